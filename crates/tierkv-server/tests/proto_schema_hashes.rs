//! Hashes bound to a schema (issue 20): `--schema-prefix user:=users` makes the keys under
//! `user:` rows of the schema `users`, read and updated field by field with the hash
//! commands. Run on `focus` (native schema API) and on `dram:btree` (the consolidated
//! adapter): round trips, field errors, commands that do not apply, the keyspace commands
//! (DEL, EXISTS, TYPE, SCAN, KEYS, DBSIZE, FLUSHDB), MULTI refusing them, concurrent
//! HSETs of different fields of one row losing nothing, and a restart keeping the rows.
//! Not covered by the differential test against redis-server (Redis has no schemas).

#![allow(
    clippy::unwrap_used,
    reason = "test helpers: a failure here is a test failure"
)]

mod common;

use std::collections::HashMap;
use std::path::Path;

use redis::{Commands, Value, cmd};
use tierkv::{Db, DurabilityMode, FieldDef, Options};
use tierkv_server::{ServerConfig, ServerHandle};

const ENGINES: &[&str] = &["focus", "dram:btree"];
const THREADS: usize = 6;
const ROUNDS: usize = 150;

/// Opens the store in `dir` (creating the schemas when `create`) and serves it with
/// `users` bound to `user:` and `counters` to `c:`.
fn serve(dir: &Path, engine: &str, create: bool) -> ServerHandle {
    let db = Db::open(dir, Options::default().engine(engine)).unwrap();
    if create {
        let s = db.schema_store().unwrap();
        s.create_schema(
            "users",
            &[
                FieldDef::fixed("age", 4),
                FieldDef::var("name", 32),
                FieldDef::var("city", 16),
                FieldDef::var("visits", 20),
            ],
        )
        .unwrap();
        let fields: Vec<FieldDef> = (0..THREADS)
            .map(|t| FieldDef::var(&format!("f{t}"), 16))
            .collect();
        s.create_schema("counters", &fields).unwrap();
    }
    let config = ServerConfig {
        schema_prefixes: vec!["user:=users".into(), "c:=counters".into()],
        ..common::test_config()
    };
    tierkv_server::spawn(db, DurabilityMode::default(), config).unwrap()
}

fn client(h: &ServerHandle) -> redis::Connection {
    redis::Client::open(format!("redis://{}/", h.addr()))
        .unwrap()
        .get_connection()
        .unwrap()
}

fn err(c: &mut redis::Connection, words: &[&[u8]]) -> String {
    let mut command = redis::Cmd::new();
    for w in words {
        command.arg(*w);
    }
    common::error_of(c, &command)
}

fn hgetall(c: &mut redis::Connection, key: &str) -> Vec<(String, Vec<u8>)> {
    let v: Vec<Vec<u8>> = cmd("HGETALL").arg(key).query(c).unwrap();
    v.chunks(2)
        .map(|p| (String::from_utf8(p[0].clone()).unwrap(), p[1].clone()))
        .collect()
}

fn round_trips_and_errors(c: &mut redis::Connection, engine: &str) {
    let added: i64 = common::run(c, "HSET user:1 name bob age abcd");
    assert_eq!(added, 2, "{engine}: a new row counts the fields named");
    assert_eq!(
        c.hget::<_, _, String>("user:1", "name").unwrap(),
        "bob",
        "{engine}"
    );
    // A new row's unnamed fields: zero bytes (fixed), empty (variable).
    assert_eq!(c.hget::<_, _, Vec<u8>>("user:1", "city").unwrap(), b"");
    let added: i64 = common::run(c, "HSET user:2 age wxyz age 1234");
    assert_eq!(
        added, 1,
        "a field named twice counts once, the last value wins"
    );
    assert_eq!(c.hget::<_, _, String>("user:2", "age").unwrap(), "1234");
    assert_eq!(c.hget::<_, _, Vec<u8>>("user:2", "name").unwrap(), b"");
    let row2 = hgetall(c, "user:2");
    assert_eq!(row2[0], ("age".to_string(), b"1234".to_vec()));
    let added: i64 = common::run(c, "HSET user:1 city paris");
    assert_eq!(added, 0, "an existing row has every field");
    assert_eq!(
        hgetall(c, "user:1"),
        vec![
            ("age".to_string(), b"abcd".to_vec()),
            ("name".to_string(), b"bob".to_vec()),
            ("city".to_string(), b"paris".to_vec()),
            ("visits".to_string(), b"".to_vec()),
        ]
    );
    let got: Vec<Option<String>> = common::run(c, "HMGET user:1 city age city");
    assert_eq!(
        got,
        vec![
            Some("paris".into()),
            Some("abcd".into()),
            Some("paris".into())
        ]
    );
    let none: Vec<Option<String>> = common::run(c, "HMGET user:9 name");
    assert_eq!(none, vec![None]);
    assert_eq!(
        c.hget::<_, _, Option<String>>("user:9", "name").unwrap(),
        None
    );
    assert!(hgetall(c, "user:9").is_empty());
    let _: () = common::run(c, "HMSET user:1 name alice");
    assert_eq!(c.hget::<_, _, String>("user:1", "name").unwrap(), "alice");
    assert_eq!(c.hget::<_, _, String>("user:1", "city").unwrap(), "paris");
    assert_eq!(c.hlen::<_, i64>("user:1").unwrap(), 4);
    assert_eq!(c.hlen::<_, i64>("user:9").unwrap(), 0);
    assert_eq!(
        c.hkeys::<_, Vec<String>>("user:1").unwrap(),
        vec!["age", "name", "city", "visits"]
    );
    assert_eq!(
        c.hvals::<_, Vec<String>>("user:1").unwrap(),
        vec!["abcd", "alice", "paris", ""]
    );
    assert!(c.hexists::<_, _, bool>("user:1", "name").unwrap());
    assert!(!c.hexists::<_, _, bool>("user:1", "nope").unwrap());
    assert!(!c.hexists::<_, _, bool>("user:9", "name").unwrap());
    let n: i64 = common::run(c, "HSTRLEN user:1 name");
    assert_eq!(n, 5);
    let n: i64 = common::run(c, "HSETNX user:1 name x");
    assert_eq!(n, 0);
    let n: i64 = common::run(c, "HSETNX user:3 name carol");
    assert_eq!(n, 1);
    assert_eq!(c.hget::<_, _, String>("user:3", "name").unwrap(), "carol");
    let page: (String, Vec<String>) = common::run(c, "HSCAN user:3 0 MATCH n*");
    assert_eq!(
        page,
        (
            "0".to_string(),
            vec!["name".to_string(), "carol".to_string()]
        )
    );

    // HINCRBY on a variable field of decimal text; refused on a fixed one.
    assert_eq!(c.hincr::<_, _, _, i64>("user:1", "visits", 5).unwrap(), 5);
    assert_eq!(c.hincr::<_, _, _, i64>("user:1", "visits", -7).unwrap(), -2);
    let e = err(c, &[b"HINCRBY", b"user:1", b"age", b"1"]);
    assert!(e.contains("fixed field") && e.contains("age"), "{e}");
    let e = err(c, &[b"HINCRBY", b"user:1", b"name", b"1"]);
    assert!(e.contains("not an integer"), "{e}");

    // Field errors name the field and the limit; nothing is written.
    let e = err(c, &[b"HSET", b"user:4", b"age", b"123"]);
    assert!(
        e.contains("'age'") && e.contains("fixed at 4 bytes") && e.contains("3 bytes"),
        "{e}"
    );
    let long = [b'x'; 33];
    let e = err(c, &[b"HSET", b"user:4", b"name", &long]);
    assert!(
        e.contains("'name'") && e.contains("at most 32 bytes"),
        "{e}"
    );
    let e = err(c, &[b"HSET", b"user:4", b"name", b"ok", b"nope", b"v"]);
    assert!(
        e.contains("unknown field 'nope'")
            && e.contains("users")
            && e.contains("age, name, city, visits"),
        "{e}"
    );
    let e = err(c, &[b"HGET", b"user:1", b"nope"]);
    assert!(e.contains("unknown field 'nope'"), "{e}");
    let e = err(c, &[b"HSET", b"user:4", b"name"]);
    assert!(e.contains("wrong number of arguments"), "{e}");
    assert_eq!(
        c.exists::<_, i64>("user:4").unwrap(),
        0,
        "a refused HSET writes nothing"
    );

    // Commands that do not apply.
    let e = err(c, &[b"HDEL", b"user:1", b"name"]);
    assert!(e.contains("cannot be removed"), "{e}");
    assert_eq!(c.hget::<_, _, String>("user:1", "name").unwrap(), "alice");
    let e = err(c, &[b"LPUSH", b"user:1", b"x"]);
    assert!(
        e.starts_with("WRONGTYPE") && e.contains("schema 'users'"),
        "{e}"
    );
    let e = err(c, &[b"GET", b"user:1"]);
    assert!(e.starts_with("WRONGTYPE"), "{e}");
    let e = err(c, &[b"SET", b"user:7", b"v"]);
    assert!(e.starts_with("WRONGTYPE"), "{e}");
    let e = err(c, &[b"HINCRBYFLOAT", b"user:1", b"visits", b"1.5"]);
    assert!(e.contains("not supported"), "{e}");

    // Keyspace commands see rows.
    assert_eq!(c.key_type::<_, String>("user:1").unwrap(), "hash");
    assert_eq!(c.key_type::<_, String>("user:9").unwrap(), "none");
    let _: () = c.set("a", "plain").unwrap();
    let _: () = c.set("zz", "plain").unwrap();
    let n: i64 = common::run(c, "EXISTS user:1 a user:9 user:1");
    assert_eq!(n, 3);
    let keys: Vec<String> = c.keys("*").unwrap();
    assert_eq!(keys, vec!["a", "user:1", "user:2", "user:3", "zz"]);
    let keys: Vec<String> = c.keys("user:*").unwrap();
    assert_eq!(keys, vec!["user:1", "user:2", "user:3"]);
    assert_eq!(common::run::<i64>(c, "DBSIZE"), 5);
    let mut cursor = "0".to_string();
    let mut seen = Vec::new();
    loop {
        let (next, page): (String, Vec<String>) = cmd("SCAN")
            .arg(&cursor)
            .arg("COUNT")
            .arg(1)
            .query(c)
            .unwrap();
        seen.extend(page);
        if next == "0" {
            break;
        }
        cursor = next;
    }
    assert_eq!(seen, vec!["a", "user:1", "user:2", "user:3", "zz"]);
    let (_, hashes): (String, Vec<String>) = common::run(c, "SCAN 0 COUNT 100 TYPE hash");
    assert_eq!(hashes, vec!["user:1", "user:2", "user:3"]);
    let n: i64 = common::run(c, "DEL user:2 a user:9");
    assert_eq!(n, 2);
    assert_eq!(
        c.hget::<_, _, Option<String>>("user:2", "age").unwrap(),
        None
    );

    // MULTI refuses commands on bound keys when queued: EXECABORT, nothing applied.
    let _: () = cmd("MULTI").query(c).unwrap();
    let _: Value = common::run(c, "SET b 1");
    let e = err(c, &[b"HSET", b"user:5", b"name", b"x"]);
    assert!(e.contains("transaction"), "{e}");
    let e = err(c, &[b"EXEC"]);
    assert!(e.starts_with("EXECABORT"), "{e}");
    assert_eq!(c.exists::<_, i64>("b").unwrap(), 0);
    assert_eq!(c.exists::<_, i64>("user:5").unwrap(), 0);

    // Databases: rows are per database; FLUSHDB removes the selected database's rows only
    // and keeps the schema.
    let _: () = common::run(c, "SELECT 1");
    assert_eq!(c.exists::<_, i64>("user:1").unwrap(), 0);
    let _: i64 = common::run(c, "HSET user:1 name db1");
    let _: () = common::run(c, "SELECT 0");
    assert_eq!(c.hget::<_, _, String>("user:1", "name").unwrap(), "alice");
    let _: () = cmd("FLUSHDB").query(c).unwrap();
    assert_eq!(c.exists::<_, i64>("user:1").unwrap(), 0);
    assert_eq!(common::run::<i64>(c, "DBSIZE"), 0);
    let _: () = common::run(c, "SELECT 1");
    assert_eq!(c.hget::<_, _, String>("user:1", "name").unwrap(), "db1");
    let _: () = cmd("FLUSHALL").query(c).unwrap();
    assert_eq!(c.exists::<_, i64>("user:1").unwrap(), 0);
    let _: i64 = common::run(c, "HSET user:1 name again");
    assert_eq!(c.hget::<_, _, String>("user:1", "name").unwrap(), "again");
    let _: () = common::run(c, "SELECT 0");
}

/// Several clients HSET different fields of one row at once; every field ends with its
/// client's last value (no update lost).
fn concurrent_fields(h: &ServerHandle) {
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let mut c = client(h);
            std::thread::spawn(move || {
                for i in 0..ROUNDS {
                    let _: i64 = cmd("HSET")
                        .arg("c:shared")
                        .arg(format!("f{t}"))
                        .arg(format!("{t}-{i}"))
                        .query(&mut c)
                        .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut c = client(h);
    let row: HashMap<String, Vec<u8>> = hgetall(&mut c, "c:shared").into_iter().collect();
    for t in 0..THREADS {
        assert_eq!(
            row.get(&format!("f{t}"))
                .map(|v| String::from_utf8_lossy(v).into_owned()),
            Some(format!("{t}-{}", ROUNDS - 1)),
            "field f{t}"
        );
    }
}

#[test]
fn bound_prefixes_behave_as_hashes_over_rows() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let h = serve(dir.path(), engine, true);
        let mut c = client(&h);
        round_trips_and_errors(&mut c, engine);
        concurrent_fields(&h);
        drop(c);
        h.shutdown().unwrap();
    }
}

/// Rows written through the protocol, the server restarted with the same binding: they
/// are there (focus natively, prism through the consolidated adapter; `dram` keeps
/// nothing across a restart). The same store served without the binding does not show
/// them, and FLUSHALL there keeps the schema and the rows (the adapter's ranges).
#[test]
fn a_restart_keeps_the_rows() {
    for engine in ["focus", "prism"] {
        let dir = tempfile::tempdir().unwrap();
        let h = serve(dir.path(), engine, true);
        let mut c = client(&h);
        let _: i64 = common::run(&mut c, "HSET user:42 name kept age 0042");
        let _: i64 = common::run(&mut c, "HSET c:1 f1 one");
        let _: () = c.set("plain", "p").unwrap();
        drop(c);
        h.shutdown().unwrap();

        let db = Db::open(dir.path(), Options::default().engine(engine)).unwrap();
        let unbound =
            tierkv_server::spawn(db, DurabilityMode::default(), common::test_config()).unwrap();
        let mut c = client(&unbound);
        let keys: Vec<String> = c.keys("*").unwrap();
        assert_eq!(
            keys,
            vec!["plain"],
            "{engine}: rows are not keys without the binding"
        );
        let _: () = cmd("FLUSHALL").query(&mut c).unwrap();
        drop(c);
        unbound.shutdown().unwrap();

        let h = serve(dir.path(), engine, false);
        let mut c = client(&h);
        assert_eq!(
            c.hget::<_, _, String>("user:42", "name").unwrap(),
            "kept",
            "{engine}"
        );
        assert_eq!(c.hget::<_, _, String>("user:42", "age").unwrap(), "0042");
        assert_eq!(c.hget::<_, _, String>("c:1", "f1").unwrap(), "one");
        assert_eq!(c.exists::<_, i64>("plain").unwrap(), 0);
        let keys: Vec<String> = c.keys("*").unwrap();
        assert_eq!(keys, vec!["c:1", "user:42"], "{engine}");
        drop(c);
        h.shutdown().unwrap();
    }
}

#[test]
fn a_binding_to_a_missing_schema_or_overlapping_prefixes_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default().engine("dram:btree")).unwrap();
    let config = ServerConfig {
        schema_prefixes: vec!["user:=nosuch".into()],
        ..common::test_config()
    };
    let e = tierkv_server::spawn(db, DurabilityMode::default(), config)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("no schema \"nosuch\""), "{e}");
}

#[test]
fn reserved_adapter_keys_are_refused_and_hidden() {
    let dir = tempfile::tempdir().unwrap();
    let h = serve(dir.path(), "prism", true);
    let mut c = client(&h);
    // The consolidated adapter's catalog lives under 0xFF 'C' in the same store: it is
    // neither listed nor writable, and FLUSHALL keeps it (the binding works after).
    let e = err(&mut c, &[b"SET", b"\xFFC", b"x"]);
    assert!(e.contains("reserved"), "{e}");
    let _: i64 = common::run(&mut c, "HSET user:1 name n");
    let keys: Vec<Vec<u8>> = c.keys("*").unwrap();
    assert_eq!(keys, vec![b"user:1".to_vec()]);
    let _: () = cmd("FLUSHALL").query(&mut c).unwrap();
    drop(c);
    h.shutdown().unwrap();
    let h = serve(dir.path(), "prism", false);
    let mut c = client(&h);
    assert_eq!(c.exists::<_, i64>("user:1").unwrap(), 0);
    let _: i64 = common::run(&mut c, "HSET user:1 name n");
    drop(c);
    h.shutdown().unwrap();
}

/// EXEC after WATCH of a row: `true` when it ran.
fn exec_ran(c: &mut redis::Connection) -> bool {
    let _: () = cmd("MULTI").query(c).unwrap();
    let _: Value = cmd("SET").arg("tx").arg("1").query(c).unwrap();
    !matches!(cmd("EXEC").query::<Value>(c).unwrap(), Value::Nil)
}

/// WATCH of a bound key sees the row's writes and deletion, and SWAPDB fails it only when
/// the row exists in one of the two databases (as for any key).
#[test]
fn watch_covers_rows() {
    let dir = tempfile::tempdir().unwrap();
    let h = serve(dir.path(), "dram:btree", true);
    let mut c = client(&h);
    let mut other = client(&h);
    let _: () = common::run(&mut c, "WATCH user:1");
    let _: i64 = common::run(&mut other, "HSET user:1 name x");
    assert!(!exec_ran(&mut c), "a row write fails the watch");
    let _: () = common::run(&mut c, "WATCH user:1");
    let _: i64 = common::run(&mut other, "DEL user:1");
    assert!(!exec_ran(&mut c), "a row deletion fails the watch");
    let _: () = common::run(&mut c, "WATCH user:1");
    let _: () = common::run(&mut other, "SWAPDB 0 1");
    assert!(exec_ran(&mut c), "no row in either database");
    let _: () = common::run(&mut other, "SELECT 1");
    let _: i64 = common::run(&mut other, "HSET user:1 name in-db-1");
    let _: () = common::run(&mut c, "WATCH user:1");
    let _: () = common::run(&mut other, "SWAPDB 0 1");
    assert!(
        !exec_ran(&mut c),
        "the swap brings a row into the watched database"
    );
    assert_eq!(c.hget::<_, _, String>("user:1", "name").unwrap(), "in-db-1");
    drop((c, other));
    h.shutdown().unwrap();
}
