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
