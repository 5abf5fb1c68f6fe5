//! Pipelining (thousands of commands before reading a reply) and binary-safe keys and
//! values.

mod common;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use redis::{Commands, Value, cmd};

#[test]
fn ten_thousand_commands_in_one_pipeline() {
    let srv = common::start("dram:hash");
    let mut c = srv.client();
    let mut p = redis::pipe();
    for i in 0..5_000 {
        p.cmd("SET").arg(format!("k{i}")).arg(i).ignore();
        p.cmd("INCR").arg("counter").ignore();
    }
    p.query::<()>(&mut c).unwrap();
    let mut p = redis::pipe();
    for i in 0..5_000 {
        p.cmd("GET").arg(format!("k{i}"));
    }
    let got: Vec<i64> = p.query(&mut c).unwrap();
    assert_eq!(got, (0..5_000).collect::<Vec<i64>>());
    assert_eq!(c.get::<_, i64>("counter").unwrap(), 5_000);
}

#[test]
fn replies_keep_request_order_across_mixed_commands() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    let mut p = redis::pipe();
    p.cmd("SET").arg("a").arg("1");
    p.cmd("GET").arg("a");
    p.cmd("NOSUCH");
    p.cmd("INCR").arg("a");
    p.cmd("HSET").arg("a").arg("f").arg("v");
    p.cmd("GET").arg("a");
    let got: Vec<redis::RedisResult<Value>> = p.ignore_errors().query(&mut c).unwrap();
    let code = |i: usize| got[i].as_ref().unwrap_err().code().map(str::to_owned);
    assert_eq!(got[0].as_ref().unwrap(), &Value::Okay);
    assert_eq!(got[1].as_ref().unwrap(), &Value::BulkString(b"1".to_vec()));
    assert_eq!(code(2).as_deref(), Some("ERR"));
    assert_eq!(got[3].as_ref().unwrap(), &Value::Int(2));
    assert_eq!(code(4).as_deref(), Some("WRONGTYPE"));
    assert_eq!(got[5].as_ref().unwrap(), &Value::BulkString(b"2".to_vec()));
}

#[test]
fn binary_keys_and_values_round_trip() {
    let seed = common::seed();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    let mut pairs = Vec::new();
    // Every byte value, CR/LF and NUL included, in keys, values, fields.
    let all: Vec<u8> = (0..=255u8).collect();
    pairs.push((all.clone(), all.iter().rev().copied().collect::<Vec<u8>>()));
    pairs.push((b"\r\n\0".to_vec(), b"$5\r\n*1\r\n".to_vec()));
    for _ in 0..200 {
        let k: Vec<u8> = (0..rng.random_range(1..64)).map(|_| rng.random()).collect();
        let v: Vec<u8> = (0..rng.random_range(0..2048))
            .map(|_| rng.random())
            .collect();
        pairs.push((k, v));
    }
    let mut expected = std::collections::BTreeMap::new();
    for (k, v) in &pairs {
        c.set::<_, _, ()>(k.as_slice(), v.as_slice()).unwrap();
        expected.insert(k.clone(), v.clone());
    }
    for (k, v) in &expected {
        assert_eq!(&c.get::<_, Vec<u8>>(k.as_slice()).unwrap(), v);
    }
    let mut hkey = all.clone();
    hkey.push(0);
    c.hset::<_, _, _, i64>(&hkey, &all[..], b"\0\r\n".as_slice())
        .unwrap();
    assert_eq!(c.hget::<_, _, Vec<u8>>(&hkey, &all[..]).unwrap(), b"\0\r\n");
    expected.insert(hkey, Vec::new());
    let (cursor, keys): (u64, Vec<Vec<u8>>) = cmd("SCAN")
        .arg(0)
        .arg("COUNT")
        .arg(10_000)
        .query(&mut c)
        .unwrap();
    assert_eq!(cursor, 0);
    assert_eq!(keys, expected.keys().cloned().collect::<Vec<_>>());
}

#[test]
fn large_values_in_a_pipeline() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    let big: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    let mut p = redis::pipe();
    for i in 0..8 {
        p.cmd("SET").arg(format!("big{i}")).arg(&big[i..]).ignore();
    }
    p.query::<()>(&mut c).unwrap();
    let got: Vec<Vec<u8>> = cmd("MGET")
        .arg((0..8).map(|i| format!("big{i}")).collect::<Vec<_>>())
        .query(&mut c)
        .unwrap();
    for (i, v) in got.iter().enumerate() {
        assert_eq!(v.as_slice(), &big[i..]);
    }
}
