//! Crash images at the named crash points of HeterMM's background work (FORMAT.md § Named
//! crash points; issue 17, item 2): racing writers and readers (gets and scans, judged by
//! linearizability: `tierkv_testkit::racing`) run on a store with 4 KiB pages, 32 KiB blocks
//! and a small pool, so that flushing, reorganisation and log reclamation run all the
//! time. At the named points (the first `FIRST` reaches of each, then one in `EVERY`, at
//! most `MAX_VERIFIED` images of a point) the handler, on the engine thread that reached
//! it, paused, takes a Tracked crash image (whole lines or torn words, alternately),
//! recovers a store from it, runs its `check` and judges every key: every acknowledged
//! write is there unless a later one overlapped it, a write in flight may be either way.
//! Every required point must be verified at least `MIN_VERIFIED` times for each index, so
//! a renamed or dead point fails the test.
//!
//! HeterMM keeps everything in one pool, so an image is the whole state: no other copy
//! has to agree with it.

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::*;
use tierkv_core::KvStore;
use tierkv_core::media::pmem::{CrashImageOptions, CrashPoint, DurabilityMode, PmemPool};
use tierkv_testkit::{PointTally, Racing, RacingConfig};

/// Log compression runs only when in-place updates keep the oldest log block's records in
/// DRAM: a second store per index takes short values (updated in place) with a log budget
/// of 4 blocks until this point is verified.
const COMPRESSION: &str = "hetermm.log.compress_copied";
const FIRST: u64 = 4;
const EVERY: u64 = 16;
const MIN_VERIFIED: u64 = 3;
const MAX_VERIFIED: u64 = 6;
/// The longest one store's racing runs go on for (more runs while a point lacks images).
const RUN_FOR: Duration = Duration::from_secs(10);
const POOL: u64 = 4 << 20;

/// One store's shape: its engine options, the values its racing writers write, and the
/// points it must have verified (FORMAT.md § Named crash points lists them all).
struct Phase {
    options: &'static str,
    value_len: std::ops::RangeInclusive<usize>,
    /// The points it runs for.
    points: &'static [&'static str],
}

const PHASES: [Phase; 2] = [
    // Values up to 600 bytes: flushes, reorganisations, log reclamation.
    Phase {
        options: "",
        value_len: 8..=600,
        points: &[
            "hetermm.flush.block_written",
            "hetermm.flush.published",
            "hetermm.flush.marks_applied",
            "hetermm.flush.before_free",
            "hetermm.reorg.copy_written",
            "hetermm.reorg.copy_published",
            "hetermm.reorg.old_unpublished",
            "hetermm.reorg.block_dropped",
            "hetermm.log.unpublished",
        ],
    },
    // Short values updated in place, a small log budget: log compression.
    Phase {
        options: "log_blocks=4",
        value_len: 8..=24,
        points: &[COMPRESSION],
    },
];

fn cfg(variant: &str, seed: u64, phase: &Phase) -> RacingConfig {
    RacingConfig {
        writers: 3,
        writers_per_key: 3,
        readers: 2,
        keys: 48,
        ops_per_writer: 1_500,
        delete_pct: 15,
        scan_pct: if variant == "hash" { 0 } else { 20 },
        value_len: phase.value_len.clone(),
        seed,
    }
}

/// Writes a crash image of `pool` (lines for an even `k`, torn words for an odd one) into
/// `dir`, recovers a store from it and runs its `check`.
fn recover_image(
    pool: &PmemPool,
    k: u64,
    dir: &Path,
    variant: &str,
    options: &str,
) -> Result<Arc<dyn KvStore>, String> {
    let opts = if k.is_multiple_of(2) {
        CrashImageOptions::lines()
    } else {
        CrashImageOptions::torn_words()
    };
    let path = dir.join(format!("image{k}"));
    pool.write_crash_image(k, opts, &path)
        .map_err(|e| format!("crash image: {e}"))?;
    let copy = PmemPool::open(&config(&path, 0, DurabilityMode::Volatile))
        .map_err(|e| format!("open image: {e}"))?;
    let store = try_open(copy, small_options(64, options), variant, false)
        .map_err(|e| format!("recovery: {e}"))?;
    store.check().map_err(|e| format!("check: {e}"))?;
    Ok(store)
}

fn every_point_recovers(variant: &str) {
    let seed = seed(&format!("hetermm_crash_named_points_{variant}"));
    let tally = Arc::new(PointTally::new(FIRST, EVERY, MAX_VERIFIED));
    for (i, phase) in PHASES.iter().enumerate() {
        run_phase(variant, seed.wrapping_add(i as u64 * 1000), phase, &tally);
    }
    // Every index must have every point of every phase verified.
    let points: Vec<&str> = PHASES.iter().flat_map(|p| p.points).copied().collect();
    tally.finish(&points, &[], MIN_VERIFIED);
}

/// Runs racing writers and readers on a new store of `phase`'s shape, cutting images at
/// its named points, until `phase.points` are verified or `RUN_FOR` has passed.
fn run_phase(variant: &str, seed: u64, phase: &Phase, tally: &Arc<PointTally>) {
    let dir = scratch_dir();
    let pool = create_pool(&dir.path().join("pool"), POOL, DurabilityMode::Tracked);
    let store = open(
        pool.clone(),
        small_options(64, phase.options),
        variant,
        true,
    );
    let c = cfg(variant, seed, phase);
    let mut racing = Racing::new(c.keys);
    let cuts = racing.cuts(&c);
    {
        let tally = tally.clone();
        let weak_pool = Arc::downgrade(&pool);
        let images_dir = dir.path().to_owned();
        let images = AtomicU64::new(seed);
        let (variant, options) = (variant.to_owned(), phase.options);
        pool.arm_crash_points(Arc::new(move |cp: CrashPoint<'_>| {
            let CrashPoint::Named(name) = cp else {
                return;
            };
            if !tally.reached(name) {
                return;
            }
            let Some(pool) = weak_pool.upgrade() else {
                return;
            };
            let k = images.fetch_add(1, Ordering::Relaxed);
            let r = cuts.cut(|| recover_image(&pool, k, &images_dir, &variant, options));
            // The image is done with once its store is recovered: keep the disk small.
            let _ = std::fs::remove_file(images_dir.join(format!("image{k}")));
            tally.record(name, r, &format!("{variant}, image seed {k}"));
        }))
        .unwrap();
    }
    let live: Arc<dyn KvStore> = store.clone();
    let started = Instant::now();
    let mut runs = vec![racing.run(&live, &c)];
    while started.elapsed() < RUN_FOR && !tally.all_verified(phase.points, MIN_VERIFIED) {
        runs.push(racing.run(&live, &c));
    }
    pool.disarm_crash_points();
    println!(
        "{variant} ({}): {} racing runs: {runs:?}",
        phase.options,
        runs.len()
    );
    drop(live);
    store.close().unwrap();
}

#[test]
fn every_named_point_recovers_what_was_acknowledged_btree() {
    every_point_recovers("btree");
}

#[test]
fn every_named_point_recovers_what_was_acknowledged_hash() {
    every_point_recovers("hash");
}

#[test]
fn every_named_point_recovers_what_was_acknowledged_lockfree() {
    every_point_recovers("lockfree");
}
