//! Model-based test of write batches (issue 24; STYLE §7): random batches, puts, deletes,
//! gets and `multi_get`s from several threads, each checked against a `BTreeMap` oracle
//! (each thread owns a partition of keys, as in [`crate::run_model`]); meanwhile *group*
//! writers rewrite whole groups of shared keys in one batch, every value naming its batch,
//! and readers `multi_get` a group: for an engine whose `multi_get` is isolated from
//! batches, all keys of a group must name the same batch. At the end the whole store is
//! compared with the oracles.
//!
//! For an engine without batches ([`KvStore::atomic_batches`] false), use
//! [`assert_batches_unsupported`] instead.

#![allow(clippy::unwrap_used, reason = "test helpers fail the test on errors")]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv_core::{Error, KvStore, WriteBatch};

/// Shape of a batch model run.
#[derive(Clone, Debug)]
pub struct BatchModelConfig {
    /// Partition threads.
    pub threads: usize,
    /// Operations per partition thread.
    pub ops_per_thread: usize,
    /// Keys per partition.
    pub keys_per_thread: u64,
    /// Most operations in one batch.
    pub max_batch: usize,
    /// Groups of shared keys rewritten whole by the group writers (0: no group phase).
    pub groups: u64,
    /// Keys per group.
    pub group_keys: u64,
    /// Batches per group writer (two writers).
    pub group_batches: u64,
    /// The seed (`TIERKV_SEED` overrides it).
    pub seed: u64,
}

impl Default for BatchModelConfig {
    fn default() -> Self {
        BatchModelConfig {
            threads: 3,
            ops_per_thread: 400,
            keys_per_thread: 64,
            max_batch: 40,
            groups: 4,
            group_keys: 12,
            group_batches: 150,
            seed: 2424,
        }
    }
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct BatchModelReport {
    /// Batches applied by the partition threads.
    pub batches: u64,
    /// Batches applied by the group writers.
    pub group_batches: u64,
    /// Group reads that saw one whole batch.
    pub group_reads: u64,
    /// `multi_get`s checked against the oracle.
    pub multi_gets: u64,
}

fn part_key(t: usize, n: u64) -> Vec<u8> {
    format!("bm{t}/{n:03}").into_bytes()
}

fn group_key(g: u64, n: u64) -> Vec<u8> {
    format!("bg{g}/{n:02}").into_bytes()
}

type Oracle = BTreeMap<Vec<u8>, Vec<u8>>;

fn partition(
    store: &dyn KvStore,
    cfg: &BatchModelConfig,
    t: usize,
    seed: u64,
) -> (Oracle, u64, u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ (t as u64 + 1).wrapping_mul(0x9e37_79b9));
    let mut oracle = Oracle::new();
    let (mut batches, mut mgets) = (0, 0);
    let key = |rng: &mut ChaCha8Rng| part_key(t, rng.random_range(0..cfg.keys_per_thread));
    for i in 0..cfg.ops_per_thread {
        let ctx = || format!("seed {seed}, thread {t}, op {i}");
        match rng.random_range(0..10) {
            0..=3 => {
                // A batch, with repeated keys: the later op must win.
                let mut b = WriteBatch::new();
                let mut model = Vec::new();
                for j in 0..rng.random_range(1..=cfg.max_batch) {
                    let k = key(&mut rng);
                    let v = (rng.random_range(0..5) != 0).then(|| format!("b{i}.{j}").into_bytes());
                    match &v {
                        Some(v) => b.put(k.clone(), v.clone()),
                        None => b.delete(k.clone()),
                    };
                    model.push((k, v));
                }
                store
                    .write_batch(&b)
                    .unwrap_or_else(|e| panic!("{}: batch: {e}", ctx()));
                for (k, v) in model {
                    match v {
                        Some(v) => oracle.insert(k, v),
                        None => oracle.remove(&k),
                    };
                }
                batches += 1;
            }
            4 => {
                let k = key(&mut rng);
                let v = format!("p{i}").into_bytes();
                store.put(&k, &v).unwrap();
                oracle.insert(k, v);
            }
            5 => {
                let k = key(&mut rng);
                store.delete(&k).unwrap();
                oracle.remove(&k);
            }
            6..=7 => {
                let keys: Vec<Vec<u8>> = (0..rng.random_range(1..20))
                    .map(|_| key(&mut rng))
                    .collect();
                let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
                let got = store
                    .multi_get(&refs)
                    .unwrap_or_else(|e| panic!("{}: multi_get: {e}", ctx()));
                let want: Vec<Option<Vec<u8>>> =
                    keys.iter().map(|k| oracle.get(k).cloned()).collect();
                assert_eq!(got, want, "{}: multi_get", ctx());
                mgets += 1;
            }
            _ => {
                let k = key(&mut rng);
                assert_eq!(
                    store.get(&k).unwrap(),
                    oracle.get(&k).cloned(),
                    "{}: get",
                    ctx()
                );
            }
        }
    }
    (oracle, batches, mgets)
}

fn group_writer(store: &dyn KvStore, cfg: &BatchModelConfig, w: u64, seed: u64) -> (Oracle, u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xb47c_0000 ^ w);
    let mut last = Oracle::new();
    for s in 0..cfg.group_batches {
        let g = rng.random_range(0..cfg.groups);
        let tag = format!("w{w}s{s}");
        let mut b = WriteBatch::new();
        for n in 0..cfg.group_keys {
            b.put(group_key(g, n), tag.clone());
        }
        store.write_batch(&b).unwrap();
        for n in 0..cfg.group_keys {
            last.insert(group_key(g, n), tag.clone().into_bytes());
        }
    }
    (last, cfg.group_batches)
}

fn group_reader(
    store: &dyn KvStore,
    cfg: &BatchModelConfig,
    stop: &AtomicBool,
    reads: &AtomicU64,
    seed: u64,
) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x4ead);
    while !stop.load(Ordering::Relaxed) {
        let g = rng.random_range(0..cfg.groups);
        let keys: Vec<Vec<u8>> = (0..cfg.group_keys).map(|n| group_key(g, n)).collect();
        let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let got = store.multi_get(&refs).unwrap();
        let first = &got[0];
        assert!(
            got.iter().all(|v| v == first),
            "seed {seed}: multi_get of group {g} saw parts of different batches: {:?}",
            got.iter()
                .map(|v| v.as_ref().map(|v| String::from_utf8_lossy(v).into_owned()))
                .collect::<Vec<_>>()
        );
        reads.fetch_add(1, Ordering::Relaxed);
    }
}

/// Runs the batch model test on `store` (which must support batches); panics with the
/// seed on the first divergence.
pub fn run_batch_model(store: Arc<dyn KvStore>, cfg: &BatchModelConfig) -> BatchModelReport {
    assert!(
        store.atomic_batches(),
        "the store does not report atomic batches"
    );
    let seed = crate::rig::env_seed().unwrap_or(cfg.seed);
    eprintln!("batch model seed {seed} (replay with TIERKV_SEED={seed})");
    let stop = AtomicBool::new(false);
    let reads = AtomicU64::new(0);
    let mut report = BatchModelReport::default();
    let mut whole = Oracle::new();
    std::thread::scope(|s| {
        let parts: Vec<_> = (0..cfg.threads)
            .map(|t| {
                let store = store.clone();
                s.spawn(move || partition(&*store, cfg, t, seed))
            })
            .collect();
        let writers: Vec<_> = (0..2u64)
            .filter(|_| cfg.groups > 0)
            .map(|w| {
                let store = store.clone();
                s.spawn(move || group_writer(&*store, cfg, w, seed))
            })
            .collect();
        if cfg.groups > 0 {
            let (store, stop, reads) = (store.clone(), &stop, &reads);
            s.spawn(move || group_reader(&*store, cfg, stop, reads, seed));
        }
        for p in parts {
            let (o, b, m) = p.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
            whole.extend(o);
            report.batches += b;
            report.multi_gets += m;
        }
        for w in writers {
            let (_, b) = w.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
            report.group_batches += b;
        }
        stop.store(true, Ordering::Relaxed);
    });
    report.group_reads = reads.load(Ordering::Relaxed);
    // The partitions must match their oracles exactly; each group must be whole.
    for t in 0..cfg.threads {
        for n in 0..cfg.keys_per_thread {
            let k = part_key(t, n);
            assert_eq!(
                store.get(&k).unwrap(),
                whole.get(&k).cloned(),
                "seed {seed}: final {k:?}"
            );
        }
    }
    for g in 0..cfg.groups {
        let vals: Vec<_> = (0..cfg.group_keys)
            .map(|n| store.get(&group_key(g, n)).unwrap())
            .collect();
        assert!(
            vals.iter().all(|v| *v == vals[0]),
            "seed {seed}: group {g} not whole at the end"
        );
    }
    report
}

/// Batches racing single puts on the same keys (issue 24: a batch is ordered as one write
/// against racing puts). Two batch writers rewrite all `keys` keys (`rk/NN`) with their
/// tag `b<w>.<s>`, two put writers put single keys (`p<w>.<s>`), a reader `multi_get`s all
/// keys: the values that carry a batch tag must all carry the same one (every batch writes
/// every key, so an older batch's value can only have been replaced). Returns the final
/// values, which a caller compares with what the store recovers after a reopen: recovery
/// must order the racing writes as the live store did.
pub fn run_racing_puts_and_batches(
    store: &dyn KvStore,
    keys: u64,
    rounds: u64,
    seed: u64,
) -> Vec<Option<Vec<u8>>> {
    let key = |n: u64| format!("rk/{n:02}").into_bytes();
    let all: Vec<Vec<u8>> = (0..keys).map(key).collect();
    let refs: Vec<&[u8]> = all.iter().map(Vec::as_slice).collect();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let mut writers = Vec::new();
        for w in 0..2u64 {
            writers.push(s.spawn(move || {
                for r in 0..rounds {
                    let tag = format!("b{w}.{r}");
                    let b: WriteBatch = (0..keys)
                        .map(|n| (key(n), Some(tag.clone().into_bytes())))
                        .collect();
                    store.write_batch(&b).unwrap();
                }
            }));
            writers.push(s.spawn(move || {
                let mut rng = ChaCha8Rng::seed_from_u64(seed ^ (w + 7));
                for r in 0..rounds * 4 {
                    let k = key(rng.random_range(0..keys));
                    store.put(&k, format!("p{w}.{r}").as_bytes()).unwrap();
                }
            }));
        }
        let (stop, refs) = (&stop, &refs);
        s.spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let got = store.multi_get(refs).unwrap();
                let tags: std::collections::BTreeSet<&[u8]> = got
                    .iter()
                    .flatten()
                    .map(Vec::as_slice)
                    .filter(|v| v.first() == Some(&b'b'))
                    .collect();
                assert!(
                    tags.len() <= 1,
                    "seed {seed}: one multi_get saw values of several batches: {:?}",
                    tags.iter()
                        .map(|t| String::from_utf8_lossy(t))
                        .collect::<Vec<_>>()
                );
            }
        });
        for w in writers {
            w.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
        }
        stop.store(true, Ordering::Relaxed);
    });
    store.multi_get(&refs).unwrap()
}

/// For an engine without native batches: `write_batch` is refused with
/// [`Error::Unsupported`], `atomic_batches` is false, and nothing of the batch is applied.
pub fn assert_batches_unsupported(store: &dyn KvStore) {
    assert!(!store.atomic_batches());
    let mut b = WriteBatch::new();
    b.put("unsupported/a", "1").put("unsupported/b", "2");
    match store.write_batch(&b) {
        Err(Error::Unsupported(why)) => assert!(why.contains("batch"), "{why}"),
        other => panic!("write_batch on an engine without batches returned {other:?}"),
    }
    assert_eq!(store.get(b"unsupported/a").unwrap(), None);
    assert_eq!(store.get(b"unsupported/b").unwrap(), None);
}
