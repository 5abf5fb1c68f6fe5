//! WATCH across SWAPDB (issue 25): a swap fails only the transactions that watched a key
//! of one of the two databases which exists in either of them (Redis 7.0's
//! `touchAllWatchedKeysInDb`), not every transaction. Each scenario runs on `tierkv serve`
//! and, when Debian's redis-server is installed, on it too: the replies must be the same,
//! and EXEC's outcome must be the one Redis's rule gives (written down per scenario).

#![allow(
    clippy::unwrap_used,
    reason = "test helpers: a failure here is a test failure"
)]

mod common;

use common::redis_server::{redis_binary, start_redis};
use redis::Value;

/// One scenario: what to set up (client 0), the steps (client index, command) and whether
/// the final EXEC (on client 0) runs.
struct Scenario {
    name: &'static str,
    setup: &'static [&'static str],
    steps: &'static [(usize, &'static str)],
    runs: bool,
}

const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "watched key exists in the watched db",
        setup: &["SELECT 0", "SET a 1"],
        steps: &[(0, "WATCH a"), (1, "SWAPDB 0 1")],
        runs: false,
    },
    Scenario {
        name: "watched key exists only in the other db",
        setup: &["SELECT 1", "SET a 1", "SELECT 0"],
        steps: &[(0, "WATCH a"), (1, "SWAPDB 1 0")],
        runs: false,
    },
    Scenario {
        name: "watched key exists in neither db",
        setup: &["SELECT 2", "SET a 1", "SELECT 0", "SET b 1"],
        steps: &[(0, "WATCH a"), (1, "SWAPDB 0 1")],
        runs: true,
    },
    Scenario {
        name: "swap of two other databases",
        setup: &["SET a 1", "SELECT 2", "SET a 2", "SELECT 0"],
        steps: &[(0, "WATCH a"), (1, "SWAPDB 2 3")],
        runs: true,
    },
    Scenario {
        name: "watched in db 3, a swap of 0 and 1",
        setup: &["SET a 1", "SELECT 3", "SET a 3"],
        steps: &[(0, "WATCH a"), (1, "SWAPDB 0 1"), (0, "PING")],
        runs: true,
    },
    Scenario {
        name: "watched in db 3, a swap of 3 and 4",
        setup: &["SELECT 3", "SET a 3"],
        steps: &[(0, "WATCH a"), (1, "SWAPDB 4 3")],
        runs: false,
    },
    Scenario {
        name: "a later swap that no longer involves the watched db",
        setup: &["SELECT 5", "SET a 5", "SELECT 0"],
        steps: &[(0, "WATCH a"), (1, "SWAPDB 0 1"), (1, "SWAPDB 1 5")],
        runs: true,
    },
    Scenario {
        name: "the watcher selects another db after WATCH",
        setup: &["SELECT 1", "SET a 1", "SELECT 0"],
        steps: &[(0, "WATCH a"), (0, "SELECT 1"), (1, "SWAPDB 0 2")],
        runs: true,
    },
    Scenario {
        name: "swap of a db with itself",
        setup: &["SET a 1"],
        steps: &[(0, "WATCH a"), (1, "SWAPDB 0 0")],
        runs: true,
    },
    Scenario {
        name: "the watcher swaps itself",
        setup: &["SET a 1"],
        steps: &[(0, "WATCH a"), (0, "SWAPDB 0 1")],
        runs: false,
    },
    Scenario {
        name: "a key with a TTL in the other db",
        setup: &["SELECT 1", "SET a 1 EX 100", "SELECT 0"],
        steps: &[(0, "WATCH a"), (1, "SWAPDB 0 1")],
        runs: false,
    },
    Scenario {
        name: "a collection in the watched db",
        setup: &["HSET a f v"],
        steps: &[(0, "WATCH a"), (1, "SWAPDB 1 0")],
        runs: false,
    },
    Scenario {
        name: "several keys, one exists",
        setup: &["SELECT 1", "RPUSH c x", "SELECT 0"],
        steps: &[(0, "WATCH a b c"), (1, "SWAPDB 0 1")],
        runs: false,
    },
    Scenario {
        name: "several keys, none exists",
        setup: &["SELECT 3", "RPUSH c x", "SELECT 0"],
        steps: &[(0, "WATCH a b c"), (1, "SWAPDB 0 1")],
        runs: true,
    },
];

fn send(c: &mut redis::Connection, words: &str) -> String {
    let mut cmd = redis::Cmd::new();
    for w in words.split_whitespace() {
        cmd.arg(w);
    }
    match cmd.query::<Value>(c) {
        Ok(v) => format!("{v:?}"),
        Err(e) => format!("error {e}"),
    }
}

/// Runs `s` on a server reached by `connect` (flushed first); returns every reply and
/// whether the EXEC ran.
fn play(s: &Scenario, connect: &dyn Fn() -> redis::Connection) -> (Vec<String>, bool) {
    let mut clients = [connect(), connect()];
    let mut replies = vec![send(&mut clients[0], "FLUSHALL")];
    for w in s.setup {
        replies.push(send(&mut clients[0], w));
    }
    for (i, w) in s.steps {
        replies.push(send(&mut clients[*i], w));
    }
    for w in ["MULTI", "SET done 1"] {
        replies.push(send(&mut clients[0], w));
    }
    let exec = redis::cmd("EXEC").query::<Value>(&mut clients[0]).unwrap();
    let ran = !matches!(exec, Value::Nil);
    replies.push(format!("{exec:?}"));
    (replies, ran)
}

#[test]
fn swapdb_fails_only_watches_of_keys_in_the_swapped_databases() {
    let srv = common::start("dram:btree");
    let redis = redis_binary().map(|bin| start_redis(&bin));
    if redis.is_none() {
        eprintln!(
            "\n!!!!! no redis-server binary: the scenarios run against the expected outcomes \
             only, not against Redis !!!!!\n"
        );
    }
    for s in SCENARIOS {
        let (ours, ran) = play(s, &|| srv.client());
        assert_eq!(ran, s.runs, "{}: {ours:?}", s.name);
        if let Some(r) = &redis {
            let (theirs, _) = play(s, &|| r.client());
            assert_eq!(ours, theirs, "{}", s.name);
        }
    }
}

#[test]
fn writes_flushes_and_expiry_still_fail_watches_after_a_swap() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    let mut other = srv.client();
    // A write to the watched key after an unrelated swap still fails the transaction.
    send(&mut c, "SET a 1");
    send(&mut c, "WATCH a");
    send(&mut other, "SWAPDB 4 5");
    send(&mut other, "SET a 2");
    send(&mut c, "MULTI");
    send(&mut c, "GET a");
    let exec: Value = redis::cmd("EXEC").query(&mut c).unwrap();
    assert_eq!(exec, Value::Nil);
    // FLUSHDB still fails every watch.
    send(&mut c, "WATCH zz");
    send(&mut other, "FLUSHDB");
    send(&mut c, "MULTI");
    send(&mut c, "GET a");
    let exec: Value = redis::cmd("EXEC").query(&mut c).unwrap();
    assert_eq!(exec, Value::Nil);
    // A watch older than every kept swap cannot be checked: EXEC fails (never misses one).
    send(&mut c, "SET a 1");
    send(&mut c, "WATCH a");
    for _ in 0..tierkv_server::swaplog::SwapLog::KEPT + 1 {
        send(&mut other, "SWAPDB 6 7");
    }
    send(&mut c, "MULTI");
    send(&mut c, "GET a");
    let exec: Value = redis::cmd("EXEC").query(&mut c).unwrap();
    assert_eq!(exec, Value::Nil);
    // Fewer swaps of other databases: it runs.
    send(&mut c, "WATCH a");
    for _ in 0..10 {
        send(&mut other, "SWAPDB 6 7");
    }
    send(&mut c, "MULTI");
    send(&mut c, "GET a");
    let exec: Value = redis::cmd("EXEC").query(&mut c).unwrap();
    assert_eq!(exec, Value::Array(vec![Value::BulkString(b"1".to_vec())]));
}
