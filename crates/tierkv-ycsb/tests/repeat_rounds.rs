//! `--repeat N`: every engine runs N times, each round in a rotated order and in fresh
//! directories; every result carries its round, and the report ends with the summary.

mod common;

use tierkv_ycsb::runner::progress::Progress;

#[test]
fn every_engine_runs_once_per_round_in_a_rotated_order() {
    let tmp = tempfile::tempdir().unwrap();
    let mut args = common::tiny_args(tmp.path(), "dram,dram:hash");
    args.workloads = "load,c".into();
    args.repeat = 2;
    let json = tmp.path().join("out.json");
    args.json = Some(json.clone());
    let mut log = Vec::new();
    let report = tierkv_ycsb::run_with(&args, &mut log, Progress::new(false)).unwrap();
    let text = String::from_utf8(log).unwrap();
    let run_dir = &report.config.run_dir;
    for line in [
        format!("round 1 of 2: running dram in {run_dir}/01-dram\n"),
        format!("round 1 of 2: running dram:hash in {run_dir}/02-dram_hash\n"),
        format!("round 2 of 2: running dram:hash in {run_dir}/03-dram_hash\n"),
        format!("round 2 of 2: running dram in {run_dir}/04-dram\n"),
    ] {
        assert!(text.contains(&line), "{line:?} missing from:\n{text}");
    }
    assert!(text.contains("2 rounds of every engine"), "{text}");
    assert!(text.contains("=== round 2 of 2 ==="), "{text}");
    assert!(text.contains("== summary of 2 rounds"), "{text}");
    for round in 1..=2 {
        for engine in ["dram", "dram:hash"] {
            let r = report.result_in(round, engine, "c").unwrap();
            assert!(r.ops_per_sec() > 0.0);
            assert_eq!(r.round, round);
        }
    }
    assert_eq!(
        report.results.len(),
        2 * 2 * 2,
        "load and c, two engines, two rounds"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let summary = doc["summary"].as_array().unwrap();
    let hash_c = summary
        .iter()
        .find(|s| s["engine"] == "dram:hash" && s["workload"] == "c")
        .unwrap();
    assert_eq!(hash_c["rounds"], 2);
    assert_eq!(hash_c["ratios"].as_array().unwrap().len(), 2);
    assert!(hash_c["median_ratio"].as_f64().unwrap() > 0.0);
    assert!(
        std::fs::read_dir(tmp.path().join("data"))
            .map(|d| d.count())
            .unwrap_or(0)
            == 0,
        "every round's data is removed"
    );
}

#[test]
fn repeat_out_of_range_is_refused_before_anything_runs() {
    let tmp = tempfile::tempdir().unwrap();
    for (n, why) in [(0, "between 1 and 100"), (101, "between 1 and 100")] {
        let mut args = common::tiny_args(tmp.path(), "dram");
        args.repeat = n;
        let err = tierkv_ycsb::run_with(&args, &mut Vec::new(), Progress::new(false))
            .unwrap_err()
            .to_string();
        assert!(err.contains(why), "{err}");
    }
    let mut args = common::tiny_args(tmp.path(), "dram");
    args.repeat = 2;
    args.crash_after_load = true;
    let err = tierkv_ycsb::run_with(&args, &mut Vec::new(), Progress::new(false))
        .unwrap_err()
        .to_string();
    assert!(err.contains("--crash-after-load"), "{err}");
}
