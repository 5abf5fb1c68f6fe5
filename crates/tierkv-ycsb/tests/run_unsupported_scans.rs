//! Scans on a hash engine are reported as unsupported for that engine, and the run still
//! succeeds: `Unsupported` is an answer, not a failure.

mod common;

use tierkv_ycsb::runner::PhaseStatus;
use tierkv_ycsb::runner::progress::Progress;

#[test]
fn scans_on_a_hash_index_are_reported_unsupported_not_failed() {
    let tmp = tempfile::tempdir().unwrap();
    let mut args = common::tiny_args(tmp.path(), "dram:btree,dram:hash");
    args.workloads = "e".into();
    let mut log = Vec::new();
    let report = tierkv_ycsb::run_with(&args, &mut log, Progress::new(false)).unwrap();
    let text = String::from_utf8(log).unwrap();
    println!("{text}");
    let hash = report.result("dram:hash", "e").unwrap();
    assert!(
        matches!(&hash.status, PhaseStatus::Unsupported(m) if m.contains("scan")),
        "{:?}",
        hash.status
    );
    assert_eq!(hash.errors(), 0);
    let btree = report.result("dram:btree", "e").unwrap();
    assert_eq!(btree.status, PhaseStatus::Ok);
    assert!(btree.ops_per_sec() > 0.0);
    assert!(text.contains("dram:hash: unsupported"), "{text}");
}
