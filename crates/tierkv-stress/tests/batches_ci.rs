//! Write batches in the stress workload (issue 24): the oracle treats a batch as one write,
//! and a recovered store that shows part of a batch is a "torn batch". The reference engine
//! (`reflog`, one commit word per batch) passes every mode with batches; its
//! `loop-batches` variant (a batch applied as a loop of puts and deletes, each committed on
//! its own) is caught; every registered engine whose stores have atomic batches runs a
//! short batch-heavy run of each mode that applies, so engines join by gaining batches.

mod common;

use tierkv::Tier;

/// A mix where a third of the operations are batches (of 1..=`--batch-size` keys).
const BATCH_HEAVY: &[&str] = &["--mix", "30,10,20,10,30", "--batch-size", "24"];

fn with_batches<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = BATCH_HEAVY.to_vec();
    v.extend_from_slice(extra);
    v
}

/// Asserts a run failed with a torn batch, named with both keys.
fn assert_torn_batch(run: &common::Run) {
    assert_eq!(run.code, 1, "the broken engine passed:\n{}", run.stdout);
    let v = run.violations();
    assert!(
        v.iter().any(|l| l.contains("(a torn batch)")
            && l.contains("expected all or none of the batch of ")
            && l.contains("holds the batch's v#")),
        "no torn batch reported:\n{}",
        run.stdout
    );
}

#[test]
fn the_reference_engine_passes_every_mode_with_batches() {
    for (mode, rounds, extra) in [
        ("kill", 4, vec![]),
        ("kill", 3, vec!["--pmem-mode", "tracked"]),
        ("pmem-image", 4, vec![]),
        (
            "pmem-image",
            3,
            vec!["--threads", "6", "--writers-per-key", "3"],
        ),
    ] {
        println!("== reflog in {mode} mode {extra:?}");
        let args = with_batches(&extra);
        let run = common::ci_run("reflog", mode, 2401, rounds, &args);
        common::assert_passed(&run, rounds);
        assert!(common::batches_acked(&run) > 0, "{}", run.verdict());
    }
    let run = common::stress(&[
        "--engine",
        "reflog",
        "--mode",
        "persist-points",
        "--seed",
        "2402",
        "--ops",
        "60",
        "--points",
        "40",
        "--keys",
        "100",
        "--pmem-size",
        "4MiB",
        "--mix",
        "30,10,20,10,30",
    ]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert!(
        run.verdict().contains("40 persist points cut"),
        "{}",
        run.verdict()
    );
    let run = common::space_run("reflog", 2403, 2, "4MiB", BATCH_HEAVY);
    common::assert_space_passed(&run, 2);
    assert!(common::batches_acked(&run) > 0, "{}", run.verdict());
}

#[test]
fn batches_applied_as_a_loop_of_puts_are_caught_as_torn() {
    for (mode, extra) in [
        ("pmem-image", vec![]),
        (
            "pmem-image",
            vec!["--threads", "6", "--writers-per-key", "3"],
        ),
        ("kill", vec![]),
        ("kill", vec!["--pmem-mode", "tracked"]),
    ] {
        println!("== reflog:loop-batches in {mode} mode {extra:?}");
        let run = common::ci_run("reflog:loop-batches", mode, 2404, 40, &with_batches(&extra));
        assert_torn_batch(&run);
    }
    let run = common::stress(&[
        "--engine",
        "reflog:loop-batches",
        "--mode",
        "persist-points",
        "--seed",
        "2405",
        "--ops",
        "60",
        "--points",
        "40",
        "--keys",
        "100",
        "--pmem-size",
        "4MiB",
        "--mix",
        "0,0,10,0,90",
    ]);
    assert_torn_batch(&run);
}

#[test]
fn batches_asked_of_an_engine_without_them_are_refused_with_the_reason() {
    // The flash reference engine has no batches: the workload says so and stops.
    let run = common::ci_run(
        "reflog-flash",
        "flash-faults",
        2406,
        2,
        &["--mix", "40,10,30,10,10"],
    );
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.stdout.contains("has no crash-atomic write batches"),
        "{}",
        run.stdout
    );
    // Without a batch weight it runs without batches.
    let run = common::ci_run("reflog-flash", "kill", 2406, 2, &[]);
    common::assert_passed(&run, 2);
    assert_eq!(common::batches_acked(&run), 0, "{}", run.verdict());
    // A registered engine without batches (if any is left) is refused before the run.
    if let Some(d) = tierkv::ENGINES
        .iter()
        .find(|d| tierkv::check_atomic_batches(d.name).is_err())
    {
        let run = common::stress(&["--engine", d.name, "--mix", "40,10,30,10,10"]);
        assert_eq!(run.code, 2, "{}: {}", d.name, run.stderr);
        assert!(run.stderr.contains("write batches"), "{}", run.stderr);
    }
    let run = common::stress(&["--engine", "reflog", "--batch-size", "101"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
}

#[test]
fn every_registered_engine_with_atomic_batches_passes_a_batch_heavy_run() {
    for d in tierkv::ENGINES
        .iter()
        .filter(|d| !d.volatile && tierkv::check_atomic_batches(d.name).is_ok())
    {
        // NOTE: a plain SIGKILL keeps the page cache, so `volatile` tests the same as
        // `msync` without an msync per persist (on a loaded machine an msync'ed round of
        // 200 ms could end before a single batch was acknowledged).
        let mut runs: Vec<(&str, Vec<&str>)> = vec![("kill", vec!["--pmem-mode", "volatile"])];
        let crash_images = !common::CRASH_TORN_BATCH.contains(&d.name);
        if crash_images {
            runs.push(("kill", vec!["--pmem-mode", "tracked"]));
        }
        if d.uses(Tier::Pmem) && crash_images {
            runs.push(("pmem-image", vec![]));
            runs.push(("pmem-image", vec!["--writers-per-key", "3"]));
        }
        if d.uses(Tier::Flash) && !common::LIVE_TORN_BATCH.contains(&d.name) {
            // As in `registered_engines_ci`: prismdb keeps its data in pmem until the pool
            // fills, so it gets a 1 MiB pool to reach flash in the first round.
            runs.push(match d.name {
                "prismdb" => (
                    "flash-faults",
                    vec!["--keys", "3000", "--pmem-size", "1MiB"],
                ),
                _ => ("flash-faults", vec!["--keys", "3000"]),
            });
        }
        for (mode, extra) in runs {
            println!("== {} in {mode} mode with batches {extra:?}", d.name);
            let run = common::ci_run(d.name, mode, 2407, 3, &with_batches(&extra));
            common::assert_passed(&run, 3);
            assert!(common::batches_acked(&run) > 0, "{}", run.verdict());
        }
    }
}

/// PRISM, found by the first batch runs (2026-11-26): a batch that failed after its commit
/// point (B2 in `prism/src/batch/mod.rs`: the commit root is set, then `apply` was refused
/// with `NoSpace` by a full PWB) returned the error with part of the batch applied to the
/// live store, and only the next open finished it: the space fill's verification found
/// torn batches (`found v#3, from before the batch's v#4, while k00003473 holds the
/// batch's v#1`, seed 3). Fixed: a batch reserves its PWB room, HSIT slots and key-index
/// room before B2 (refused with `NoSpace` there, nothing applied), and B3 does not stop
/// for a background failure that poisoned the engine after B2 (the same half-applied batch
/// after an injected I/O error, flash-faults `--keys 3000 --seed 4 --rounds 6`).
#[test]
fn prism_a_batch_refused_after_its_commit_point_is_half_applied() {
    let run = common::space_run(
        "prism",
        3,
        2,
        "4MiB",
        &["--flash-size", "16MiB", "--keys", "28535"],
    );
    common::assert_space_passed(&run, 2);
}

/// PRISM under power-loss kills with batch-heavy rounds. Found by the first batch runs
/// (`kill --pmem-mode tracked --seed 2401 --rounds 10 --threads 3 --keys 300 --pmem-size
/// 4MiB --mix 30,10,20,10,30 --batch-size 24`, round 8: `k00000031 ... from before the
/// batch's v#14, while k00000006 holds the batch's v#16`). Cause (fixed 2026-11-26): the
/// cut freezes flash first, PWB reclamation fails and poisons the engine while a batch is
/// applying; that batch returns `Poisoned` with its commit root set, and a batch of another
/// thread that had passed its writability check before the poison then committed over that
/// root, so recovery never finished the first one. A commit now checks, under the batch
/// gate, that the engine is writable and the root is free (prism's
/// `tests/batch_power_cut.rs` reaches the race in seconds). Five seeds of ten rounds.
#[test]
#[ignore = "long: run by hand (release build)"]
fn prism_power_loss_kill_shows_a_torn_batch() {
    for seed in 2401..2406 {
        let run = common::ci_run(
            "prism",
            "kill",
            seed,
            10,
            &with_batches(&["--pmem-mode", "tracked"]),
        );
        common::assert_passed(&run, 10);
    }
}

/// PRISM in pmem-image with batch-heavy rounds: the same torn batch as after a power-loss
/// kill, and the same cause (`--mode pmem-image --seed 2411 --rounds 25 --threads 3 --keys
/// 300 --pmem-size 4MiB --mix 30,10,20,10,30 --batch-size 24`, round 15: `k00000239: ...
/// found absent, from before the batch's v#.., while k00000009 holds the batch's v#31`;
/// the kept image held the logs of both batches and the root word of the second).
#[test]
#[ignore = "long: run by hand (release build)"]
fn prism_pmem_image_shows_a_torn_batch() {
    for seed in 2411..2414 {
        let run = common::ci_run("prism", "pmem-image", seed, 25, BATCH_HEAVY);
        common::assert_passed(&run, 25);
    }
}
