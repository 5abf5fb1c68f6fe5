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

#[test]
fn space_mode_refuses_power_loss_pools_and_nonsense_shares() {
    let space = ["--engine", "reflog", "--mode", "space"];
    for (extra, why) in [
        (["--pmem-mode", "tracked"], "msync or volatile"),
        (["--refill", "2"], "--refill 2"),
        (["--kill-fraction", "1.5"], "--kill-fraction 1.5"),
    ] {
        let args: Vec<&str> = space.iter().chain(extra.iter()).copied().collect();
        let run = common::stress(&args);
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains(why), "{args:?}: {}", run.stderr);
    }
}

#[test]
fn help_shows_examples_of_every_mode() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tierkv-stress"))
        .arg("--help")
        .output()
        .expect("running tierkv-stress --help");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("Examples:"), "{help}");
    for mode in ["kill", "pmem-image", "flash-faults", "space"] {
        assert!(help.contains(&format!("--mode {mode} ")), "{mode}: {help}");
    }
}
