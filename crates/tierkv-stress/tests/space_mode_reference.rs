//! space mode (issue 23) on the reference engine: the correct `reflog` fills, deletes,
//! writes again and recovers from clean reopens and mid-fill kills, with one writer per key
//! and with racing writers; the broken variants that lose a value on a refusal or refuse
//! deletes on a full store are caught, and so is a store that refuses while mostly empty.

mod common;

#[test]
fn the_reference_engine_fills_frees_and_recovers() {
    let run = common::space_run("reflog", 2301, 3, "4MiB", &["--kill-fraction", "0.5"]);
    common::assert_space_passed(&run, 3);
    assert!(run.count("mid-fill") >= 1, "{}", run.verdict());
    // reflog keeps its live data in one half of the pool: it must refuse near 50%.
    assert!(
        run.verdict().contains("live at refusal min 4"),
        "{}",
        run.verdict()
    );
}

#[test]
fn the_reference_engine_fills_under_racing_writers() {
    let run = common::space_run(
        "reflog",
        2302,
        2,
        "2MiB",
        &[
            "--threads",
            "4",
            "--writers-per-key",
            "2",
            "--kill-fraction",
            "1",
        ],
    );
    common::assert_space_passed(&run, 2);
    assert_eq!(run.count("mid-fill"), 2, "{}", run.verdict());
}

#[test]
fn a_value_lost_on_a_refusal_is_caught() {
    let run = common::space_run("reflog:lose-on-refusal", 2303, 3, "4MiB", &[]);
    common::assert_caught(&run);
    assert!(
        run.violations()
            .iter()
            .any(|v| v.contains("after the fill") && v.contains("acknowledged and lost")),
        "{}",
        run.stdout
    );
}

#[test]
fn deletes_refused_on_a_full_store_are_caught() {
    let run = common::space_run("reflog:refuse-deletes-when-full", 2304, 3, "4MiB", &[]);
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    assert!(run.verdict().starts_with("FAIL"), "{}", run.stdout);
    assert!(
        run.stdout
            .lines()
            .any(|l| l.starts_with("FAILURE: round 1: the delete of k")
                && l.contains("on a full store failed: no space left on pmem")),
        "{}",
        run.stdout
    );
}

#[test]
fn a_store_that_refuses_while_mostly_empty_is_a_finding() {
    // reflog refuses at about half the pool: demanding 90% makes that a failure.
    let run = common::space_run("reflog", 2305, 2, "4MiB", &["--min-full", "0.9"]);
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout
            .lines()
            .any(|l| l.contains("writes were refused with only 4") && l.contains("--min-full 90%")),
        "{}",
        run.stdout
    );
}

#[test]
fn a_write_that_never_returns_is_a_hang_and_ends_the_run() {
    // The stall bound is --write-bound + --gc-wait + 5 s.
    let run = common::space_run(
        "reflog:hang-when-full",
        2306,
        2,
        "4MiB",
        &["--write-bound", "100ms", "--gc-wait", "100ms"],
    );
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    assert!(run.verdict().starts_with("FAIL"), "{}", run.stdout);
    assert!(
        run.stdout.lines().any(|l| l
            .starts_with("FAILURE: round 1: the fill made no progress for 5 s: the engine hangs")),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("data kept in "), "{}", run.stdout);
}
