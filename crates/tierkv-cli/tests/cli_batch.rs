//! `tierkv batch` end to end (issue 24): lines from stdin or a file applied as one batch on
//! prism; a bad line writes nothing (and creates no store); an engine without atomic
//! batches refuses with one clear line and creates nothing.

mod common;

use std::path::Path;
use std::process::Output;

const SMALL: [&str; 4] = ["--pmem-size", "8MiB", "--flash-size", "16MiB"];

fn run(args: &[&str], dir: &Path, stdin: &[u8]) -> Output {
    let mut all = args.to_vec();
    let dir = dir.to_str().expect("utf-8 path");
    all.extend(["--dir", dir]);
    common::tierkv_stdin(&all, stdin)
}

fn get(dir: &Path, key: &str) -> Option<String> {
    let o = run(&["get", key], dir, b"");
    match o.status.code() {
        Some(0) => Some(String::from_utf8_lossy(&o.stdout).trim_end().to_owned()),
        Some(3) => None,
        c => panic!(
            "get {key}: exit {c:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        ),
    }
}

#[test]
fn batch_from_stdin_and_from_a_file() {
    let d = tempfile::tempdir().unwrap();
    let s = d.path().join("s");
    let mut args = vec!["batch"];
    args.extend(SMALL);
    let o = run(
        &args,
        &s,
        b"put user:1 alice smith\nput idx:alice 1\n# skip\nput gone x\ndel gone\n",
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("applied 3 operations as one batch"));
    assert_eq!(get(&s, "user:1").as_deref(), Some("alice smith"));
    assert_eq!(get(&s, "idx:alice").as_deref(), Some("1"));
    assert_eq!(get(&s, "gone"), None);
    let file = d.path().join("ops.txt");
    std::fs::write(&file, "del user:1\nput idx:alice 2\n").unwrap();
    let o = run(&["batch", "--in", file.to_str().unwrap()], &s, b"");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(get(&s, "user:1"), None);
    assert_eq!(get(&s, "idx:alice").as_deref(), Some("2"));
}

#[test]
fn a_bad_line_writes_nothing_and_creates_no_store() {
    let d = tempfile::tempdir().unwrap();
    let s = d.path().join("s");
    let o = run(&["batch"], &s, b"put a 1\nfrobnicate b\n");
    assert_eq!(o.status.code(), Some(1));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("line 2") && !e.contains("panicked"), "{e}");
    assert!(!s.exists(), "a store was created for a refused batch");
}

#[test]
fn an_engine_without_batches_refuses_clearly() {
    let d = tempfile::tempdir().unwrap();
    let s = d.path().join("s");
    let mut args = vec!["batch", "--engine", "hetermm@oplog=off"];
    args.extend(SMALL);
    let o = run(&args, &s, b"put a 1\nput b 2\n");
    assert_eq!(o.status.code(), Some(1));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("no crash-atomic write batches") && e.trim_end().lines().count() <= 2,
        "{e}"
    );
    assert!(!s.exists(), "a store was created for a refused batch");
}
