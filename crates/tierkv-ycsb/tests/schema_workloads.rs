//! Schema workloads (issue 20): `--schema` stores the `--fields` records through the
//! field-level API — FOCUS natively, the other engines through the consolidated or the
//! scattered adapter — and the micro-benchmarks `field-read`, `field-update`, `field-scan`
//! read and write single fields.

mod common;

use tierkv_ycsb::cli::BenchArgs;
use tierkv_ycsb::runner::PhaseStatus;
use tierkv_ycsb::runner::progress::Progress;
use tierkv_ycsb::schema::SchemaLayout;
use tierkv_ycsb::workload::OpKind;

/// Records loaded and operations per workload.
const N: u64 = 500;

const PHASES: [&str; 7] = [
    "load",
    "a",
    "e",
    "f",
    "field-read",
    "field-update",
    "field-scan",
];

fn schema_args(tmp: &std::path::Path, engines: &str, layout: SchemaLayout) -> BenchArgs {
    let mut args = common::tiny_args(tmp, engines);
    args.value_size = None;
    args.fields = Some(10);
    args.field_size = Some(tierkv::ByteSize(100));
    args.schema = Some(layout);
    args.records = N;
    args.ops = Some(N);
    args.workloads = PHASES.join(",");
    // NOTE: focus persists every row; msync on a disk-backed temp dir would be slow.
    args.pmem_mode = Some(tierkv::DurabilityMode::Volatile);
    args
}

#[test]
fn every_schema_workload_runs_natively_on_focus_and_through_the_adapters_elsewhere() {
    for layout in [
        SchemaLayout::Native,
        SchemaLayout::Consolidated,
        SchemaLayout::Scattered,
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let args = schema_args(tmp.path(), "focus,dram:btree", layout);
        let mut log = Vec::new();
        let report = tierkv_ycsb::run_with(&args, &mut log, Progress::new(false)).unwrap();
        let text = tierkv_ycsb::report::table::render(&report);
        let header = String::from_utf8(log).unwrap();
        assert!(
            header.contains(&format!("schema API ({layout})")),
            "{header}"
        );
        for engine in ["focus", "dram:btree"] {
            for phase in PHASES {
                let r = report.result(engine, phase).unwrap();
                assert_eq!(
                    r.status,
                    PhaseStatus::Ok,
                    "{layout} {engine} {phase}: {text}"
                );
                assert_eq!(r.errors(), 0, "{layout} {engine} {phase}");
                // Every key read or updated was loaded (zipfian over loaded records only:
                // these workloads insert nothing).
                for kind in [OpKind::Read, OpKind::Update, OpKind::ReadModifyWrite] {
                    assert_eq!(
                        r.ops.not_found(kind),
                        0,
                        "{layout} {engine} {phase} {kind:?}: {text}"
                    );
                }
            }
            let load = report.result(engine, "load").unwrap();
            assert_eq!(load.ops.latency(OpKind::Insert).unwrap().count(), N);
            let fu = report.result(engine, "field-update").unwrap();
            assert_eq!(fu.ops.latency(OpKind::Update).unwrap().count(), N);
            let fs = report.result(engine, "field-scan").unwrap();
            assert_eq!(fs.ops.latency(OpKind::Scan).unwrap().count(), N);
        }
        // Natively, FOCUS appends a delta per one-field update (swim), or rewrites the row
        // at a restore point; through the adapters every update rewrites a whole value, and
        // focus appends no delta.
        let c = &report
            .result("focus", "field-update")
            .unwrap()
            .counters
            .counters;
        let count = |name: &str| c.get(name).copied().unwrap_or(0);
        let (deltas, restores) = (
            count("focus_deltas_appended"),
            count("focus_restore_points"),
        );
        if layout == SchemaLayout::Native {
            assert!(
                deltas > 0 && deltas + restores >= N,
                "native focus: {deltas} deltas, {restores} restore points"
            );
        } else {
            assert_eq!(deltas, 0, "{layout}: focus through the adapter");
        }
    }
}

#[test]
fn single_field_workloads_need_the_schema_api() {
    let tmp = tempfile::tempdir().unwrap();
    let mut args = common::tiny_args(tmp.path(), "dram:btree");
    args.workloads = "load,field-read".into();
    let e = tierkv_ycsb::run_with(&args, &mut Vec::new(), Progress::new(false)).unwrap_err();
    assert!(e.to_string().contains("needs --schema"), "{e}");
    args.fields = Some(4);
    args.value_size = None;
    args.schema = Some(SchemaLayout::Native);
    args.records = 200;
    args.ops = Some(200);
    args.pmem_mode = Some(tierkv::DurabilityMode::Volatile);
    let report = tierkv_ycsb::run_with(&args, &mut Vec::new(), Progress::new(false)).unwrap();
    assert_eq!(
        report.result("dram:btree", "field-read").unwrap().status,
        PhaseStatus::Ok
    );
}

#[test]
fn the_schema_flag_parses_and_needs_fields() {
    use clap::Parser as _;
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }
    let ok = Cli::try_parse_from(["bench", "--fields", "10", "--schema", "scattered"]).unwrap();
    assert_eq!(ok.bench.schema, Some(SchemaLayout::Scattered));
    assert!(Cli::try_parse_from(["bench", "--schema", "native"]).is_err());
    let e = Cli::try_parse_from(["bench", "--fields", "3", "--schema", "rows"])
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("expected native, consolidated or scattered"),
        "{e}"
    );
}
