//! redis-py (PyPI) application-style checks: transactional pipelines, a WATCH retry loop
//! from several threads, a TTL cache, a SET NX lock, hash counters, keyspace helpers
//! (`tests/redis_py/app_tests.py`), run against an in-process `tierkv serve`.
//!
//! The Python interpreter is `TIERKV_REDIS_PY` or `target/redis-py-venv/bin/python`
//! (`scripts/test.sh` creates that venv with redis-py), else `python3` if it can import
//! redis. Without any, the test prints a loud message and passes.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers: a failure here is a test failure"
)]

mod common;

use std::path::PathBuf;
use std::process::Command;

fn python_with_redis() -> Option<PathBuf> {
    let venv =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/redis-py-venv/bin/python");
    let candidates = std::env::var_os("TIERKV_REDIS_PY")
        .map(PathBuf::from)
        .into_iter()
        .chain([
            venv,
            PathBuf::from("python3"),
            // Debian's python3-redis, when the python3 on PATH is another one.
            PathBuf::from("/usr/bin/python3"),
        ]);
    for p in candidates {
        let ok = Command::new(&p)
            .args(["-c", "import redis"])
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return Some(p);
        }
    }
    None
}

#[test]
fn redis_py_applications_run_unchanged() {
    let Some(python) = python_with_redis() else {
        eprintln!(
            "\n\n!!!!! SKIPPED: no Python with redis-py (scripts/test.sh creates \
             target/redis-py-venv; or set TIERKV_REDIS_PY) — the redis-py tests did not run !!!!!\n"
        );
        return;
    };
    let srv = common::start("dram:btree");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/redis_py/app_tests.py");
    let out = Command::new(&python)
        .arg(&script)
        .arg(srv.addr.ip().to_string())
        .arg(srv.addr.port().to_string())
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    println!("{stdout}");
    assert!(
        out.status.success(),
        "redis-py checks failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("checks passed"), "{stdout}");
}
