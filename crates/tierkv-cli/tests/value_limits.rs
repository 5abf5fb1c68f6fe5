//! One value-size limit story (issue 23, finding 8): `tierkv engines` prints each engine's
//! limit, a value of exactly that size round-trips through `put`/`get`, and one byte more is
//! refused with an error that names the same number.

mod common;

use std::path::Path;
use std::process::Output;

fn run(args: &[&str], stdin: &[u8]) -> Output {
    common::tierkv_stdin(args, stdin)
}

/// The limit `tierkv engines` prints for `engine` ("values up to N bytes").
fn printed_limit(engine: &str) -> usize {
    let o = run(&["engines"], b"");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let line = out
        .lines()
        .find(|l| l.split_whitespace().next() == Some(engine))
        .unwrap_or_else(|| panic!("no line for {engine}: {out}"));
    let at = line
        .find("values up to ")
        .unwrap_or_else(|| panic!("no value limit for {engine}: {line}"));
    let digits: String = line[at + 13..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == ',')
        .filter(char::is_ascii_digit)
        .collect();
    digits.parse().expect("a number")
}

fn put(dir: &Path, engine: &str, value: &[u8]) -> Output {
    let d = dir.to_str().expect("utf-8");
    let args = [
        "put",
        "--dir",
        d,
        "--engine",
        engine,
        "--pmem-size",
        "64MiB",
        "--flash-size",
        "16MiB",
        "--stdin",
        "k",
    ];
    run(&args, value)
}

#[test]
fn every_engine_says_its_value_limit_and_keeps_to_it() {
    for engine in ["prism", "hetermm", "dram"] {
        let limit = printed_limit(engine);
        assert!(limit >= 4096, "{engine}: {limit}");
        let d = tempfile::tempdir().unwrap();
        let o = put(d.path(), engine, &vec![b'x'; limit]);
        assert!(
            o.status.success(),
            "{engine}: a value of its limit ({limit}) was refused: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        if engine != "dram" {
            let o = run(&["get", "--dir", d.path().to_str().unwrap(), "k"], b"");
            assert_eq!(o.stdout.len(), limit + 1, "{engine}");
        }
        let o = put(d.path(), engine, &vec![b'x'; limit + 1]);
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{engine}: {e}");
        assert!(
            e.contains(&format!("limit of {limit} bytes")),
            "{engine}: the error should name the limit {limit}: {e}"
        );
    }
}
