//! Key expiry: the EXPIRE family and its flags, TTL/PTTL/EXPIRETIME, PERSIST, SETEX,
//! PSETEX, GETEX, SET EX/PX/EXAT/PXAT/KEEPTTL; expired keys invisible at once, removed by
//! the active sweep on ordered and unordered engines, and deadlines surviving a restart.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers: a failure here is a test failure"
)]

mod common;

use std::time::{Duration, Instant};

use redis::{Commands, cmd};
use tierkv::{ByteSize, Db, DurabilityMode, Options};

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[test]
fn ttl_commands_follow_redis() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    assert_eq!(common::run::<i64>(&mut c, "TTL nokey"), -2);
    let _: () = c.set("k", "v").unwrap();
    assert_eq!(common::run::<i64>(&mut c, "TTL k"), -1);
    assert_eq!(common::run::<i64>(&mut c, "EXPIRETIME k"), -1);
    assert_eq!(common::run::<i64>(&mut c, "EXPIRE k 100"), 1);
    assert_eq!(common::run::<i64>(&mut c, "TTL k"), 100);
    let pttl: i64 = common::run(&mut c, "PTTL k");
    assert!((99_000..=100_000).contains(&pttl), "{pttl}");
    let at: i64 = common::run(&mut c, "PEXPIRETIME k");
    assert!(
        (now_ms() + 98_000..=now_ms() + 100_000).contains(&at),
        "{at}"
    );
    // Flags: NX refuses a key with a TTL, XX one without, GT/LT compare.
    assert_eq!(common::run::<i64>(&mut c, "EXPIRE k 50 NX"), 0);
    assert_eq!(common::run::<i64>(&mut c, "EXPIRE k 50 GT"), 0);
    assert_eq!(common::run::<i64>(&mut c, "EXPIRE k 50 LT"), 1);
    assert_eq!(common::run::<i64>(&mut c, "EXPIRE k 200 XX"), 1);
    assert_eq!(common::run::<i64>(&mut c, "TTL k"), 200);
    // Writes that keep the TTL (APPEND, INCR) and ones that clear it (SET).
    let _: () = c.set("n", 1).unwrap();
    assert_eq!(common::run::<i64>(&mut c, "EXPIRE n 300"), 1);
    let _: i64 = c.incr("n", 1).unwrap();
    assert_eq!(common::run::<i64>(&mut c, "TTL n"), 300);
    assert_eq!(c.get::<_, i64>("n").unwrap(), 2);
    let _: () = cmd("SET")
        .arg("n")
        .arg(5)
        .arg("KEEPTTL")
        .query(&mut c)
        .unwrap();
    assert_eq!(common::run::<i64>(&mut c, "TTL n"), 300);
    let _: () = c.set("n", 6).unwrap();
    assert_eq!(common::run::<i64>(&mut c, "TTL n"), -1);
    assert_eq!(common::run::<i64>(&mut c, "PERSIST k"), 1);
    assert_eq!(common::run::<i64>(&mut c, "PERSIST k"), 0);
    assert_eq!(common::run::<i64>(&mut c, "TTL k"), -1);
    // Hashes keep their TTL across HSET.
    let _: () = c.hset("h", "f", "v").unwrap();
    assert_eq!(common::run::<i64>(&mut c, "EXPIRE h 400"), 1);
    let _: () = c.hset("h", "g", "w").unwrap();
    assert_eq!(common::run::<i64>(&mut c, "TTL h"), 400);
    // A deadline in the past deletes at once.
    assert_eq!(common::run::<i64>(&mut c, "EXPIRE h -1"), 1);
    assert_eq!(c.exists::<_, i64>("h").unwrap(), 0);
    assert_eq!(common::run::<i64>(&mut c, "EXPIRE missing 10"), 0);
}

#[test]
fn expiry_argument_errors_are_redis_errors() {
    let srv = common::start("dram:hash");
    let mut c = srv.client();
    let _: () = c.set("k", "v").unwrap();
    for (words, want) in [
        (
            "EXPIRE k 10 NX XX",
            "ERR NX and XX, GT or LT options at the same time are not compatible",
        ),
        (
            "EXPIRE k 10 GT LT",
            "ERR GT and LT options at the same time are not compatible",
        ),
        ("EXPIRE k 10 FOO", "ERR Unsupported option FOO"),
        (
            "EXPIRE k ten",
            "ERR value is not an integer or out of range",
        ),
        (
            "EXPIRE k 9223372036854775807",
            "ERR invalid expire time in 'expire' command",
        ),
        ("SETEX k 0 v", "ERR invalid expire time in 'setex' command"),
        (
            "PSETEX k -5 v",
            "ERR invalid expire time in 'psetex' command",
        ),
        ("SET k v EX 0", "ERR invalid expire time in 'set' command"),
        ("SET k v EX 5 PX 5", "ERR syntax error"),
        ("SET k v KEEPTTL EX 5", "ERR syntax error"),
        ("GETEX k EX 0", "ERR invalid expire time in 'getex' command"),
        ("GETEX k PERSIST EX 5", "ERR syntax error"),
    ] {
        let mut command = redis::Cmd::new();
        for w in words.split(' ') {
            command.arg(w);
        }
        assert_eq!(common::error_of(&mut c, &command), want, "{words}");
    }
    assert_eq!(
        common::run::<i64>(&mut c, "TTL k"),
        -1,
        "errors changed nothing"
    );
}

#[test]
fn setex_getex_and_set_with_expiry() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    let _: () = common::run(&mut c, "SETEX a 100 va");
    assert_eq!(common::run::<i64>(&mut c, "TTL a"), 100);
    let _: () = common::run(&mut c, "PSETEX b 100000 vb");
    assert_eq!(common::run::<i64>(&mut c, "TTL b"), 100);
    let at = now_ms() / 1000 + 1000;
    let _: () = common::run(&mut c, &format!("SET c vc EXAT {at}"));
    assert_eq!(common::run::<i64>(&mut c, "EXPIRETIME c"), at);
    assert_eq!(common::run::<String>(&mut c, "GETEX a PERSIST"), "va");
    assert_eq!(common::run::<i64>(&mut c, "TTL a"), -1);
    assert_eq!(common::run::<String>(&mut c, "GETEX a EX 30"), "va");
    assert_eq!(common::run::<i64>(&mut c, "TTL a"), 30);
    assert_eq!(common::run::<String>(&mut c, "GETEX a"), "va");
    assert_eq!(common::run::<i64>(&mut c, "TTL a"), 30);
    assert_eq!(common::run::<Option<String>>(&mut c, "GETEX zz EX 5"), None);
    let _: () = c.hset("h", "f", "v").unwrap();
    assert!(common::error_of(&mut c, cmd("GETEX").arg("h")).starts_with("WRONGTYPE"));
    // SET ... GET with an expiry returns the old value and sets the new deadline.
    assert_eq!(
        common::run::<String>(&mut c, "SET c new GET PX 50000"),
        "vc"
    );
    assert_eq!(common::run::<i64>(&mut c, "TTL c"), 50);
}

#[test]
fn expired_keys_are_invisible_at_once() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    let _: () = common::run(&mut c, "PSETEX k 150 v");
    let _: () = c.hset("h", "f", "v").unwrap();
    assert_eq!(common::run::<i64>(&mut c, "PEXPIRE h 150"), 1);
    assert_eq!(c.get::<_, String>("k").unwrap(), "v");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(c.get::<_, Option<String>>("k").unwrap(), None);
    assert_eq!(c.exists::<_, i64>(&["k", "h"]).unwrap(), 0);
    assert_eq!(common::run::<i64>(&mut c, "TTL k"), -2);
    assert_eq!(common::run::<String>(&mut c, "TYPE h"), "none");
    assert_eq!(c.hget::<_, _, Option<String>>("h", "f").unwrap(), None);
    // INCR on an expired key starts from zero, without the old deadline.
    let _: () = common::run(&mut c, "PSETEX n 100 41");
    std::thread::sleep(Duration::from_millis(150));
    assert_eq!(c.incr::<_, _, i64>("n", 1).unwrap(), 1);
    assert_eq!(common::run::<i64>(&mut c, "TTL n"), -1);
}

fn dbsize(c: &mut redis::Connection) -> i64 {
    common::run(c, "DBSIZE")
}

fn wait_for(mut cond: impl FnMut() -> bool, what: &str) {
    let t = Instant::now();
    while !cond() {
        assert!(t.elapsed() < Duration::from_secs(10), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_active_sweep_removes_keys_nobody_reads() {
    for engine in ["dram:btree", "dram:hash"] {
        let srv = common::start(engine);
        let mut c = srv.client();
        for i in 0..200 {
            let _: () = cmd("PSETEX")
                .arg(format!("short:{i}"))
                .arg(800)
                .arg(i)
                .query(&mut c)
                .unwrap();
        }
        let _: () = c.set("forever", 1).unwrap();
        let _: () = common::run(&mut c, "SETEX later 1000 x");
        assert_eq!(dbsize(&mut c), 202, "{engine}");
        wait_for(|| dbsize(&mut c) == 2, engine);
        assert_eq!(c.get::<_, i64>("forever").unwrap(), 1);
        let ttl: i64 = common::run(&mut c, "TTL later");
        assert!((990..=1000).contains(&ttl), "{ttl}");
    }
}

fn persistent_options(dir: &std::path::Path) -> Options {
    Options::default()
        .engine("hetermm")
        .pmem_dir(dir.join("pmem"))
        .pmem_size(ByteSize::mib(64))
        .flash_dir(dir.join("flash"))
        .flash_size(ByteSize::mib(256))
        .dram_budget(ByteSize::mib(64))
}

#[test]
fn deadlines_survive_a_restart_and_expire_afterwards() {
    let dir = tempfile::tempdir().unwrap();
    let start = || {
        let db = Db::open(dir.path().join("db"), persistent_options(dir.path())).unwrap();
        tierkv_server::spawn(db, DurabilityMode::default(), common::test_config()).unwrap()
    };
    let srv = start();
    let url = format!("redis://{}/", srv.addr());
    let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
    let _: () = common::run(&mut c, "SETEX long 1000 a");
    let _: () = common::run(&mut c, "PSETEX short 600 b");
    let _: () = c.set("plain", "c").unwrap();
    drop(c);
    srv.shutdown().unwrap();

    let srv = start();
    let url = format!("redis://{}/", srv.addr());
    let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
    let ttl: i64 = common::run(&mut c, "TTL long");
    assert!((998..=1000).contains(&ttl), "{ttl}");
    assert_eq!(common::run::<i64>(&mut c, "TTL plain"), -1);
    // The short key was written before the restart: the sweep's keyspace walk finds it.
    wait_for(|| dbsize(&mut c) == 2, "the pre-restart key expires");
    assert_eq!(c.get::<_, Option<String>>("short").unwrap(), None);
    assert_eq!(c.get::<_, String>("long").unwrap(), "a");
    drop(c);
    srv.shutdown().unwrap();
}
