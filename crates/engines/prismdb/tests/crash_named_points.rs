//! Crash images at the named crash points of the background work (FORMAT.md §3 "Named
//! crash points"; issue 17, item 2): racing writers and readers (gets and scans, judged by
//! linearizability: `tierkv_testkit::racing`) run on a store whose fast tier is so small
//! that its compaction thread demotes, commits manifests, frees victims and promotes hot
//! keys all the time. At every named point the compaction thread reaches (the first
//! `FIRST` of each, then one in `EVERY`) the handler, on that thread, paused, takes a
//! Tracked crash image (whole lines or torn words, alternately) and a copy of the flash
//! directory, recovers a fresh store from them, runs its `check` and judges every key:
//! every acknowledged write is there unless a later one overlapped it, a write in flight
//! may be either way. The test then asserts that every background point was reached and
//! verified at least `MIN_VERIFIED` times, so a renamed or dead point fails it.
//!
//! One partition: its compaction thread is the only writer of flash, and it is paused at
//! its own points, so the flash copy is the flash state of that instant. The foreground
//! points (put, delete) are counted but not cut here (the compaction thread may be writing
//! flash meanwhile); `crash_persist_points` cuts them in a single-threaded script.

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tierkv_core::KvStore;
use tierkv_core::media::pmem::CrashPoint;
use tierkv_testkit::{PointTally, Racing, RacingConfig};

use common::{BACKGROUND, FOREGROUND, Rig};

const SPEC: &str = "prismdb@partitions=1,chunk_size=16KiB,table_size=64KiB,\
high_watermark=0.002,low_watermark=0.001,bucket_keys=16,tracker_min=16,pin_threshold=0.5,\
block_cache=64KiB";

const FIRST: u64 = 24;
const EVERY: u64 = 4;
const MIN_VERIFIED: u64 = 3;
/// The longest the racing runs go on for (more runs while a point lacks images).
const RUN_FOR: Duration = Duration::from_secs(90);

#[test]
fn every_named_point_of_compaction_and_promotion_recovers_what_was_acknowledged() {
    let seed = common::seed("crash_named_points", 0x4E41_4D45);
    let rig = Arc::new(Rig::new(SPEC, 4));
    let (store, pool) = rig.create_with_pool();
    let cfg = RacingConfig {
        writers: 4,
        writers_per_key: 2,
        readers: 2,
        keys: 96,
        ops_per_writer: 3_000,
        delete_pct: 20,
        scan_pct: 25,
        value_len: 8..=300,
        seed,
    };
    let mut racing = Racing::new(cfg.keys);
    let cuts = racing.cuts(&cfg);
    let tally = Arc::new(PointTally::new(FIRST, EVERY, u64::MAX));
    let images = Arc::new(AtomicU64::new(0));
    {
        let (rig, tally, weak) = (rig.clone(), tally.clone(), Arc::downgrade(&pool));
        pool.arm_crash_points(Arc::new(move |cp: CrashPoint<'_>| {
            let CrashPoint::Named(name) = cp else {
                return;
            };
            if !tally.reached(name) || !BACKGROUND.contains(&name) {
                return;
            }
            let Some(pool) = weak.upgrade() else { return };
            let image_seed = seed.wrapping_add(images.fetch_add(1, Ordering::Relaxed));
            let mut dir = None;
            let r = cuts.cut(|| {
                let (d, s) = rig.recover_image(&pool, image_seed, SPEC)?;
                dir = Some(d);
                Ok(s)
            });
            tally.record(name, r, &format!("image seed {image_seed}"));
        }))
        .unwrap();
    }
    let live: Arc<dyn KvStore> = store.clone();
    // Runs until every point is verified often enough (promotions are rare, and how many
    // images a run gets depends on the machine), or `RUN_FOR` has passed.
    let started = Instant::now();
    let mut runs = vec![racing.run(&live, &cfg)];
    while started.elapsed() < RUN_FOR && !tally.all_verified(&BACKGROUND, MIN_VERIFIED) {
        runs.push(racing.run(&live, &cfg));
    }
    pool.disarm_crash_points();
    println!("{} racing runs: {runs:?}", runs.len());
    tally.finish(&BACKGROUND, &FOREGROUND, MIN_VERIFIED);
    drop(live);
    store.close().unwrap();
}
