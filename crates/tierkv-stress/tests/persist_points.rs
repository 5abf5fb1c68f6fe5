//! `persist-points` mode (issue 17, item 2): the correct reference engine survives a crash
//! after every persist of a workload, the broken ones are caught at the first persist
//! point that exposes them, and every registered pmem engine (each variant) passes a short
//! fixed-seed pass.

mod common;

use tierkv::Tier;

fn points_run(engine: &str, seed: &str, ops: &str, points: &str) -> common::Run {
    common::stress(&[
        "--engine",
        engine,
        "--mode",
        "persist-points",
        "--seed",
        seed,
        "--ops",
        ops,
        "--points",
        points,
        "--keys",
        "100",
        "--pmem-size",
        "1MiB",
    ])
}

#[test]
fn the_reference_engine_survives_a_crash_after_every_persist() {
    let run = points_run("reflog", "1720", "120", "1000");
    assert_eq!(run.code, 0, "{}", run.stdout);
    // Fewer persists than --points: every one of them is cut.
    let counted = run.count("persists");
    assert!(counted > 50, "{}", run.verdict());
    assert_eq!(
        run.count("persist"),
        counted + run.count("named"),
        "{}",
        run.verdict()
    );
    assert_eq!(run.count("acknowledged"), 0, "{}", run.verdict());
    assert_eq!(
        run.count("pmem"),
        2 * run.count("persist"),
        "{}",
        run.verdict()
    );
}

#[test]
fn broken_reference_engines_are_caught_at_a_persist_point() {
    for engine in ["reflog:skip-persist", "reflog:ack-before-persist"] {
        let run = points_run(engine, "1721", "120", "1000");
        common::assert_caught(&run);
        assert!(
            run.violations().iter().all(|v| v.contains("crash at ")),
            "{}",
            run.stdout
        );
        assert!(run.count("acknowledged") > 0, "{}", run.verdict());
    }
}

#[test]
fn every_registered_pmem_engine_passes_a_short_persist_points_pass() {
    for d in tierkv::ENGINES
        .iter()
        .filter(|d| !d.volatile && d.uses(Tier::Pmem))
    {
        let engines: Vec<String> = if d.variants.len() > 1 {
            d.variants
                .iter()
                .map(|v| format!("{}:{v}", d.name))
                .collect()
        } else {
            vec![d.name.to_owned()]
        };
        // Recovering a flash engine costs more; cut fewer points of it in CI.
        let points = if d.uses(Tier::Flash) { "4" } else { "10" };
        for e in engines {
            println!("== {e}");
            let run = common::stress(&[
                "--engine",
                &e,
                "--mode",
                "persist-points",
                "--seed",
                "1722",
                "--ops",
                "80",
                "--points",
                points,
                "--keys",
                "100",
                "--pmem-size",
                "4MiB",
                "--flash-size",
                "64MiB",
            ]);
            assert_eq!(run.code, 0, "{e}: {}{}", run.stdout, run.stderr);
            assert_eq!(run.count("acknowledged"), 0, "{}", run.verdict());
            assert!(run.count("persist") > 0, "{}", run.verdict());
        }
    }
}

fn compacting_run(engine: &str) -> common::Run {
    common::stress(&[
        "--engine",
        engine,
        "--mode",
        "persist-points",
        "--seed",
        "9",
        "--ops",
        "500",
        "--points",
        "40",
        "--keys",
        "100",
        "--pmem-size",
        "256KiB",
        "--max-value",
        "4KiB",
    ])
}

#[test]
fn named_points_inside_compaction_are_cut_and_the_correct_engine_passes_them() {
    let run = compacting_run("reflog");
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert!(
        run.count("named") > 0,
        "no named point cut: {}",
        run.verdict()
    );
}

#[test]
fn a_move_acknowledged_before_its_persist_is_caught_at_the_named_point() {
    let run = compacting_run("reflog:ack-before-move-persist");
    common::assert_caught(&run);
    assert!(
        run.violations()
            .iter()
            .any(|v| v.contains("reflog.compact.after_switch")),
        "{}",
        run.stdout
    );
}
