//! Power failure at every persist point of the engine (DESIGN §4, failure 2; issue 18):
//! a writer puts and deletes with a 4 KiB MemTable, so log appends, one-piece flushes,
//! directory publishes, zero-copy moves and merges into the repository all run many
//! times; just before each of the engine's persists a hook takes a Tracked crash image
//! (line-level and word-torn alternately), recovers it into a fresh store and checks that
//! every acknowledged write is there and nothing else: each key holds its last
//! acknowledged value, or the value of the one write in flight on it.

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use std::sync::{Arc, Mutex};

use common::crash::{Model, Sampler, assert_recovered, write};
use common::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv_core::media::pmem::{CrashPoint, DurabilityMode, PmemPool};
use tierkv_core::{KvStore, Stats};
use tierkv_mio::MioStore;

const PARAMS: &str = "memtable=4KiB,levels=4,stall_timeout_ms=60000,progress_wait_ms=60000";

struct Crasher {
    pool: Mutex<Option<Arc<PmemPool>>>,
    model: Mutex<Model>,
    dir: std::path::PathBuf,
    sampler: Sampler,
    /// Upper-level links the recoveries of the images repaired (`defrag_links_repaired`).
    repaired: Mutex<u64>,
}

impl Crasher {
    fn at(&self, label: &str) {
        let Some((n, opts)) = self.sampler.next(label) else {
            return;
        };
        let Some(pool) = self.pool.lock().unwrap().clone() else {
            return;
        };
        // The image and the model are taken together: the writer updates the model under
        // its lock, so no write is acknowledged between the two.
        let (image, model) = {
            let m = self.model.lock().unwrap();
            (pool.crash_image(n ^ 0x5eed, opts).unwrap(), m.clone())
        };
        let path = self.dir.join(format!("img-{label}-{n}"));
        std::fs::write(&path, &image).unwrap();
        std::fs::write(path.with_extension("orig"), &image).unwrap();
        let ctx = format!("crash before persist {label} #{n}");
        let img = PmemPool::open(&config(&path, 0, DurabilityMode::Volatile)).unwrap();
        let store = tierkv_mio::open_store(img, options(PARAMS), limits(), false)
            .unwrap_or_else(|e| panic!("{ctx}: recovery failed: {e}"));
        assert_recovered(&ctx, &*store, &model);
        *self.repaired.lock().unwrap() += counter(&store.stats(), "defrag_links_repaired");
        if let Err(e) = store.check() {
            let kept = std::env::temp_dir().join(format!("mio-failed-image-{label}-{n}"));
            let _ = std::fs::write(&kept, &image);
            panic!("{ctx}: check: {e} (image kept in {})", kept.display());
        }
        store.close().unwrap();
        drop(store);
        std::fs::remove_file(&path).unwrap();
        let _ = std::fs::remove_file(path.with_extension("orig"));
        self.sampler.verified(label);
    }
}

impl Crasher {
    fn new(dir: &std::path::Path, sample: u64) -> Arc<Crasher> {
        Arc::new(Crasher {
            pool: Mutex::new(None),
            model: Mutex::new(Model::new()),
            dir: dir.to_path_buf(),
            sampler: Sampler::new(sample),
            repaired: Mutex::default(),
        })
    }

    /// Puts and deletes on 60 keys, the model updated around each call, until the
    /// background work settles; returns the store's stats.
    fn workload(&self, store: &MioStore, seed: u64) -> Stats {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        for i in 0..1_500u32 {
            let k = format!("key{:03}", rng.random_range(0..60)).into_bytes();
            let put = rng.random_range(0..100) < 85;
            let v = put.then(|| {
                let mut v = format!("{i}:").into_bytes();
                v.resize(rng.random_range(20..300), b'a' + (i % 26) as u8);
                v
            });
            assert!(self.write(store, &k, v), "a write was refused");
        }
        // A liveness bound only: the background threads pause at every sampled point
        // while its image is recovered and checked, which is slow on a loaded machine.
        assert!(store.wait_idle(std::time::Duration::from_secs(600)));
        *self.pool.lock().unwrap() = None;
        let s = store.stats();
        self.sampler.report();
        println!(
            "flushes {}, nodes relinked {}, repository merges {}",
            counter(&s, "flushes"),
            counter(&s, "nodes_relinked"),
            counter(&s, "compactions_l2")
        );
        s
    }

    /// One put or delete, the model updated around it; `false` when it was refused.
    fn write(&self, store: &MioStore, k: &[u8], v: Option<Vec<u8>>) -> bool {
        match write(&self.model, store, k, v) {
            Ok(()) => true,
            Err(tierkv_core::Error::NoSpace { .. }) => false,
            Err(e) => panic!("write: {e}"),
        }
    }

    /// Small values until the pool is full (no images), three quarters of them deleted,
    /// then values of the largest slab class: the repository's sparse slabs are evacuated
    /// under pressure (`src/defrag.rs`), with images at its persist points.
    fn fragment_workload(&self, store: &MioStore, pool: Arc<PmemPool>, seed: u64) -> Stats {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut keys = Vec::new();
        for i in 0..100_000u32 {
            let k = format!("s{i:05}").into_bytes();
            let mut v = format!("{i}:").into_bytes();
            v.resize(rng.random_range(60..100), b'a' + (i % 26) as u8);
            if !self.write(store, &k, Some(v)) {
                break;
            }
            keys.push(k);
        }
        *self.pool.lock().unwrap() = Some(pool);
        for (i, k) in keys.iter().enumerate() {
            if i % 4 != 0 {
                self.write(store, k, None);
            }
        }
        let mut refused = 0;
        for i in 0..keys.len() as u32 / 8 {
            let k = format!("L{i:05}").into_bytes();
            let mut v = format!("{i}:").into_bytes();
            v.resize(rng.random_range(700..900), b'A' + (i % 26) as u8);
            if !self.write(store, &k, Some(v)) {
                refused += 1;
                if refused > 3 {
                    break;
                }
            }
        }
        assert!(store.wait_idle(std::time::Duration::from_secs(600)));
        *self.pool.lock().unwrap() = None;
        let s = store.stats();
        self.sampler.report();
        println!(
            "{} small keys, 3/4 deleted; defrag: {} chunks freed, {} nodes moved; \
             upper-level links repaired in the images: {}",
            keys.len(),
            counter(&s, "defrag_chunks_freed"),
            counter(&s, "defrag_nodes_moved"),
            self.repaired.lock().unwrap()
        );
        s
    }

    fn assert_verified(&self, labels: &[&str], at_least: u64) {
        let verified = self.sampler.verified_counts();
        for label in labels {
            assert!(
                verified.get(*label).copied().unwrap_or(0) >= at_least,
                "{label}: {verified:?}"
            );
        }
    }
}

/// A new store on `pool` whose persists with a label `wanted` accepts take images.
fn hooked_store(
    crasher: &Arc<Crasher>,
    pool: &Arc<PmemPool>,
    wanted: fn(&str) -> bool,
) -> Arc<MioStore> {
    let c = crasher.clone();
    let hook = Arc::new(move |label: &'static str| {
        if wanted(label) {
            c.at(label);
        }
    }) as tierkv_mio::table::PersistHook;
    tierkv_mio::open_store_with_persist_hook(pool.clone(), options(PARAMS), limits(), true, hook)
        .unwrap()
}

#[test]
fn every_persist_point_of_put_flush_and_compactions_recovers() {
    let seed = seed("crash_persist_points");
    let dir = scratch_dir();
    let crasher = Crasher::new(dir.path(), 15);
    let pool = create_pool(&dir.path().join("pool"), 2 << 20, DurabilityMode::Tracked);
    let store = hooked_store(&crasher, &pool, |_| true);
    *crasher.pool.lock().unwrap() = Some(pool);
    crasher.workload(&store, seed);
    store.close().unwrap();
    crasher.assert_verified(
        &[
            "wal-record",
            "flush-table",
            "dir-object",
            "dir-root",
            "zc-new-mark",
            "zc-mark",
            "zc-unlink-new",
            "zc-x-links",
            "zc-link-old",
            "zc-unmark",
            "lc-node",
            "lc-link",
            "lc-unlink",
        ],
        5,
    );
}

/// The named crash points of the background work (`FORMAT.md` § Named crash points),
/// armed on the pool with the core mechanism (`PmemPool::arm_crash_points`): at each, on
/// the background thread that reached it (paused meanwhile), a crash image (line-level
/// and word-torn alternately) is recovered into a fresh store and every acknowledged
/// write checked, then `check` run on it.
#[test]
fn every_named_crash_point_of_background_work_recovers() {
    let seed = seed("crash_named_points");
    let dir = scratch_dir();
    let crasher = Crasher::new(dir.path(), 40);
    let pool = create_pool(&dir.path().join("pool"), 2 << 20, DurabilityMode::Tracked);
    let store = open(pool.clone(), PARAMS, true);
    *crasher.pool.lock().unwrap() = Some(pool.clone());
    let c = crasher.clone();
    pool.arm_crash_points(Arc::new(move |cp| {
        if let CrashPoint::Named(name) = cp {
            c.at(name);
        }
    }))
    .unwrap();
    crasher.workload(&store, seed);
    pool.disarm_crash_points();
    store.close().unwrap();
    crasher.assert_verified(
        &[tierkv_mio::points::UNLOCKED, tierkv_mio::points::NODE_MOVE].concat(),
        3,
    );
}

/// Defragmentation of the repository (`src/defrag.rs`): an image before every persist of
/// a node's copy and of each of its links, and at the named points after the copy and
/// after each link, each recovered and checked (`check` fails on an upper-level link to a
/// node level 0 does not reach, which recovery must have unlinked).
#[test]
fn every_persist_point_of_defragmentation_recovers() {
    let seed = seed("crash_defrag_points");
    let dir = scratch_dir();
    let crasher = Crasher::new(dir.path(), 150);
    let pool = create_pool(&dir.path().join("pool"), 2 << 20, DurabilityMode::Tracked);
    // Only the defragmentation's persists: the other test covers the rest.
    let store = hooked_store(&crasher, &pool, |label| label.starts_with("df-"));
    let c = crasher.clone();
    pool.arm_crash_points(Arc::new(move |cp| {
        if let CrashPoint::Named(name) = cp
            && name.starts_with("mio.defrag.")
        {
            c.at(name);
        }
    }))
    .unwrap();
    let s = crasher.fragment_workload(&store, pool.clone(), seed);
    pool.disarm_crash_points();
    store.close().unwrap();
    assert!(counter(&s, "defrag_chunks_freed") > 0);
    crasher.assert_verified(
        &[
            "df-node",
            "df-link",
            "mio.defrag.after_copy",
            "mio.defrag.after_link",
        ],
        5,
    );
    assert!(
        *crasher.repaired.lock().unwrap() > 0,
        "no image needed the upper-level repair"
    );
}
