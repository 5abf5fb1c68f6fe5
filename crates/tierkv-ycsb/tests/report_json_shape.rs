//! A real (tiny) run's `--json` output has exactly the shape issue 4 promises scripts:
//! `{"config": {...every flag...}, "results": [{"engine", "workload", "ops_per_sec",
//! "duration_s", "ops": {kind: {"count", "mean_us", "p50_us", "p99_us", "p999_us"}},
//! "counters": {...}}]}`. The shape is written out here, independently of the code that
//! produces it.

mod common;

use serde_json::Value;
use tierkv_ycsb::runner::progress::Progress;

/// Every flag of the issue, by its name in `config` (sizes in bytes, times in seconds).
const CONFIG_KEYS: &[&str] = &[
    "engines",
    "workloads",
    "records",
    "ops",
    "duration_s",
    "warmup_ops",
    "warmup_s",
    "threads",
    "distribution",
    "key_size",
    "value_size",
    "fields",
    "field_size",
    "schema",
    "dram",
    "pmem_path",
    "pmem_size",
    "pmem_mode",
    "flash_path",
    "flash_size",
    "json",
    "chart",
    "seed",
    "dir",
    "keep",
];
/// The counters the issue lists.
const COUNTER_KEYS: &[&str] = &[
    "user_bytes_written",
    "flash_bytes_written",
    "flash_bytes_read",
    "pmem_bytes_written",
    "reads_from_dram",
    "reads_from_pmem",
    "reads_from_flash",
    "dram_bytes",
];
const OP_KINDS: &[&str] = &["read", "update", "insert", "scan", "rmw"];
const WORKLOADS: &[&str] = &["load", "a", "b", "c", "d", "e", "f", "s"];

fn validate(doc: &Value, engines: &[&str]) -> Result<(), String> {
    let top = doc.as_object().ok_or("the document is not an object")?;
    let mut keys: Vec<&str> = top.keys().map(String::as_str).collect();
    keys.sort_unstable();
    if keys != ["config", "results"] {
        return Err(format!("top-level keys {keys:?}"));
    }
    let config = doc["config"].as_object().ok_or("config is not an object")?;
    for k in CONFIG_KEYS {
        if !config.contains_key(*k) {
            return Err(format!("config lacks {k}"));
        }
    }
    if !doc["config"]["seed"].is_u64() || !doc["config"]["pmem_mode"].is_string() {
        return Err("config.seed or config.pmem_mode has the wrong type".into());
    }
    let results = doc["results"].as_array().ok_or("results is not an array")?;
    let listed = doc["config"]["workloads"]
        .as_array()
        .ok_or("config.workloads is not an array")?
        .len();
    if results.len() != engines.len() * listed {
        return Err(format!(
            "{} results for {} engines x {listed} workloads",
            results.len(),
            engines.len()
        ));
    }
    for r in results {
        let engine = r["engine"].as_str().ok_or("engine is not a string")?;
        if !engines.contains(&engine) {
            return Err(format!("engine {engine:?} was not on the command line"));
        }
        let workload = r["workload"].as_str().ok_or("workload is not a string")?;
        if !WORKLOADS.contains(&workload) {
            return Err(format!("workload {workload:?}"));
        }
        let ops_per_sec = r["ops_per_sec"]
            .as_f64()
            .ok_or("ops_per_sec is not a number")?;
        let duration = r["duration_s"]
            .as_f64()
            .ok_or("duration_s is not a number")?;
        if !(ops_per_sec > 0.0 && duration > 0.0) {
            return Err(format!(
                "{engine}/{workload}: {ops_per_sec} ops/s over {duration} s"
            ));
        }
        let ops = r["ops"].as_object().ok_or("ops is not an object")?;
        if ops.is_empty() {
            return Err(format!("{engine}/{workload}: no operations"));
        }
        for (kind, o) in ops {
            if !OP_KINDS.contains(&kind.as_str()) {
                return Err(format!("operation kind {kind:?}"));
            }
            if !o["count"].is_u64() {
                return Err(format!(
                    "{engine}/{workload}/{kind}: count is not an integer"
                ));
            }
            for k in ["mean_us", "p50_us", "p99_us", "p999_us"] {
                let v = o[k]
                    .as_f64()
                    .ok_or(format!("{engine}/{workload}/{kind}: {k}"))?;
                if v < 0.0 {
                    return Err(format!("{engine}/{workload}/{kind}: {k} = {v}"));
                }
            }
        }
        let counters = r["counters"]
            .as_object()
            .ok_or("counters is not an object")?;
        for k in COUNTER_KEYS {
            if !counters.get(*k).is_some_and(Value::is_u64) {
                return Err(format!(
                    "{engine}/{workload}: counter {k} missing or not an integer"
                ));
            }
        }
    }
    Ok(())
}

#[test]
fn json_of_a_real_run_has_the_documented_shape() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out.json");
    let mut args = common::tiny_args(tmp.path(), "dram:btree,dram");
    args.workloads = "load,a,b,c,d,e,f".into();
    args.json = Some(out.clone());
    let mut log = Vec::new();
    let r = tierkv_ycsb::run_with(&args, &mut log, Progress::new(false));
    println!("{}", String::from_utf8_lossy(&log));
    r.unwrap();
    let doc: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    validate(&doc, &["dram:btree", "dram"]).unwrap();
    // The engines' counters are deltas over the measured part: the load wrote every record.
    let load = doc["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["engine"] == "dram:btree" && r["workload"] == "load")
        .unwrap();
    assert_eq!(load["ops"]["insert"]["count"], 2_000);
    assert!(load["counters"]["user_bytes_written"].as_u64().unwrap() >= 2_000 * 256);
}

/// Validates a JSON report of any run: `TIERKV_BENCH_JSON=out.json cargo test -p
/// tierkv-ycsb --test report_json_shape -- --ignored`. The engines and workloads are taken
/// from the file's `config`.
#[test]
#[ignore = "validates the file named by TIERKV_BENCH_JSON"]
fn json_file_named_by_the_environment_has_the_documented_shape() {
    let path = std::env::var("TIERKV_BENCH_JSON").expect("set TIERKV_BENCH_JSON to a report");
    let doc: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let engines: Vec<&str> = doc["config"]["engines"]
        .as_array()
        .expect("config.engines")
        .iter()
        .map(|e| e.as_str().expect("engine labels are strings"))
        .collect();
    validate(&doc, &engines).unwrap();
    println!(
        "{path}: valid ({} results)",
        doc["results"].as_array().map_or(0, Vec::len)
    );
}

#[test]
fn the_validator_rejects_documents_off_the_shape() {
    let good = serde_json::json!({"config": {}, "results": []});
    assert!(validate(&good, &[]).is_err(), "a config without the flags");
    assert!(validate(&serde_json::json!([]), &[]).is_err());
}
