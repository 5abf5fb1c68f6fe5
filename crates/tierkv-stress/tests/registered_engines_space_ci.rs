//! space mode (issue 23) for every persistent engine in `tierkv::ENGINES`: a short
//! fixed-seed run of each engine and index variant on a small pool and a small flash
//! device (so that a fill takes seconds in a debug build). Engines join by being
//! registered. An engine whose space run is known to fail is skipped here with the reason,
//! and its defect is reproduced by an `#[ignore]`d test below, named after it: the
//! engine's fix turns that test green and takes the engine off `KNOWN_FAILING`; it is then
//! kept as a regression test, renamed after what it now checks (its doc tells the defect).

mod common;

/// The CI shape of a space run besides the pool: a 16 MiB flash device and a SIGKILLed
/// child in half the rounds.
const CI_FLAGS: &[&str] = &["--flash-size", "16MiB", "--kill-fraction", "0.5"];

/// prismdb's write bound in CI: 20 s instead of the 5 s default. These are debug builds on
/// two cores that the other tests of this binary load too, where one prismdb compaction of
/// its 16 MiB tables took over 5 s (`a write of the fill took 11110 ms`, and `the fill made
/// no progress for 20 s`; also at 93ad8ae, 1 run in 3). The other engines keep 5 s: the
/// focus and mio regression tests below rest on it; the release runs of the note keep it
/// for every engine.
const PRISMDB_CI_FLAGS: &[&str] = &["--write-bound", "20s"];

/// Engines whose space run fails today, with the `#[ignore]`d test that reproduces it.
const KNOWN_FAILING: &[(&str, &str)] = &[];

/// Runs two CI-sized space rounds of `spec` and asserts that they passed.
fn passes_two_rounds(spec: &str, seed: u64) {
    let slow = if spec.starts_with("prismdb") {
        PRISMDB_CI_FLAGS
    } else {
        &[]
    };
    let flags = [CI_FLAGS, slow, common::batch_flags(spec, "space")].concat();
    let run = common::space_run(spec, seed, 2, "4MiB", &flags);
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

/// FOCUS on a full pool: a write that adds data used to wait for GC to make room for a
/// fixed 5 s (`ADMIT_WAIT`) before it was refused with `NoSpace`, even when GC had nothing
/// left to collect, so every refused write took 5 s (`a write of the fill took 5001.9 ms
/// (--write-bound 5000.0 ms)`, seed 2311, 4 MiB pool). Fixed 2026-11-26: the wait ends as
/// soon as a GC pass that began after the writer started waiting gave up
/// (`focus/src/gc.rs`, `Passes`). (Until then also: the store poisoned itself when GC
/// found no free chunk; fixed before.)
#[test]
fn focus_refuses_a_write_on_a_full_pool_once_gc_gives_up_not_after_a_fixed_wait() {
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
fn mio_accepts_deletes_on_a_full_pool() {
    passes_two_rounds("mio@stall_timeout_ms=500", 2312);
}

/// PrismDB's deletes need room on the pmem tier; when it was full they triggered a
/// compaction to flash, which wrote one whole new sorted table before it removed the old
/// ones and so found no room on a device that was a bit over half full: every delete on
/// the full store failed with "fast tier full and compaction failed: no space left on
/// flash". Fixed 2026-11-26 (prismdb FORMAT.md §3 "Room for deletes", "Room on flash"):
/// pmem slots and chunks reserved for tombstones, tables bounded by a 32nd of the device,
/// a flash reserve for one table's rewrite, and tombstone-only compactions when flash has
/// no other room.
#[test]
fn prismdb_accepts_deletes_on_a_full_store_when_flash_is_half_full() {
    passes_two_rounds("prismdb", 2313);
}

/// HeterMM, regression: with two racing writers per key it refused writes with 7-10% of the
/// pool live (16% once writes waited for a room pass): a write was refused as soon as the
/// flusher dipped into the pmem reserve, while blocks over the reorganisation threshold
/// waited for the reclaimer, and in-place updates kept each record at the capacity of its
/// largest value. Now a write is refused only after a room pass that began after it found
/// no room (`hetermm/src/flush.rs`), and an in-place update may not waste more than its
/// value's size; 37-42% of the pool is live at the first refusals. The test asks for 20%
/// (the default `--min-full` is 10%).
#[test]
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
