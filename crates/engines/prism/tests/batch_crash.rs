//! Crash-atomic write batches (issue 24; `FORMAT.md` § Write batches), judged by the
//! testkit's batch-atomicity kit: Tracked crash images taken at random moments while three
//! threads write batches of 1..=100 keys, and after every persist of chosen batches; each
//! image is recovered and every batch must be whole or absent, none acknowledged lost. The
//! kit must also catch a non-atomic engine (batches as a loop of puts over the same store).
//!
//! Flash is large enough that GC never runs (asserted), so an image taken earlier can be
//! recovered against the flash state copied later (chunks are only ever added).

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use std::path::Path;
use std::sync::Arc;

use common::{Rig, assert_check};
use tierkv_core::KvStore;
use tierkv_core::media::pmem::CrashImageOptions;
use tierkv_testkit::rig::{scratch_dir, seed};
use tierkv_testkit::{BatchKit, BatchKitConfig, BatchReport, NonAtomicBatches};

/// Small PWBs, so that reclamation runs inside batches.
const SPEC: &str = "prism@pwb_count=2,pwb_size=64KiB,chunk_size=16KiB,svc_size=64KiB";
const POOL_MIB: u64 = 8;
const FLASH_MIB: u64 = 16;

/// Copies the flash directory of `from` and writes `image` as the pool of a fresh store
/// directory `to`; opens it (recovery).
fn recover_copy(from: &Path, to: &Path, image: &[u8]) -> Arc<dyn KvStore> {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to.join("flash")).unwrap();
    for f in std::fs::read_dir(from.join("flash")).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), to.join("flash").join(f.file_name())).unwrap();
    }
    std::fs::write(to.join("pmem.pool"), image).unwrap();
    let store = Rig::at(to, SPEC, POOL_MIB, FLASH_MIB)
        .reopen()
        .unwrap_or_else(|e| panic!("recovery of {}: {e}", to.display()));
    assert_check(&*store);
    store
}

fn assert_no_gc(store: &dyn KvStore) {
    let st = store.stats();
    assert_eq!(
        st.counters["gc_runs"], 0,
        "GC ran: earlier images may point at reused chunks"
    );
}

#[test]
fn batches_survive_crash_images_at_random_moments() {
    let seed = seed("batches_survive_crash_images_at_random_moments");
    let mut total = BatchReport::default();
    for round in 0..2u64 {
        let tmp = scratch_dir();
        let rig = Rig::at(tmp.path(), SPEC, POOL_MIB, FLASH_MIB);
        let (live, pool) = rig.create_with_pool();
        let store: Arc<dyn KvStore> = live;
        let kit = BatchKit::new(BatchKitConfig {
            seed: seed.wrapping_add(round),
            ..BatchKitConfig::default()
        });
        let cuts = kit.run_with_cuts(&store, 8, |i| {
            let s = seed ^ (round << 8) ^ i;
            let opts = if s.is_multiple_of(2) {
                CrashImageOptions::lines()
            } else {
                CrashImageOptions::torn_words()
            };
            pool.crash_image(s, opts).unwrap()
        });
        assert_no_gc(&*store);
        for (i, (image, ledger)) in cuts.into_iter().enumerate() {
            let to = tmp.path().join("img");
            let recovered = recover_copy(tmp.path(), &to, &image);
            total.merge(kit.check(&*recovered, &ledger, &format!("round {round} image {i}")));
        }
        store.close().unwrap();
    }
    println!(
        "random moments: {} images, {} batches checked, {} torn, {} lost",
        total.images, total.batches_checked, total.torn, total.lost
    );
    total.assert_clean();
    assert!(
        total.batches_checked > 24,
        "too few batches before the cuts: {total:?}"
    );
}

/// Runs the persist-point kit over `store` (prism itself, or a wrapper of it) and returns
/// its verdicts.
fn persist_points(
    tmp: &Path,
    store: Arc<dyn KvStore>,
    pool: &Arc<tierkv_core::media::pmem::PmemPool>,
    kit: &BatchKit,
    cut: &[u64],
    stride: u64,
) -> (BatchReport, Vec<u64>, u64) {
    let mut replayed = 0;
    let last = cut.iter().max().copied().unwrap_or(1);
    let to = tmp.join("image");
    let (r, persists) = kit.run_persist_points(&store, pool, last, cut, stride, |_, image| {
        let s = recover_copy(tmp, &to, &image);
        replayed += s.stats().counters["batches_replayed"];
        s
    });
    assert_no_gc(&*store);
    (r, persists, replayed)
}

#[test]
fn batches_survive_a_crash_after_every_persist_of_their_commit() {
    let seed = seed("batches_survive_a_crash_after_every_persist_of_their_commit");
    let tmp = scratch_dir();
    let rig = Rig::at(tmp.path(), SPEC, POOL_MIB, FLASH_MIB);
    let (live, pool) = rig.create_with_pool();
    let kit = BatchKit::new(BatchKitConfig {
        max_batch: 12,
        seed,
        ..BatchKitConfig::default()
    });
    let (r, persists, replayed) = persist_points(tmp.path(), live, &pool, &kit, &[1, 4, 7], 1);
    println!(
        "persist points: {} images ({persists:?} persists in the cut batches), {} batches \
         checked, {} torn, {} lost, {replayed} committed batches finished by recovery",
        r.images, r.batches_checked, r.torn, r.lost
    );
    r.assert_clean();
    assert!(replayed > 0, "no image fell between commit and apply");
    assert_eq!(
        r.images,
        persists.iter().sum::<u64>(),
        "an image per persist"
    );
}

/// The kit catches a non-atomic engine: the same store, with batches applied as a loop of
/// puts and deletes (every fourth persist of six batches is enough).
#[test]
fn the_kit_catches_batches_applied_as_a_loop_of_puts() {
    let seed = seed("the_kit_catches_batches_applied_as_a_loop_of_puts");
    let tmp = scratch_dir();
    let rig = Rig::at(tmp.path(), SPEC, POOL_MIB, FLASH_MIB);
    let (live, pool) = rig.create_with_pool();
    let broken: Arc<dyn KvStore> = Arc::new(NonAtomicBatches(live));
    let kit = BatchKit::new(BatchKitConfig {
        max_batch: 12,
        seed,
        ..BatchKitConfig::default()
    });
    let (r, _, _) = persist_points(tmp.path(), broken, &pool, &kit, &[1, 2, 3, 4, 5, 6], 4);
    println!(
        "loop of puts: {} images, {} torn, {} lost; first: {:?}",
        r.images,
        r.torn,
        r.lost,
        r.failures.first()
    );
    assert!(
        r.torn > 0,
        "the kit did not catch a non-atomic batch: {r:?}"
    );
}

/// Every persist of five batches of up to 100 keys (minutes in a debug build).
#[test]
#[ignore = "long: run by hand"]
fn large_batches_survive_a_crash_after_every_persist() {
    let seed = seed("large_batches_survive_a_crash_after_every_persist");
    let tmp = scratch_dir();
    let rig = Rig::at(tmp.path(), SPEC, POOL_MIB, FLASH_MIB);
    let (live, pool) = rig.create_with_pool();
    let kit = BatchKit::new(BatchKitConfig {
        seed,
        ..BatchKitConfig::default()
    });
    let (r, persists, _) = persist_points(tmp.path(), live, &pool, &kit, &[1, 2, 3, 4, 5], 1);
    println!(
        "{} images ({persists:?}), {} batches checked, {} torn, {} lost",
        r.images, r.batches_checked, r.torn, r.lost
    );
    r.assert_clean();
}
