//! A short run of the whole benchmark matrix on a small file: every job completes I/O, the
//! text table has a row per job, the JSON has the documented shape, the file is reused by
//! the next run and removed by `--cleanup`.

use clap::Parser;
use tierkv_iobench::{IoBenchArgs, bench};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: IoBenchArgs,
}

fn args(dir: &std::path::Path, extra: &[&str]) -> IoBenchArgs {
    let mut argv = vec![
        "bench-io".to_owned(),
        "--dir".into(),
        dir.display().to_string(),
        "--size".into(),
        "4MiB".into(),
        "--runtime".into(),
        "0.2".into(),
    ];
    argv.extend(extra.iter().map(|s| (*s).to_owned()));
    Cli::parse_from(argv).args
}

fn backend() -> &'static str {
    match tierkv_core::media::flash::uring_supported() {
        Ok(()) => "uring",
        Err(e) => {
            eprintln!("io_uring refused here ({e}); running the pread/pwrite path");
            "threads"
        }
    }
}

#[test]
fn default_matrix_runs_and_reports_in_fio_units() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let json = dir.path().join("out.json");
    let a = args(
        dir.path(),
        &["--backend", backend(), "--json", json.to_str().unwrap()],
    );
    let mut text = Vec::new();
    let report = bench(&a, &mut text, false).unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(text.starts_with("tierkv bench-io: "), "{text}");
    for row in [
        "randread       4k    1",
        "randread       4k   64",
        "randwrite      4k   32",
    ] {
        assert!(text.contains(row), "{row:?} missing:\n{text}");
    }
    assert!(text.contains("seqwrite     512k   64"), "{text}");
    assert_eq!(report.results.len(), 5);
    for e in &report.results {
        let r = &e.ours;
        assert!(r.ios > 0 && r.iops > 0.0 && r.mib_per_s > 0.0, "{r:?}");
        assert!(r.lat_p50_us > 0.0 && r.lat_p99_us >= r.lat_p50_us, "{r:?}");
        assert!(e.fio_command.contains(&format!("--iodepth={}", r.job.qd)));
    }

    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["config"]["size_bytes"], 4 << 20);
    assert_eq!(v["config"]["backend"], backend());
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 5);
    assert_eq!(results[2]["pattern"], "randwrite");
    assert_eq!(results[2]["qd"], 32);
    assert!(results[0]["iops"].as_f64().unwrap() > 0.0);
    assert!(results[0]["fio"].is_null());
}

#[test]
fn the_file_is_reused_then_removed_by_cleanup() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let file = dir.path().join("tierkv-iobench.dat");
    let a = args(dir.path(), &["--pattern", "randread", "--qd", "4"]);
    bench(&a, &mut Vec::new(), false).unwrap();
    let first = std::fs::metadata(&file).unwrap();
    assert_eq!(first.len(), 4 << 20);
    bench(&a, &mut Vec::new(), false).unwrap();
    let second = std::fs::metadata(&file).unwrap();
    assert_eq!(
        (first.ino(), first.mtime(), first.mtime_nsec()),
        (second.ino(), second.mtime(), second.mtime_nsec()),
        "a read-only run reuses the file without writing it"
    );
    let mut text = Vec::new();
    let a = args(
        dir.path(),
        &["--pattern", "randread", "--qd", "4", "--cleanup"],
    );
    bench(&a, &mut text, false).unwrap();
    assert!(String::from_utf8(text).unwrap().contains("removed"));
    assert!(!file.exists());
}

#[test]
fn the_pread_path_runs_too() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let a = args(
        dir.path(),
        &[
            "--backend",
            "threads",
            "--pattern",
            "randwrite",
            "--qd",
            "1",
        ],
    );
    let r = bench(&a, &mut Vec::new(), false).unwrap();
    assert_eq!(r.config.backend, "threads");
    assert!(r.results[0].ours.ios > 0);
}
