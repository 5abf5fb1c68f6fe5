//! The `tierkv` binary end to end: creation rules, output format, exit codes, bad input.

use std::path::Path;
use std::process::{Command, Output};

/// Runs `tierkv <args> --dir <dir>` (store commands take `--dir` after the subcommand).
fn tierkv(dir: &Path, args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tierkv"));
    c.args(args);
    if args
        .first()
        .is_some_and(|a| !a.starts_with('-') && *a != "engines" && *a != "frobnicate")
    {
        c.arg("--dir").arg(dir);
    }
    c.output().expect("run tierkv")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn assert_one_clear_line(o: &Output) {
    let e = stderr(o);
    assert!(
        !e.contains("panicked") && !e.contains("RUST_BACKTRACE"),
        "{e}"
    );
    assert!(
        e.trim_end().lines().count() <= 2,
        "expected a short error, got: {e}"
    );
}

#[test]
fn commands_other_than_put_never_create_a_store() {
    let d = tempfile::tempdir().unwrap();
    let store = d.path().join("s");
    for args in [
        &["get", "k"][..],
        &["del", "k"],
        &["scan"],
        &["stats"],
        &["check"],
    ] {
        let o = tierkv(&store, args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("no tierkv store"),
            "{args:?}: {}",
            stderr(&o)
        );
        assert_one_clear_line(&o);
        assert!(!store.exists(), "{args:?} created the directory");
    }
}

#[test]
fn put_creates_and_check_and_stats_work() {
    let d = tempfile::tempdir().unwrap();
    let o = tierkv(d.path(), &["put", "--engine", "dram:btree", "k", "v"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("keeps everything in DRAM"),
        "volatile note missing"
    );
    assert!(d.path().join("MANIFEST").exists());
    let o = tierkv(d.path(), &["check"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("check passed"));
    let o = tierkv(d.path(), &["stats", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v.get("user_bytes_written").is_some());
}

#[test]
fn get_of_missing_key_exits_3() {
    let d = tempfile::tempdir().unwrap();
    let o = tierkv(d.path(), &["put", "--engine", "dram", "a", "1"]);
    assert!(o.status.success());
    // The dram engine is volatile: the value did not survive the put's process.
    let o = tierkv(d.path(), &["get", "a"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(o.stdout.is_empty());
}

#[test]
fn bad_input_is_one_line_and_exit_1() {
    let d = tempfile::tempdir().unwrap();
    let cases: Vec<Vec<String>> = vec![
        vec!["put".into(), "".into(), "v".into()],
        vec!["put".into(), "k".repeat(1025), "v".into()],
        vec![
            "put".into(),
            "--engine".into(),
            "nosuch".into(),
            "k".into(),
            "v".into(),
        ],
        vec![
            "put".into(),
            "--engine".into(),
            "dram@x=1".into(),
            "k".into(),
            "v".into(),
        ],
        vec!["put".into(), "--hex".into(), "zz".into(), "00".into()],
    ];
    for c in cases {
        let args: Vec<&str> = c.iter().map(String::as_str).collect();
        let o = tierkv(d.path(), &args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).starts_with("tierkv: "),
            "{args:?}: {}",
            stderr(&o)
        );
        assert_one_clear_line(&o);
    }
}

#[test]
fn another_engines_directory_is_refused() {
    let d = tempfile::tempdir().unwrap();
    assert!(
        tierkv(d.path(), &["put", "--engine", "dram:hash", "k", "v"])
            .status
            .success()
    );
    let o = tierkv(d.path(), &["get", "--engine", "dram:btree", "k"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("holds a dram:hash store"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn corrupt_manifest_is_reported_not_reformatted() {
    let d = tempfile::tempdir().unwrap();
    let small = ["--pmem-size", "8MiB", "--flash-size", "16MiB"];
    let o = tierkv(d.path(), &[&["put"][..], &small, &["k", "v"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let m = d.path().join("MANIFEST");
    let mut b = std::fs::read(&m).unwrap();
    b.truncate(10);
    std::fs::write(&m, &b).unwrap();
    for args in [&["get", "k"][..], &["put", "k", "v"], &["check"]] {
        let o = tierkv(d.path(), args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert!(
            stderr(&o).contains("corruption"),
            "{args:?}: {}",
            stderr(&o)
        );
        assert_one_clear_line(&o);
    }
    assert_eq!(std::fs::read(&m).unwrap(), b);
}

#[test]
fn usage_errors_exit_2_and_help_works() {
    let d = tempfile::tempdir().unwrap();
    let o = tierkv(d.path(), &["frobnicate"]);
    assert_eq!(o.status.code(), Some(2));
    let o = tierkv(d.path(), &["--help"]);
    assert!(o.status.success());
    let help = String::from_utf8_lossy(&o.stdout);
    for word in [
        "put",
        "get",
        "del",
        "scan",
        "stats",
        "check",
        "bench-io",
        "Exit codes",
    ] {
        assert!(help.contains(word), "--help lacks {word}");
    }
    let o = tierkv(d.path(), &["put", "--pmem-size", "12 parsecs", "k", "v"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn engines_lists_the_registry() {
    let d = tempfile::tempdir().unwrap();
    let o = tierkv(d.path(), &["engines"]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("dram"));
}
