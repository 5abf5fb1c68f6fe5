//! kill mode catches the two broken reference engines with power-loss kills (issue 5,
//! first acceptance point). A plain SIGKILL cannot: the page cache keeps unpersisted pool
//! stores across the death of a process, so a missing persist only shows when the kill also
//! cuts the power (a tracked pool).

mod common;

const POWER_LOSS: &[&str] = &["--pmem-mode", "tracked"];

#[test]
fn ack_before_persist_is_caught_by_power_loss_kills() {
    let run = common::ci_run("reflog:ack-before-persist", "kill", 404, 12, POWER_LOSS);
    common::assert_caught(&run);
}

#[test]
fn skipped_commit_persist_is_caught_by_power_loss_kills() {
    let run = common::ci_run("reflog:skip-persist", "kill", 404, 12, POWER_LOSS);
    common::assert_caught(&run);
}
