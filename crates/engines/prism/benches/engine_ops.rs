//! Micro-benchmark of the whole PRISM engine, without the YCSB harness: load N records of
//! 1 KiB from T threads, reopen (recovery, §5.5), then random gets and a 50/50 get/put mix
//! over the loaded keys (uniform). Prints throughput, recovery time and the engine's
//! counters; meant for profiling (`perf record`) and for a quick recovery-time check.
//!
//! `cargo bench -p tierkv-prism --bench engine_ops`; environment:
//! `PRISM_BENCH_RECORDS` (default 200000), `PRISM_BENCH_THREADS` (4), `PRISM_BENCH_SECS`
//! (per phase, 3), `PRISM_BENCH_DIR` (flash directory parent; default the target
//! directory), `PRISM_BENCH_POOL_DIR` (default /dev/shm), `PRISM_BENCH_SPEC` (default
//! `prism`), `PRISM_BENCH_DRAM_MIB` (128). The pool is in Volatile mode (said below).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use tierkv_core::format::manifest::Manifest;
use tierkv_core::media::Media;
use tierkv_core::media::flash::FlashDevice;
use tierkv_core::media::pmem::{PmemConfig, PmemPool};
use tierkv_core::{
    ByteSize, DurabilityMode, EmulatedLatency, EngineContext, FlashOptions, KvStore, Options,
};
use tierkv_prism::PrismStore;

const VALUE_LEN: usize = 1024;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn key(i: u64) -> Vec<u8> {
    format!("user{:016x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15)).into_bytes()
}

struct Setup {
    pool_path: PathBuf,
    flash_dir: PathBuf,
    spec: String,
    dram: u64,
}

impl Setup {
    fn open(&self, created: bool) -> Arc<PrismStore> {
        let cfg = PmemConfig {
            path: self.pool_path.clone(),
            size: 1 << 30,
            mode: DurabilityMode::Volatile,
            latency: EmulatedLatency::default(),
        };
        let pool = if created {
            PmemPool::create(&cfg)
        } else {
            PmemPool::open(&cfg)
        }
        .expect("pool");
        let flash = FlashOptions {
            size: ByteSize::gib(8),
            ..FlashOptions::default()
        };
        let dev = FlashDevice::open(&self.flash_dir, &flash).expect("flash");
        let options = Options::default()
            .engine(&self.spec)
            .dram_budget(ByteSize(self.dram));
        let ctx = EngineContext {
            dir: self.flash_dir.clone(),
            spec: options.engine_spec().expect("spec"),
            options,
            manifest: Manifest {
                engine: "prism".into(),
                created_by: "engine_ops bench".into(),
                pmem: None,
                flash: Vec::new(),
            },
            media: Media {
                pmem: Some(pool),
                flash: vec![dev],
            },
            created,
        };
        PrismStore::open(&ctx).expect("open")
    }
}

/// Runs `op` from `threads` threads for `secs` seconds; returns ops/s.
fn timed(threads: u64, secs: u64, op: &(dyn Fn(&mut rand::rngs::StdRng) + Sync)) -> f64 {
    let stop = AtomicBool::new(false);
    let done = AtomicU64::new(0);
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let (stop, done) = (&stop, &done);
            s.spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(t);
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    op(&mut rng);
                    n += 1;
                }
                done.fetch_add(n, Ordering::Relaxed);
            });
        }
        std::thread::sleep(Duration::from_secs(secs));
        stop.store(true, Ordering::Relaxed);
    });
    done.load(Ordering::Relaxed) as f64 / t0.elapsed().as_secs_f64()
}

fn load(store: &PrismStore, records: u64, threads: u64) -> f64 {
    let next = AtomicU64::new(0);
    let t0 = Instant::now();
    let value = vec![0x5au8; VALUE_LEN];
    std::thread::scope(|s| {
        for _ in 0..threads {
            let (next, value) = (&next, &value);
            s.spawn(move || {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= records {
                        break;
                    }
                    store.put(&key(i), value).expect("put");
                }
            });
        }
    });
    records as f64 / t0.elapsed().as_secs_f64()
}

fn main() {
    let records = env_u64("PRISM_BENCH_RECORDS", 200_000);
    let threads = env_u64("PRISM_BENCH_THREADS", 4);
    let secs = env_u64("PRISM_BENCH_SECS", 3);
    let parent = std::env::var("PRISM_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_TARGET_TMPDIR")));
    let pool_dir = std::env::var("PRISM_BENCH_POOL_DIR").unwrap_or_else(|_| "/dev/shm".into());
    let keep = env_u64("PRISM_BENCH_KEEP", 0) == 1;
    let tmp = tempfile::tempdir_in(&parent).expect("tempdir");
    let (pool_path, flash_dir) = if keep {
        (
            Path::new(&pool_dir).join("prism-bench.pool"),
            parent.join("prism-bench-flash"),
        )
    } else {
        (
            Path::new(&pool_dir).join(format!("prism-bench-{}.pool", std::process::id())),
            tmp.path().join("flash"),
        )
    };
    let reuse = keep && pool_path.exists();
    let setup = Setup {
        pool_path,
        flash_dir,
        spec: std::env::var("PRISM_BENCH_SPEC").unwrap_or_else(|_| "prism".into()),
        dram: env_u64("PRISM_BENCH_DRAM_MIB", 128) << 20,
    };
    println!(
        "engine_ops: {} records of {VALUE_LEN} B, {threads} threads, spec {}, pool {} (volatile: survives a process crash only), flash {}",
        records,
        setup.spec,
        setup.pool_path.display(),
        setup.flash_dir.display()
    );
    if !reuse {
        let store = setup.open(true);
        println!(
            "load            {:>10.0} ops/s",
            load(&store, records, threads)
        );
        store.close().expect("close");
        drop(store);
    }
    let t0 = Instant::now();
    let store = setup.open(false);
    println!(
        "reopen          {:>10.1} ms (recovery_micros {})",
        t0.elapsed().as_secs_f64() * 1e3,
        store.stats().recovery_micros
    );
    let value = vec![0xa5u8; VALUE_LEN];
    if env_u64("PRISM_BENCH_ONLY_REOPEN", 0) == 1 {
        return;
    }
    let get = |rng: &mut rand::rngs::StdRng| {
        let k = key(rng.random_range(0..records));
        store.get(&k).expect("get").expect("present");
    };
    println!("get (uniform)   {:>10.0} ops/s", timed(threads, secs, &get));
    let mixed = |rng: &mut rand::rngs::StdRng| {
        let k = key(rng.random_range(0..records));
        if rng.random_bool(0.5) {
            store.put(&k, &value).expect("put");
        } else {
            store.get(&k).expect("get").expect("present");
        }
    };
    println!(
        "50/50 get/put   {:>10.0} ops/s",
        timed(threads, secs, &mixed)
    );
    let s = store.stats();
    println!("counters: {:?}", s.counters);
    println!("gauges: {:?}", s.gauges);
    store.close().expect("close");
    drop(store);
    if !keep {
        let _ = std::fs::remove_file(&setup.pool_path);
    }
}
