//! kill mode: the correct reference engines survive SIGKILLs at random moments, round after
//! round on the same directory; with a tracked pool, power-loss kills too.

mod common;

#[test]
fn reflog_survives_sigkill() {
    let run = common::ci_run("reflog", "kill", 303, 5, &["--pmem-mode", "volatile"]);
    common::assert_passed(&run, 5);
    assert!(
        run.stdout.contains("mode volatile (NOT durable"),
        "{}",
        run.stdout
    );
}

#[test]
fn reflog_survives_power_loss_kills() {
    let run = common::ci_run("reflog", "kill", 304, 5, &["--pmem-mode", "tracked"]);
    common::assert_passed(&run, 5);
    assert!(
        run.verdict().contains("5 pmem crash images"),
        "{}",
        run.verdict()
    );
}

#[test]
fn reflog_flash_survives_sigkill_and_power_loss_kills() {
    for mode in ["msync", "tracked"] {
        let engine = "reflog-flash@segment=1MiB";
        let run = common::ci_run(engine, "kill", 305, 3, &["--pmem-mode", mode]);
        common::assert_passed(&run, 3);
    }
}
