//! Transactions: MULTI/EXEC/DISCARD with Redis's error rules, WATCH/UNWATCH, isolation of
//! EXEC from other clients, and the redis crate's atomic pipelines.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};

use redis::{Commands, Value, cmd};

/// Sends `cmds` then `PING MARK` on a raw connection; returns every reply before MARK's.
fn raw_exchange(srv: &common::TestServer, cmds: &[&[&[u8]]]) -> String {
    let mut s = srv.raw();
    let mut req = Vec::new();
    for c in cmds {
        req.extend_from_slice(&common::resp(c));
    }
    req.extend_from_slice(&common::resp(&[b"PING", b"MARK"]));
    let got = common::exchange(&mut s, &req, |b| b.ends_with(b"$4\r\nMARK\r\n"));
    let got = String::from_utf8_lossy(&got).into_owned();
    got.trim_end_matches("$4\r\nMARK\r\n").to_string()
}

#[test]
fn queued_commands_run_at_exec_and_runtime_errors_do_not_abort_the_rest() {
    let srv = common::start("dram:hash");
    let out = raw_exchange(
        &srv,
        &[
            &[b"MULTI"],
            &[b"SET", b"a", b"x"],
            &[b"INCR", b"a"],
            &[b"SET", b"b", b"1", b"BADOPT"],
            &[b"SET", b"c", b"3"],
            &[b"EXEC"],
            &[b"MGET", b"a", b"b", b"c"],
        ],
    );
    assert_eq!(
        out,
        "+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n\
         *4\r\n+OK\r\n-ERR value is not an integer or out of range\r\n-ERR syntax error\r\n+OK\r\n\
         *3\r\n$1\r\nx\r\n$-1\r\n$1\r\n3\r\n"
    );
}

#[test]
fn a_queuing_error_discards_the_whole_transaction() {
    // The reproduction: SET a 1; INCR a; SET b (wrong arity) must apply nothing.
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    let mut reply = Vec::new();
    for words in [
        vec!["MULTI"],
        vec!["SET", "a", "1"],
        vec!["INCR", "a"],
        vec!["SET", "b"],
        vec!["NOSUCHCOMMAND", "x"],
        vec!["EXEC"],
    ] {
        let mut command = redis::Cmd::new();
        for w in words {
            command.arg(w);
        }
        reply.push(match command.query::<Value>(&mut c) {
            Ok(Value::Okay) => "OK".to_string(),
            Ok(Value::SimpleString(s)) => s,
            Ok(Value::ServerError(e)) => e.code().to_string(),
            Err(e) => e.code().unwrap_or("?").to_string(),
            Ok(v) => format!("{v:?}"),
        });
    }
    assert_eq!(
        reply,
        ["OK", "QUEUED", "QUEUED", "ERR", "ERR", "EXECABORT"],
        "{reply:?}"
    );
    assert_eq!(c.exists::<_, i64>("a").unwrap(), 0);
    assert_eq!(c.exists::<_, i64>("b").unwrap(), 0);
    // The connection is out of MULTI again.
    assert_eq!(c.set::<_, _, String>("a", 5).unwrap(), "OK");
}

#[test]
fn exec_discard_multi_and_watch_misuse_get_redis_errors() {
    let srv = common::start("dram:hash");
    let mut c = srv.client();
    assert_eq!(
        common::error_of(&mut c, &cmd("EXEC")),
        "ERR EXEC without MULTI"
    );
    assert_eq!(
        common::error_of(&mut c, &cmd("DISCARD")),
        "ERR DISCARD without MULTI"
    );
    let _: () = cmd("MULTI").query(&mut c).unwrap();
    assert_eq!(
        common::error_of(&mut c, &cmd("MULTI")),
        "ERR MULTI calls can not be nested"
    );
    assert_eq!(
        common::error_of(&mut c, cmd("WATCH").arg("k")),
        "ERR WATCH inside MULTI is not allowed"
    );
    let q: String = cmd("SET").arg("k").arg("v").query(&mut c).unwrap();
    assert_eq!(q, "QUEUED");
    // Neither misuse marked the transaction failed (Redis 7.0 behaves so).
    let v: Vec<String> = cmd("EXEC").query(&mut c).unwrap();
    assert_eq!(v, ["OK"]);
    let _: () = cmd("MULTI").query(&mut c).unwrap();
    let _: String = cmd("SET").arg("k").arg("w").query(&mut c).unwrap();
    let _: () = cmd("DISCARD").query(&mut c).unwrap();
    assert_eq!(c.get::<_, String>("k").unwrap(), "v");
}

#[test]
fn watch_fails_exec_after_another_clients_write_and_unwatch_forgets() {
    let srv = common::start("dram:btree");
    let (mut a, mut b) = (srv.client(), srv.client());
    let _: () = a.set("k", 1).unwrap();
    let _: () = cmd("WATCH").arg("k").query(&mut a).unwrap();
    let _: () = b.set("k", 2).unwrap();
    let _: () = cmd("MULTI").query(&mut a).unwrap();
    let _: String = cmd("SET").arg("k").arg(3).query(&mut a).unwrap();
    let v: Value = cmd("EXEC").query(&mut a).unwrap();
    assert_eq!(v, Value::Nil, "a watched key changed: EXEC must fail");
    assert_eq!(a.get::<_, i64>("k").unwrap(), 2);

    // EXEC forgot the watch: the next transaction runs.
    let _: () = cmd("MULTI").query(&mut a).unwrap();
    let _: String = cmd("SET").arg("k").arg(4).query(&mut a).unwrap();
    let v: Vec<String> = cmd("EXEC").query(&mut a).unwrap();
    assert_eq!(v, ["OK"]);

    // UNWATCH forgets too.
    let _: () = cmd("WATCH").arg("k").query(&mut a).unwrap();
    let _: () = b.set("k", 5).unwrap();
    let _: () = cmd("UNWATCH").query(&mut a).unwrap();
    let _: () = cmd("MULTI").query(&mut a).unwrap();
    let _: String = cmd("INCR").arg("k").query(&mut a).unwrap();
    let v: Vec<i64> = cmd("EXEC").query(&mut a).unwrap();
    assert_eq!(v, [6]);

    // A write that changes nothing watched does not abort; a DEL of the key does.
    let _: () = cmd("WATCH").arg("k").arg("missing").query(&mut a).unwrap();
    let _: () = b.set("other-key-entirely", 1).unwrap();
    let _: () = b.del("missing").unwrap();
    let _: () = cmd("MULTI").query(&mut a).unwrap();
    let _: String = cmd("GET").arg("k").query(&mut a).unwrap();
    let v: Vec<i64> = cmd("EXEC").query(&mut a).unwrap();
    assert_eq!(v, [6]);
    let _: () = cmd("WATCH").arg("k").query(&mut a).unwrap();
    let _: () = b.del("k").unwrap();
    let _: () = cmd("MULTI").query(&mut a).unwrap();
    let _: String = cmd("GET").arg("k").query(&mut a).unwrap();
    let v: Value = cmd("EXEC").query(&mut a).unwrap();
    assert_eq!(v, Value::Nil);
}

#[test]
fn watch_retry_loops_lose_no_increment() {
    let srv = common::start("dram:hash");
    const THREADS: usize = 6;
    const EACH: i64 = 60;
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            let srv = &srv;
            s.spawn(move || {
                let mut c = srv.client();
                for _ in 0..EACH {
                    loop {
                        let _: () = cmd("WATCH").arg("counter").query(&mut c).unwrap();
                        let v: Option<i64> = c.get("counter").unwrap();
                        let next = v.unwrap_or(0) + 1;
                        let r: Option<Vec<String>> = redis::pipe()
                            .atomic()
                            .set("counter", next)
                            .query(&mut c)
                            .unwrap();
                        if r.is_some() {
                            break;
                        }
                    }
                }
            });
        }
    });
    let mut c = srv.client();
    assert_eq!(c.get::<_, i64>("counter").unwrap(), THREADS as i64 * EACH);
}

#[test]
fn readers_never_see_half_of_an_exec() {
    let srv = common::start("dram:btree");
    let stop = AtomicBool::new(false);
    let mut c = srv.client();
    let _: () = c.mset(&[("x", 0), ("y", 0)]).unwrap();
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut w = srv.client();
            for _ in 0..300 {
                let _: (i64, i64) = redis::pipe()
                    .atomic()
                    .incr("x", 1)
                    .incr("y", 1)
                    .query(&mut w)
                    .unwrap();
            }
            stop.store(true, Ordering::Relaxed);
        });
        let mut seen = 0;
        while !stop.load(Ordering::Relaxed) {
            // Two separate GETs inside one transaction of the reader: isolated too.
            let (x, y): (i64, i64) = redis::pipe()
                .atomic()
                .get("x")
                .get("y")
                .query(&mut c)
                .unwrap();
            assert_eq!(x, y, "a reader saw half of a transaction");
            seen += 1;
        }
        writer.join().unwrap();
        assert!(seen > 0);
    });
    assert_eq!(c.get::<_, i64>("x").unwrap(), 300);
}

#[test]
fn exec_in_resp3_and_a_failed_watch_answers_null() {
    let srv = common::start("dram:hash");
    let mut a = srv.client_resp3();
    let mut b = srv.client();
    let _: () = cmd("WATCH").arg("k").query(&mut a).unwrap();
    let _: () = b.set("k", 1).unwrap();
    let _: () = cmd("MULTI").query(&mut a).unwrap();
    let _: String = cmd("PING").query(&mut a).unwrap();
    let v: Value = cmd("EXEC").query(&mut a).unwrap();
    assert_eq!(v, Value::Nil);
}

/// The INFO counter of committed write batches.
#[allow(
    clippy::unwrap_used,
    reason = "test helper: a failure is a test failure"
)]
fn atomic_batches(c: &mut redis::Connection) -> u64 {
    let info: String = cmd("INFO").arg("stats").query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("tierkv_atomic_batches:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn exec_as_one_batch_reads_its_own_pending_writes() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    let before = atomic_batches(&mut c);
    let out = raw_exchange(
        &srv,
        &[
            &[b"MULTI"],
            &[b"SET", b"a", b"1"],
            &[b"INCR", b"a"],
            &[b"GET", b"a"],
            &[b"DEL", b"a"],
            &[b"EXISTS", b"a"],
            &[b"SET", b"a", b"5", b"PX", b"100000"],
            &[b"MSET", b"b", b"1", b"c", b"2"],
            &[b"MSETNX", b"b", b"9", b"d", b"9"],
            &[b"EXEC"],
        ],
    );
    assert_eq!(
        out,
        "+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n\
         +QUEUED\r\n*8\r\n+OK\r\n:2\r\n$1\r\n2\r\n:1\r\n:0\r\n+OK\r\n+OK\r\n:0\r\n"
    );
    assert_eq!(c.get::<_, String>("a").unwrap(), "5");
    let pttl: i64 = cmd("PTTL").arg("a").query(&mut c).unwrap();
    assert!(pttl > 90_000, "{pttl}");
    assert_eq!(c.get::<_, Option<String>>("d").unwrap(), None);
    // One batch for the EXEC (the MSET and MSETNX inside it join it).
    assert_eq!(atomic_batches(&mut c), before + 1);
    // A multi-key DEL and UNLINK are batches of their own; a one-key DEL is not.
    c.mset::<_, _, ()>(&[("x", 1), ("y", 2), ("z", 3)]).unwrap();
    assert_eq!(c.del::<_, i64>(&["x", "y", "nope"]).unwrap(), 2);
    assert_eq!(c.unlink::<_, i64>(&["z", "nope"]).unwrap(), 1);
    assert_eq!(c.del::<_, i64>("a").unwrap(), 1);
    assert_eq!(atomic_batches(&mut c), before + 4);
}

#[test]
fn a_transaction_over_the_batch_limit_is_refused_whole() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    let keys: Vec<String> = (0..=tierkv::MAX_BATCH_OPS)
        .map(|i| format!("k{i}"))
        .collect();
    let mut cmds: Vec<Vec<&[u8]>> = vec![vec![b"MULTI"]];
    cmds.extend(keys.iter().map(|k| vec![&b"SET"[..], k.as_bytes(), b"v"]));
    cmds.push(vec![b"EXEC"]);
    let cmds: Vec<&[&[u8]]> = cmds.iter().map(Vec::as_slice).collect();
    let out = raw_exchange(&srv, &cmds);
    let last = out.lines().last().unwrap();
    assert!(
        last.starts_with("-ERR nothing was applied") && last.contains("limit of 10000 operations"),
        "{last}"
    );
    assert_eq!(cmd("DBSIZE").query::<i64>(&mut c).unwrap(), 0);
    // The same for one MSET; the connection keeps working.
    let pairs: Vec<(String, usize)> = (0..=tierkv::MAX_BATCH_OPS)
        .map(|i| (format!("k{i}"), i))
        .collect();
    let e = c.mset::<_, _, ()>(&pairs).unwrap_err().to_string();
    assert!(e.contains("nothing was applied"), "{e}");
    assert_eq!(cmd("DBSIZE").query::<i64>(&mut c).unwrap(), 0);
    c.mset::<_, _, ()>(&pairs[..tierkv::MAX_BATCH_OPS]).unwrap();
    assert_eq!(
        cmd("DBSIZE").query::<usize>(&mut c).unwrap(),
        tierkv::MAX_BATCH_OPS
    );
}

#[test]
fn info_says_whether_multi_key_writes_are_crash_atomic() {
    let dir = tempfile::tempdir().unwrap();
    let options = tierkv::Options::default()
        .engine("hetermm@oplog=off")
        .pmem_dir(dir.path().join("pmem"))
        .pmem_size(tierkv::ByteSize::mib(64))
        .flash_dir(dir.path().join("flash"))
        .flash_size(tierkv::ByteSize::mib(256))
        .dram_budget(tierkv::ByteSize::mib(64));
    let srv = common::start_with(options, common::test_config());
    let mut c = srv.client();
    let info: String = cmd("INFO").arg("tierkv").query(&mut c).unwrap();
    assert!(info.contains("crash_atomic_multi_key:0\r\n"), "{info}");
    assert!(info.contains("atomic_batches:0\r\n"), "{info}");
    // Without batches the writes still happen, one by one.
    let before = atomic_batches(&mut c);
    c.mset::<_, _, ()>(&[("a", 1), ("b", 2)]).unwrap();
    let (x, y): (i64, i64) = redis::pipe()
        .atomic()
        .incr("a", 1)
        .incr("b", 1)
        .query(&mut c)
        .unwrap();
    assert_eq!((x, y), (2, 3));
    assert_eq!(atomic_batches(&mut c), before);
}
