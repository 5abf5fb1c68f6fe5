//! flash-faults mode: the correct flash reference engine survives dropped and torn unsynced
//! writes and injected EIO / ENOSPC; the one that acknowledges before syncing is caught.

mod common;

#[test]
fn reflog_flash_survives_crashes_and_injected_errors() {
    let engine = "reflog-flash@segment=1MiB";
    let run = common::ci_run(
        engine,
        "flash-faults",
        505,
        10,
        &["--fault-fraction", "0.6"],
    );
    common::assert_passed(&run, 10);
    assert!(
        run.count("I/O") > 0,
        "no fault was injected: {}",
        run.verdict()
    );
}

#[test]
fn ack_before_sync_is_caught() {
    let engine = "reflog-flash:ack-before-persist@segment=1MiB";
    let run = common::ci_run(engine, "flash-faults", 506, 12, &[]);
    common::assert_caught(&run);
}
