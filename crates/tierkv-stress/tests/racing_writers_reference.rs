//! Racing writers (`--writers-per-key`, issue 17 item 1): the correct reference engines
//! pass every mode with three writers per key, and `reflog:lose-race-winner` (a write that
//! raced is ranked above every later write at recovery) is caught.

mod common;

#[test]
fn correct_reference_engines_pass_every_mode_with_racing_writers() {
    for (engine, mode, extra) in [
        ("reflog", "pmem-image", &[][..]),
        ("reflog", "kill", &["--pmem-mode", "tracked"][..]),
        ("reflog-flash", "flash-faults", &[][..]),
    ] {
        let mut args = vec!["--writers-per-key", "3"];
        args.extend_from_slice(extra);
        let run = common::ci_run(engine, mode, 1701, 5, &args);
        common::assert_passed(&run, 5);
        assert!(run.stdout.contains("(3 writers per key)"), "{}", run.stdout);
    }
}

#[test]
fn a_lost_racing_winner_is_caught_in_pmem_image_mode() {
    let run = common::ci_run(
        "reflog:lose-race-winner",
        "pmem-image",
        1702,
        // A run stops at its first violation, so rounds cost time only while the lost race
        // has not happened yet: enough of them that a loaded machine (fewer operations per
        // 200 ms round) still reaches it (12 once missed it under a load average of 20).
        60,
        &["--writers-per-key", "3"],
    );
    common::assert_caught(&run);
    // The boosted loser outranks the acknowledged winner at recovery: an older put shows
    // as "older than acknowledged", a delete as "acknowledged and lost" (seed 1702 under
    // load once lost the race to a delete first).
    assert!(
        run.violations().iter().any(|v| {
            v.contains("older than acknowledged") || v.contains("acknowledged and lost")
        }),
        "{}",
        run.stdout
    );
}

#[test]
fn a_lost_racing_winner_is_caught_by_power_loss_kills() {
    let run = common::ci_run(
        "reflog:lose-race-winner",
        "kill",
        1703,
        60,
        &["--writers-per-key", "3", "--pmem-mode", "tracked"],
    );
    common::assert_caught(&run);
}

#[test]
fn more_writers_per_key_than_threads_is_refused() {
    let run = common::stress(&[
        "--engine",
        "reflog",
        "--threads",
        "2",
        "--writers-per-key",
        "3",
    ]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("--writers-per-key 3"), "{}", run.stderr);
}
