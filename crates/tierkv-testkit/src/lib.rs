//! # tierkv-testkit
//!
//! The model-based test every engine runs (STYLE §7): random get / put / delete / scan from
//! several threads against one store, each result checked against a `BTreeMap` oracle.
//!
//! How concurrency is made checkable: each thread owns a *partition* of the key space (keys
//! `p<thread>/<n>`), so its own operations are sequential and its oracle is exact; yet all
//! partitions live in one store, so threads race inside the engine (shared buffers, index
//! nodes, background work). A scan starts inside the partition and is checked up to the
//! partition's end. A second phase has every thread write the same *shared* keys, each value
//! naming its writer and sequence number; readers check that every value they see was
//! written by someone and never goes backwards for a given writer. At the end the whole store
//! is compared with the union of the oracles.
//!
//! Racing writers ([`racing`]): groups of threads write the same keys at once while
//! readers get and scan them; every answer is judged by linearizability, live and after a
//! crash image taken while they run ([`Racing`], [`run_racing`]).
//!
//! Write batches ([`batch`], [`batch_model`]): a model test of batches against an oracle
//! with isolated `multi_get` readers, and the batch-atomicity crash kit ([`BatchKit`]).
//!
//! Named crash points ([`points`]): which reaches to cut, the counts, and the assertions
//! that every point was reached and verified ([`PointTally`]).
//!
//! Every run prints its seed; `TIERKV_SEED=<n>` replays it.

#![forbid(unsafe_code)]

pub mod batch;
pub mod batch_model;
pub mod points;
pub mod racing;
pub mod rig;
pub mod schema;

pub use batch::{
    BatchKit, BatchKitConfig, BatchReport, CommitSide, Ledger, NonAtomicBatches, batch_child,
    batch_child_env,
};
pub use batch_model::{
    BatchModelConfig, BatchModelReport, assert_batches_unsupported, run_batch_model,
    run_racing_puts_and_batches,
};
pub use points::PointTally;
pub use racing::{
    Cuts, Racing, RacingConfig, RacingReport, RacingWrite, ReadBounds, WriteSpan, run_racing,
};

use std::collections::BTreeMap;
use std::sync::Arc;

use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv_core::{KvStore, Result};

/// Shape of a model-based run.
#[derive(Clone, Debug)]
pub struct ModelConfig {
    /// Client threads.
    pub threads: usize,
    /// Operations per thread in the partitioned phase.
    pub ops_per_thread: usize,
    /// Distinct keys per partition (small, so that overwrites and deletes are frequent).
    pub keys_per_thread: u64,
    /// Value sizes are drawn uniformly from this range.
    pub value_len: std::ops::RangeInclusive<usize>,
    /// Percent of operations that are puts, deletes, scans (the rest are gets).
    pub put_pct: u32,
    /// Percent deletes.
    pub delete_pct: u32,
    /// Percent scans (0 for engines without ordered scans).
    pub scan_pct: u32,
    /// Operations per thread in the shared-keys phase (0 skips it).
    pub shared_ops_per_thread: usize,
    /// The seed (overridden by `TIERKV_SEED`).
    pub seed: u64,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            threads: 4,
            ops_per_thread: 5_000,
            keys_per_thread: 300,
            value_len: 0..=300,
            put_pct: 45,
            delete_pct: 10,
            scan_pct: 5,
            shared_ops_per_thread: 2_000,
            seed: 0x7157_4b56,
        }
    }
}

/// What a run did, for the test's own assertions.
#[derive(Clone, Debug, Default)]
pub struct ModelReport {
    /// Operations executed.
    pub ops: u64,
    /// Gets that found a value.
    pub hits: u64,
    /// Scans executed.
    pub scans: u64,
    /// Keys in the store at the end.
    pub final_keys: usize,
}

/// A thread's oracle: the exact contents of its partition.
type Oracle = BTreeMap<Vec<u8>, Vec<u8>>;

fn key(part: usize, n: u64) -> Vec<u8> {
    format!("p{part:03}/{n:08}").into_bytes()
}

fn value(rng: &mut ChaCha8Rng, cfg: &ModelConfig, tag: &[u8]) -> Vec<u8> {
    let len = rng.random_range(cfg.value_len.clone()).max(tag.len());
    let mut v = vec![0u8; len];
    rng.fill_bytes(&mut v);
    v[..tag.len()].copy_from_slice(tag);
    v
}

/// The seed a run uses: `TIERKV_SEED` if set, else `cfg.seed`.
pub fn effective_seed(cfg: &ModelConfig) -> u64 {
    crate::rig::env_seed().unwrap_or(cfg.seed)
}

/// Runs the model-based test; panics (with the seed) on the first divergence.
pub fn run_model(store: Arc<dyn KvStore>, cfg: &ModelConfig) -> ModelReport {
    let seed = effective_seed(cfg);
    eprintln!("model test seed {seed} (replay with TIERKV_SEED={seed})");
    let models: Vec<(Oracle, ModelReport)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..cfg.threads)
            .map(|t| {
                let store = store.clone();
                s.spawn(move || partition_worker(&*store, cfg, t, seed))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    let mut report = ModelReport::default();
    let mut oracle = BTreeMap::new();
    for (m, r) in models {
        report.ops += r.ops;
        report.hits += r.hits;
        report.scans += r.scans;
        oracle.extend(m);
    }
    if cfg.shared_ops_per_thread > 0 {
        let finals = shared_phase(&store, cfg, seed);
        report.ops += (cfg.shared_ops_per_thread * cfg.threads) as u64;
        oracle.extend(finals);
    }
    verify_all(&*store, &oracle, cfg.scan_pct > 0, seed);
    report.final_keys = oracle.len();
    report
}

fn partition_worker(
    store: &dyn KvStore,
    cfg: &ModelConfig,
    part: usize,
    seed: u64,
) -> (Oracle, ModelReport) {
    let mut rng =
        ChaCha8Rng::seed_from_u64(seed ^ (part as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut model = Oracle::new();
    let mut rep = ModelReport::default();
    let ctx = |i: usize, what: &str| format!("seed {seed}, thread {part}, op {i}: {what}");
    for i in 0..cfg.ops_per_thread {
        let k = key(part, rng.random_range(0..cfg.keys_per_thread));
        let dice = rng.random_range(0..100);
        rep.ops += 1;
        if dice < cfg.put_pct {
            let v = value(&mut rng, cfg, &k);
            must(store.put(&k, &v), &ctx(i, "put"));
            model.insert(k, v);
        } else if dice < cfg.put_pct + cfg.delete_pct {
            must(store.delete(&k), &ctx(i, "delete"));
            model.remove(&k);
        } else if dice < cfg.put_pct + cfg.delete_pct + cfg.scan_pct {
            rep.scans += 1;
            let limit = rng.random_range(1..=50);
            let got = must(store.scan(&k, limit), &ctx(i, "scan"));
            check_scan(&got, &model, &k, limit, &ctx(i, "scan"));
        } else {
            let got = must(store.get(&k), &ctx(i, "get"));
            if got.is_some() {
                rep.hits += 1;
            }
            assert_eq!(
                got.as_deref(),
                model.get(&k).map(Vec::as_slice),
                "{}",
                ctx(i, &format!("get {}", String::from_utf8_lossy(&k)))
            );
        }
    }
    (model, rep)
}

fn check_scan(
    got: &[(Vec<u8>, Vec<u8>)],
    model: &BTreeMap<Vec<u8>, Vec<u8>>,
    start: &[u8],
    limit: usize,
    ctx: &str,
) {
    assert!(
        got.len() <= limit,
        "{ctx}: scan returned {} > limit {limit}",
        got.len()
    );
    for w in got.windows(2) {
        assert!(w[0].0 < w[1].0, "{ctx}: scan out of order");
    }
    let prefix = &start[..5]; // "pNNN/"
    let own: Vec<_> = got
        .iter()
        .take_while(|(k, _)| k.starts_with(prefix))
        .collect();
    let want: Vec<_> = model.range(start.to_vec()..).take(limit).collect();
    // The store may return fewer own keys only because the limit was reached.
    assert!(
        own.len() == want.len() || own.len() == got.len(),
        "{ctx}: scan from {} returned {} partition keys, model has {}",
        String::from_utf8_lossy(start),
        own.len(),
        want.len()
    );
    for ((gk, gv), (mk, mv)) in own.iter().map(|p| (&p.0, &p.1)).zip(want) {
        assert_eq!(gk, mk, "{ctx}: scan key");
        assert_eq!(
            gv,
            mv,
            "{ctx}: scan value of {}",
            String::from_utf8_lossy(gk)
        );
    }
}

/// Writers race on the same keys; a value is `w<writer>:<seq>:` + padding.
fn shared_phase(
    store: &Arc<dyn KvStore>,
    cfg: &ModelConfig,
    seed: u64,
) -> BTreeMap<Vec<u8>, Vec<u8>> {
    const SHARED_KEYS: u64 = 16;
    let shared_key = |n: u64| format!("shared/{n:04}").into_bytes();
    let parse = |v: &[u8]| -> (usize, u64) {
        let s = String::from_utf8_lossy(v);
        let mut it = s.trim_start_matches('w').split(':');
        let w = it.next().and_then(|x| x.parse().ok()).unwrap_or(usize::MAX);
        let q = it.next().and_then(|x| x.parse().ok()).unwrap_or(u64::MAX);
        (w, q)
    };
    let lasts: Vec<BTreeMap<u64, (u64, bool)>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..cfg.threads)
            .map(|t| {
                let store = store.clone();
                s.spawn(move || {
                    let mut rng = ChaCha8Rng::seed_from_u64(seed.rotate_left(17) ^ t as u64);
                    // per key: (last seq written by me, deleted?)
                    let mut mine: BTreeMap<u64, (u64, bool)> = BTreeMap::new();
                    // per key and writer: the highest seq seen (monotonic reads)
                    let mut seen: BTreeMap<(u64, usize), u64> = BTreeMap::new();
                    for seq in 0..cfg.shared_ops_per_thread as u64 {
                        let n = rng.random_range(0..SHARED_KEYS);
                        let k = shared_key(n);
                        match rng.random_range(0..10) {
                            0..=4 => {
                                let mut v = format!("w{t}:{seq}:").into_bytes();
                                v.resize(v.len() + rng.random_range(0..64), b'.');
                                must(store.put(&k, &v), "shared put");
                                mine.insert(n, (seq, false));
                            }
                            5 => {
                                must(store.delete(&k), "shared delete");
                                mine.insert(n, (seq, true));
                            }
                            _ => {
                                if let Some(v) = must(store.get(&k), "shared get") {
                                    let (w, q) = parse(&v);
                                    assert!(
                                        w < cfg.threads,
                                        "seed {seed}: shared value {:?} has no writer",
                                        String::from_utf8_lossy(&v)
                                    );
                                    let e = seen.entry((n, w)).or_insert(0);
                                    assert!(
                                        q >= *e,
                                        "seed {seed}: key {n} went back from w{w}:{e} to w{w}:{q}"
                                    );
                                    *e = q;
                                }
                            }
                        }
                    }
                    mine
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    // After all writers are done each key holds one writer's last write (or is deleted by one
    // writer's last delete): check that, and return the final state as the oracle.
    let mut finals = BTreeMap::new();
    for n in 0..SHARED_KEYS {
        let k = shared_key(n);
        let got = must(store.get(&k), "shared final get");
        match &got {
            Some(v) => {
                let (w, q) = parse(v);
                let last = lasts.get(w).and_then(|m| m.get(&n));
                assert_eq!(
                    last,
                    Some(&(q, false)),
                    "seed {seed}: shared key {n} holds w{w}:{q}, not that writer's last write"
                );
                finals.insert(k, v.clone());
            }
            None => assert!(
                lasts.iter().any(|m| m.get(&n).is_none_or(|(_, del)| *del)),
                "seed {seed}: shared key {n} is gone but no writer's last operation deleted it"
            ),
        }
    }
    finals
}

/// Checks that the store holds exactly `oracle` (by gets, and by one full scan when
/// `scans` is true).
pub fn verify_all(
    store: &dyn KvStore,
    oracle: &BTreeMap<Vec<u8>, Vec<u8>>,
    scans: bool,
    seed: u64,
) {
    for (k, v) in oracle {
        let got = must(store.get(k), "final get");
        assert_eq!(
            got.as_ref(),
            Some(v),
            "seed {seed}: final get {}",
            String::from_utf8_lossy(k)
        );
    }
    if scans {
        let all = must(store.scan(b"\0", usize::MAX), "final scan");
        let want: Vec<_> = oracle.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        assert_eq!(all.len(), want.len(), "seed {seed}: final scan length");
        assert!(
            all == want,
            "seed {seed}: final scan differs from the oracle"
        );
    }
}

fn must<T>(r: Result<T>, what: &str) -> T {
    r.unwrap_or_else(|e| panic!("{what}: unexpected error: {e}"))
}
