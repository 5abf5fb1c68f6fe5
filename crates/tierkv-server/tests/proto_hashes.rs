//! Hash commands through the `redis` crate, in RESP2 and RESP3.

mod common;

use std::collections::HashMap;

use redis::{Commands, Value, cmd};

#[test]
fn hash_commands_reply_as_redis() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    let added: i64 = cmd("HSET")
        .arg("h")
        .arg("a")
        .arg("1")
        .arg("b")
        .arg("2")
        .query(&mut c)
        .unwrap();
    assert_eq!(added, 2);
    let added: i64 = cmd("HSET")
        .arg("h")
        .arg("b")
        .arg("20")
        .arg("c")
        .arg("3")
        .query(&mut c)
        .unwrap();
    assert_eq!(added, 1, "only c is new");
    assert_eq!(
        cmd("HMSET")
            .arg("h")
            .arg("d")
            .arg("4")
            .query::<Value>(&mut c)
            .unwrap(),
        Value::Okay
    );
    assert_eq!(c.hget::<_, _, String>("h", "b").unwrap(), "20");
    assert_eq!(c.hget::<_, _, Option<String>>("h", "zz").unwrap(), None);
    assert_eq!(c.hget::<_, _, Option<String>>("nohash", "a").unwrap(), None);
    let got: Vec<Option<String>> = cmd("HMGET")
        .arg("h")
        .arg("a")
        .arg("zz")
        .arg("d")
        .query(&mut c)
        .unwrap();
    assert_eq!(got, vec![Some("1".into()), None, Some("4".into())]);
    let all: HashMap<String, String> = c.hgetall("h").unwrap();
    assert_eq!(all.len(), 4);
    assert_eq!(all["c"], "3");
    // HGETALL in RESP2 is a flat array in insertion order.
    let flat: Vec<String> = cmd("HGETALL").arg("h").query(&mut c).unwrap();
    assert_eq!(flat, ["a", "1", "b", "20", "c", "3", "d", "4"]);
    assert_eq!(c.hlen::<_, i64>("h").unwrap(), 4);
    assert_eq!(c.hexists::<_, _, i64>("h", "a").unwrap(), 1);
    assert_eq!(c.hexists::<_, _, i64>("h", "zz").unwrap(), 0);
    assert_eq!(
        cmd("HDEL")
            .arg("h")
            .arg("a")
            .arg("zz")
            .arg("a")
            .query::<i64>(&mut c)
            .unwrap(),
        1
    );
    assert_eq!(c.hlen::<_, i64>("h").unwrap(), 3);
    assert_eq!(cmd("HLEN").arg("nohash").query::<i64>(&mut c).unwrap(), 0);
    let empty: HashMap<String, String> = c.hgetall("nohash").unwrap();
    assert!(empty.is_empty());
}

#[test]
fn deleting_the_last_field_deletes_the_key() {
    let srv = common::start("dram:hash");
    let mut c = srv.client();
    c.hset::<_, _, _, i64>("h", "only", "x").unwrap();
    assert_eq!(
        cmd("HDEL")
            .arg("h")
            .arg("only")
            .query::<i64>(&mut c)
            .unwrap(),
        1
    );
    assert!(!c.exists::<_, bool>("h").unwrap());
    assert_eq!(
        cmd("TYPE").arg("h").query::<String>(&mut c).unwrap(),
        "none"
    );
}

#[test]
fn hash_commands_on_a_string_are_wrongtype() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    c.set::<_, _, ()>("s", "v").unwrap();
    let wrongtype = "WRONGTYPE Operation against a key holding the wrong kind of value";
    for command in [
        cmd("HSET").arg("s").arg("f").arg("v").clone(),
        cmd("HGET").arg("s").arg("f").clone(),
        cmd("HGETALL").arg("s").clone(),
        cmd("HDEL").arg("s").arg("f").clone(),
        cmd("HLEN").arg("s").clone(),
        cmd("HEXISTS").arg("s").arg("f").clone(),
        cmd("HMGET").arg("s").arg("f").clone(),
    ] {
        assert_eq!(common::error_of(&mut c, &command), wrongtype);
    }
    assert_eq!(c.get::<_, String>("s").unwrap(), "v");
    let e = common::error_of(&mut c, cmd("HSET").arg("h").arg("f"));
    assert_eq!(e, "ERR wrong number of arguments for 'hset' command");
    let e = common::error_of(&mut c, cmd("HSET").arg("h").arg("f").arg("v").arg("g"));
    assert_eq!(e, "ERR wrong number of arguments for 'hset' command");
}

#[test]
fn resp3_hgetall_is_a_map() {
    let srv = common::start("dram:btree");
    let mut c = srv.client_resp3();
    c.hset::<_, _, _, i64>("h", "f", "v").unwrap();
    let v: Value = cmd("HGETALL").arg("h").query(&mut c).unwrap();
    assert_eq!(
        v,
        Value::Map(vec![(
            Value::BulkString(b"f".to_vec()),
            Value::BulkString(b"v".to_vec())
        )])
    );
    assert_eq!(
        cmd("HGET")
            .arg("h")
            .arg("zz")
            .query::<Value>(&mut c)
            .unwrap(),
        Value::Nil
    );
}

#[test]
fn string_that_looks_like_an_encoded_hash_stays_a_string() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    let tricky: &[u8] = b"\xFFTKh\x01\x01\x00\x00\x00";
    c.set::<_, _, ()>("t", tricky).unwrap();
    assert_eq!(c.get::<_, Vec<u8>>("t").unwrap(), tricky);
    assert_eq!(
        cmd("STRLEN").arg("t").query::<i64>(&mut c).unwrap(),
        tricky.len() as i64
    );
    assert_eq!(
        cmd("TYPE").arg("t").query::<String>(&mut c).unwrap(),
        "string"
    );
    assert!(common::error_of(&mut c, cmd("HGETALL").arg("t")).starts_with("WRONGTYPE"));
}
