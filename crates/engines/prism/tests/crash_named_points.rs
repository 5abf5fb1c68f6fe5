//! Crash images at the named crash points of the background work (FORMAT.md § Named crash
//! points; issue 17, item 2): racing writers and readers (gets and scans, judged by
//! linearizability: `tierkv_testkit::racing`) run on a store with tiny PWBs, chunks, SVC and
//! flash, so that PWB reclamation, Value Storage GC and scan-chain rewrites run all the
//! time. At the named points (until `FIRST` of each are verified, then one in `EVERY`, at
//! most `MAX_VERIFIED`) the handler, on the engine thread that reached it, paused, takes a
//! Tracked crash image (whole lines or torn words, alternately) and a copy of the flash
//! directory, recovers a fresh store from them, runs its `check` and judges every key:
//! every acknowledged write is there unless a later one overlapped it, a write in flight
//! may be either way. Every point must be verified at least `MIN_VERIFIED` times, so a
//! renamed or dead point fails the test.
//!
//! The flash copy must be the flash state of the image's instant as far as the image can
//! tell: no chunk it points into may be freed and rewritten while the copy is made. GC and
//! chain rewrites hold `gc_lock`, so at their points nothing else frees chunks; at a
//! reclamation point the handler takes `gc_lock` (or skips the cut when GC holds it). One
//! reclaimer thread, paused at its own points, is the only other writer of chunks, and it
//! writes only free ones. (The recovery-time points `prism.key_index.merge_*` are cut by
//! `key_index::tests::a_crash_at_each_named_point_of_a_recovery_merge_recovers_the_same_keys`.)

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tierkv_core::KvStore;
use tierkv_core::media::pmem::CrashPoint;
use tierkv_testkit::{PointTally, Racing, RacingConfig};

use common::Rig;

const SPEC: &str = "prism@pwb_count=2,pwb_size=16KiB,chunk_size=8KiB,svc_size=16KiB,\
reclaim_threads=1";
/// The background points cut here.
const POINTS: [&str; 7] = [
    "prism.reclaim.chunk_synced",
    "prism.reclaim.pointers_moved",
    "prism.reclaim.head_persisted",
    "prism.gc.after_copy",
    "prism.gc.after_switch",
    "prism.gc.victims_retired",
    "prism.chain.after_copy",
];
/// Must be reached, not necessarily cut often (only a chain member whose CAS won reaches
/// it).
const OPTIONAL: [&str; 1] = ["prism.chain.after_switch"];
const FIRST: u64 = 8;
const EVERY: u64 = 8;
const MIN_VERIFIED: u64 = 3;
const MAX_VERIFIED: u64 = 20;
/// The longest the racing runs go on for (more runs while a point lacks images).
const RUN_FOR: Duration = Duration::from_secs(30);

#[test]
fn every_named_point_of_reclamation_gc_and_chain_rewrite_recovers_what_was_acknowledged() {
    let seed = tierkv_testkit::rig::seed("crash_named_points");
    let rig = Arc::new(Rig::new(SPEC, 4, 1).with_flash_kib(640));
    let (store, pool) = rig.create_with_pool();
    let cfg = RacingConfig {
        writers: 3,
        writers_per_key: 3,
        readers: 2,
        keys: 48,
        ops_per_writer: 3_000,
        delete_pct: 15,
        scan_pct: 40,
        value_len: 8..=600,
        seed,
    };
    let mut racing = Racing::new(cfg.keys);
    let cuts = racing.cuts(&cfg);
    let tally = Arc::new(PointTally::new(FIRST, EVERY, MAX_VERIFIED));
    {
        let (rig, tally) = (rig.clone(), tally.clone());
        let (weak_pool, weak_store) = (Arc::downgrade(&pool), Arc::downgrade(&store));
        let images = AtomicU64::new(seed);
        pool.arm_crash_points(Arc::new(move |cp: CrashPoint<'_>| {
            let CrashPoint::Named(name) = cp else {
                return;
            };
            if !tally.reached(name) {
                return;
            }
            let (Some(pool), Some(live)) = (weak_pool.upgrade(), weak_store.upgrade()) else {
                return;
            };
            // GC and chain rewrites hold `gc_lock` at their own points; reclamation
            // takes it here so that no chunk is freed while the image is cut.
            let _no_gc = if name.starts_with("prism.reclaim.") {
                let Some(g) = live.core().gc_lock.try_lock() else {
                    tally.skipped();
                    return;
                };
                Some(g)
            } else {
                None
            };
            let k = images.fetch_add(1, Ordering::Relaxed);
            let mut dir = None;
            let r = cuts.cut(|| {
                let (d, s) = rig.recover_image(&pool, k)?;
                dir = Some(d);
                Ok(s)
            });
            tally.record(name, r, &format!("image seed {k}"));
        }))
        .unwrap();
    }
    let live: Arc<dyn KvStore> = store.clone();
    let started = Instant::now();
    let mut runs = vec![racing.run(&live, &cfg)];
    while started.elapsed() < RUN_FOR && !tally.all_verified(&POINTS, MIN_VERIFIED) {
        runs.push(racing.run(&live, &cfg));
    }
    pool.disarm_crash_points();
    println!("{} racing runs: {runs:?}", runs.len());
    tally.finish(&POINTS, &OPTIONAL, MIN_VERIFIED);
    drop(live);
    store.close().unwrap();
}
