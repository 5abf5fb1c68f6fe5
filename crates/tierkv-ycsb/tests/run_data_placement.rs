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

#[test]
fn crash_after_load_kills_the_process_and_leaves_a_recoverable_store() {
    use std::os::unix::process::ExitStatusExt as _;
    let tmp = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tierkv-bench"))
        .args(["--engines", "prism", "--records", "2000", "--threads", "2"])
        .args([
            "--pmem-size",
            "64MiB",
            "--flash-size",
            "256MiB",
            "--crash-after-load",
        ])
        .arg("--dir")
        .arg(tmp.path().join("data"))
        .arg("--pmem-path")
        .arg(tmp.path().join("pmem"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGKILL),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("load of 2000 records done"), "{stdout}");
    let data = stdout
        .lines()
        .find_map(|l| l.strip_prefix("running prism in "))
        .unwrap();
    // Nothing closed the store: reopening it recovers every loaded record.
    let manifest = tierkv::Manifest::read_from(std::path::Path::new(data))
        .unwrap()
        .unwrap();
    let options = tierkv::Options {
        engine: manifest.engine,
        ..Default::default()
    };
    let db = tierkv::Db::open_existing(data, options).unwrap();
    let rows = db.scan::<&[u8], _>(.., usize::MAX).unwrap();
    assert_eq!(rows.len(), 2000);
    db.close().unwrap();
}

#[test]
fn crash_after_load_takes_exactly_one_engine() {
    let tmp = tempfile::tempdir().unwrap();
    let mut args = common::tiny_args(tmp.path(), "dram,dram:hash");
    args.crash_after_load = true;
    let e = args.plan().unwrap_err();
    assert!(e.contains("exactly one engine"), "{e}");
}
