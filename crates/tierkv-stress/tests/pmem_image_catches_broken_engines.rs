//! pmem-image mode catches the two broken reference engines (issue 5, first acceptance
//! point): one acknowledges puts before persisting them, one never persists its commit word.

mod common;

#[test]
fn ack_before_persist_is_reported_as_lost_acknowledged_writes() {
    let run = common::ci_run("reflog:ack-before-persist", "pmem-image", 202, 12, &[]);
    common::assert_caught(&run);
}

#[test]
fn skipped_commit_persist_is_reported_as_lost_acknowledged_writes() {
    let run = common::ci_run("reflog:skip-persist", "pmem-image", 202, 12, &[]);
    common::assert_caught(&run);
}
