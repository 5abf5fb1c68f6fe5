//! Every engine in `tierkv::ENGINES` gets the harness for free: each persistent one runs a
//! short deterministic run of every crash mode that applies to its tiers (issue 5, item 6),
//! and each volatile one is refused with the reason. Engines join this test by being
//! registered (and a variant that stores data on other tiers than its engine's default,
//! such as `mio:flash`, by declaring them in `variant_tiers`); nothing here names them
//! but to give a variant small tables ([`variant_params`]).

mod common;

use tierkv::Tier;

/// Options that make a variant's own mechanism run within a CI-sized run.
fn variant_params(name: &str, variant: &str) -> &'static str {
    match (name, variant) {
        // Three levels and 64 KiB flash tables: write-outs to flash and flash compactions
        // within the first rounds.
        ("mio", "flash") => "@levels=3,sst_size=64KiB,flash_base=256KiB",
        _ => "",
    }
}

#[test]
fn every_registered_engine_passes_each_applicable_mode_or_is_refused() {
    let mut targets: Vec<(_, String, &[Tier])> = Vec::new();
    for d in tierkv::ENGINES {
        targets.push((d, d.name.to_owned(), d.tiers));
        for (variant, tiers) in d.variant_tiers {
            let spec = format!("{}:{variant}{}", d.name, variant_params(d.name, variant));
            targets.push((d, spec, tiers));
        }
    }
    for (d, spec, tiers) in targets {
        let spec = spec.as_str();
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
        if tiers.contains(&Tier::Pmem) {
            modes.push("pmem-image");
        }
        if tiers.contains(&Tier::Flash) {
            modes.push("flash-faults");
        }
        for mode in modes {
            println!("== {spec} in {mode} mode");
            // flash-faults fails a run that never reached flash, so an engine that keeps its
            // data in pmem until the pool fills (prismdb: values of 12 B..4 KiB) gets a 1 MiB
            // pool and a put-heavy mix, which overflow it within the first round even on a
            // loaded machine (~750 puts in 4 rounds); prism cannot be created in a pool under
            // ~2.02 MiB and reaches flash with 3000 keys in the 4 MiB one.
            let extra: &[&str] = match (mode, d.name) {
                ("flash-faults", "prismdb") => &[
                    "--keys",
                    "3000",
                    "--pmem-size",
                    "1MiB",
                    "--mix",
                    "80,5,10,5",
                ],
                ("flash-faults", _) => &["--keys", "3000"],
                _ => &[],
            };
            let extra = [
                extra,
                common::batch_flags(d.name, mode),
                common::crash_batch_flags(d.name, mode),
            ]
            .concat();
            let run = common::ci_run(spec, mode, 601, 4, &extra);
            common::assert_passed(&run, 4);
        }
        let extra = [
            &["--pmem-mode", "tracked"],
            common::crash_batch_flags(d.name, "kill-tracked"),
        ]
        .concat();
        let run = common::ci_run(spec, "kill", 602, 3, &extra);
        common::assert_passed(&run, 3);
    }
}
