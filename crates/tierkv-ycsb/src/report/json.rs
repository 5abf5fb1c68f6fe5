//! `--json FILE`: the one documented, stable shape scripts rely on (issue 4, DESIGN §6):
//!
//! ```text
//! {"config": {every flag as it took effect, the pmem mode and path, the flash path, the seed},
//!  "results": [{"engine": "dram:btree", "workload": "a", "round": 1,
//!               "status": "ok" | "unsupported" | "failed", "message": null | "...",
//!               "distribution": "zipfian" | "latest" | "uniform" | null,
//!               "ops_per_sec": 123.4, "keys_per_sec": 0.0, "duration_s": 1.0,
//!               "ops": {"read": {"count": 1, "mean_us": 1.0, "p50_us": 1.0, "p99_us": 1.0,
//!                                "p999_us": 1.0, "errors": 0, "not_found": 0},
//!                       "update": {...}},
//!               "counters": {"user_bytes_written": 0, "flash_bytes_written": 0,
//!                            "flash_bytes_read": 0, "pmem_bytes_written": 0,
//!                            "reads_from_dram": 0, "reads_from_pmem": 0,
//!                            "reads_from_flash": 0, "dram_bytes": 0, ...}}]}
//! ```
//! - `engine` is the label as given on the command line; `workload` is `load`, `a` ... `f`;
//!   `round` the round it ran in, from 1 (`--repeat`; always 1 without).
//! - `ops` holds the kinds the workload issued (`read`, `update`, `insert`, `scan`, `rmw`,
//!   `batch`);
//!   `count` counts completed operations (a read that found nothing is completed and also
//!   counted in `not_found`), `errors` failed ones; latencies are in microseconds.
//! - `ops_per_sec` is completed operations over `duration_s`, the measured wall-clock time;
//!   `keys_per_sec` the keys written by write batches (`batch10`, `batch100`: batches per
//!   second times the batch size), 0 for the other workloads.
//! - `counters` are the target's counters as deltas over the measured part, flat: every
//!   field of [`tierkv::Stats`] (integers; `dram_bytes` and `recovery_micros` are gauges taken
//!   at the end), then the engine's own counters (integers) and gauges (numbers). An engine
//!   counter named like a common one is written as `engine_<name>`.
//! - `settled` (the load only, with `--settle-load`; else absent): `{"waited_s": 2.5,
//!   "quiet": true, "counters": {...}}`, the counters from the load's start until its
//!   background work ended `waited_s` after its last operation (`quiet` false: the wait
//!   gave up with bytes still being written).
//! - `summary` (with `--repeat` above 1; else absent): per workload (in report order) and
//!   engine, `{"workload": "a", "engine": "mio", "rounds": 3, "ops_per_sec": [...],
//!   "median_ops_per_sec": 1.0, "ratios": [...], "median_ratio": 1.0}`, where `ratios` are
//!   the engine's throughput over the first engine's within each round.
//!
//! Thread safety: pure functions.

use std::path::Path;

use serde_json::{Map, Value, json};
use tierkv::Stats;

use super::BenchReport;
use crate::runner::PhaseResult;
use crate::workload::OpKind;

/// The whole report as JSON.
pub fn to_json(report: &BenchReport) -> Value {
    let results: Vec<Value> = report.results.iter().map(result_json).collect();
    let mut doc = json!({
        "config": serde_json::to_value(&report.config).unwrap_or(Value::Null),
        "results": results,
    });
    if report.rounds() > 1
        && let Some(m) = doc.as_object_mut()
    {
        m.insert("summary".into(), summary_json(report));
    }
    doc
}

/// `--repeat`'s summary: one object per workload and engine.
fn summary_json(report: &BenchReport) -> Value {
    let mut rows = Vec::new();
    for phase in report.phases_in_run_order() {
        for e in super::rounds::summarize(report, &phase) {
            rows.push(json!({
                "workload": phase.name(),
                "engine": e.engine,
                "rounds": e.ops_per_sec.len(),
                "ops_per_sec": e.ops_per_sec,
                "median_ops_per_sec": e.median_ops(),
                "ratios": e.ratios,
                "median_ratio": e.median_ratio(),
            }));
        }
    }
    Value::Array(rows)
}

/// Writes the report to `path`, pretty-printed.
pub fn write(report: &BenchReport, path: &Path) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let text = serde_json::to_string_pretty(&to_json(report))?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}

fn result_json(r: &PhaseResult) -> Value {
    let mut ops = Map::new();
    for kind in OpKind::ALL {
        let Some(h) = r.ops.latency(kind) else {
            continue;
        };
        let errors = r.ops.errors(kind);
        if h.count() == 0 && errors == 0 {
            continue;
        }
        let s = h.summary();
        ops.insert(
            kind.name().to_owned(),
            json!({
                "count": s.count,
                "mean_us": s.mean_us,
                "p50_us": s.p50_us,
                "p99_us": s.p99_us,
                "p999_us": s.p999_us,
                "errors": errors,
                "not_found": r.ops.not_found(kind),
            }),
        );
    }
    let mut v = json!({
        "engine": r.engine,
        "workload": r.phase.name(),
        "round": r.round,
        "status": r.status.name(),
        "message": r.status.message(),
        "distribution": r.distribution.map(|d| d.to_string()),
        "ops_per_sec": r.ops_per_sec(),
        "keys_per_sec": r.keys_per_sec(),
        "duration_s": r.duration.as_secs_f64(),
        "ops": ops,
        "counters": counters_json(&r.counters),
    });
    if let (Some(s), Some(m)) = (&r.settled, v.as_object_mut()) {
        m.insert(
            "settled".into(),
            json!({
                "waited_s": s.waited.as_secs_f64(),
                "quiet": s.quiet,
                "counters": counters_json(&s.counters),
            }),
        );
    }
    v
}

/// The counters as one flat object.
pub fn counters_json(stats: &Stats) -> Value {
    let mut flat = match serde_json::to_value(stats) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    };
    flat.remove("counters");
    flat.remove("gauges");
    let engine = stats
        .counters
        .iter()
        .map(|(k, v)| (k, json!(v)))
        .chain(stats.gauges.iter().map(|(k, v)| (k, json!(v))));
    for (name, value) in engine {
        let key = if flat.contains_key(name) {
            format!("engine_{name}")
        } else {
            name.clone()
        };
        flat.insert(key, value);
    }
    Value::Object(flat)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::sample_report;

    #[test]
    fn results_carry_the_issue_shape() {
        let v = to_json(&sample_report());
        let first = &v["results"][0];
        assert_eq!(first["engine"], "dram:btree");
        assert_eq!(first["workload"], "load");
        assert!(first["ops_per_sec"].as_f64().unwrap() > 0.0);
        let insert = &first["ops"]["insert"];
        for k in ["count", "mean_us", "p50_us", "p99_us", "p999_us"] {
            assert!(insert[k].is_number(), "{k} in {insert}");
        }
        for k in ["user_bytes_written", "flash_bytes_written", "dram_bytes"] {
            assert!(first["counters"][k].is_u64(), "{k}");
        }
        assert_eq!(v["config"]["seed"], 42);
    }

    #[test]
    fn unsupported_and_failed_phases_say_so() {
        let v = to_json(&sample_report());
        let results = v["results"].as_array().unwrap();
        let e = results
            .iter()
            .find(|r| r["engine"] == "dram:hash" && r["workload"] == "e")
            .unwrap();
        assert_eq!(e["status"], "unsupported");
        assert_eq!(e["message"], "scan: hash index");
        let a = results
            .iter()
            .find(|r| r["engine"] == "dram:hash" && r["workload"] == "a")
            .unwrap();
        assert_eq!(a["status"], "failed");
        assert_eq!(a["ops"]["update"]["errors"], 1);
    }

    #[test]
    fn engine_counters_are_flattened_without_shadowing_common_ones() {
        let mut s = Stats {
            dram_bytes: 7,
            ..Stats::default()
        };
        s.counters.insert("pwb_reclamations".into(), 3);
        s.counters.insert("dram_bytes".into(), 9);
        s.gauges.insert("svc_hit_ratio".into(), 0.5);
        let c = counters_json(&s);
        assert_eq!(c["dram_bytes"], 7);
        assert_eq!(c["engine_dram_bytes"], 9);
        assert_eq!(c["pwb_reclamations"], 3);
        assert_eq!(c["svc_hit_ratio"], 0.5);
        assert!(c.get("counters").is_none() && c.get("gauges").is_none());
    }
}
