//! Each engine runs in a fresh directory under `--dir`, announced in the header and the
//! log; the data is removed afterwards unless `--keep`, and kept where the report says.

mod common;

use tierkv_ycsb::runner::progress::Progress;

fn entries(p: &std::path::Path) -> Vec<String> {
    match std::fs::read_dir(p) {
        Ok(it) => it
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    }
}

#[test]
fn data_is_removed_after_the_run_by_default() {
    let tmp = tempfile::tempdir().unwrap();
    let mut args = common::tiny_args(tmp.path(), "dram,dram:hash");
    args.workloads = "load,c".into();
    let mut log = Vec::new();
    let report = tierkv_ycsb::run_with(&args, &mut log, Progress::new(false)).unwrap();
    let text = String::from_utf8(log).unwrap();
    let run_dir = &report.config.run_dir;
    assert!(
        text.contains(&format!("running dram in {run_dir}/01-dram")),
        "{text}"
    );
    assert!(
        text.contains(&format!("running dram:hash in {run_dir}/02-dram_hash")),
        "{text}"
    );
    assert!(
        text.contains(&format!("data removed from {run_dir}")),
        "{text}"
    );
    assert!(
        entries(&tmp.path().join("data")).is_empty(),
        "{:?}",
        entries(&tmp.path().join("data"))
    );
    assert!(entries(&tmp.path().join("pmem")).is_empty());
}

#[test]
fn keep_leaves_each_engines_directory_where_the_report_says() {
    let tmp = tempfile::tempdir().unwrap();
    let mut args = common::tiny_args(tmp.path(), "dram:btree");
    args.workloads = "load".into();
    args.keep = true;
    let mut log = Vec::new();
    let report = tierkv_ycsb::run_with(&args, &mut log, Progress::new(false)).unwrap();
    let text = String::from_utf8(log).unwrap();
    let engine_dir = std::path::Path::new(&report.config.run_dir).join("01-dram_btree");
    assert!(
        engine_dir
            .join(tierkv::core::format::manifest::MANIFEST_FILE)
            .exists(),
        "the store's manifest is kept in {engine_dir:?}"
    );
    assert!(text.contains("data kept in"), "{text}");
}
