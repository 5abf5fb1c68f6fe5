//! Field updates in the stress workload (issue 20): `focus` (native schema store, fields on
//! by default) passes every mode that applies to it with put_row / update_fields /
//! get_fields / delete_row / scan_fields in the mix; an engine without a native schema
//! store (`prism`, the reference `reflog`) passes with `--fields` through the consolidated
//! adapter; and `reflog:lose-field-updates` (a schema store whose update_fields is an
//! unlocked read-modify-write of the row) is caught losing concurrent updates of
//! different fields of one row (in pmem-image; by hand also in kill mode). CI-sized: a few seconds per run.

mod common;

/// The `N rows verified` counter of a run's verdict.
fn rows_verified(run: &common::Run) -> u64 {
    common::number_before(run, " rows verified")
}

/// Asserts that the field workload ran and its rows were verified.
fn assert_fields_ran(run: &common::Run) {
    assert!(run.count("put_row") > 0, "{}", run.verdict());
    assert!(run.count("update_fields") > 0, "{}", run.verdict());
    assert!(rows_verified(run) > 0, "{}", run.verdict());
}

#[test]
fn focus_passes_kill_power_loss_kill_and_pmem_image_with_field_updates() {
    for (mode, rounds, extra) in [
        ("kill", 3, vec![]),
        ("kill", 3, vec!["--pmem-mode", "tracked"]),
        ("pmem-image", 3, vec![]),
        ("pmem-image", 2, vec!["--threads", "6", "--fields", "3"]),
    ] {
        println!("== focus in {mode} mode {extra:?}");
        let run = common::ci_run("focus", mode, 2001, rounds, &extra);
        common::assert_passed(&run, rounds);
        assert_fields_ran(&run);
        assert!(
            run.stdout.contains("on 10 fields") || extra.contains(&"--fields"),
            "fields are on by default for focus:\n{}",
            run.stdout
        );
    }
}

#[test]
fn focus_passes_persist_points_and_space_with_field_updates() {
    let run = common::stress(&[
        "--engine",
        "focus",
        "--mode",
        "persist-points",
        "--seed",
        "2002",
        "--ops",
        "60",
        "--points",
        "40",
        "--keys",
        "50",
        "--pmem-size",
        "4MiB",
        "--fields",
        "4",
    ]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(run.count("persist") > 0, "{}", run.verdict());
    assert!(rows_verified(&run) > 0, "{}", run.verdict());
    let run = common::space_run("focus", 2003, 1, "4MiB", &["--fields", "4"]);
    common::assert_space_passed(&run, 1);
    assert_fields_ran(&run);
}

#[test]
fn engines_without_a_native_schema_store_run_fields_only_when_asked() {
    let run = common::ci_run("reflog", "pmem-image", 2004, 2, &[]);
    common::assert_passed(&run, 2);
    assert!(!run.verdict().contains("put_row"), "{}", run.verdict());
    for (engine, mode, extra) in [
        ("prism", "pmem-image", vec!["--fields", "6"]),
        ("prism", "kill", vec!["--fields", "6"]),
        (
            "reflog",
            "kill",
            vec!["--fields", "4", "--pmem-mode", "tracked"],
        ),
    ] {
        println!("== {engine} in {mode} mode {extra:?}");
        let run = common::ci_run(engine, mode, 2005, 3, &extra);
        common::assert_passed(&run, 3);
        if mode == "kill" {
            // NOTE: a debug prism child may be killed a few operations after it opened
            // (seconds of open on a loaded machine): any field operation will do.
            let ops = ["put_row", "update_fields", "get_fields"].map(|w| run.count(w));
            assert!(ops.iter().sum::<u64>() > 0, "{}", run.verdict());
            assert!(rows_verified(&run) > 0, "{}", run.verdict());
        } else {
            assert_fields_ran(&run);
        }
    }
}

#[test]
fn lost_concurrent_field_updates_are_caught() {
    // NOTE: in-process (pmem-image), where a round does thousands of operations even on a
    // loaded machine; a kill-mode child may be killed a hundred operations after it
    // started, before two updates of one row ever met. Two fields over 16 rows: updates
    // of different fields of one row meet often.
    let run = common::ci_run(
        "reflog:lose-field-updates",
        "pmem-image",
        2006,
        6,
        &["--fields", "2", "--threads", "4"],
    );
    assert_eq!(run.code, 1, "the broken engine passed:\n{}", run.stdout);
    let v = run.violations();
    assert!(
        v.iter().any(|l| l.contains("a lost field update")
            || l.contains("resurrected after an acknowledged delete")),
        "no lost field update reported:\n{}",
        run.stdout
    );
}

#[test]
fn too_many_fields_are_refused() {
    let run = common::stress(&["--engine", "focus", "--fields", "65", "--rounds", "1"]);
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
    assert!(run.stderr.contains("--fields"), "{}", run.stderr);
}
