//! space mode (issue 23) for every persistent engine in `tierkv::ENGINES`: a short
//! fixed-seed run of each engine and index variant on a small pool and a small flash
//! device (so that a fill takes seconds in a debug build). Engines join by being
//! registered. An engine whose space run is known to fail is skipped here with the reason,
//! and its defect is reproduced by an `#[ignore]`d test below, named after it: the
//! engine's fix turns that test green and takes the engine off `KNOWN_FAILING`.

mod common;

/// The CI shape of a space run besides the pool: a 16 MiB flash device and a SIGKILLed
/// child in half the rounds.
const CI_FLAGS: &[&str] = &["--flash-size", "16MiB", "--kill-fraction", "0.5"];

/// Engines whose space run fails today, with the `#[ignore]`d test that reproduces it.
const KNOWN_FAILING: &[(&str, &str)] = &[
    (
        "focus",
        "focus_refuses_writes_on_a_full_pool_only_after_a_fixed_5_s_wait",
    ),
    (
        "prismdb",
        "prismdb_refuses_deletes_when_compaction_finds_no_room_on_flash",
    ),
];

/// Runs two CI-sized space rounds of `spec` and asserts that they passed.
fn passes_two_rounds(spec: &str, seed: u64) {
    let run = common::space_run(spec, seed, 2, "4MiB", CI_FLAGS);
    common::assert_space_passed(&run, 2);
}

#[test]
fn every_registered_engine_fills_frees_writes_again_and_recovers() {
    for d in tierkv::ENGINES.iter().filter(|d| !d.volatile) {
        if let Some((_, test)) = KNOWN_FAILING.iter().find(|(n, _)| *n == d.name) {
            println!(
                "== {} skipped: known to fail space mode, see {test}",
                d.name
            );
            continue;
        }
        for spec in common::engine_variants(d) {
            println!("== {spec} in space mode");
            passes_two_rounds(&spec, 2310);
        }
    }
}

/// FOCUS on a full pool: a write that adds data waits for GC to make room for a fixed 5 s
/// (`ADMIT_WAIT` in `focus/src/store.rs`) before it is refused with `NoSpace`, even when GC
/// has nothing left to collect, so every refused write takes 5 s (`a write of the fill took
/// 5001.9 ms (--write-bound 5000.0 ms)`, seed 2311, 4 MiB pool). The wait should end as
/// soon as GC has made a pass that found no room to reclaim. (Until 2026-11-26 the store
/// poisoned itself instead: GC without a free chunk was a background failure; fixed.)
#[test]
#[ignore = "focus: every refused write first waits 5 s for GC (engine defect, issue 23)"]
fn focus_refuses_writes_on_a_full_pool_only_after_a_fixed_5_s_wait() {
    passes_two_rounds("focus", 2311);
}

/// MioDB records a delete as a tombstone in its MemTable, which needs room on pmem like a
/// put: on a full pool deletes were refused with `NoSpace` ("the MemTable is full and the
/// previous one could not be flushed in time", or "pmem allocator ...: no 16 contiguous
/// free chunk(s)" for the new MemTable's log), so nothing could ever be freed, and each
/// refused write first stalled `stall_timeout_ms` (10 s) while writers queued behind it
/// waited 30-40 s (the `--write-bound` failure). Fixed 2026-11-26 (`mio/src/space.rs`):
/// every MemTable owns its flush target, puts are admitted against the room the
/// compactions need, a spare pair is kept for deletes, and a write that finds no room is
/// refused as soon as the background stops making progress. Kept as its regression test,
/// with the short stall that showed the refused deletes at once.
#[test]
fn mio_refuses_deletes_on_a_full_pool() {
    passes_two_rounds("mio@stall_timeout_ms=500", 2312);
}

/// PrismDB's deletes need room on the pmem tier; when it is full they trigger a
/// compaction to flash, which writes one whole new sorted table before it removes the old
/// ones and so finds no room on a device that is a bit over half full: every delete on the
/// full store fails with "fast tier full and compaction failed: no space left on flash".
#[test]
#[ignore = "prismdb: deletes refused on a full store (engine defect, issue 23)"]
fn prismdb_refuses_deletes_when_compaction_finds_no_room_on_flash() {
    passes_two_rounds("prismdb", 2313);
}

/// HeterMM fills to 26-39% of its pool when writes go to random keys (the rest is its
/// reserve: room to flush all of DRAM, log and reorganisation blocks), but when each key is
/// overwritten several times in a row (two racing writers per key) it refuses writes with
/// 7-10% of the pool live: the space of superseded versions is not reclaimed before a
/// write is refused (a write waits for one defragmentation pass, `mem/alloc.rs`
/// `wait_for_space`, then gives up). Seen with every index; this is the open "transient
/// NoSpace in small pools" bug. The test asks for 20% live at the first refusals (the
/// default `--min-full` is 10%, right at the edge of what the engine reaches here).
#[test]
#[ignore = "hetermm: refuses overwrites with under a tenth of the pool live (engine defect, issue 23)"]
fn hetermm_refuses_overwrites_with_under_a_tenth_of_the_pool_live() {
    let run = common::space_run(
        "hetermm:hash",
        2314,
        2,
        "4MiB",
        &[
            "--threads",
            "4",
            "--writers-per-key",
            "2",
            "--kill-fraction",
            "0",
            "--min-full",
            "0.2",
        ],
    );
    common::assert_space_passed(&run, 2);
}
