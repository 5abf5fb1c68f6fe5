//! The command line refuses what it cannot test, with the reason, before touching anything.

mod common;

#[test]
fn a_volatile_engine_is_refused() {
    let run = common::stress(&["--engine", "dram", "--seed", "1"]);
    assert_eq!(run.code, 2);
    assert!(
        run.stdout.starts_with("tierkv stress: seed 1\n"),
        "{}",
        run.stdout
    );
    assert!(run.stderr.contains("volatile"), "{}", run.stderr);
    assert!(run.stderr.contains("nothing to recover"), "{}", run.stderr);
}

#[test]
fn a_mode_without_its_tier_is_refused() {
    let run = common::stress(&["--engine", "reflog-flash", "--mode", "pmem-image"]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("keeps nothing on pmem"),
        "{}",
        run.stderr
    );
    let run = common::stress(&["--engine", "reflog", "--mode", "flash-faults"]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("writes nothing to flash"),
        "{}",
        run.stderr
    );
}

#[test]
fn an_unknown_engine_is_refused_with_the_list() {
    let run = common::stress(&["--engine", "nosuch"]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("unknown engine \"nosuch\""),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("reflog"), "{}", run.stderr);
}
