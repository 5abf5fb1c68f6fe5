//! space mode (issue 23) on the reference engine: the correct `reflog` fills, deletes,
//! writes again and recovers from clean reopens and mid-fill kills, with one writer per key
//! and with racing writers; the broken variants that lose a value on a refusal or refuse
//! deletes on a full store are caught, and so is a store that refuses while mostly empty.

mod common;

/// A CI-sized space run of `engine` on a 4 MiB pool.
fn space_run(engine: &str, seed: u64, rounds: u64, extra: &[&str]) -> common::Run {
    let (seed, rounds) = (seed.to_string(), rounds.to_string());
    let mut args = vec![
        "--engine",
        engine,
        "--mode",
        "space",
        "--seed",
        &seed,
        "--rounds",
        &rounds,
        "--round-time",
        "200ms",
        "--pmem-size",
        "4MiB",
    ];
    args.extend_from_slice(extra);
    if !extra.contains(&"--threads") {
        args.extend_from_slice(&["--threads", "3"]);
    }
    common::stress(&args)
}

/// Asserts a passing space run: every round filled, deleted, wrote again and recovered.
pub fn assert_space_passed(run: &common::Run, rounds: u64) {
    assert_eq!(run.code, 0, "the run failed:\n{}{}", run.stdout, run.stderr);
    assert!(run.verdict().starts_with("PASS"), "{}", run.stdout);
    assert_eq!(run.count("rounds"), rounds, "{}", run.verdict());
    assert_eq!(run.count("fills"), rounds, "{}", run.verdict());
    assert!(writes_refused(run) >= rounds, "{}", run.verdict());
    assert!(run.count("deletes") > 0, "{}", run.verdict());
    let kills = run.count("mid-fill");
    assert_eq!(run.count("recoveries"), rounds + kills, "{}", run.verdict());
}

/// The `N writes refused` counter of the verdict.
fn writes_refused(run: &common::Run) -> u64 {
    let v = run.verdict();
    let before = v.split(" writes refused").next().unwrap_or("");
    before
        .rsplit(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no writes refused in {v:?}"))
}

#[test]
fn the_reference_engine_fills_frees_and_recovers() {
    let run = space_run("reflog", 2301, 3, &["--kill-fraction", "0.5"]);
    assert_space_passed(&run, 3);
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
    let run = space_run(
        "reflog",
        2302,
        2,
        &[
            "--threads",
            "4",
            "--writers-per-key",
            "2",
            "--kill-fraction",
            "1",
        ],
    );
    assert_space_passed(&run, 2);
    assert_eq!(run.count("mid-fill"), 2, "{}", run.verdict());
}

#[test]
fn a_value_lost_on_a_refusal_is_caught() {
    let run = space_run("reflog:lose-on-refusal", 2303, 3, &[]);
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
    let run = space_run("reflog:refuse-deletes-when-full", 2304, 3, &[]);
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
    let run = space_run("reflog", 2305, 2, &["--min-full", "0.9"]);
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout
            .lines()
            .any(|l| l.contains("writes were refused with only 4") && l.contains("--min-full 90%")),
        "{}",
        run.stdout
    );
}
