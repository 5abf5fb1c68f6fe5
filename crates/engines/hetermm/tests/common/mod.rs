//! Helpers shared by the hetermm integration tests: pools on tmpfs, stores with small pages
//! and blocks (so flushing, reorganisation and log reclamation happen many times in a short
//! test), printed seeds, and a phased model driver (read-write phases alternating with
//! read-only ones, so the read cache grows and shrinks) checked against per-thread oracles.

#![allow(dead_code)] // each test file uses a subset
#![allow(clippy::unwrap_used, reason = "test helpers fail the test on errors")]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv_core::media::pmem::{DurabilityMode, PmemPool};
use tierkv_core::{EngineSpec, KvStore, Limits, Stats};
use tierkv_hetermm::{CoreIndex, HeterOptions, HeterStore};
use tierkv_testkit::{ModelConfig, run_model};

#[allow(unused_imports, reason = "each test file uses a subset")]
pub use tierkv_testkit::rig::{config, create_pool, scratch_dir, seed};

/// Options with 4 KiB pages, 32 KiB blocks and `pages` pages of DRAM, plus `extra`
/// (spec-style `key=value` options).
pub fn small_options(pages: u64, extra: &str) -> HeterOptions {
    let spec = if extra.is_empty() {
        "hetermm@page_bits=12,block_bits=15".to_owned()
    } else {
        format!("hetermm@page_bits=12,block_bits=15,{extra}")
    };
    let spec: EngineSpec = spec.parse().expect("spec");
    HeterOptions::from_params(spec.params(), pages * 4096).expect("options")
}

/// Options for write batches that span pages: 4 KiB pages and 64 KiB blocks (16 pages per
/// block, so a batch may take 32 log pages and 32 DRAM pages: a batch of 100 operations of
/// ~150 bytes spans four log pages), 384 KiB of DRAM (a little over the least these blocks
/// allow, so the flusher runs often) and a log budget of 3 blocks.
pub fn span_options() -> HeterOptions {
    let spec: EngineSpec = "hetermm@page_bits=12,block_bits=16,log_blocks=3"
        .parse()
        .expect("spec");
    HeterOptions::from_params(spec.params(), 96 << 12).expect("options")
}

/// Options for write-batch tests: 32 KiB pages (a batch of 100 small keys fits one log
/// page), 64 KiB blocks, 16 pages of DRAM (eight blocks: the flusher runs all the time)
/// and a log budget of 3 blocks.
pub fn batch_options() -> HeterOptions {
    let spec: EngineSpec = "hetermm@page_bits=15,block_bits=16,log_blocks=3"
        .parse()
        .expect("spec");
    HeterOptions::from_params(spec.params(), 16 << 15).expect("options")
}

/// Opens (or creates) a store with the index `variant`.
pub fn open(
    pool: Arc<PmemPool>,
    opts: HeterOptions,
    variant: &str,
    created: bool,
) -> Arc<HeterStore> {
    try_open(pool, opts, variant, created).expect("open store")
}

/// Opens (or creates) a store, returning the error.
pub fn try_open(
    pool: Arc<PmemPool>,
    opts: HeterOptions,
    variant: &str,
    created: bool,
) -> tierkv_core::Result<Arc<HeterStore>> {
    HeterStore::open(
        pool,
        opts,
        Limits::default(),
        CoreIndex::new(variant)?,
        created,
    )
}

/// An engine counter (0 if absent).
pub fn counter(s: &Stats, name: &str) -> u64 {
    s.counters
        .get(&format!("hetermm_{name}"))
        .copied()
        .unwrap_or(0)
}

/// An engine gauge (0 if absent).
pub fn gauge(s: &Stats, name: &str) -> f64 {
    s.gauges
        .get(&format!("hetermm_{name}"))
        .copied()
        .unwrap_or(0.0)
}

/// Shape of a phased model run.
#[derive(Clone, Debug)]
pub struct Phases {
    /// Client threads.
    pub threads: usize,
    /// Rounds of (read-write phase, read-only phase).
    pub rounds: usize,
    /// Operations per thread per read-write phase.
    pub ops: usize,
    /// How long each read-only phase lasts.
    pub read_only: Duration,
    /// Keys per thread.
    pub keys: u64,
    /// Largest value.
    pub max_value: usize,
    /// Percent scans in read-write phases (0 for hash indexes).
    pub scan_pct: u32,
}

/// One thread's oracle and what it saw.
type ThreadResult = (BTreeMap<Vec<u8>, Vec<u8>>, PhaseReport);

/// What a phased run saw.
#[derive(Debug, Default)]
pub struct PhaseReport {
    /// Operations executed.
    pub ops: u64,
    /// Gets that found their key.
    pub hits: u64,
}

fn key(t: usize, n: u64) -> Vec<u8> {
    format!("t{t:02}/{n:06}").into_bytes()
}

/// Runs `p` against `store` from `p.threads` threads, each checking every result against
/// its own oracle (its partition of the keys); verifies the whole store at the end.
pub fn run_phases(store: &Arc<HeterStore>, p: &Phases, seed: u64) -> PhaseReport {
    let barrier = std::sync::Barrier::new(p.threads);
    let oracles: Vec<ThreadResult> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..p.threads)
            .map(|t| {
                let barrier = &barrier;
                let store = store.clone();
                s.spawn(move || worker(&*store, p, t, seed, barrier))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("worker"))
            .collect()
    });
    let mut report = PhaseReport::default();
    for (oracle, r) in &oracles {
        report.ops += r.ops;
        report.hits += r.hits;
        for (k, v) in oracle {
            assert_eq!(
                store.get(k).unwrap().as_ref(),
                Some(v),
                "seed {seed}: final get"
            );
        }
    }
    report
}

fn worker(
    store: &dyn KvStore,
    p: &Phases,
    t: usize,
    seed: u64,
    barrier: &std::sync::Barrier,
) -> ThreadResult {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ (t as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut oracle = BTreeMap::new();
    let mut rep = PhaseReport::default();
    for round in 0..p.rounds {
        for i in 0..p.ops {
            let k = key(t, rng.random_range(0..p.keys));
            let ctx = format!("seed {seed}, thread {t}, round {round}, op {i}");
            let dice = rng.random_range(0..100);
            rep.ops += 1;
            if dice < 45 {
                let mut v = vec![0u8; rng.random_range(0..=p.max_value)];
                rng.fill_bytes(&mut v);
                store
                    .put(&k, &v)
                    .unwrap_or_else(|e| panic!("{ctx}: put: {e}"));
                oracle.insert(k, v);
            } else if dice < 55 {
                store
                    .delete(&k)
                    .unwrap_or_else(|e| panic!("{ctx}: delete: {e}"));
                oracle.remove(&k);
            } else if dice < 55 + p.scan_pct {
                let got = store
                    .scan(&k, 20)
                    .unwrap_or_else(|e| panic!("{ctx}: scan: {e}"));
                let want: Vec<_> = oracle.range(k.clone()..).take(20).collect();
                let own: Vec<_> = got
                    .iter()
                    .take_while(|(g, _)| g.starts_with(&k[..4]))
                    .collect();
                assert!(
                    own.len() == want.len() || own.len() == got.len(),
                    "{ctx}: scan length"
                );
                for ((gk, gv), (wk, wv)) in own.iter().map(|x| (&x.0, &x.1)).zip(want) {
                    assert_eq!((gk, gv), (wk, wv), "{ctx}: scan");
                }
            } else {
                check_get(store, &oracle, &k, &ctx, &mut rep);
            }
        }
        barrier.wait();
        let until = Instant::now() + p.read_only;
        while Instant::now() < until {
            let k = key(t, rng.random_range(0..p.keys));
            check_get(
                store,
                &oracle,
                &k,
                &format!("seed {seed}, thread {t}, read-only {round}"),
                &mut rep,
            );
            rep.ops += 1;
        }
        barrier.wait();
    }
    (oracle, rep)
}

fn check_get(
    store: &dyn KvStore,
    oracle: &BTreeMap<Vec<u8>, Vec<u8>>,
    k: &[u8],
    ctx: &str,
    rep: &mut PhaseReport,
) {
    let got = store.get(k).unwrap_or_else(|e| panic!("{ctx}: get: {e}"));
    assert_eq!(
        got.as_ref(),
        oracle.get(k),
        "{ctx}: get {}",
        String::from_utf8_lossy(k)
    );
    if got.is_some() {
        rep.hits += 1;
    }
}

/// The model scenario of one index: the shared testkit driver (concurrent partitions +
/// racing writers of shared keys, scans when `scan_pct` > 0), then a phased run whose
/// read-only phases grow the read cache and whose write phases take its pages back; every
/// mechanism must have run many times (counters), and `check` must pass.
pub fn model_scenario(variant: &str, scan_pct: u32) {
    let dir = scratch_dir();
    let pool = create_pool(&dir.path().join("pool"), 16 << 20, DurabilityMode::Volatile);
    let store = open(pool, small_options(64, ""), variant, true);
    model_scenario_on(store, variant, scan_pct);
}

/// [`model_scenario`] on a store whose logical addresses start `blocks_left` blocks before
/// the last its geometry allows (just below 2^63): an empty store is created and closed,
/// its flush frontier moved there in the pool file, and the store reopened.
pub fn model_scenario_near_the_end(variant: &str, scan_pct: u32, blocks_left: u64) {
    let dir = scratch_dir();
    let path = dir.path().join("pool");
    let store = open(
        create_pool(&path, 16 << 20, DurabilityMode::Volatile),
        small_options(64, ""),
        variant,
        true,
    );
    store.close().unwrap();
    drop(store);
    let pool = move_flush_frontier(&path, |m| {
        (tierkv_hetermm::geometry::block_numbers(m) - blocks_left) << m
    });
    let store = try_open(pool, small_options(64, ""), variant, false).unwrap();
    model_scenario_on(store, variant, scan_pct);
}

/// Opens the (closed) store's pool at `path` and sets its flush frontier to `frontier(m)`,
/// m being the store's block_bits; returns the pool.
pub fn move_flush_frontier(
    path: &std::path::Path,
    frontier: impl FnOnce(u32) -> u64,
) -> Arc<PmemPool> {
    let pool = PmemPool::open(&config(path, 0, DurabilityMode::Volatile)).unwrap();
    // Root word 0 names the superblock; its block_bits byte is at +12 and the frontier word
    // at +64 (FORMAT.md § Pool layout, § Superblock).
    let sb = pool.root(0).unwrap();
    let m = u32::from(pool.read(sb + 12, 1).unwrap()[0]);
    pool.store_u64(sb + 64, frontier(m)).unwrap();
    pool
}

fn model_scenario_on(store: Arc<HeterStore>, variant: &str, scan_pct: u32) {
    let cfg = ModelConfig {
        scan_pct,
        seed: seed(&format!("model_{variant}")),
        ..ModelConfig::default()
    };
    let r = run_model(store.clone(), &cfg);
    assert!(r.hits > 1_000, "{r:?}");
    let phased = Phases {
        threads: 3,
        rounds: 4,
        ops: 2_500,
        read_only: std::time::Duration::from_millis(120),
        keys: 250,
        max_value: 300,
        scan_pct,
    };
    store.flush().unwrap();
    let p = run_phases(&store, &phased, cfg.seed);
    assert!(p.hits > 1_000, "{p:?}");
    let s = store.stats();
    println!("{variant}: {:#?}", s.counters);
    println!("{variant}: {:#?}", s.gauges);
    for (name, at_least) in [
        ("flushes", 50),
        ("reorganisations", 10),
        ("log_blocks_reclaimed", 20),
        ("cache_resizes", 4),
        ("cache_grows", 2),
        ("cache_hits", 10),
        ("in_place_updates", 100),
        ("marks", 1_000),
    ] {
        assert!(
            counter(&s, name) >= at_least,
            "{variant}: {name} = {} < {at_least}",
            counter(&s, name)
        );
    }
    let lines = store.check().unwrap();
    println!("{}", lines.join("\n"));
    store.close().unwrap();
}
