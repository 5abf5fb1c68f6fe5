//! Issue 23, finding 4 (the engine side is HeterMM's, issue 21/22): hetermm with its default
//! 256 MiB pool acknowledges 100,000 SETs of 2 KB through `serve`, never refusing one; after
//! a `kill -9` the store must open again and serve every acknowledged key.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers: a failure here is a test failure"
)]

mod common;

use common::proc::Proc;
use tierkv::{Db, Options};

#[test]
#[ignore = "needs the engine fix of issue 21/22"]
fn hetermm_reopens_after_a_kill_with_every_acknowledged_key() {
    let d = tempfile::tempdir().unwrap();
    let p = Proc::start(d.path(), &["--engine", "hetermm"]);
    let mut c = p.client();
    let value = vec![b'v'; 2048];
    let n = 100_000;
    for start in (0..n).step_by(1000) {
        let mut pipe = redis::pipe();
        for i in start..start + 1000 {
            pipe.cmd("SET")
                .arg(format!("key{i:06}"))
                .arg(&value)
                .ignore();
        }
        pipe.query::<()>(&mut c)
            .unwrap_or_else(|e| panic!("a SET of the batch at {start} was refused: {e}"));
    }
    drop(c);
    drop(p); // SIGKILL
    let db = Db::open_existing(d.path(), Options::default().engine("hetermm"))
        .unwrap_or_else(|e| panic!("reopen after kill -9: {e}"));
    for i in (0..n).step_by(997) {
        let k = format!("key{i:06}");
        assert!(db.get(k.as_bytes()).unwrap().is_some(), "{k}");
    }
    db.close().unwrap();
}
