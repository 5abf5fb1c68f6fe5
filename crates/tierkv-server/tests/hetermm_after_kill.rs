//! Issue 23, finding 4 (the engine side is HeterMM's, issue 21/22): hetermm acknowledged
//! 100,000 SETs of 2 KB through `serve` in its default 256 MiB pool, never refusing one;
//! after a `kill -9` `get`, `check` and `stats` failed with "no space left on pmem … no 16
//! contiguous free chunk(s)" (recovery's forced flush found no room), and `serve` refused
//! DEL and SET. Now the engine keeps a reserve for that flush and refuses writes before it is
//! touched (in the 256 MiB pool the 96,777th SET of 2 KB is refused: 197 MB of records in
//! 209 MB of blocks, the rest the reserve). The test fills a small pool through `serve`
//! the same way until SETs are refused (seconds, not the minutes of 100,000 SETs in a debug
//! build), kills the server, and asks of the store: it opens, serves every acknowledged
//! key, passes `check`, deletes, and takes writes again once deletes have freed space.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers: a failure here is a test failure"
)]

mod common;

use std::time::{Duration, Instant};

use common::proc::Proc;
use tierkv::{Db, Options};

const BATCH: usize = 500;
/// More than the pool holds: the fill must end with refused SETs.
const MAX_SETS: usize = 40_000;

fn key(i: usize) -> String {
    format!("key{i:06}")
}

#[test]
fn hetermm_reopens_after_a_kill_with_every_acknowledged_key() {
    let d = tempfile::tempdir().unwrap();
    let args = [
        "--engine",
        "hetermm",
        "--pmem-mode",
        "volatile",
        "--pmem-size",
        "32MiB",
    ];
    let p = Proc::start(d.path(), &args);
    let mut c = p.client();
    let value = vec![b'v'; 2048];
    // Every key below `acked` was acknowledged: the fill stops at the first batch with a
    // refused SET, whose keys count as in flight.
    let mut acked = 0;
    while acked < MAX_SETS {
        let mut pipe = redis::pipe();
        for i in acked..acked + BATCH {
            pipe.cmd("SET").arg(key(i)).arg(&value).ignore();
        }
        match pipe.query::<()>(&mut c) {
            Ok(()) => acked += BATCH,
            Err(e) => {
                assert!(
                    e.to_string().contains("no space left on pmem"),
                    "a SET of the batch at {acked} failed otherwise than for room: {e}"
                );
                break;
            }
        }
    }
    assert!(
        (1000..MAX_SETS).contains(&acked),
        "the pool must fill, and not at once: {acked} SETs acknowledged"
    );
    drop(c);
    drop(p); // SIGKILL
    let db = Db::open_existing(d.path(), Options::default().engine("hetermm"))
        .unwrap_or_else(|e| panic!("reopen after kill -9: {e}"));
    for i in 0..acked {
        let k = key(i);
        assert_eq!(
            db.get(k.as_bytes())
                .unwrap_or_else(|e| panic!("get {k} after kill -9: {e}"))
                .as_deref(),
            Some(&value[..]),
            "{k}"
        );
    }
    db.check()
        .unwrap_or_else(|e| panic!("check after kill -9: {e}"));
    for i in (0..acked).filter(|i| i % 4 != 0) {
        db.delete(key(i).as_bytes())
            .unwrap_or_else(|e| panic!("delete {} on the full store: {e}", key(i)));
    }
    // Deletes free space once the flusher has applied their marks and the reclaimer has
    // reorganised: a write waits for that (or is refused until then).
    let started = Instant::now();
    while let Err(e) = db.put(b"after-deletes", &value) {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no write accepted after deletes freed space: {e}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    println!(
        "{acked} SETs of 2 KiB acknowledged before the pool was full; a write accepted {:?} \
         after the deletes",
        started.elapsed()
    );
    for i in (0..acked).step_by(4) {
        assert!(db.get(key(i).as_bytes()).unwrap().is_some(), "{}", key(i));
    }
    db.close().unwrap();
}
