//! Keyspace commands: DEL, EXISTS, TYPE, DBSIZE and SCAN, on ordered and unordered engines.

mod common;

use std::collections::BTreeSet;

use redis::{Commands, cmd};

#[test]
fn del_exists_and_type() {
    let srv = common::start("dram:hash");
    let mut c = srv.client();
    c.set::<_, _, ()>("a", "1").unwrap();
    c.set::<_, _, ()>("b", "2").unwrap();
    c.hset::<_, _, _, i64>("h", "f", "v").unwrap();
    assert_eq!(common::run::<i64>(&mut c, "EXISTS a a zz h"), 3);
    assert_eq!(common::run::<String>(&mut c, "TYPE a"), "string");
    assert_eq!(common::run::<String>(&mut c, "TYPE h"), "hash");
    assert_eq!(common::run::<String>(&mut c, "TYPE zz"), "none");
    assert_eq!(common::run::<i64>(&mut c, "DEL a a zz h"), 2);
    assert_eq!(common::run::<i64>(&mut c, "EXISTS a h b"), 1);
}

#[test]
fn dbsize_counts_by_a_walk_on_every_engine() {
    for engine in ["dram:btree", "dram:hash", "dram:lockfree"] {
        let srv = common::start(engine);
        let mut c = srv.client();
        assert_eq!(cmd("DBSIZE").query::<i64>(&mut c).unwrap(), 0, "{engine}");
        for i in 0..2500 {
            c.set::<_, _, ()>(format!("k{i}"), i).unwrap();
        }
        c.hset::<_, _, _, i64>("h", "f", "v").unwrap();
        c.del::<_, i64>("k7").unwrap();
        assert_eq!(
            cmd("DBSIZE").query::<i64>(&mut c).unwrap(),
            2500,
            "{engine}"
        );
        let info: String = cmd("INFO").arg("keyspace").query(&mut c).unwrap();
        assert!(info.contains("db0:keys=2500,"), "{engine}: {info}");
        // Elements of collections and other databases' keys are not this database's
        // keys (the engine's own counter, which DBSIZE used to answer on unordered
        // engines, counts them: `RPUSH l a b; SET x 1` made it 4).
        c.rpush::<_, _, i64>("l", &["a", "b"]).unwrap();
        let _: () = common::run(&mut c, "SELECT 1");
        c.set::<_, _, ()>("x", 1).unwrap();
        assert_eq!(cmd("DBSIZE").query::<i64>(&mut c).unwrap(), 1, "{engine}");
        let _: () = common::run(&mut c, "SELECT 0");
        assert_eq!(
            cmd("DBSIZE").query::<i64>(&mut c).unwrap(),
            2501,
            "{engine}"
        );
        let _: () = common::run(&mut c, "SWAPDB 1 5");
        let info: String = cmd("INFO").arg("keyspace").query(&mut c).unwrap();
        assert!(info.contains("db0:keys=2501,"), "{engine}: {info}");
        assert!(info.contains("db5:keys=1,"), "{engine}: {info}");
        assert!(!info.contains("db1:"), "{engine}: {info}");
    }
}

#[test]
fn full_scan_returns_every_key_once_in_order() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    let want: BTreeSet<String> = (0..1000).map(|i| format!("key:{i:05}")).collect();
    for k in &want {
        c.set::<_, _, ()>(k, "x").unwrap();
    }
    // The redis crate's iterator parses cursors as u64, as most clients do.
    let got: Vec<String> = cmd("SCAN")
        .cursor_arg(0)
        .arg("COUNT")
        .arg(37)
        .clone()
        .iter(&mut c)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(got.len(), want.len(), "no duplicates, nothing missing");
    assert!(got.windows(2).all(|w| w[0] < w[1]), "key order");
    assert_eq!(got.into_iter().collect::<BTreeSet<_>>(), want);
}

#[test]
fn scan_match_and_type_filter_keys() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    for i in 0..50 {
        c.set::<_, _, ()>(format!("user:{i}"), i).unwrap();
        c.set::<_, _, ()>(format!("item:{i}"), i).unwrap();
    }
    c.hset::<_, _, _, i64>("user:h", "f", "v").unwrap();
    let users: Vec<String> = cmd("SCAN")
        .cursor_arg(0)
        .arg("MATCH")
        .arg("user:*")
        .clone()
        .iter(&mut c)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(users.len(), 51);
    assert!(users.iter().all(|k| k.starts_with("user:")));
    let hashes: Vec<String> = cmd("SCAN")
        .cursor_arg(0)
        .arg("TYPE")
        .arg("hash")
        .clone()
        .iter(&mut c)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(hashes, ["user:h"]);
    let ones: Vec<String> = cmd("SCAN")
        .cursor_arg(0)
        .arg("MATCH")
        .arg("item:1?")
        .arg("COUNT")
        .arg(1000)
        .clone()
        .iter(&mut c)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(ones.len(), 10);
    // A single page: a prefix pattern ends the walk when keys pass the prefix.
    let (cursor, keys): (u64, Vec<String>) = cmd("SCAN")
        .arg(0)
        .arg("MATCH")
        .arg("item:*")
        .arg("COUNT")
        .arg(1000)
        .query(&mut c)
        .unwrap();
    assert_eq!((cursor, keys.len()), (0, 50));
    let (_, none): (u64, Vec<String>) = cmd("SCAN")
        .arg(0)
        .arg("TYPE")
        .arg("list")
        .query(&mut c)
        .unwrap();
    assert!(none.is_empty());
}

#[test]
fn scan_errors_are_clear() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    let e = common::error_of(&mut c, cmd("SCAN").arg("abc"));
    assert_eq!(e, "ERR invalid cursor");
    let e = common::error_of(&mut c, cmd("SCAN").arg("123456789"));
    assert!(e.contains("start the scan again from 0"), "{e}");
    let e = common::error_of(&mut c, cmd("SCAN").arg(0).arg("COUNT").arg(0));
    assert_eq!(e, "ERR syntax error");
    let e = common::error_of(&mut c, cmd("SCAN").arg(0).arg("MATCH"));
    assert_eq!(e, "ERR syntax error");
    let e = common::error_of(&mut c, cmd("SCAN").arg(0).arg("TYPE").arg("bogus"));
    assert_eq!(e, "ERR unknown type name 'bogus'");
}

/// SCAN on an unordered engine walks by index shard (issue 25 point 3): every key once,
/// whatever COUNT; MATCH and TYPE filter; the cursor is the store's (any number is valid,
/// one past the last shard ends the walk); other databases' keys and list elements never
/// show.
#[test]
fn scan_on_an_unordered_engine_walks_by_shard() {
    for engine in ["dram:hash", "dram:lockfree"] {
        let srv = common::start(engine);
        let mut c = srv.client();
        let want: BTreeSet<String> = (0..1000).map(|i| format!("key:{i:05}")).collect();
        for k in &want {
            c.set::<_, _, ()>(k, "x").unwrap();
        }
        c.rpush::<_, _, i64>("key:list", &["a", "b", "c"]).unwrap();
        let _: () = common::run(&mut c, "SELECT 3");
        c.set::<_, _, ()>("key:other-db", "x").unwrap();
        let _: () = common::run(&mut c, "SELECT 0");
        for count in [1, 37, 100_000] {
            let got: Vec<String> = cmd("SCAN")
                .cursor_arg(0)
                .arg("COUNT")
                .arg(count)
                .clone()
                .iter(&mut c)
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let mut all = want.clone();
            all.insert("key:list".into());
            assert_eq!(
                got.len(),
                all.len(),
                "{engine} COUNT {count}: each key once"
            );
            assert_eq!(got.into_iter().collect::<BTreeSet<_>>(), all, "{engine}");
        }
        let lists: Vec<String> = cmd("SCAN")
            .cursor_arg(0)
            .arg("TYPE")
            .arg("list")
            .clone()
            .iter(&mut c)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(lists, ["key:list"], "{engine}");
        let matched: BTreeSet<String> = cmd("SCAN")
            .cursor_arg(0)
            .arg("MATCH")
            .arg("key:0001*")
            .clone()
            .iter(&mut c)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let want_matched: BTreeSet<String> = (10..20).map(|i| format!("key:{i:05}")).collect();
        assert_eq!(matched, want_matched, "{engine}");
        let (next, keys): (u64, Vec<String>) = cmd("SCAN").arg(1_000_000).query(&mut c).unwrap();
        assert_eq!((next, keys.len()), (0, 0), "{engine}: past the end");
        let e = common::error_of(&mut c, cmd("SCAN").arg("abc"));
        assert_eq!(e, "ERR invalid cursor", "{engine}");
    }
}

#[test]
fn keys_written_during_a_scan_do_not_break_it() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    let mut w = srv.client();
    for i in 0..300 {
        c.set::<_, _, ()>(format!("k{i:04}"), i).unwrap();
    }
    let mut cursor = 0u64;
    let mut seen = Vec::new();
    let mut round = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(25)
            .query(&mut c)
            .unwrap();
        seen.extend(keys);
        // Meanwhile another client deletes keys behind and ahead, and adds new ones.
        w.del::<_, i64>(format!("k{:04}", round * 7)).unwrap();
        w.set::<_, _, ()>(format!("k{:04}x", round * 11), "new")
            .unwrap();
        round += 1;
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    let set: BTreeSet<&String> = seen.iter().collect();
    assert_eq!(set.len(), seen.len(), "no key returned twice");
    // Every key present throughout the walk was returned.
    for i in 0..300 {
        let k = format!("k{i:04}");
        let deleted = i % 7 == 0 && i / 7 < round;
        assert!(deleted || set.contains(&k), "{k} missing");
    }
}
