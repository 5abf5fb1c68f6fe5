//! Crash-atomic write batches (issue 24; FORMAT.md § Write batches), judged by the
//! testkit's batch-atomicity kit: Tracked crash images taken at random moments while three
//! threads write batches of 1..=100 keys into a 1 MiB pool of 16 KiB chunks (so chunks
//! roll over inside batches and GC — its thread and a collector stepping it — collects
//! chunks holding members and commit records),
//! after every persist of chosen batches (line-level and word-torn; GC's persists among
//! them once it runs), and at the batch
//! commit's named crash points; each image is recovered and every batch must be whole or
//! absent, none acknowledged lost. The kit must also catch a non-atomic engine (batches as
//! a loop of puts over the same store).

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use common::*;
use tierkv_core::media::pmem::{CrashImageOptions, DurabilityMode, PmemPool};
use tierkv_core::{KvStore, WriteBatch};
use tierkv_focus::FocusStore;
use tierkv_testkit::{BatchKit, BatchKitConfig, BatchReport, CommitSide, NonAtomicBatches};

const EXTRA: &str = "chunk_size=16KiB,gc_threshold=0.9";
const POOL: u64 = 1 << 20;

fn counter(s: &dyn KvStore, name: &str) -> u64 {
    s.stats()
        .counters
        .get(&format!("focus_{name}"))
        .copied()
        .unwrap_or(0)
}

/// Writes `image` to a fresh file in `dir` and opens it (recovery), then checks the
/// store. The file is unlinked at once (the mapping stays): the store of an earlier image
/// may still be closing on its GC thread and hold the lock of its own file.
fn recover(dir: &Path, image: &[u8]) -> Arc<dyn KvStore> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let path = dir.join(format!("img-{}", NEXT.fetch_add(1, Ordering::Relaxed)));
    std::fs::write(&path, image).unwrap();
    let store = try_reopen(&path, EXTRA).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    std::fs::remove_file(&path).unwrap();
    if let Err(e) = store.check() {
        panic!("check after recovery: {e}");
    }
    store
}

fn tracked(dir: &Path) -> (Arc<PmemPool>, Arc<FocusStore>) {
    let store = new_store(dir, POOL, DurabilityMode::Tracked, EXTRA);
    (store.plog().pool().clone(), store)
}

fn kit(seed: u64, max_batch: usize) -> BatchKit {
    BatchKit::new(BatchKitConfig {
        seed,
        max_batch,
        ..BatchKitConfig::default()
    })
}

fn alternate(s: u64) -> CrashImageOptions {
    if s.is_multiple_of(2) {
        CrashImageOptions::lines()
    } else {
        CrashImageOptions::torn_words()
    }
}

#[test]
fn batches_survive_crash_images_at_random_moments_with_gc_running() {
    let seed = seed("focus_batches_survive_crash_images_at_random_moments");
    let mut total = BatchReport::default();
    let (mut gc_chunks, mut batches) = (0, 0);
    for round in 0..2u64 {
        let dir = scratch_dir();
        let (pool, store) = tracked(dir.path());
        let dynamic: Arc<dyn KvStore> = store.clone();
        let kit = kit(seed.wrapping_add(round), 100);
        // Besides the GC thread (whose passes wait 20 ms apart), a collector steps GC
        // all the time, so that chunks of batches are collected between the cuts.
        let stop = std::sync::atomic::AtomicBool::new(false);
        let cuts = std::thread::scope(|sc| {
            sc.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    store.gc_step().unwrap();
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            });
            let cuts = kit.run_with_cuts(&dynamic, 6, |i| {
                let s = seed ^ (round << 8) ^ i;
                pool.crash_image(s, alternate(s)).unwrap()
            });
            stop.store(true, Ordering::Relaxed);
            cuts
        });
        gc_chunks += counter(&*store, "gc_chunks");
        batches += counter(&*store, "batches");
        store.close().unwrap();
        for (i, (image, ledger)) in cuts.into_iter().enumerate() {
            let recovered = recover(dir.path(), &image);
            total.merge(kit.check(&*recovered, &ledger, &format!("round {round} image {i}")));
        }
    }
    println!(
        "random moments: {} images, {} batches checked, {} torn, {} lost; {batches} batches, \
         {gc_chunks} chunks collected",
        total.images, total.batches_checked, total.torn, total.lost
    );
    total.assert_clean();
    assert!(total.batches_checked > 24, "too few batches: {total:?}");
    assert!(gc_chunks > 0, "GC never ran during the batches");
}

fn persist_points(
    dir: &Path,
    store: Arc<dyn KvStore>,
    pool: &Arc<PmemPool>,
    kit: &BatchKit,
    cut: &[u64],
    stride: u64,
) -> (BatchReport, Vec<u64>) {
    let last = cut.iter().max().copied().unwrap_or(1);
    kit.run_persist_points(&store, pool, last, cut, stride, |_, image| {
        recover(dir, &image)
    })
}

#[test]
fn batches_survive_a_crash_after_every_persist_of_their_commit() {
    let seed = seed("focus_batches_survive_a_crash_after_every_persist_of_their_commit");
    let dir = scratch_dir();
    let (pool, store) = tracked(dir.path());
    let kit = kit(seed, 40);
    // The first batches and the last ones, when GC collects chunks of earlier batches
    // (its persists inside a cut batch are cut too).
    let cut: Vec<u64> = (1..=4).chain(150..=157).collect();
    let (r, persists) = persist_points(dir.path(), store.clone(), &pool, &kit, &cut, 1);
    let gc = counter(&*store, "gc_chunks");
    println!(
        "persist points: {} images ({persists:?} persists in the cut batches), {} batches \
         checked, {} torn, {} lost; {gc} chunks collected",
        r.images, r.batches_checked, r.torn, r.lost
    );
    r.assert_clean_with_an_image_per_persist(&persists);
    assert!(r.images >= 24, "{r:?}");
    assert!(gc > 0, "GC never ran");
}

/// The kit catches a non-atomic engine: the same store, with batches applied as a loop of
/// puts and deletes.
#[test]
fn the_kit_catches_batches_applied_as_a_loop_of_puts() {
    let seed = seed("focus_the_kit_catches_batches_applied_as_a_loop_of_puts");
    let dir = scratch_dir();
    let (pool, store) = tracked(dir.path());
    let broken: Arc<dyn KvStore> = Arc::new(NonAtomicBatches(store));
    let kit = kit(seed, 12);
    let (r, _) = persist_points(dir.path(), broken, &pool, &kit, &[1, 2, 3, 4, 5, 6], 3);
    r.assert_caught("loop of puts");
}

/// The batch commit's named crash points (FORMAT.md § Named crash points): at
/// `focus.batch.members_persisted` (every member durable, no commit) the batch must be
/// absent after recovery, at `focus.batch.committed` (commit durable, index not moved)
/// present.
#[test]
fn the_named_crash_points_of_a_batch_commit_recover_none_or_all() {
    let seed = seed("focus_the_named_crash_points_of_a_batch_commit_recover_none_or_all");
    let dir = scratch_dir();
    let (pool, store) = tracked(dir.path());
    let kit = kit(seed, 40);
    let points = [
        ("focus.batch.members_persisted", CommitSide::Before),
        ("focus.batch.committed", CommitSide::After),
    ];
    let mut dropped = 0;
    let (report, seen) = kit.run_named_points(&*store, &pool, 12, &points, |image| {
        let recovered = recover(dir.path(), &image);
        dropped += counter(&*recovered, "uncommitted_dropped");
        recovered
    });
    println!(
        "named points: {seen:?}, {} images, {dropped} uncommitted members dropped",
        report.images
    );
    report.assert_clean();
    assert!(dropped > 0, "no image held uncommitted members");
    // A batch of deletes of absent keys only writes nothing and reaches neither point.
    let committed = seen.get("focus.batch.committed").copied().unwrap_or(0);
    assert!(committed >= 8, "{seen:?}");
    assert_eq!(seen.get("focus.batch.members_persisted"), Some(&committed));
}

/// Bad input: an empty batch and a batch of deletes of absent keys write nothing; a batch
/// over the core's limits or over a quarter of the pool is refused whole, nothing applied,
/// and the store goes on taking batches.
#[test]
fn oversized_batches_are_refused_whole_and_empty_ones_do_nothing() {
    let dir = scratch_dir();
    let store = new_store(dir.path(), POOL, DurabilityMode::Volatile, EXTRA);
    let appended = |s: &FocusStore| {
        s.stats()
            .counters
            .get("focus_bytes_appended")
            .copied()
            .unwrap_or(0)
    };
    let before = appended(&store);
    store.write_batch(&WriteBatch::new()).unwrap();
    let mut absent = WriteBatch::new();
    absent.delete("nobody").delete("nothing");
    store.write_batch(&absent).unwrap();
    assert_eq!(appended(&store), before, "nothing appended");
    // 1 MiB pool of 16 KiB chunks: about 250 KiB at most.
    let mut big = WriteBatch::new();
    for i in 0..100 {
        big.put(format!("big{i:03}"), vec![b'x'; 8000]);
    }
    let e = store.write_batch(&big).unwrap_err();
    assert!(
        matches!(e, tierkv_core::Error::InvalidArgument(_)) && e.to_string().contains("quarter"),
        "{e}"
    );
    let mut over = WriteBatch::new();
    over.put("ok", "1").put("bad", vec![0u8; 20_000]);
    assert!(matches!(
        store.write_batch(&over),
        Err(tierkv_core::Error::InvalidArgument(_))
    ));
    for k in ["big000", "big099", "ok"] {
        assert_eq!(store.get(k.as_bytes()).unwrap(), None, "{k}");
    }
    let mut fine = WriteBatch::new();
    for i in 0..20 {
        fine.put(format!("big{i:03}"), vec![b'y'; 8000]);
    }
    store.write_batch(&fine).unwrap();
    let keys: Vec<Vec<u8>> = (0..21).map(|i| format!("big{i:03}").into_bytes()).collect();
    let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    let got = store.multi_get(&refs).unwrap();
    assert!(
        got[..20]
            .iter()
            .all(|v| v.as_deref() == Some(&[b'y'; 8000][..]))
    );
    assert_eq!(got[20], None);
    assert_eq!(counter(&*store, "batches"), 1);
    assert_eq!(counter(&*store, "batch_records"), 20);
}
