//! A hand-made report shared by the report modules' tests: two targets over load, a and e,
//! the second at half the first's throughput, unable to scan, with one failed update.

use std::time::Duration;

use tierkv::Stats;

use super::{BenchReport, RunConfig, TargetLine};
use crate::histogram::OpHistograms;
use crate::runner::{PhaseResult, PhaseStatus};
use crate::workload::{Distribution, OpKind, Phase, workload};

pub(crate) fn sample_config() -> RunConfig {
    RunConfig {
        version: "0.1.0".into(),
        engines: vec!["dram:btree".into(), "dram:hash".into()],
        workloads: vec!["load".into(), "a".into(), "e".into()],
        records: 1000,
        ops: Some(1000),
        duration_s: None,
        warmup_ops: Some(0),
        warmup_s: None,
        threads: 2,
        distribution: None,
        key_size: None,
        key_format: "YCSB".into(),
        value_size: Some(1024),
        fields: None,
        field_size: None,
        schema: None,
        value_bytes: 1024,
        dram: 1 << 28,
        pmem_path: "/dev/shm/tierkv-bench".into(),
        pmem_size: 1 << 30,
        pmem_mode: "volatile".into(),
        pmem_durability: "NOT durable".into(),
        pmem_emulated_latency: false,
        pmem_latency_read_ns_per_line: 0,
        pmem_latency_persist_ns: 0,
        flash_path: "<data>/flash".into(),
        flash_size: 4 << 30,
        json: None,
        chart: None,
        seed: 42,
        dir: "bench-data".into(),
        run_dir: "bench-data/run-1-1".into(),
        keep: false,
    }
}

fn result(engine: &str, phase: Phase, ops_scale: u64, status: PhaseStatus) -> PhaseResult {
    let mut ops = OpHistograms::new().unwrap();
    let kinds: &[OpKind] = match phase {
        Phase::Load => &[OpKind::Insert],
        Phase::Run(w) if w.name == "e" => &[OpKind::Scan, OpKind::Insert],
        Phase::Run(_) => &[OpKind::Read, OpKind::Update],
    };
    if status == PhaseStatus::Ok || matches!(status, PhaseStatus::Failed(_)) {
        for (i, kind) in kinds.iter().enumerate() {
            for n in 0..500 * ops_scale {
                ops.record(*kind, 1_000 + n * (i as u64 + 1));
            }
        }
    }
    if matches!(status, PhaseStatus::Failed(_)) {
        ops.record_error(OpKind::Update);
    }
    let counters = Stats {
        user_bytes_written: 1 << 20,
        flash_bytes_written: 3 << 20,
        dram_bytes: 5 << 20,
        reads_from_dram: 500,
        ..Stats::default()
    };
    PhaseResult {
        engine: engine.into(),
        phase,
        distribution: match phase {
            Phase::Load => None,
            Phase::Run(_) => Some(Distribution::Zipfian),
        },
        status,
        duration: Duration::from_millis(100),
        ops,
        counters,
        settled: None,
    }
}

pub(crate) fn sample_report() -> BenchReport {
    let a = Phase::Run(*workload("a").unwrap());
    let e = Phase::Run(*workload("e").unwrap());
    let results = vec![
        result("dram:btree", Phase::Load, 2, PhaseStatus::Ok),
        result("dram:btree", a, 2, PhaseStatus::Ok),
        result("dram:btree", e, 2, PhaseStatus::Ok),
        result("dram:hash", Phase::Load, 1, PhaseStatus::Ok),
        result(
            "dram:hash",
            a,
            1,
            PhaseStatus::Failed("update: boom".into()),
        ),
        result(
            "dram:hash",
            e,
            1,
            PhaseStatus::Unsupported("scan: hash index".into()),
        ),
    ];
    BenchReport {
        config: sample_config(),
        targets: vec![
            TargetLine {
                label: "dram:btree".into(),
                description: "ordered".into(),
            },
            TargetLine {
                label: "dram:hash".into(),
                description: "hash".into(),
            },
        ],
        phases: vec![Phase::Load, a, e],
        results,
    }
}

#[test]
fn header_says_where_data_goes_and_how_durable_pmem_is() {
    let report = sample_report();
    let h = super::header(&report.config, &report.targets);
    println!("{h}");
    assert!(h.contains("bench-data/run-1-1/<engine>"), "{h}");
    assert!(h.contains("removed after each engine ran"));
    assert!(h.contains("mode volatile: NOT durable"));
    assert!(h.contains("/dev/shm/tierkv-bench"));
    assert!(h.contains("seed 42"));
    assert!(h.contains("emulated pmem latency: off"));
}

/// `--settle-load`: the load's counters up to the end of its background work are a second
/// counter row (the wait and whether it ended in the label) and a `settled` object in JSON.
#[test]
fn a_settled_load_is_a_second_counter_row_and_a_json_object() {
    let mut report = sample_report();
    let load = report
        .results
        .iter_mut()
        .find(|r| r.phase == Phase::Load)
        .unwrap();
    let mut counters = load.counters.clone();
    counters.pmem_bytes_written = 7 << 20;
    load.settled = Some(crate::runner::Settled {
        waited: Duration::from_millis(2_500),
        quiet: true,
        counters,
    });
    let text = super::table::render(&report);
    let row = text
        .lines()
        .find(|l| l.starts_with("dram:btree +2.5 s settled"))
        .unwrap_or_else(|| panic!("no settled row in\n{text}"));
    assert!(row.contains("7.0"), "{row}");
    let json = super::json::to_json(&report);
    let first = &json["results"][0];
    assert_eq!(first["workload"], "load");
    assert_eq!(first["settled"]["waited_s"], 2.5);
    assert_eq!(first["settled"]["quiet"], true);
    assert_eq!(first["settled"]["counters"]["pmem_bytes_written"], 7 << 20);
    assert!(json["results"][1].get("settled").is_none());
}
