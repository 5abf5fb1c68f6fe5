//! Crash-atomic write batches (issue 24; `FORMAT.md` § Write batches), judged by the
//! testkit's batch-atomicity kit: Tracked crash images taken at random moments while three
//! threads write batches of 1..=100 keys into 16 KiB MemTables (so MemTable switches,
//! one-piece flushes, zero-copy merges and lazy copies run inside and between batches),
//! after every persist of chosen batches (line-level and word-torn), and at the batch
//! commit's named crash points; each image is recovered and every batch must be whole or
//! absent, none acknowledged lost. The kit must also catch a non-atomic engine (batches as
//! a loop of puts over the same store).

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use std::path::Path;
use std::sync::Arc;

use common::*;
use tierkv_core::media::pmem::{CrashImageOptions, DurabilityMode, PmemPool};
use tierkv_core::{KvStore, WriteBatch};
use tierkv_testkit::{BatchKit, BatchKitConfig, BatchReport, CommitSide, NonAtomicBatches};

const PARAMS: &str = "memtable=16KiB,levels=3,stall_timeout_ms=60000,progress_wait_ms=60000";
const POOL: u64 = 4 << 20;

/// Writes `image` to `path` and opens it (recovery), then checks the store's structure.
fn recover(path: &Path, image: &[u8]) -> Arc<dyn KvStore> {
    std::fs::write(path, image).unwrap();
    let pool = PmemPool::open(&config(path, 0, DurabilityMode::Volatile)).unwrap();
    let store = tierkv_mio::open_store(pool, options(PARAMS), limits(), false)
        .unwrap_or_else(|e| panic!("recovery of {}: {e}", path.display()));
    if let Err(e) = store.check() {
        panic!("check after recovery: {e}");
    }
    store
}

/// A Tracked store in `dir` (its pool and the store).
fn tracked(dir: &Path) -> (Arc<PmemPool>, Arc<dyn KvStore>) {
    let pool = create_pool(&dir.join("pool"), POOL, DurabilityMode::Tracked);
    let store: Arc<dyn KvStore> = open(pool.clone(), PARAMS, true);
    (pool, store)
}

fn kit(seed: u64, max_batch: usize) -> BatchKit {
    BatchKit::new(BatchKitConfig {
        seed,
        max_batch,
        ..BatchKitConfig::default()
    })
}

#[test]
fn batches_survive_crash_images_at_random_moments() {
    let seed = seed("mio_batches_survive_crash_images_at_random_moments");
    let mut total = BatchReport::default();
    let mut flushes = 0;
    for round in 0..2u64 {
        let dir = scratch_dir();
        let (pool, store) = tracked(dir.path());
        let kit = kit(seed.wrapping_add(round), 100);
        let cuts = kit.run_with_cuts(&store, 6, |i| {
            let s = seed ^ (round << 8) ^ i;
            let opts = if s.is_multiple_of(2) {
                CrashImageOptions::lines()
            } else {
                CrashImageOptions::torn_words()
            };
            pool.crash_image(s, opts).unwrap()
        });
        flushes += counter(&store.stats(), "flushes");
        store.close().unwrap();
        for (i, (image, ledger)) in cuts.into_iter().enumerate() {
            let recovered = recover(&dir.path().join("img"), &image);
            total.merge(kit.check(&*recovered, &ledger, &format!("round {round} image {i}")));
        }
    }
    println!(
        "random moments: {} images, {} batches checked, {} torn, {} lost, {flushes} flushes",
        total.images, total.batches_checked, total.torn, total.lost
    );
    total.assert_clean();
    assert!(
        total.batches_checked > 24,
        "too few batches before the cuts: {total:?}"
    );
    assert!(flushes > 4, "no MemTable was flushed during the batches");
}

/// Runs the persist-point kit over `store` (mio itself, or a wrapper of it).
fn persist_points(
    dir: &Path,
    store: Arc<dyn KvStore>,
    pool: &Arc<PmemPool>,
    kit: &BatchKit,
    cut: &[u64],
    stride: u64,
) -> (BatchReport, Vec<u64>) {
    let last = cut.iter().max().copied().unwrap_or(1);
    let to = dir.join("image");
    kit.run_persist_points(&store, pool, last, cut, stride, |_, image| {
        recover(&to, &image)
    })
}

#[test]
fn batches_survive_a_crash_after_every_persist_of_their_commit() {
    let seed = seed("mio_batches_survive_a_crash_after_every_persist_of_their_commit");
    let dir = scratch_dir();
    let (pool, store) = tracked(dir.path());
    let kit = kit(seed, 60);
    let cut: Vec<u64> = (1..=30).collect();
    let (r, persists) = persist_points(dir.path(), store.clone(), &pool, &kit, &cut, 1);
    let s = store.stats();
    println!(
        "persist points: {} images ({persists:?} persists in the cut batches), {} batches \
         checked, {} torn, {} lost; {} batches, {} flushes",
        r.images,
        r.batches_checked,
        r.torn,
        r.lost,
        counter(&s, "batches"),
        counter(&s, "flushes")
    );
    r.assert_clean();
    assert!(r.images >= 10, "an image per persist: {r:?}");
    assert!(
        persists.iter().any(|&p| p > 1),
        "no cut batch switched MemTables: {persists:?}"
    );
}

/// The kit catches a non-atomic engine: the same store, with batches applied as a loop of
/// puts and deletes (each put persists its own log record).
#[test]
fn the_kit_catches_batches_applied_as_a_loop_of_puts() {
    let seed = seed("mio_the_kit_catches_batches_applied_as_a_loop_of_puts");
    let dir = scratch_dir();
    let (pool, store) = tracked(dir.path());
    let broken: Arc<dyn KvStore> = Arc::new(NonAtomicBatches(store));
    let kit = kit(seed, 12);
    let (r, _) = persist_points(dir.path(), broken, &pool, &kit, &[1, 2, 3, 4, 5, 6], 3);
    r.assert_caught("loop of puts");
}

/// The batch commit's named crash points (`FORMAT.md` § Named crash points): at
/// `mio.batch.before_log` the batch must be absent after recovery, at
/// `mio.batch.after_log` (its record persisted, nothing in the MemTable yet) present.
#[test]
fn the_named_crash_points_of_a_batch_commit_recover_none_or_all() {
    let seed = seed("mio_the_named_crash_points_of_a_batch_commit_recover_none_or_all");
    let dir = scratch_dir();
    let (pool, store) = tracked(dir.path());
    let kit = kit(seed, 40);
    let points = [
        ("mio.batch.before_log", CommitSide::Before),
        ("mio.batch.after_log", CommitSide::After),
    ];
    let (report, seen) = kit.run_named_points(&*store, &pool, 16, &points, |image| {
        recover(&dir.path().join("img"), &image)
    });
    println!("named points: {seen:?}, {} images", report.images);
    report.assert_clean();
    assert_eq!(seen.get("mio.batch.before_log"), Some(&16));
    assert_eq!(seen.get("mio.batch.after_log"), Some(&16));
}

/// Bad input: an empty batch is a no-op; a batch over the core's limits or too large for
/// the pool (its MemTable and log over an eighth of it) is refused whole, nothing applied,
/// and the store goes on taking batches.
#[test]
fn oversized_batches_are_refused_whole_and_empty_ones_do_nothing() {
    let dir = scratch_dir();
    let pool = create_pool(&dir.path().join("pool"), 2 << 20, DurabilityMode::Volatile);
    let store = open(pool, PARAMS, true);
    let before = store.stats();
    store.write_batch(&WriteBatch::new()).unwrap();
    assert_eq!(counter(&store.stats(), "batches"), 0);
    assert_eq!(
        counter(&store.stats(), "wal_bytes"),
        counter(&before, "wal_bytes")
    );
    // 2 MiB pool: 256 KiB at most. 100 values of 4 KiB need more.
    let mut big = WriteBatch::new();
    for i in 0..100 {
        big.put(format!("big{i:03}"), vec![b'x'; 4096]);
    }
    let e = store.write_batch(&big).unwrap_err();
    assert!(
        matches!(e, tierkv_core::Error::InvalidArgument(_)) && e.to_string().contains("eighth"),
        "{e}"
    );
    let mut over = WriteBatch::new();
    over.put("ok", "1")
        .put("bad", vec![0u8; limits().max_value_len + 1]);
    assert!(matches!(
        store.write_batch(&over),
        Err(tierkv_core::Error::InvalidArgument(_))
    ));
    for k in ["big000", "big099", "ok"] {
        assert_eq!(store.get(k.as_bytes()).unwrap(), None, "{k}");
    }
    let mut fine = WriteBatch::new();
    for i in 0..20 {
        fine.put(format!("big{i:03}"), vec![b'y'; 4096]);
    }
    store.write_batch(&fine).unwrap();
    let keys: Vec<Vec<u8>> = (0..21).map(|i| format!("big{i:03}").into_bytes()).collect();
    let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    let got = store.multi_get(&refs).unwrap();
    assert!(
        got[..20]
            .iter()
            .all(|v| v.as_deref() == Some(&[b'y'; 4096][..]))
    );
    assert_eq!(got[20], None);
    assert_eq!(counter(&store.stats(), "batches"), 1);
    assert_eq!(counter(&store.stats(), "batch_ops"), 20);
}
