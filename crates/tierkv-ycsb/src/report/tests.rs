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
        repeat: 1,
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
        round: 1,
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

/// Two engines, workload A, three rounds (`--repeat 3`): "x" at 100, 200 and 500 ops/s,
/// "y" at 125, 200 and 250.
pub(crate) fn rounds_report() -> BenchReport {
    let a = Phase::Run(*workload("a").unwrap());
    let mut results = Vec::new();
    for (round, (x, y)) in [(100.0, 125.0), (200.0, 200.0), (500.0, 250.0)]
        .into_iter()
        .enumerate()
    {
        for (engine, ops) in [("x", x), ("y", y)] {
            let mut r = result(engine, a, 1, PhaseStatus::Ok);
            // 1,000 operations (500 reads, 500 updates).
            r.duration = Duration::from_secs_f64(r.ops.completed() as f64 / ops);
            r.round = round as u32 + 1;
            results.push(r);
        }
    }
    let target = |label: &str| TargetLine {
        label: label.into(),
        description: label.into(),
    };
    BenchReport {
        config: RunConfig {
            repeat: 3,
            ..sample_config()
        },
        targets: vec![target("x"), target("y")],
        phases: vec![a],
        results,
    }
}

#[test]
fn repeated_runs_get_a_table_per_round_and_a_summary() {
    let report = rounds_report();
    assert_eq!(report.rounds(), 3);
    assert_eq!(
        report.result_in(3, "y", "a").map(|r| r.ops_per_sec()),
        Some(250.0)
    );
    let text = super::table::render(&report);
    println!("{text}");
    for round in 1..=3 {
        assert!(
            text.contains(&format!("=== round {round} of 3 ===")),
            "{text}"
        );
    }
    assert!(text.contains("summary of 3 rounds"), "{text}");
    assert!(text.contains("1.25x 1.00x 0.50x"), "{text}");
    let json = super::json::to_json(&report);
    assert_eq!(json["config"]["repeat"], 3);
    assert_eq!(json["results"][5]["round"], 3);
    let summary = &json["summary"];
    assert_eq!(summary[1]["engine"], "y");
    assert_eq!(summary[1]["workload"], "a");
    assert_eq!(summary[1]["median_ratio"], 1.0);
    assert_eq!(summary[1]["ratios"], serde_json::json!([1.25, 1.0, 0.5]));
    assert_eq!(summary[1]["median_ops_per_sec"], 200.0);
    // One round: no summary, no round headings.
    let one = sample_report();
    let text = super::table::render(&one);
    assert!(
        !text.contains("round") && !text.contains("summary"),
        "{text}"
    );
    assert!(super::json::to_json(&one).get("summary").is_none());
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
