//! SWAPDB (issue 25, round 4): two databases exchange their contents as clients see them —
//! strings, TTLs and collections — and every command that names a database follows
//! (SELECT, FLUSHDB, MOVE, COPY ... DB, DBSIZE, SCAN, INFO keyspace); blocked clients are
//! woken by a swap that fills their list; the swap survives `kill -9` and a restart; a
//! stored map that is not a permutation stops the server from starting. Replies are also
//! checked against redis-server by the differential test.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers: a failure here is a test failure"
)]

mod common;

use std::time::{Duration, Instant};

use common::proc::Proc;
use redis::{Commands, Value, cmd};

fn select(c: &mut redis::Connection, db: u8) {
    let _: () = cmd("SELECT").arg(db).query(c).unwrap();
}

/// Fills logical database `db` with a string with a TTL, a plain string, a hash and a list,
/// each tagged with `tag`.
fn fill(c: &mut redis::Connection, db: u8, tag: &str) {
    select(c, db);
    let _: () = cmd("SET")
        .arg("s")
        .arg(tag)
        .arg("EX")
        .arg(1000)
        .query(c)
        .unwrap();
    let _: () = c.set(format!("only-{tag}"), tag).unwrap();
    let _: () = c.hset("h", "f", tag).unwrap();
    let _: () = c.rpush("l", &[tag, tag]).unwrap();
}

fn check(c: &mut redis::Connection, db: u8, tag: &str) {
    select(c, db);
    assert_eq!(c.get::<_, String>("s").unwrap(), tag, "db {db}");
    let ttl: i64 = c.ttl("s").unwrap();
    assert!((990..=1000).contains(&ttl), "db {db}: ttl {ttl}");
    assert_eq!(c.get::<_, String>(format!("only-{tag}")).unwrap(), tag);
    assert_eq!(c.hget::<_, _, String>("h", "f").unwrap(), tag);
    assert_eq!(
        c.lrange::<_, Vec<String>>("l", 0, -1).unwrap(),
        vec![tag, tag]
    );
    assert_eq!(common::run::<i64>(c, "DBSIZE"), 4);
}

#[test]
fn swapdb_exchanges_contents_ttls_and_collections() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    fill(&mut c, 0, "zero");
    fill(&mut c, 1, "one");
    fill(&mut c, 7, "seven");
    let _: () = common::run(&mut c, "SWAPDB 0 1");
    check(&mut c, 0, "one");
    check(&mut c, 1, "zero");
    check(&mut c, 7, "seven");
    // A database swapped with an empty one, then swapped on.
    let _: () = common::run(&mut c, "SWAPDB 1 9");
    select(&mut c, 1);
    assert_eq!(common::run::<i64>(&mut c, "DBSIZE"), 0);
    check(&mut c, 9, "zero");
    let _: () = common::run(&mut c, "SWAPDB 9 0");
    check(&mut c, 0, "zero");
    check(&mut c, 9, "one");
    // Swapping a database with itself changes nothing.
    let _: () = common::run(&mut c, "SWAPDB 7 7");
    check(&mut c, 7, "seven");
}

#[test]
fn commands_that_name_a_database_follow_the_swap() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    fill(&mut c, 2, "two");
    let _: () = common::run(&mut c, "SWAPDB 2 0");
    select(&mut c, 0);
    // SCAN and KEYS walk the logical database 0, now stored as database 2.
    let (cursor, mut keys): (u64, Vec<String>) = cmd("SCAN")
        .arg(0)
        .arg("COUNT")
        .arg(100)
        .query(&mut c)
        .unwrap();
    keys.sort();
    assert_eq!(
        (cursor, keys),
        (
            0,
            vec!["h".into(), "l".into(), "only-two".into(), "s".into()]
        )
    );
    let info: String = cmd("INFO").arg("keyspace").query(&mut c).unwrap();
    assert!(info.contains("db0:keys=4,"), "{info}");
    assert!(!info.contains("db2:"), "{info}");
    // MOVE and COPY ... DB name logical databases.
    assert_eq!(common::run::<i64>(&mut c, "MOVE only-two 2"), 1);
    assert_eq!(common::run::<i64>(&mut c, "COPY h h DB 5"), 1);
    select(&mut c, 2);
    assert_eq!(c.get::<_, String>("only-two").unwrap(), "two");
    select(&mut c, 5);
    assert_eq!(c.hget::<_, _, String>("h", "f").unwrap(), "two");
    // FLUSHDB empties the logical database only.
    select(&mut c, 0);
    let _: () = common::run(&mut c, "FLUSHDB");
    assert_eq!(common::run::<i64>(&mut c, "DBSIZE"), 0);
    select(&mut c, 2);
    assert_eq!(common::run::<i64>(&mut c, "DBSIZE"), 1);
    // FLUSHALL empties every database and the map with them.
    let _: () = common::run(&mut c, "FLUSHALL");
    let _: () = c.set("fresh", 1).unwrap();
    let _: () = common::run(&mut c, "SWAPDB 2 3");
    select(&mut c, 3);
    assert_eq!(c.get::<_, i64>("fresh").unwrap(), 1);
}

#[test]
fn swapdb_refuses_bad_indexes_as_redis_does() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    for (args, want) in [
        ("0 16", "ERR DB index is out of range"),
        ("-1 0", "ERR DB index is out of range"),
        ("x 0", "ERR invalid first DB index"),
        ("0 1.5", "ERR invalid second DB index"),
        ("99999999999 0", "ERR invalid first DB index"),
    ] {
        let mut command = cmd("SWAPDB");
        for a in args.split(' ') {
            command.arg(a);
        }
        assert_eq!(common::error_of(&mut c, &command), want, "SWAPDB {args}");
    }
    assert!(common::error_of(&mut c, cmd("SWAPDB").arg(0)).contains("wrong number"));
}

#[test]
fn swapdb_fails_watches_and_runs_inside_exec() {
    let srv = common::start("dram:btree");
    let (mut a, mut b) = (srv.client(), srv.client());
    let _: () = a.set("k", 1).unwrap();
    let _: () = cmd("WATCH").arg("k").query(&mut a).unwrap();
    let _: () = common::run(&mut b, "SWAPDB 0 1");
    let _: () = cmd("MULTI").query(&mut a).unwrap();
    let _: () = cmd("SET").arg("k").arg(2).query(&mut a).unwrap();
    assert_eq!(cmd("EXEC").query::<Value>(&mut a).unwrap(), Value::Nil);
    assert_eq!(a.exists::<_, i64>("k").unwrap(), 0);
    // Inside MULTI: later commands of the transaction see the swapped databases.
    let _: () = cmd("MULTI").query(&mut a).unwrap();
    let _: () = cmd("SWAPDB").arg(0).arg(1).query(&mut a).unwrap();
    let _: () = cmd("GET").arg("k").query(&mut a).unwrap();
    let replies: Vec<Value> = cmd("EXEC").query(&mut a).unwrap();
    assert_eq!(replies[1], Value::BulkString(b"1".to_vec()));
}

#[test]
fn a_client_blocked_on_an_empty_list_is_served_by_a_swap_that_fills_it() {
    let srv = common::start("dram:btree");
    let mut pusher = srv.client();
    let _: () = pusher.rpush("q", "job").unwrap();
    let mut waiter = srv.client();
    select(&mut waiter, 1);
    let started = Instant::now();
    let blocked = std::thread::spawn(move || {
        let got: Option<(String, String)> = waiter.blpop("q", 10.0).unwrap();
        got
    });
    std::thread::sleep(Duration::from_millis(300));
    let _: () = common::run(&mut pusher, "SWAPDB 0 1");
    let got = blocked.join().unwrap();
    assert_eq!(got, Some(("q".into(), "job".into())));
    assert!(started.elapsed() < Duration::from_secs(5));
    select(&mut pusher, 1);
    assert_eq!(pusher.exists::<_, i64>("q").unwrap(), 0);
}

#[test]
fn expiry_and_the_sweep_follow_the_swap() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    let _: () = cmd("SET")
        .arg("t")
        .arg("v")
        .arg("PX")
        .arg(300)
        .query(&mut c)
        .unwrap();
    let _: () = common::run(&mut c, "SWAPDB 0 4");
    select(&mut c, 4);
    let pttl: i64 = c.pttl("t").unwrap();
    assert!((1..=300).contains(&pttl), "{pttl}");
    // The active sweep removes it without a read (DBSIZE counts stored keys).
    let deadline = Instant::now() + Duration::from_secs(10);
    while common::run::<i64>(&mut c, "DBSIZE") > 0 {
        assert!(Instant::now() < deadline, "the sweep never removed the key");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_swap_survives_kill_9_and_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = Proc::start_small(dir.path(), Some("prism"));
    let mut c = p.client();
    fill(&mut c, 0, "zero");
    fill(&mut c, 3, "three");
    let _: () = common::run(&mut c, "SWAPDB 0 3");
    let _: () = common::run(&mut c, "SWAPDB 3 15");
    p.kill9();
    drop(p);
    let p = Proc::start_small(dir.path(), None);
    let mut c = p.client();
    check(&mut c, 0, "three");
    check(&mut c, 15, "zero");
    select(&mut c, 3);
    assert_eq!(common::run::<i64>(&mut c, "DBSIZE"), 0);
}

#[test]
fn a_stored_map_that_is_not_a_permutation_stops_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let db = tierkv::Db::open(dir.path(), tierkv::Options::default().engine("dram:btree")).unwrap();
    let mut bad = tierkv_server::dbmap::encode(&tierkv_server::dbmap::IDENTITY);
    bad[5] = 0;
    db.put(&tierkv_server::keyspace::dbmap_key(), &bad).unwrap();
    let err = tierkv_server::spawn(db, tierkv::DurabilityMode::default(), common::test_config())
        .unwrap_err();
    let text = format!("{err:#}");
    assert!(
        text.contains("database map") && text.contains("twice"),
        "{text}"
    );
}
