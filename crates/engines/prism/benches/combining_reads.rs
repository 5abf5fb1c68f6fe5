//! Micro-benchmark of PRISM's flash reads (§5.3, §7.6 Figure 11): random reads of 4 KiB
//! values from a Value Storage on the data disk (io_uring, `O_DIRECT`), from 1, 4 and 32
//! threads, with each batching mode — thread combining, batch size 1, timeout batching.
//! Prints throughput, mean and p99 latency, and the mean batch size.
//!
//! `cargo bench -p tierkv-prism --bench combining_reads`; environment:
//! `PRISM_BENCH_DIR` (default: a temporary directory under the target directory),
//! `PRISM_BENCH_MIB` (data set, default 256), `PRISM_BENCH_SECS` (per run, default 3).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};
use tierkv_core::media::flash::FlashDevice;
use tierkv_core::{ByteSize, FlashOptions, IoBackend};
use tierkv_prism::combining::CombiningMode;
use tierkv_prism::value_storage::{DEFAULT_CHUNK_SIZE, ValueLocation, ValueStorage};

const VALUE_LEN: usize = 4096;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn load(dev: &Arc<FlashDevice>, mib: u64) -> Vec<ValueLocation> {
    let capacity = (mib + 16) << 20;
    let vs = ValueStorage::create(
        0,
        dev.clone(),
        capacity,
        DEFAULT_CHUNK_SIZE,
        CombiningMode::Combining,
        64,
    )
    .expect("create");
    let count = (mib << 20) / VALUE_LEN as u64;
    let per_chunk = vs.values_fitting(std::iter::repeat_n(VALUE_LEN, 1000)) as u64;
    let mut locs = Vec::with_capacity(count as usize);
    let mut slot = 0u64;
    while slot < count {
        let n = per_chunk.min(count - slot);
        let vals: Vec<Vec<u8>> = (slot..slot + n)
            .map(|s| vec![(s % 251) as u8; VALUE_LEN])
            .collect();
        let refs: Vec<(u64, &[u8])> = vals
            .iter()
            .enumerate()
            .map(|(i, v)| (slot + i as u64, v.as_slice()))
            .collect();
        locs.extend(vs.write_chunk(&refs).expect("write"));
        slot += n;
    }
    locs
}

struct Run {
    ops: u64,
    secs: f64,
    hist: Histogram<u64>,
    mean_batch: f64,
}

fn run(vs: &ValueStorage, locs: &[ValueLocation], threads: u64, secs: u64) -> Run {
    let stop = AtomicBool::new(false);
    let before = vs.stats().combining;
    let start = Instant::now();
    let hists: Vec<Histogram<u64>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let stop = &stop;
                s.spawn(move || {
                    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(t);
                    let mut h = Histogram::<u64>::new(3).expect("histogram");
                    while !stop.load(Ordering::Relaxed) {
                        let i = rng.random_range(0..locs.len());
                        let t0 = Instant::now();
                        let (slot, v) = vs.read(locs[i]).expect("read");
                        let _ = h.record(t0.elapsed().as_nanos() as u64);
                        assert!(
                            slot == i as u64 && v.len() == VALUE_LEN && v[0] == (slot % 251) as u8
                        );
                    }
                    h
                })
            })
            .collect();
        std::thread::sleep(Duration::from_secs(secs));
        stop.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .map(|h| h.join().expect("reader thread"))
            .collect()
    });
    let secs = start.elapsed().as_secs_f64();
    let mut hist = Histogram::<u64>::new(3).expect("histogram");
    for h in &hists {
        hist.add(h).expect("same bounds");
    }
    let after = vs.stats().combining;
    let batches = after.batches() - before.batches();
    let requests = after.requests() - before.requests();
    Run {
        ops: hist.len(),
        secs,
        hist,
        mean_batch: if batches == 0 {
            0.0
        } else {
            requests as f64 / batches as f64
        },
    }
}

fn main() {
    let mib = env_u64("PRISM_BENCH_MIB", 256);
    let secs = env_u64("PRISM_BENCH_SECS", 3);
    let tmp;
    let dir = match std::env::var_os("PRISM_BENCH_DIR") {
        Some(d) => std::path::PathBuf::from(d),
        None => {
            tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
            tmp.path().to_path_buf()
        }
    };
    let opts = FlashOptions {
        size: ByteSize((mib + 64) << 20),
        io_backend: IoBackend::Uring,
        queue_depth: 64,
        ..FlashOptions::default()
    };
    let dev = FlashDevice::open(&dir, &opts).expect("open flash device (io_uring)");
    println!(
        "data: {mib} MiB of {VALUE_LEN}-byte values in {} (O_DIRECT: {}), {secs} s per run",
        dir.display(),
        dev.direct_io()
    );
    let locs = load(&dev, mib);
    let modes = [
        CombiningMode::Combining,
        CombiningMode::Single,
        CombiningMode::Timeout { micros: 100 },
    ];
    // One storage per mode over the same file (reads only), so modes can be interleaved.
    let storages: Vec<ValueStorage> = modes
        .iter()
        .map(|&mode| {
            let vs =
                ValueStorage::open(0, dev.clone(), DEFAULT_CHUNK_SIZE, mode, 64).expect("open");
            for l in &locs {
                vs.mark_valid(*l).expect("mark");
            }
            vs.finish_recovery();
            vs
        })
        .collect();
    let _warm_up = run(&storages[1], &locs, 4, 1);
    println!(
        "{:<6} {:<14} {:>7} {:>12} {:>10} {:>10} {:>11}",
        "round", "mode", "threads", "reads/s", "mean µs", "p99 µs", "mean batch"
    );
    for round in 1..=2 {
        for threads in [1, 4, 32] {
            for (mode, vs) in modes.iter().zip(&storages) {
                let r = run(vs, &locs, threads, secs);
                println!(
                    "{:<6} {:<14} {:>7} {:>12.0} {:>10.1} {:>10.1} {:>11.2}",
                    round,
                    mode.to_string(),
                    threads,
                    r.ops as f64 / r.secs,
                    r.hist.mean() / 1000.0,
                    r.hist.value_at_quantile(0.99) as f64 / 1000.0,
                    r.mean_batch
                );
            }
        }
    }
}
