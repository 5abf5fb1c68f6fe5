//! Keyspace and string/hash commands of round 2: FLUSHDB/FLUSHALL (and WATCH seeing them),
//! RENAME keeping the TTL, TIME, GETDEL, GETRANGE/SETRANGE, MSETNX, INCRBYFLOAT, HINCRBY,
//! HKEYS/HVALS. Their replies are also checked against redis-server by the differential
//! test; this file covers what that test cannot (clock, engines, other clients).

#![allow(
    clippy::unwrap_used,
    reason = "test helpers: a failure here is a test failure"
)]

mod common;

use redis::{Commands, Value, cmd};

#[test]
fn flushdb_empties_the_store_and_fails_watchers() {
    let srv = common::start("dram:btree");
    let (mut a, mut b) = (srv.client(), srv.client());
    for i in 0..3000 {
        let _: () = a.set(format!("k{i}"), i).unwrap();
    }
    let _: () = cmd("WATCH").arg("unrelated").query(&mut a).unwrap();
    let _: () = cmd("FLUSHDB").query(&mut b).unwrap();
    assert_eq!(common::run::<i64>(&mut b, "DBSIZE"), 0);
    let _: () = cmd("MULTI").query(&mut a).unwrap();
    let _: String = cmd("PING").query(&mut a).unwrap();
    assert_eq!(cmd("EXEC").query::<Value>(&mut a).unwrap(), Value::Nil);
    let _: () = common::run(&mut b, "FLUSHALL SYNC");
    assert!(common::error_of(&mut b, cmd("FLUSHDB").arg("NOW")).starts_with("ERR syntax"));
}

/// On an unordered engine (no range delete) FLUSHDB finds the database's keys by a cursor
/// walk: the selected database is emptied, the others are left; FLUSHALL empties all.
#[test]
fn flushdb_and_flushall_on_an_unordered_engine() {
    for engine in ["dram:hash", "dram:lockfree"] {
        let srv = common::start(engine);
        let mut c = srv.client();
        for i in 0..3000 {
            let _: () = c.set(format!("k{i}"), i).unwrap();
        }
        let _: i64 = c.rpush("l", &["a", "b", "c"]).unwrap();
        let _: () = common::run(&mut c, "SELECT 2");
        let _: () = c.set("k", 1).unwrap();
        let _: i64 = c.rpush("l2", &["a", "b"]).unwrap();
        let _: () = common::run(&mut c, "SELECT 0");
        let _: () = common::run(&mut c, "FLUSHDB");
        assert_eq!(common::run::<i64>(&mut c, "DBSIZE"), 0, "{engine}");
        assert_eq!(c.exists::<_, i64>("k7").unwrap(), 0, "{engine}");
        let _: () = common::run(&mut c, "SELECT 2");
        assert_eq!(common::run::<i64>(&mut c, "DBSIZE"), 2, "{engine}");
        assert_eq!(c.get::<_, i64>("k").unwrap(), 1, "{engine}");
        let _: () = common::run(&mut c, "FLUSHALL");
        assert_eq!(common::run::<i64>(&mut c, "DBSIZE"), 0, "{engine}");
        assert_eq!(c.exists::<_, i64>("k").unwrap(), 0, "{engine}");
    }
}

#[test]
fn rename_moves_value_and_deadline() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    let _: () = common::run(&mut c, "SETEX a 500 v");
    let _: () = common::run(&mut c, "RENAME a b");
    assert_eq!(common::run::<i64>(&mut c, "TTL b"), 500);
    assert_eq!(c.exists::<_, i64>("a").unwrap(), 0);
    assert_eq!(
        common::error_of(&mut c, cmd("RENAME").arg("a").arg("c")),
        "ERR no such key"
    );
    let _: () = c.set("c", 1).unwrap();
    assert_eq!(common::run::<i64>(&mut c, "RENAMENX b c"), 0);
    assert_eq!(common::run::<i64>(&mut c, "RENAMENX b d"), 1);
    assert_eq!(c.get::<_, String>("d").unwrap(), "v");
}

#[test]
fn time_is_the_wall_clock() {
    let srv = common::start("dram:hash");
    let mut c = srv.client();
    let (secs, micros): (u64, u64) = cmd("TIME").query(&mut c).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(secs.abs_diff(now) <= 2, "{secs} vs {now}");
    assert!(micros < 1_000_000);
}

#[test]
fn string_and_hash_commands_of_round_two() {
    let srv = common::start("dram:hash");
    let mut c = srv.client();
    let _: () = c.set("s", "Hello World").unwrap();
    assert_eq!(common::run::<String>(&mut c, "GETRANGE s -5 -1"), "World");
    assert_eq!(common::run::<i64>(&mut c, "SETRANGE s 6 Redis"), 11);
    assert_eq!(common::run::<i64>(&mut c, "SETRANGE pad 3 x"), 4);
    assert_eq!(c.get::<_, Vec<u8>>("pad").unwrap(), b"\0\0\0x");
    assert_eq!(common::run::<String>(&mut c, "GETDEL s"), "Hello Redis");
    assert_eq!(c.exists::<_, i64>("s").unwrap(), 0);
    assert_eq!(common::run::<i64>(&mut c, "MSETNX a 1 b 2"), 1);
    assert_eq!(common::run::<i64>(&mut c, "MSETNX b 3 c 4"), 0);
    assert_eq!(c.exists::<_, i64>("c").unwrap(), 0);
    assert_eq!(common::run::<String>(&mut c, "INCRBYFLOAT f 10.5"), "10.5");
    assert_eq!(
        common::run::<String>(&mut c, "INCRBYFLOAT f -0.25"),
        "10.25"
    );
    assert_eq!(common::run::<i64>(&mut c, "HINCRBY h n 5"), 5);
    assert_eq!(common::run::<i64>(&mut c, "HINCRBY h n -7"), -2);
    let _: () = c.hset("h", "g", "x").unwrap();
    assert_eq!(
        common::error_of(&mut c, cmd("HINCRBY").arg("h").arg("g").arg(1)),
        "ERR hash value is not an integer"
    );
    assert_eq!(common::run::<Vec<String>>(&mut c, "HKEYS h"), ["n", "g"]);
    assert_eq!(common::run::<Vec<String>>(&mut c, "HVALS h"), ["-2", "x"]);
}

#[test]
fn keys_and_randomkey_see_live_keys_only() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    assert_eq!(common::run::<Option<String>>(&mut c, "RANDOMKEY"), None);
    let _: () = c.set("user:1", 1).unwrap();
    let _: () = c.set("user:2", 2).unwrap();
    let _: () = c.set("item:1", 3).unwrap();
    let _: () = common::run(&mut c, "PSETEX user:3 1 gone");
    std::thread::sleep(std::time::Duration::from_millis(5));
    assert_eq!(
        common::run::<Vec<String>>(&mut c, "KEYS user:*"),
        ["user:1", "user:2"]
    );
    assert_eq!(common::run::<Vec<String>>(&mut c, "KEYS *").len(), 3);
    for _ in 0..20 {
        let k: String = common::run(&mut c, "RANDOMKEY");
        assert!(["user:1", "user:2", "item:1"].contains(&k.as_str()), "{k}");
    }
    assert_eq!(common::run::<i64>(&mut c, "COPY item:1 item:2"), 1);
    assert_eq!(common::run::<i64>(&mut c, "COPY item:1 item:2"), 0);
    assert_eq!(common::run::<i64>(&mut c, "COPY user:1 item:2 REPLACE"), 1);
    assert_eq!(c.get::<_, i64>("item:2").unwrap(), 1);
}

#[test]
fn client_list_info_and_info_sections() {
    let srv = common::start("dram:btree");
    let mut a = srv.client();
    let mut b = srv.client();
    let _: () = cmd("CLIENT")
        .arg("SETNAME")
        .arg("worker-a")
        .query(&mut a)
        .unwrap();
    let _: () = cmd("CLIENT")
        .arg("NO-EVICT")
        .arg("on")
        .query(&mut a)
        .unwrap();
    let mine: String = cmd("CLIENT").arg("INFO").query(&mut a).unwrap();
    let id: i64 = cmd("CLIENT").arg("ID").query(&mut a).unwrap();
    assert!(
        mine.starts_with(&format!("id={id} addr=127.0.0.1:")),
        "{mine}"
    );
    assert!(
        mine.contains(" name=worker-a ") && mine.contains(" cmd=client|info "),
        "{mine}"
    );
    let list: String = cmd("CLIENT").arg("LIST").query(&mut b).unwrap();
    assert_eq!(list.lines().count(), 2, "{list}");
    assert!(list.contains("name=worker-a"), "{list}");
    drop(a);
    let t = std::time::Instant::now();
    loop {
        let list: String = cmd("CLIENT").arg("LIST").query(&mut b).unwrap();
        if list.lines().count() == 1 {
            break;
        }
        assert!(
            t.elapsed().as_secs() < 10,
            "a closed client stays listed: {list}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _: () = common::run(&mut b, "PSETEX gone 1 x");
    std::thread::sleep(std::time::Duration::from_millis(5));
    assert_eq!(b.get::<_, Option<String>>("gone").unwrap(), None);
    let info: String = cmd("INFO").query(&mut b).unwrap();
    for want in [
        "# CPU\r\nused_cpu_sys:",
        "# Persistence\r\nloading:0",
        "expired_keys:1",
    ] {
        assert!(info.contains(want), "INFO lacks {want:?}:\n{info}");
    }
}
