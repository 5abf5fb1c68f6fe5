//! The keyspace commands on engines with an unordered index (issue 25 points 3 and 4):
//! SCAN, KEYS, DBSIZE and RANDOMKEY on `dram:hash`, `dram:lockfree` and `hetermm:hash`
//! answer as on `dram:btree` (the same sets of keys, the same counts) over random command
//! sequences with several databases, collections and expiring keys; and the elements of
//! collections deleted, overwritten or expired are reclaimed by the sweep there (the
//! engine's own key count comes back down to the live keys and elements).

#![allow(
    clippy::unwrap_used,
    reason = "test helpers: a failure here is a test failure"
)]

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use redis::{Value, cmd};
use tierkv::{ByteSize, Db, DurabilityMode, Options};

const DBS: u8 = 3;
const KEYS: u32 = 40;

/// A server over a new store of `engine`; `hetermm:*` gets small pools.
fn start(engine: &str) -> common::TestServer {
    let options = Options::default().engine(engine);
    let options = if engine.starts_with("hetermm") {
        options
            .pmem_size(ByteSize::mib(64))
            .flash_size(ByteSize::mib(256))
            .dram_budget(ByteSize::mib(64))
    } else {
        options
    };
    common::start_with(options, common::test_config())
}

/// One random command, or two, over the keys `k0`..`k39` (strings, lists, sets, hashes;
/// long TTLs; deletes and overwrites; SELECT; a rare FLUSHDB or SWAPDB), and keys with
/// short TTLs. A key given a TTL of milliseconds gets a name of its own (`t<n>`, `c<n>`),
/// which no later command touches: the two servers receive each command one after the
/// other, so such a key may already have expired on one and not yet on the other, and
/// only the keyspace comparisons (after a pause longer than every short TTL) look at it.
fn random_command(rng: &mut ChaCha8Rng, fresh: &mut u64) -> Vec<redis::Cmd> {
    let key = format!("k{}", rng.random_range(0..KEYS));
    let elem = format!("e{}", rng.random_range(0..8));
    let mut c;
    match rng.random_range(0..100) {
        0..15 => {
            c = cmd("SET");
            c.arg(&key).arg(rng.random_range(0..100));
        }
        15..20 => {
            // Expires before the comparison (the sequence ends with a pause).
            *fresh += 1;
            c = cmd("SET");
            c.arg(format!("t{fresh}"))
                .arg("short")
                .arg("PX")
                .arg(rng.random_range(1..30));
        }
        20..25 => {
            c = cmd("SET");
            c.arg(&key).arg("long").arg("EX").arg(1000);
        }
        25..40 => {
            c = cmd("RPUSH");
            c.arg(&key).arg(&elem).arg("x");
        }
        40..47 => {
            c = cmd("LPOP");
            c.arg(&key);
        }
        47..57 => {
            c = cmd("SADD");
            c.arg(&key).arg(&elem);
        }
        57..62 => {
            c = cmd("SREM");
            c.arg(&key).arg(&elem);
        }
        62..70 => {
            c = cmd("HSET");
            c.arg(&key).arg(&elem).arg(1);
        }
        70..82 => {
            c = cmd("DEL");
            c.arg(&key);
        }
        82..87 => {
            // A collection that expires before the comparison.
            *fresh += 1;
            let key = format!("c{fresh}");
            let mut fill = cmd(["RPUSH", "SADD", "HSET"][rng.random_range(0..3)]);
            fill.arg(&key).arg(&elem).arg("x");
            let mut expire = cmd("PEXPIRE");
            expire.arg(&key).arg(rng.random_range(1..30));
            return vec![fill, expire];
        }
        87..92 => {
            c = cmd("SELECT");
            c.arg(rng.random_range(0..DBS));
        }
        92..95 => {
            c = cmd("EXPIRE");
            c.arg(&key).arg(1000);
        }
        // (No MOVE, RENAME or COPY: of a collection they walk its elements in order,
        // which unordered engines refuse — a documented difference of theirs.)
        97 => {
            c = cmd("SWAPDB");
            c.arg(rng.random_range(0..DBS))
                .arg(rng.random_range(0..DBS));
        }
        98 if rng.random_range(0..4) == 0 => c = cmd("FLUSHDB"),
        _ => {
            c = cmd("GET");
            c.arg(&key);
        }
    }
    vec![c]
}

/// Every key of a full SCAN with `args` after the cursor.
fn scan_all(c: &mut redis::Connection, args: &[&str]) -> Vec<String> {
    let mut command = cmd("SCAN");
    command.cursor_arg(0);
    for a in args {
        command.arg(*a);
    }
    command.iter(c).unwrap().map(Result::unwrap).collect()
}

/// What the keyspace commands say about the selected database: SCAN (with COUNT 1, 7 and
/// the default; MATCH; TYPE), KEYS, DBSIZE, and whether RANDOMKEY names a key of it.
fn keyspace(c: &mut redis::Connection, engine: &str) -> Vec<(String, BTreeSet<String>)> {
    let mut out = Vec::new();
    let all = scan_all(c, &[]);
    let set: BTreeSet<String> = all.iter().cloned().collect();
    assert_eq!(all.len(), set.len(), "{engine}: SCAN returned a key twice");
    for count in ["1", "7"] {
        let again: BTreeSet<String> = scan_all(c, &["COUNT", count]).into_iter().collect();
        assert_eq!(again, set, "{engine}: SCAN COUNT {count}");
    }
    out.push(("scan".to_owned(), set.clone()));
    for (name, args) in [
        ("scan match", &["MATCH", "k1*"][..]),
        ("scan list", &["TYPE", "list"][..]),
        ("scan set", &["TYPE", "set"][..]),
        ("scan string", &["TYPE", "string"][..]),
    ] {
        out.push((name.to_owned(), scan_all(c, args).into_iter().collect()));
    }
    let keys: Vec<String> = cmd("KEYS").arg("*").query(c).unwrap();
    out.push(("keys".to_owned(), keys.into_iter().collect()));
    let keys: Vec<String> = cmd("KEYS").arg("k?").query(c).unwrap();
    out.push(("keys k?".to_owned(), keys.into_iter().collect()));
    let n: i64 = cmd("DBSIZE").query(c).unwrap();
    out.push(("dbsize".to_owned(), BTreeSet::from([n.to_string()])));
    let random: Option<String> = cmd("RANDOMKEY").query(c).unwrap();
    match random {
        Some(k) => assert!(set.contains(&k), "{engine}: RANDOMKEY {k} not in {set:?}"),
        None => assert!(set.is_empty(), "{engine}: RANDOMKEY nil with keys"),
    }
    out
}

/// Runs the same random sequences against `engine` and `dram:btree`: the replies of the
/// commands and, every 50 commands (after the short TTLs have passed and every key was
/// read once, so that expired keys are gone from both), the keyspace of every database.
fn same_keyspace_as_btree(engine: &str, seed: u64) {
    let (srv, oracle) = (start(engine), start("dram:btree"));
    let (mut c, mut o) = (srv.client(), oracle.client());
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    // How many keys, lists and sets the comparisons saw (the test must compare something).
    let (mut keys, mut lists, mut sets) = (0, 0, 0);
    let mut fresh = 0;
    for round in 0..6 {
        for _ in 0..50 {
            for command in random_command(&mut rng, &mut fresh) {
                let got: Result<Value, _> = command.query(&mut c);
                let want: Result<Value, _> = command.query(&mut o);
                assert_eq!(
                    format!("{got:?}"),
                    format!("{want:?}"),
                    "{engine} seed {seed} round {round}: {:?}",
                    String::from_utf8_lossy(&command.get_packed_command())
                );
            }
        }
        std::thread::sleep(Duration::from_millis(40));
        for db in 0..DBS {
            for con in [&mut c, &mut o] {
                let _: () = cmd("SELECT").arg(db).query(con).unwrap();
                for k in 0..KEYS {
                    let _: i64 = cmd("EXISTS").arg(format!("k{k}")).query(con).unwrap();
                }
                for n in 1..=fresh {
                    for k in [format!("t{n}"), format!("c{n}")] {
                        let _: i64 = cmd("EXISTS").arg(k).query(con).unwrap();
                    }
                }
            }
            let got = keyspace(&mut c, engine);
            let want = keyspace(&mut o, "dram:btree");
            assert_eq!(got, want, "{engine} seed {seed} round {round} db {db}");
            let size = |name: &str| {
                want.iter()
                    .find(|(n, _)| n == name)
                    .map_or(0, |(_, s)| s.len())
            };
            keys += size("scan");
            lists += size("scan list");
            sets += size("scan set");
        }
        let _: () = cmd("SELECT").arg(0).query(&mut c).unwrap();
        let _: () = cmd("SELECT").arg(0).query(&mut o).unwrap();
    }
    assert!(
        keys > 100 && lists > 10 && sets > 10,
        "{keys} {lists} {sets}"
    );
}

#[test]
fn keyspace_commands_on_unordered_engines_answer_as_on_dram_btree() {
    let seed = common::seed();
    for (i, engine) in ["dram:hash", "dram:lockfree", "hetermm:hash"]
        .into_iter()
        .enumerate()
    {
        for s in 0..3 {
            same_keyspace_as_btree(engine, seed.wrapping_add(i as u64 * 100 + s));
        }
    }
}

/// The engine's own count of store keys (`INFO tierkv`'s `keys`: every store key,
/// elements and internal keys included).
fn store_keys(c: &mut redis::Connection) -> u64 {
    let info: String = cmd("INFO").arg("tierkv").query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("keys:"))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
        .unwrap()
}

/// Elements orphaned by DEL, an overwrite and an expiry of lists and sets (in databases
/// 0 and 4) are reclaimed by the sweep on an unordered engine: the engine's key count
/// comes back to what the live keys hold.
fn orphans_are_reclaimed(srv: &common::TestServer, engine: &str) {
    let mut c = srv.client();
    let words = |c: &mut redis::Connection, w: &str| {
        let _: Value = common::run(c, w);
    };
    let base = store_keys(&mut c);
    let elems: Vec<String> = (0..500).map(|i| format!("e{i}")).collect();
    for db in [0, 4] {
        words(&mut c, &format!("SELECT {db}"));
        for key in ["deleted", "overwritten", "expired", "kept"] {
            let _: i64 = cmd("RPUSH")
                .arg(format!("l:{key}"))
                .arg(&elems)
                .query(&mut c)
                .unwrap();
            let _: i64 = cmd("SADD")
                .arg(format!("s:{key}"))
                .arg(&elems)
                .query(&mut c)
                .unwrap();
        }
        words(&mut c, "DEL l:deleted s:deleted");
        words(&mut c, "SET l:overwritten x");
        words(&mut c, "SET s:overwritten x");
        words(&mut c, "PEXPIRE l:expired 20");
        words(&mut c, "PEXPIRE s:expired 20");
    }
    // Live per database: l:kept (its metadata and 500 elements in 16 chunks of 32),
    // s:kept (1 + 500) and the two strings.
    let want = base + 2 * ((1 + 500_u64.div_ceil(32)) + 501 + 2);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut now = store_keys(&mut c);
    while now != want && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        now = store_keys(&mut c);
    }
    assert_eq!(now, want, "{engine}: orphaned elements left in the store");
    for db in [0, 4] {
        words(&mut c, &format!("SELECT {db}"));
        assert_eq!(common::run::<i64>(&mut c, "LLEN l:kept"), 500, "{engine}");
        assert_eq!(common::run::<i64>(&mut c, "SCARD s:kept"), 500, "{engine}");
        assert_eq!(common::run::<i64>(&mut c, "DBSIZE"), 4, "{engine}");
    }
}

#[test]
fn orphaned_elements_are_reclaimed_on_unordered_engines() {
    for engine in ["dram:hash", "dram:lockfree", "hetermm:hash"] {
        orphans_are_reclaimed(&start(engine), engine);
    }
}

/// After a restart of a persistent unordered engine the sweep finds elements orphaned
/// before it (a list deleted, then the server stopped before the sweep's pass).
#[test]
fn elements_orphaned_before_a_restart_are_reclaimed_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let options = || {
        Options::default()
            .engine("hetermm:hash")
            .pmem_dir(dir.path().join("pmem"))
            .pmem_size(ByteSize::mib(64))
            .flash_dir(dir.path().join("flash"))
            .flash_size(ByteSize::mib(256))
            .dram_budget(ByteSize::mib(64))
    };
    let db = Db::open(dir.path().join("db"), options()).unwrap();
    let srv = tierkv_server::spawn(db, DurabilityMode::default(), common::test_config()).unwrap();
    let mut c = redis::Client::open(format!("redis://{}/", srv.addr()))
        .unwrap()
        .get_connection()
        .unwrap();
    let elems: Vec<String> = (0..300).map(|i| format!("e{i}")).collect();
    let _: i64 = cmd("RPUSH").arg("l").arg(&elems).query(&mut c).unwrap();
    let _: i64 = cmd("RPUSH").arg("kept").arg(&elems).query(&mut c).unwrap();
    let _: () = common::run(&mut c, "SET l overwritten");
    drop(c);
    srv.shutdown().unwrap();
    let db = Db::open(dir.path().join("db"), options()).unwrap();
    let srv = tierkv_server::spawn(db, DurabilityMode::default(), common::test_config()).unwrap();
    let mut c = redis::Client::open(format!("redis://{}/", srv.addr()))
        .unwrap()
        .get_connection()
        .unwrap();
    // "l" (a string now) and "kept": its metadata and 300 elements in 10 chunks of 32.
    let want = 1 + (1 + 300_u64.div_ceil(32));
    let deadline = Instant::now() + Duration::from_secs(30);
    while store_keys(&mut c) > want && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(store_keys(&mut c), want);
    assert_eq!(common::run::<i64>(&mut c, "LLEN kept"), 300);
    assert_eq!(common::run::<String>(&mut c, "GET l"), "overwritten");
    srv.shutdown().unwrap();
}
