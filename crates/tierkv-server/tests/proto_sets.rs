//! Sets (issue 25 item 4): SSCAN with real cursors over a large set, SRANDMEMBER/SPOP
//! sampling, the algebra's STORE forms over other types, and what an unordered engine
//! answers.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers: a failure here is a test failure"
)]

mod common;

use std::collections::BTreeSet;

use redis::{Commands, cmd};

#[test]
fn sscan_srandmember_and_spop_over_a_large_set() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    let all: Vec<String> = (0..1500).map(|i| format!("m{i}")).collect();
    for chunk in all.chunks(500) {
        c.sadd::<_, _, i64>("s", chunk).unwrap();
    }
    assert_eq!(c.scard::<_, i64>("s").unwrap(), 1500);
    let mut cursor = "0".to_string();
    let mut seen = Vec::new();
    loop {
        let (next, page): (String, Vec<String>) = cmd("SSCAN")
            .arg("s")
            .arg(&cursor)
            .arg("COUNT")
            .arg(200)
            .query(&mut c)
            .unwrap();
        seen.extend(page);
        cursor = next;
        if cursor == "0" {
            break;
        }
    }
    let unique: BTreeSet<_> = seen.iter().cloned().collect();
    assert_eq!((seen.len(), unique.len()), (1500, 1500));
    let sample: Vec<String> = cmd("SRANDMEMBER").arg("s").arg(10).query(&mut c).unwrap();
    let distinct: BTreeSet<_> = sample.iter().collect();
    assert_eq!(distinct.len(), 10);
    assert!(sample.iter().all(|m| unique.contains(m)));
    let repeats: Vec<String> = cmd("SRANDMEMBER").arg("s").arg(-30).query(&mut c).unwrap();
    assert_eq!(repeats.len(), 30);
    let popped: Vec<String> = cmd("SPOP").arg("s").arg(700).query(&mut c).unwrap();
    assert_eq!(popped.iter().collect::<BTreeSet<_>>().len(), 700);
    assert_eq!(c.scard::<_, i64>("s").unwrap(), 800);
    for m in &popped {
        assert!(
            !c.sismember::<_, _, bool>("s", m).unwrap(),
            "{m} popped twice"
        );
    }
    let rest: Vec<String> = cmd("SPOP").arg("s").arg(5000).query(&mut c).unwrap();
    assert_eq!(rest.len(), 800);
    assert_eq!(common::run::<i64>(&mut c, "EXISTS s"), 0);
}

#[test]
fn store_forms_replace_any_type_and_delete_on_empty() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    c.sadd::<_, _, ()>("a", &["1", "2", "3"]).unwrap();
    c.sadd::<_, _, ()>("b", &["2", "3", "4"]).unwrap();
    c.set::<_, _, ()>("dst", "a string").unwrap();
    assert_eq!(common::run::<i64>(&mut c, "SINTERSTORE dst a b"), 2);
    assert_eq!(common::run::<String>(&mut c, "TYPE dst"), "set");
    let m: BTreeSet<String> = c.smembers("dst").unwrap();
    assert_eq!(m, ["2", "3"].iter().map(|s| s.to_string()).collect());
    assert_eq!(common::run::<i64>(&mut c, "SINTERCARD 2 a b LIMIT 1"), 1);
    assert_eq!(common::run::<i64>(&mut c, "SDIFFSTORE dst a a"), 0);
    assert_eq!(common::run::<i64>(&mut c, "EXISTS dst"), 0);
}

#[test]
fn an_unordered_engine_keeps_point_operations_and_says_why_it_cannot_enumerate() {
    let srv = common::start("dram:hash");
    let mut c = srv.client();
    assert_eq!(common::run::<i64>(&mut c, "SADD s a b"), 2);
    assert_eq!(common::run::<i64>(&mut c, "SISMEMBER s a"), 1);
    assert_eq!(common::run::<i64>(&mut c, "SCARD s"), 2);
    let e = common::error_of(&mut c, cmd("SMEMBERS").arg("s"));
    assert!(e.contains("walks a collection's elements in order"), "{e}");
    assert!(e.contains("dram:hash"), "{e}");
}
