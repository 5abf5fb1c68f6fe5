//! Every engine in `tierkv::ENGINES` gets the harness for free: each persistent one runs a
//! short deterministic run of every crash mode that applies to its tiers (issue 5, item 6),
//! and each volatile one is refused with the reason. Engines join this test by being
//! registered; nothing here names them.

mod common;

use tierkv::Tier;

#[test]
fn every_registered_engine_passes_each_applicable_mode_or_is_refused() {
    for d in tierkv::ENGINES {
        if d.volatile {
            let run = common::stress(&["--engine", d.name, "--seed", "600"]);
            assert_eq!(run.code, 2, "{}: {}", d.name, run.stderr);
            assert!(
                run.stderr.contains("volatile"),
                "{}: {}",
                d.name,
                run.stderr
            );
            continue;
        }
        let mut modes = vec!["kill"];
        if d.uses(Tier::Pmem) {
            modes.push("pmem-image");
        }
        if d.uses(Tier::Flash) {
            modes.push("flash-faults");
        }
        for mode in modes {
            println!("== {} in {mode} mode", d.name);
            let run = common::ci_run(d.name, mode, 601, 4, &[]);
            common::assert_passed(&run, 4);
        }
        let run = common::ci_run(d.name, "kill", 602, 3, &["--pmem-mode", "tracked"]);
        common::assert_passed(&run, 3);
    }
}
