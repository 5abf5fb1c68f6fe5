//! Racing writers (issue 17): groups of threads put and delete the same keys at once while
//! readers get and scan them, on every index variant; reads are judged by linearizability
//! live, and a Tracked crash image taken while it all runs (flushing, reorganisation and log
//! reclamation included, with small pages and blocks) must recover to a linearizable state:
//! each key the last acknowledged write, one overlapping it, or one in flight.

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use std::sync::Arc;

use common::*;
use tierkv_core::KvStore;
use tierkv_core::media::pmem::{CrashImageOptions, DurabilityMode, PmemPool};
use tierkv_testkit::{Racing, RacingConfig, run_racing};

fn cfg(variant: &str, seed: u64) -> RacingConfig {
    RacingConfig {
        writers: 4,
        writers_per_key: 4,
        readers: 2,
        keys: 48,
        ops_per_writer: 1_500,
        scan_pct: if variant == "hash" { 0 } else { 20 },
        seed,
        ..RacingConfig::default()
    }
}

/// A fixed seed (CI runs the same operations every time), or `TIERKV_SEED`.
fn fixed_seed(test: &str) -> u64 {
    let seed = std::env::var("TIERKV_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x1717);
    println!("{test}: seed {seed} (replay with TIERKV_SEED={seed})");
    seed
}

fn live(variant: &str) {
    let dir = scratch_dir();
    let pool = create_pool(&dir.path().join("pool"), 16 << 20, DurabilityMode::Volatile);
    let store: Arc<dyn KvStore> = open(pool, small_options(64, ""), variant, true);
    let r = run_racing(
        &store,
        &cfg(variant, fixed_seed(&format!("racing_{variant}"))),
    );
    println!("{variant}: {r:?}");
    assert!(r.overlapping_writes > 20, "{r:?}");
    store.close().unwrap();
}

fn crash(variant: &str, rounds: u64, seed: u64) {
    let dir = scratch_dir();
    let pool = create_pool(&dir.path().join("pool"), 16 << 20, DurabilityMode::Tracked);
    let mut store: Arc<dyn KvStore> = open(pool.clone(), small_options(64, ""), variant, true);
    let mut pool = pool;
    let mut racing = Racing::new(cfg(variant, 0).keys);
    for round in 0..rounds {
        let c = cfg(variant, seed.wrapping_add(round));
        let path = dir.path().join(format!("img{round}"));
        let opts = if round % 2 == 0 {
            CrashImageOptions::lines()
        } else {
            CrashImageOptions::torn_words()
        };
        let cut_pool = pool.clone();
        let cut_path = path.clone();
        let (recovered, r) = racing.crash(
            store,
            &c,
            500 + round * 700,
            move || {
                cut_pool
                    .write_crash_image(seed ^ round, opts, &cut_path)
                    .unwrap()
            },
            |()| {
                let p = PmemPool::open(&config(&path, 0, DurabilityMode::Tracked)).unwrap();
                pool = p.clone();
                let s: Arc<dyn KvStore> = try_open(p, small_options(64, ""), variant, false)
                    .unwrap_or_else(|e| panic!("seed {seed}, round {round}: recovery: {e}"));
                s
            },
        );
        println!("{variant} round {round}: {r:?}");
        store = recovered;
    }
    store.close().unwrap();
}

#[test]
fn racing_writers_are_linearizable_btree() {
    live("btree");
}

#[test]
fn racing_writers_are_linearizable_hash() {
    live("hash");
}

#[test]
fn racing_writers_are_linearizable_lockfree() {
    live("lockfree");
}

/// Bug B of the release stress runs (`tierkv-stress --engine hetermm:lockfree --mode
/// pmem-image --seed 1006 --writers-per-key 4`: a live get failed with `compact block 1296
/// holds no record at offset 1003168`; in kill mode a crash lost an acknowledged delete or
/// put). The lock-free index's `compute` applied a record address an earlier call of
/// `set_value` had returned, while HeterMM took the last call's for the installed one: the
/// installed record was marked as an orphan (reorganisation then dropped it under the
/// readers) and its log entry withdrawn. A small pool keeps the reclaimer busy, so readers
/// race against reorganisation all the time. (8 MiB, not 4: in 4 MiB the transient
/// `NoSpace` under heavy overwrites, issue 22 bug A, fixed since, failed about 1 run in 7.)
#[test]
fn racing_writers_and_readers_under_reorganisation_lockfree() {
    let dir = scratch_dir();
    let pool = create_pool(&dir.path().join("pool"), 8 << 20, DurabilityMode::Volatile);
    let store: Arc<dyn KvStore> = open(pool, small_options(64, ""), "lockfree", true);
    let c = RacingConfig {
        keys: 300,
        ops_per_writer: 8_000,
        scan_pct: 0,
        value_len: 16..=3000,
        seed: fixed_seed("racing_reorg_lockfree").wrapping_add(77),
        ..cfg("lockfree", 0)
    };
    let r = run_racing(&store, &c);
    println!("lockfree under reorganisation: {r:?}");
    let s = store.stats();
    assert!(counter(&s, "reorganisations") > 100, "{:?}", s.counters);
    assert!(r.overlapping_writes > 1000, "{r:?}");
    store.close().unwrap();
}

// Three crashes per test: the workload goes on on the store recovered from the last image
// (one crash only while `writes_after_two_recoveries_find_a_pages_array_slot_still_held`
// was open; fixed 2026-11-26, confirmed by release stress runs).
#[test]
fn racing_writers_survive_crash_images_btree() {
    crash("btree", 3, fixed_seed("racing_crash_btree"));
}

#[test]
fn racing_writers_survive_crash_images_hash() {
    crash("hash", 3, fixed_seed("racing_crash_hash"));
}

#[test]
fn racing_writers_survive_crash_images_lockfree() {
    crash("lockfree", 3, fixed_seed("racing_crash_lockfree"));
}

/// Issue 17 bug (found by the racing-writers crash test, every index variant): after a
/// store has been recovered from a crash image (once or twice), a put sometimes fails with
/// `corruption in dram at offset 72: pages array slot of page 72 still holds page 8`
/// (64 DRAM pages: logical page 8 is still mapped when page 72 needs its slot, so a page
/// of the write region was never flushed and freed). Seen in about 3% of runs of three
/// rounds; this runs 40 three-round sequences of each variant (the three at once) with distinct
/// seeds. Seen with `TIERKV_SEED` unset in the `racing_writers_survive_crash_images_*`
/// tests run 150 times: 4 failures, in rounds after two recoveries (the failing rounds'
/// `racing-writers seed`s: 3319574046558815678 lockfree, 8166076322042407135 lockfree,
/// 7216492082213880723 btree, 4578385582920145162 hash). This test failed at its 8th
/// iteration (btree, after one recovery, `racing-writers seed 61345`: `write v117 of
/// race/0005: corruption in dram at offset 64: pages array slot of page 64 still holds
/// page 0`). Still open: `tierkv-stress --engine hetermm:hash --mode pmem-image --seed 2003
/// --writers-per-key 4` (64 MiB pool) failed the same way at round 73 (`pages array slot of
/// page 35551 still holds page 35296`, a ring of 255 pages). In every case seen the stale page
/// is the first page of its block (0, 8, 35296), in a store recovered from a crash image.
/// Not reproduced by this test in 240 three-round sequences (80 iterations, seeds 5911 and
/// 61345 + i * 7919). Cause (2026-11-26): page reservations were bounded by `off_dram`,
/// which a flush moves before it unmaps the flushed block's pages; a writer holding a free
/// page (the window has holes) reserved page M + ring length in between. Fixed (bounded by
/// `unmapped_below`); deterministic regression test in the crate:
/// `regressions::a_writer_never_maps_into_a_slot_the_flushed_block_still_holds`. This long
/// search stays, by hand (5 min).
#[test]
#[ignore = "a 5-minute search, by hand; the bug's deterministic test is in regressions.rs"]
fn writes_after_two_recoveries_find_a_pages_array_slot_still_held() {
    let first = fixed_seed("pages_array_slot");
    for i in 0..40 {
        // The three variants at once, as when the test binary runs them in parallel (the
        // failures were seen that way, under contention).
        std::thread::scope(|s| {
            for variant in ["btree", "hash", "lockfree"] {
                s.spawn(move || crash(variant, 3, first.wrapping_add(i * 7919)));
            }
        });
    }
}
