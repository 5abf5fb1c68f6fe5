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

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use tierkv_core::KvStore;
use tierkv_core::media::pmem::CrashPoint;
use tierkv_testkit::{Racing, RacingConfig};

use common::{BACKGROUND, FOREGROUND, Rig};

const SPEC: &str = "prismdb@partitions=1,chunk_size=16KiB,table_size=64KiB,\
high_watermark=0.002,low_watermark=0.001,bucket_keys=16,tracker_min=16,pin_threshold=0.5,\
block_cache=64KiB";

const FIRST: u64 = 24;
const EVERY: u64 = 4;
const MIN_VERIFIED: u64 = 3;

#[derive(Default)]
struct Tally {
    /// Per point: (reached, verified).
    seen: BTreeMap<String, (u64, u64)>,
    failures: Vec<String>,
}

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
        ops_per_writer: 6_000,
        delete_pct: 20,
        scan_pct: 25,
        value_len: 8..=300,
        seed,
    };
    let mut racing = Racing::new(cfg.keys);
    let cuts = racing.cuts(&cfg);
    let tally = Arc::new(Mutex::new(Tally::default()));
    let images = Arc::new(AtomicU64::new(0));
    {
        let (rig, tally, weak) = (rig.clone(), tally.clone(), Arc::downgrade(&pool));
        pool.arm_crash_points(Arc::new(move |cp: CrashPoint<'_>| {
            let CrashPoint::Named(name) = cp else {
                return;
            };
            let n = {
                let mut t = tally.lock();
                let e = t.seen.entry(name.to_owned()).or_default();
                e.0 += 1;
                e.0
            };
            if !BACKGROUND.contains(&name) || !(n <= FIRST || n.is_multiple_of(EVERY)) {
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
            let mut t = tally.lock();
            match r {
                Ok(_) => t.seen.entry(name.to_owned()).or_default().1 += 1,
                Err(e) => t
                    .failures
                    .push(format!("crash at {name} (image seed {image_seed}): {e}")),
            }
        }))
        .unwrap();
    }
    let live: Arc<dyn KvStore> = store.clone();
    let report = racing.run(&live, &cfg);
    pool.disarm_crash_points();
    let t = tally.lock();
    println!("{report:?}");
    println!("named points (reached, verified): {:?}", t.seen);
    assert!(t.failures.is_empty(), "{:#?}", t.failures);
    for name in BACKGROUND {
        let (reached, verified) = t.seen.get(name).copied().unwrap_or_default();
        assert!(
            verified >= MIN_VERIFIED,
            "{name}: reached {reached}, verified {verified} (< {MIN_VERIFIED}): {:?}",
            t.seen
        );
    }
    for name in FOREGROUND {
        assert!(
            t.seen.contains_key(name),
            "{name} never reached: {:?}",
            t.seen
        );
    }
    let unknown: Vec<_> = t
        .seen
        .keys()
        .filter(|k| !BACKGROUND.contains(&k.as_str()) && !FOREGROUND.contains(&k.as_str()))
        .collect();
    assert!(unknown.is_empty(), "points not listed here: {unknown:?}");
    drop(t);
    drop(live);
    store.close().unwrap();
}
