//! Write batches under the power cut of `tierkv stress` (issue 24): the flash devices crash
//! first (later writes and syncs fail), and the pmem image is taken a moment later while
//! the writers still run. PWB reclamation then fails and poisons the engine, so batches
//! fail in the middle of applying (after their commit point) while other threads' batches
//! wait on the batch gate.
//!
//! The defect this reaches (found with `tierkv stress --mode pmem-image --seed 2411`): a
//! batch that failed after its commit point left root word 2 naming its log; a batch of
//! another thread that had passed its writability check before the poison then took the
//! gate, logged and committed over that root word. Recovery finished the second batch and
//! never the first, which stayed half applied ("torn"). A commit now re-checks, under the
//! gate, that the engine is writable and that no committed batch is unfinished.
//!
//! Small PWBs and a small flash device keep PWB reclamation and GC running throughout
//! (asserted over the rounds); a thread of single puts on other keys shares the PWBs and
//! the gate. The pmem image is taken after the flash crashed, so the flash copied beside
//! it (its crash state) is exactly what the image may refer to, GC or not.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::{Rig, value_for};
use tierkv_core::KvStore;
use tierkv_core::media::flash::CrashMode;
use tierkv_testkit::rig::seed;
use tierkv_testkit::{BatchKit, BatchKitConfig, BatchReport};

/// Two small PWBs for three batch writers and a single-put thread; a low GC threshold is
/// not needed: the device is small.
const SPEC: &str = "prism@pwb_count=2,pwb_size=64KiB,chunk_size=16KiB,svc_size=64KiB";
const ROUNDS: u64 = 8;

#[test]
fn batches_stay_whole_when_flash_fails_before_the_pmem_image() {
    let seed = seed("batches_stay_whole_when_flash_fails_before_the_pmem_image");
    let mut total = BatchReport::default();
    let (mut gc_runs, mut reclaims, mut poisoned) = (0, 0, 0);
    let solo_puts = AtomicU64::new(0);
    for round in 0..ROUNDS {
        let rig = Rig::new(SPEC, 8, 1).with_flash_kib(1024).with_faults();
        let inj = rig.injector.clone().unwrap();
        let (live, pool) = rig.create_with_pool();
        // Garbage on flash before the batches start, so that GC runs during them.
        for i in 0..4_000u64 {
            let k = format!("warm/{:03}", i % 120).into_bytes();
            live.put(&k, &value_for(&k, i)).unwrap();
        }
        let store: Arc<dyn KvStore> = live.clone();
        let kit = BatchKit::new(BatchKitConfig {
            seed: seed.wrapping_add(round),
            max_batch: 40,
            ..BatchKitConfig::default()
        });
        let stop = AtomicBool::new(false);
        let cuts = std::thread::scope(|s| {
            // Single puts beside the batches: other keys, the same PWBs and gate.
            s.spawn(|| {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let k = format!("solo/{:03}", i % 97).into_bytes();
                    if live.put(&k, &value_for(&k, i)).is_err() {
                        break;
                    }
                    solo_puts.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
            });
            let cuts = kit.run_with_cuts(&store, 1, |i| {
                // The power cut as the stress harness makes it: flash first, then (while
                // the writers run into the failed flash) the pmem image.
                inj.crash(CrashMode::DropUnsynced).unwrap();
                std::thread::sleep(Duration::from_millis(30));
                (
                    rig.recover_image(&pool, seed ^ (round << 8) ^ i),
                    live.stats(),
                )
            });
            stop.store(true, Ordering::Relaxed);
            cuts
        });
        for (i, ((recovered, live_stats), ledger)) in cuts.into_iter().enumerate() {
            let (_dir, recovered) =
                recovered.unwrap_or_else(|e| panic!("round {round} image {i}: {e}"));
            total.merge(kit.check(&*recovered, &ledger, &format!("round {round} image {i}")));
            gc_runs += live_stats.counters["gc_runs"];
            reclaims += live_stats.counters["pwb_reclaims"];
            poisoned += u64::from(store.put(b"after", b"cut").is_err());
            recovered.close().unwrap();
        }
        // Closing a store whose flash crashed may fail; its image was judged above.
        let _ = store.close();
    }
    println!(
        "power cuts: {} images, {} batches checked, {} torn, {} lost; {gc_runs} GC runs, \
         {reclaims} PWB reclamations, {poisoned} of {ROUNDS} live stores poisoned by the cut, {} single puts",
        total.images,
        total.batches_checked,
        total.torn,
        total.lost,
        solo_puts.load(Ordering::Relaxed)
    );
    total.assert_clean();
    assert!(solo_puts.load(Ordering::Relaxed) > 0, "no single put ran");
    assert!(gc_runs > 0, "GC never ran");
    assert!(reclaims > 0, "PWB reclamation never ran");
    assert!(poisoned > 0, "no cut made a background step fail");
}
