//! The write-batch workloads (issue 24): `batch10` and `batch100` run on engines with
//! crash-atomic batches and report batches per second, keys per second and latency per
//! batch; an engine without atomic batches is reported as unsupported, not failed.

mod common;

use tierkv_ycsb::runner::PhaseStatus;
use tierkv_ycsb::runner::progress::Progress;
use tierkv_ycsb::workload::OpKind;

#[test]
fn batch_workloads_run_on_dram_and_prism_and_report_keys_per_second() {
    let tmp = tempfile::tempdir().unwrap();
    let mut engines = "dram:btree,prism".to_owned();
    let without = tierkv::ENGINES
        .iter()
        .find(|d| tierkv::check_atomic_batches(d.name).is_err())
        .map(|d| d.name);
    if let Some(name) = without {
        engines = format!("{engines},{name}");
    }
    let mut args = common::tiny_args(tmp.path(), &engines);
    args.workloads = "batch10,batch100".into();
    args.ops = Some(300);
    // NOTE: prism persists every batch; msync on a disk-backed temp dir would take minutes.
    args.pmem_mode = Some(tierkv::DurabilityMode::Volatile);
    let mut log = Vec::new();
    let report = tierkv_ycsb::run_with(&args, &mut log, Progress::new(false)).unwrap();
    let text = tierkv_ycsb::report::table::render(&report);
    println!("{text}");
    for engine in ["dram:btree", "prism"] {
        for (phase, size) in [("batch10", 10.0), ("batch100", 100.0)] {
            let r = report.result(engine, phase).unwrap();
            assert_eq!(r.status, PhaseStatus::Ok, "{engine} {phase}: {text}");
            let h = r.ops.latency(OpKind::Batch).unwrap();
            assert_eq!(h.count(), 300, "{engine} {phase}");
            assert_eq!(r.errors(), 0);
            let keys = r.keys_per_sec();
            assert!(
                (keys - r.ops_per_sec() * size).abs() < 1e-6 * keys.max(1.0),
                "{engine} {phase}: {keys} keys/s vs {} batches/s",
                r.ops_per_sec()
            );
            // Every put of the batches was written (keys may repeat within a batch).
            assert!(
                r.counters.user_bytes_written >= 300 * 256,
                "{engine} {phase}: {}",
                r.counters.user_bytes_written
            );
            assert!(
                text.contains(&format!("-- {engine}: ")) && text.contains("puts per batch"),
                "{text}"
            );
        }
    }
    if let Some(name) = without {
        let r = report.result(name, "batch10").unwrap();
        assert!(
            matches!(&r.status, PhaseStatus::Unsupported(m) if m.contains("write batches")),
            "{:?}",
            r.status
        );
        assert!(text.contains(&format!("-- {name}: unsupported")), "{text}");
    }
}
