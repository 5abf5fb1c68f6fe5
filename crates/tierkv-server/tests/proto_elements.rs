//! The per-element layer (issue 25 item 4): hashes stored as metadata + one sub-key per
//! field, DEL/overwrite/expiry in O(1) with the old elements reclaimed by the server's
//! sweep, internal keys invisible to the keyspace commands, the reserved prefix refused,
//! HSCAN with real cursors, format-1 hashes read and rewritten on their first write,
//! packed hashes on an unordered engine, SELECT 0-15.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers: a failure here is a test failure"
)]

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use redis::{Commands, Value, cmd};
use tierkv::{Db, DurabilityMode, Options};
use tierkv_server::encoding::{self, HashEdit, Stored};

/// `INFO stats`'s count of reclaimed elements.
fn reclaimed(c: &mut redis::Connection) -> u64 {
    let info: String = cmd("INFO").arg("stats").query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("tierkv_reclaimed_elements:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

/// Waits until at least `n` elements were reclaimed (the sweep ticks every 100 ms).
fn wait_reclaimed(c: &mut redis::Connection, n: u64) -> u64 {
    let t = Instant::now();
    loop {
        let got = reclaimed(c);
        if got >= n {
            return got;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "only {got} of {n} elements reclaimed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn fill(c: &mut redis::Connection, key: &str, fields: usize) {
    for chunk in (0..fields).collect::<Vec<_>>().chunks(500) {
        let mut command = cmd("HSET");
        command.arg(key);
        for i in chunk {
            command.arg(format!("f{i:05}")).arg(format!("v{i}"));
        }
        command.query::<i64>(c).unwrap();
    }
}

#[test]
fn del_overwrite_and_expiry_are_o1_and_the_elements_are_reclaimed() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    fill(&mut c, "big", 3000);
    assert_eq!(c.hlen::<_, i64>("big").unwrap(), 3000);
    // Only the user key is visible, whatever the store holds.
    assert_eq!(common::run::<i64>(&mut c, "DBSIZE"), 1);
    assert_eq!(common::run::<Vec<String>>(&mut c, "KEYS *"), ["big"]);
    let page: (String, Vec<String>) = common::run(&mut c, "SCAN 0 COUNT 1000");
    assert_eq!(page, ("0".to_string(), vec!["big".to_string()]));
    assert_eq!(common::run::<String>(&mut c, "RANDOMKEY"), "big");
    assert_eq!(common::run::<String>(&mut c, "TYPE big"), "hash");

    let before = reclaimed(&mut c);
    let t = Instant::now();
    assert_eq!(c.del::<_, i64>("big").unwrap(), 1);
    let del_time = t.elapsed();
    assert_eq!(c.hlen::<_, i64>("big").unwrap(), 0);
    assert_eq!(
        c.hget::<_, _, Option<String>>("big", "f00001").unwrap(),
        None
    );
    wait_reclaimed(&mut c, before + 3000);
    assert!(del_time < Duration::from_secs(2), "DEL took {del_time:?}");

    // A new hash under the same key starts empty: nothing of the old one shows through.
    assert_eq!(c.hset::<_, _, _, i64>("big", "new", "1").unwrap(), 1);
    let all: Vec<String> = cmd("HKEYS").arg("big").query(&mut c).unwrap();
    assert_eq!(all, ["new"]);

    // Overwritten by a string, then expired: both reclaim.
    fill(&mut c, "h2", 500);
    let before = reclaimed(&mut c);
    c.set::<_, _, ()>("h2", "now a string").unwrap();
    wait_reclaimed(&mut c, before + 500);
    fill(&mut c, "h3", 400);
    let before = reclaimed(&mut c);
    assert_eq!(common::run::<i64>(&mut c, "PEXPIRE h3 50"), 1);
    assert!(common::run::<i64>(&mut c, "PTTL h3") > 0);
    wait_reclaimed(&mut c, before + 400);
    assert_eq!(c.hlen::<_, i64>("h3").unwrap(), 0);
    // The live hash was left alone.
    assert_eq!(c.hget::<_, _, String>("big", "new").unwrap(), "1");
}

#[test]
fn internal_keys_are_reserved() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    let internal = b"\xFF\xFEtk\x65anything".to_vec();
    let e = common::error_of(&mut c, cmd("SET").arg(&internal).arg("v"));
    assert!(
        e.contains("reserved for tierkv serve's internal keys"),
        "{e}"
    );
    let e = common::error_of(&mut c, cmd("GET").arg(&internal));
    assert!(e.contains("reserved"), "{e}");
    // A key merely close to the prefix is an ordinary key.
    c.set::<_, _, ()>(b"\xFF\xFEtj", "ok").unwrap();
    c.set::<_, _, ()>(b"\xFF\xFF", "ok").unwrap();
    c.hset::<_, _, _, ()>("h", "f", "v").unwrap();
    let keys: BTreeSet<Vec<u8>> = cmd("KEYS").arg("*").query(&mut c).unwrap();
    let want: BTreeSet<Vec<u8>> = [b"\xFF\xFEtj".to_vec(), b"\xFF\xFF".to_vec(), b"h".to_vec()]
        .into_iter()
        .collect();
    assert_eq!(keys, want);
    assert_eq!(common::run::<i64>(&mut c, "DBSIZE"), 3);
}

#[test]
fn hscan_walks_a_large_hash_with_real_cursors() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    fill(&mut c, "h", 1000);
    let mut cursor = "0".to_string();
    let mut seen = Vec::new();
    let mut calls = 0;
    loop {
        let (next, page): (String, Vec<String>) = cmd("HSCAN")
            .arg("h")
            .arg(&cursor)
            .arg("COUNT")
            .arg(100)
            .query(&mut c)
            .unwrap();
        assert!(page.len() <= 200);
        seen.extend(page.chunks(2).map(|p| p[0].clone()));
        calls += 1;
        cursor = next;
        if cursor == "0" {
            break;
        }
    }
    assert!(calls >= 10, "{calls} calls");
    let unique: BTreeSet<_> = seen.iter().cloned().collect();
    assert_eq!((seen.len(), unique.len()), (1000, 1000));
    // MATCH filters within pages; NOVALUES leaves the values out.
    let (_, page): (String, Vec<String>) = cmd("HSCAN")
        .arg("h")
        .arg(0)
        .arg("MATCH")
        .arg("f0000?")
        .arg("COUNT")
        .arg(1000)
        .arg("NOVALUES")
        .query(&mut c)
        .unwrap();
    assert_eq!(page.len(), 10);
    assert!(page.iter().all(|f| f.starts_with("f0000")));
}

#[test]
fn hash_commands_beyond_round_two() {
    for engine in ["dram:btree", "dram:hash"] {
        let srv = common::start(engine);
        let mut c = srv.client();
        assert_eq!(common::run::<i64>(&mut c, "HSETNX h a 1"), 1, "{engine}");
        assert_eq!(common::run::<i64>(&mut c, "HSETNX h a 2"), 0, "{engine}");
        assert_eq!(common::run::<i64>(&mut c, "HSTRLEN h a"), 1, "{engine}");
        assert_eq!(common::run::<i64>(&mut c, "HSTRLEN h zz"), 0, "{engine}");
        assert_eq!(
            common::run::<String>(&mut c, "HINCRBYFLOAT h x 1.5"),
            "1.5",
            "{engine}"
        );
        assert_eq!(
            common::run::<String>(&mut c, "HINCRBYFLOAT h x -0.25"),
            "1.25",
            "{engine}"
        );
        let e = common::error_of(&mut c, cmd("HINCRBYFLOAT").arg("h").arg("x").arg("y"));
        assert_eq!(e, "ERR value is not a valid float", "{engine}");
        c.set::<_, _, ()>("s", "v").unwrap();
        for words in [
            "HSETNX s a 1",
            "HSTRLEN s a",
            "HINCRBYFLOAT s a 1",
            "HLEN s",
        ] {
            let mut command = redis::Cmd::new();
            for w in words.split(' ') {
                command.arg(w);
            }
            let e = common::error_of(&mut c, &command);
            assert!(e.starts_with("WRONGTYPE"), "{engine} {words}: {e}");
        }
        let e = common::error_of(&mut c, cmd("GET").arg("h"));
        assert!(e.starts_with("WRONGTYPE"), "{engine}: {e}");
        let all: Vec<String> = cmd("HGETALL").arg("h").query(&mut c).unwrap();
        assert_eq!(all, ["a", "1", "x", "1.25"], "{engine}");
        let one: String = common::run(&mut c, "HRANDFIELD h");
        assert!(one == "a" || one == "x", "{engine}: {one}");
        let repeats: Vec<String> = common::run(&mut c, "HRANDFIELD h -5");
        assert_eq!(repeats.len(), 5, "{engine}");
        let mut whole: Vec<String> = common::run(&mut c, "HRANDFIELD h 10 WITHVALUES");
        let mut pairs: Vec<_> = whole.chunks(2).map(<[String]>::to_vec).collect();
        pairs.sort();
        whole = pairs.concat();
        assert_eq!(whole, ["a", "1", "x", "1.25"], "{engine}");
    }
}

#[test]
fn format_one_hashes_are_read_and_rewritten_per_element_on_write() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default().engine("prism")).unwrap();
    let mut edit = HashEdit::new(None);
    edit.set(b"b", b"2");
    edit.set(b"a", b"1");
    let packed = edit.encode();
    db.put(b"old", &packed).unwrap();
    db.put(b"old2", &encoding::wrap_expiry(u64::MAX / 2, &packed))
        .unwrap();
    let handle =
        tierkv_server::spawn(db, DurabilityMode::default(), common::test_config()).unwrap();
    let mut c = redis::Client::open(format!("redis://{}/", handle.addr()))
        .unwrap()
        .get_connection()
        .unwrap();
    // Read as it is (format 1 keeps insertion order).
    let all: Vec<String> = cmd("HGETALL").arg("old").query(&mut c).unwrap();
    assert_eq!(all, ["b", "2", "a", "1"]);
    assert_eq!(c.hlen::<_, i64>("old").unwrap(), 2);
    // The first write rewrites it per element.
    assert_eq!(c.hset::<_, _, _, i64>("old", "c", "3").unwrap(), 1);
    let all: Vec<String> = cmd("HGETALL").arg("old").query(&mut c).unwrap();
    assert_eq!(all, ["a", "1", "b", "2", "c", "3"]);
    assert_eq!(c.hdel::<_, _, i64>("old2", "a").unwrap(), 1);
    assert_eq!(c.hgetall::<_, Vec<String>>("old2").unwrap(), ["b", "2"]);
    assert!(
        common::run::<i64>(&mut c, "TTL old2") > 0,
        "the TTL survives"
    );
    assert_eq!(common::run::<i64>(&mut c, "DBSIZE"), 2);
    handle.shutdown().unwrap();
    // What the store now holds under the key: a metadata record, no longer the packed hash.
    let db = Db::open(dir.path(), Options::default().engine("prism")).unwrap();
    let stored = db.get(b"old").unwrap().unwrap();
    match encoding::decode(&stored).unwrap() {
        Stored::Meta(m) => assert_eq!((m.kind, m.count), (encoding::Kind::Hash, 3)),
        other => panic!("not rewritten per element: {other:?}"),
    }
    let ordered: Vec<_> = db.scan::<&[u8], _>(.., 100).unwrap();
    assert_eq!(ordered.len(), 2 + 3 + 1, "two keys, their five elements");
}

#[test]
fn select_isolates_sixteen_databases() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    c.set::<_, _, ()>("k", "zero").unwrap();
    c.hset::<_, _, _, ()>("h", "f", "zero").unwrap();
    assert_eq!(common::run::<String>(&mut c, "SELECT 1"), "OK");
    assert_eq!(c.get::<_, Option<String>>("k").unwrap(), None);
    assert_eq!(c.hlen::<_, i64>("h").unwrap(), 0);
    c.set::<_, _, ()>("k", "one").unwrap();
    c.hset::<_, _, _, ()>("h", "f", "one").unwrap();
    c.hset::<_, _, _, ()>("h", "g", "one").unwrap();
    assert_eq!(common::run::<i64>(&mut c, "DBSIZE"), 2);
    assert_eq!(common::run::<Vec<String>>(&mut c, "KEYS *"), ["h", "k"]);
    // COPY into database 2, with a hash's elements.
    assert_eq!(common::run::<i64>(&mut c, "COPY h h DB 2"), 1);
    let info: String = cmd("INFO").arg("keyspace").query(&mut c).unwrap();
    for line in ["db0:keys=2,", "db1:keys=2,", "db2:keys=1,"] {
        assert!(info.contains(line), "{line} in {info}");
    }
    assert_eq!(common::run::<String>(&mut c, "SELECT 2"), "OK");
    assert_eq!(c.hget::<_, _, String>("h", "g").unwrap(), "one");
    assert_eq!(common::run::<String>(&mut c, "SELECT 1"), "OK");
    assert_eq!(common::run::<String>(&mut c, "FLUSHDB"), "OK");
    assert_eq!(common::run::<i64>(&mut c, "DBSIZE"), 0);
    assert_eq!(common::run::<String>(&mut c, "SELECT 0"), "OK");
    assert_eq!(c.get::<_, String>("k").unwrap(), "zero");
    assert_eq!(c.hget::<_, _, String>("h", "f").unwrap(), "zero");
    // Another connection starts in database 0; FLUSHALL empties every database.
    let mut d = srv.client();
    assert_eq!(d.get::<_, String>("k").unwrap(), "zero");
    assert_eq!(common::run::<String>(&mut d, "FLUSHALL"), "OK");
    assert_eq!(common::run::<String>(&mut c, "SELECT 2"), "OK");
    assert_eq!(common::run::<i64>(&mut c, "DBSIZE"), 0);
    assert_eq!(
        common::error_of(&mut c, cmd("SELECT").arg(16)),
        "ERR DB index is out of range"
    );
    let v: Value = cmd("SELECT").arg(15).query(&mut c).unwrap();
    assert_eq!(v, Value::Okay);
}

#[test]
fn a_transaction_reads_its_own_pending_element_writes() {
    // Inside EXEC the writes are a pending batch; walks of a collection merge them in,
    // also when pending deletes empty whole pages of what the store holds.
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    fill(&mut c, "h", 600);
    let mut p = redis::pipe();
    p.atomic();
    let doomed: Vec<String> = (0..300).map(|i| format!("f{i:05}")).collect();
    p.hdel("h", &doomed).ignore();
    p.hset("h", "zz-new", "1").ignore();
    p.hgetall("h");
    p.hlen("h");
    p.cmd("HSCAN").arg("h").arg(0).arg("COUNT").arg(1000);
    let (all, len, scan): (Vec<String>, i64, (String, Vec<String>)) = p.query(&mut c).unwrap();
    assert_eq!(all.len(), 2 * 301);
    assert_eq!(len, 301);
    assert_eq!(all[0], "f00300");
    assert_eq!(all[all.len() - 2], "zz-new");
    assert_eq!(scan.1.len(), 2 * 301);
    // And lists: pops and pushes in one EXEC, then LRANGE.
    let mut p = redis::pipe();
    p.atomic();
    p.rpush("l", (0..400).collect::<Vec<i64>>()).ignore();
    p.lpop("l", std::num::NonZeroUsize::new(300)).ignore();
    p.rpush("l", "end").ignore();
    p.lrange("l", 0, -1);
    let (range,): (Vec<String>,) = p.query(&mut c).unwrap();
    assert_eq!(range.len(), 101);
    assert_eq!((range[0].as_str(), range[100].as_str()), ("300", "end"));
}
