//! String commands through the `redis` crate: replies and error strings as Redis gives them.

mod common;

use redis::{Commands, Value, cmd};

#[test]
fn get_set_and_set_options_reply_as_redis() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    assert_eq!(c.get::<_, Option<String>>("k").unwrap(), None);
    assert_eq!(
        cmd("SET")
            .arg("k")
            .arg("v1")
            .query::<Value>(&mut c)
            .unwrap(),
        Value::Okay
    );
    assert_eq!(c.get::<_, String>("k").unwrap(), "v1");
    // NX on a present key: nil, nothing written.
    let v: Value = cmd("SET")
        .arg("k")
        .arg("v2")
        .arg("NX")
        .query(&mut c)
        .unwrap();
    assert_eq!(v, Value::Nil);
    assert_eq!(c.get::<_, String>("k").unwrap(), "v1");
    // XX on an absent key: nil, nothing written.
    let v: Value = cmd("SET")
        .arg("absent")
        .arg("x")
        .arg("XX")
        .query(&mut c)
        .unwrap();
    assert_eq!(v, Value::Nil);
    assert!(!c.exists::<_, bool>("absent").unwrap());
    // XX on a present key writes; GET returns the old value.
    let old: Option<String> = cmd("SET")
        .arg("k")
        .arg("v3")
        .arg("XX")
        .arg("GET")
        .query(&mut c)
        .unwrap();
    assert_eq!(old.as_deref(), Some("v1"));
    assert_eq!(c.get::<_, String>("k").unwrap(), "v3");
    // NX GET on an absent key: writes, returns nil.
    let old: Option<String> = cmd("SET")
        .arg("n")
        .arg("1")
        .arg("nx")
        .arg("get")
        .query(&mut c)
        .unwrap();
    assert_eq!(old, None);
    assert_eq!(c.get::<_, String>("n").unwrap(), "1");
    // KEEPTTL is accepted (no key has a TTL).
    assert_eq!(
        cmd("SET")
            .arg("k")
            .arg("v4")
            .arg("KEEPTTL")
            .query::<Value>(&mut c)
            .unwrap(),
        Value::Okay
    );
}

#[test]
fn set_option_errors_are_redis_errors() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    let e = common::error_of(&mut c, cmd("SET").arg("k").arg("v").arg("NX").arg("XX"));
    assert_eq!(e, "ERR syntax error");
    let e = common::error_of(&mut c, cmd("SET").arg("k").arg("v").arg("BOGUS"));
    assert_eq!(e, "ERR syntax error");
    let e = common::error_of(&mut c, cmd("SET").arg("k").arg("v").arg("EX"));
    assert_eq!(e, "ERR syntax error");
    let e = common::error_of(&mut c, cmd("SET").arg("k").arg("v").arg("EX").arg(0));
    assert_eq!(e, "ERR invalid expire time in 'set' command");
    let e = common::error_of(
        &mut c,
        cmd("SET")
            .arg("k")
            .arg("v")
            .arg("PX")
            .arg(10)
            .arg("KEEPTTL"),
    );
    assert_eq!(e, "ERR syntax error");
    assert!(
        !c.exists::<_, bool>("k").unwrap(),
        "a refused SET wrote nothing"
    );
    let e = common::error_of(&mut c, cmd("GET").arg("a").arg("b"));
    assert_eq!(e, "ERR wrong number of arguments for 'get' command");
}

#[test]
fn setnx_getset_mget_mset() {
    let srv = common::start("dram:hash");
    let mut c = srv.client();
    assert_eq!(
        cmd("SETNX").arg("a").arg("1").query::<i64>(&mut c).unwrap(),
        1
    );
    assert_eq!(
        cmd("SETNX").arg("a").arg("2").query::<i64>(&mut c).unwrap(),
        0
    );
    assert_eq!(c.get::<_, String>("a").unwrap(), "1");
    let old: Option<String> = cmd("GETSET").arg("a").arg("3").query(&mut c).unwrap();
    assert_eq!(old.as_deref(), Some("1"));
    let old: Option<String> = cmd("GETSET").arg("new").arg("x").query(&mut c).unwrap();
    assert_eq!(old, None);
    assert_eq!(
        cmd("MSET")
            .arg("x")
            .arg("1")
            .arg("y")
            .arg("2")
            .query::<Value>(&mut c)
            .unwrap(),
        Value::Okay
    );
    let got: Vec<Option<String>> = cmd("MGET")
        .arg("x")
        .arg("nope")
        .arg("y")
        .query(&mut c)
        .unwrap();
    assert_eq!(got, vec![Some("1".into()), None, Some("2".into())]);
    let e = common::error_of(&mut c, cmd("MSET").arg("x").arg("1").arg("y"));
    assert_eq!(e, "ERR wrong number of arguments for 'mset' command");
    // MGET answers nil for a key of another type, as Redis does.
    c.hset::<_, _, _, i64>("h", "f", "v").unwrap();
    let got: Vec<Option<String>> = cmd("MGET").arg("x").arg("h").query(&mut c).unwrap();
    assert_eq!(got, vec![Some("1".into()), None]);
}

#[test]
fn counters_follow_redis_integer_rules() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    assert_eq!(c.incr::<_, _, i64>("n", 1).unwrap(), 1);
    assert_eq!(cmd("INCR").arg("n").query::<i64>(&mut c).unwrap(), 2);
    assert_eq!(
        cmd("INCRBY").arg("n").arg(40).query::<i64>(&mut c).unwrap(),
        42
    );
    assert_eq!(cmd("DECR").arg("n").query::<i64>(&mut c).unwrap(), 41);
    assert_eq!(
        cmd("DECRBY").arg("n").arg(50).query::<i64>(&mut c).unwrap(),
        -9
    );
    assert_eq!(c.get::<_, String>("n").unwrap(), "-9");
    c.set::<_, _, ()>("s", "abc").unwrap();
    let e = common::error_of(&mut c, cmd("INCR").arg("s"));
    assert_eq!(e, "ERR value is not an integer or out of range");
    c.set::<_, _, ()>("padded", " 1").unwrap();
    assert!(common::error_of(&mut c, cmd("INCR").arg("padded")).contains("not an integer"));
    let e = common::error_of(&mut c, cmd("INCRBY").arg("n").arg("1.5"));
    assert_eq!(e, "ERR value is not an integer or out of range");
    c.set::<_, _, ()>("max", i64::MAX).unwrap();
    let e = common::error_of(&mut c, cmd("INCR").arg("max"));
    assert_eq!(e, "ERR increment or decrement would overflow");
    assert_eq!(
        c.get::<_, i64>("max").unwrap(),
        i64::MAX,
        "a refused INCR wrote nothing"
    );
    let e = common::error_of(&mut c, cmd("DECRBY").arg("n").arg(i64::MIN));
    assert_eq!(e, "ERR decrement would overflow");
}

#[test]
fn append_and_strlen() {
    let srv = common::start("dram:lockfree");
    let mut c = srv.client();
    assert_eq!(
        cmd("APPEND")
            .arg("a")
            .arg("Hello")
            .query::<i64>(&mut c)
            .unwrap(),
        5
    );
    assert_eq!(
        cmd("APPEND")
            .arg("a")
            .arg(" World")
            .query::<i64>(&mut c)
            .unwrap(),
        11
    );
    assert_eq!(c.get::<_, String>("a").unwrap(), "Hello World");
    assert_eq!(cmd("STRLEN").arg("a").query::<i64>(&mut c).unwrap(), 11);
    assert_eq!(cmd("STRLEN").arg("none").query::<i64>(&mut c).unwrap(), 0);
}

#[test]
fn string_commands_on_a_hash_are_wrongtype() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    c.hset::<_, _, _, i64>("h", "f", "1").unwrap();
    let wrongtype = "WRONGTYPE Operation against a key holding the wrong kind of value";
    for command in [
        cmd("GET").arg("h").clone(),
        cmd("INCR").arg("h").clone(),
        cmd("APPEND").arg("h").arg("x").clone(),
        cmd("STRLEN").arg("h").clone(),
        cmd("GETSET").arg("h").arg("x").clone(),
        cmd("SET").arg("h").arg("x").arg("GET").clone(),
    ] {
        assert_eq!(common::error_of(&mut c, &command), wrongtype);
    }
    assert_eq!(
        c.hget::<_, _, String>("h", "f").unwrap(),
        "1",
        "the hash is intact"
    );
    // A plain SET replaces any type, as in Redis.
    c.set::<_, _, ()>("h", "now a string").unwrap();
    assert_eq!(c.get::<_, String>("h").unwrap(), "now a string");
}

/// SETBIT past the store's value limit is refused before anything is allocated or
/// written (Redis's own bound, 2^32 bits, is far above it); within the limit it grows the
/// string with zero bytes and keeps the TTL.
#[test]
fn setbit_beyond_the_value_limit_is_refused_and_changes_nothing() {
    let srv = common::start("dram:hash");
    let mut c = srv.client();
    let e = common::error_of(&mut c, cmd("SETBIT").arg("b").arg(4_294_967_295_u64).arg(1));
    assert!(e.contains("exceeds maximum allowed size"), "{e}");
    assert_eq!(c.exists::<_, i64>("b").unwrap(), 0);
    let _: () = cmd("SET")
        .arg("b")
        .arg("a")
        .arg("EX")
        .arg(1000)
        .query(&mut c)
        .unwrap();
    assert_eq!(
        cmd("SETBIT")
            .arg("b")
            .arg(23)
            .arg(1)
            .query::<i64>(&mut c)
            .unwrap(),
        0
    );
    assert_eq!(
        cmd("GET").arg("b").query::<Vec<u8>>(&mut c).unwrap(),
        b"a\0\x01"
    );
    assert!(cmd("TTL").arg("b").query::<i64>(&mut c).unwrap() > 0);
    assert_eq!(cmd("BITCOUNT").arg("b").query::<i64>(&mut c).unwrap(), 4);
}
