//! Lists (issue 25 item 4): the commands on ordered and unordered engines, blocking
//! BLPOP/BRPOP/BLMOVE woken by another client's push, timeouts, non-blocking inside
//! MULTI, and blocked clients holding no worker thread.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers: a failure here is a test failure"
)]

mod common;

use std::time::{Duration, Instant};

use redis::{Commands, Value, cmd};
use tierkv::{Limits, Options};

fn words<T: redis::FromRedisValue>(c: &mut redis::Connection, w: &str) -> T {
    common::run(c, w)
}

#[test]
fn list_commands_on_ordered_and_unordered_engines() {
    for engine in ["dram:btree", "dram:hash"] {
        let srv = common::start(engine);
        let mut c = srv.client();
        assert_eq!(words::<i64>(&mut c, "RPUSH l b c d"), 3, "{engine}");
        assert_eq!(words::<i64>(&mut c, "LPUSH l a z"), 5, "{engine}");
        let all: Vec<String> = words(&mut c, "LRANGE l 0 -1");
        assert_eq!(all, ["z", "a", "b", "c", "d"], "{engine}");
        assert_eq!(words::<String>(&mut c, "LINDEX l -1"), "d", "{engine}");
        assert_eq!(words::<String>(&mut c, "LSET l 0 y"), "OK", "{engine}");
        assert_eq!(words::<i64>(&mut c, "LINSERT l AFTER b x"), 6, "{engine}");
        assert_eq!(words::<i64>(&mut c, "LREM l 1 a"), 1, "{engine}");
        let all: Vec<String> = words(&mut c, "LRANGE l 0 -1");
        assert_eq!(all, ["y", "b", "x", "c", "d"], "{engine}");
        assert_eq!(words::<i64>(&mut c, "LPOS l c"), 3, "{engine}");
        assert_eq!(words::<String>(&mut c, "LTRIM l 1 -2"), "OK", "{engine}");
        let all: Vec<String> = words(&mut c, "LRANGE l 0 -1");
        assert_eq!(all, ["b", "x", "c"], "{engine}");
        assert_eq!(
            words::<String>(&mut c, "LMOVE l m RIGHT LEFT"),
            "c",
            "{engine}"
        );
        assert_eq!(words::<String>(&mut c, "RPOPLPUSH l l"), "x", "{engine}");
        let all: Vec<String> = words(&mut c, "LRANGE l 0 -1");
        assert_eq!(all, ["x", "b"], "{engine}");
        let popped: Vec<String> = words(&mut c, "LPOP l 5");
        assert_eq!(popped, ["x", "b"], "{engine}");
        assert_eq!(
            words::<i64>(&mut c, "EXISTS l"),
            0,
            "the empty list is gone"
        );
        assert_eq!(words::<String>(&mut c, "TYPE m"), "list", "{engine}");
        let e = common::error_of(&mut c, cmd("GET").arg("m"));
        assert!(e.starts_with("WRONGTYPE"), "{engine}: {e}");
        let e = common::error_of(&mut c, cmd("HSET").arg("m").arg("f").arg("v"));
        assert!(e.starts_with("WRONGTYPE"), "{engine}: {e}");
        c.set::<_, _, ()>("s", "v").unwrap();
        let e = common::error_of(&mut c, cmd("LPUSH").arg("s").arg("v"));
        assert!(e.starts_with("WRONGTYPE"), "{engine}: {e}");
        assert_eq!(c.del::<_, i64>("m").unwrap(), 1, "{engine}");
        assert_eq!(words::<i64>(&mut c, "LLEN m"), 0, "{engine}");
    }
}

/// LRANGE over more than one page of element reads (256), on an unordered engine (one
/// multi-key read per page) and an ordered one (range scans), alone and inside MULTI
/// (where the transaction's own pending writes are read first).
#[test]
fn long_ranges_read_across_pages_alike() {
    let all: Vec<String> = (0..700).map(|i| format!("v{i}")).collect();
    for engine in ["dram:hash", "dram:btree"] {
        let srv = common::start(engine);
        let mut c = srv.client();
        let mut push = cmd("RPUSH");
        push.arg("l").arg(&all);
        assert_eq!(push.query::<i64>(&mut c).unwrap(), 700, "{engine}");
        let got: Vec<String> = words(&mut c, "LRANGE l 0 -1");
        assert_eq!(got, all, "{engine}");
        let got: Vec<String> = words(&mut c, "LRANGE l 255 600");
        assert_eq!(got, all[255..=600], "{engine}");
        let got: Vec<String> = words(&mut c, "LRANGE l -3 -1");
        assert_eq!(got, all[697..], "{engine}");
        // Inside a transaction, after a pending push and a pending LSET.
        let (n, ok, got): (i64, String, Vec<String>) = redis::pipe()
            .atomic()
            .cmd("LPUSH")
            .arg("l")
            .arg("first")
            .cmd("LSET")
            .arg("l")
            .arg(300)
            .arg("changed")
            .cmd("LRANGE")
            .arg("l")
            .arg(0)
            .arg(-1)
            .query(&mut c)
            .unwrap();
        assert_eq!((n, ok.as_str()), (701, "OK"), "{engine}");
        let mut want = vec!["first".to_string()];
        want.extend(all.iter().cloned());
        want[300] = "changed".into();
        assert_eq!(got, want, "{engine}");
        let got: Vec<String> = words(&mut c, "LRANGE l 0 -1");
        assert_eq!(got, want, "{engine}");
    }
}

/// The committed write batches so far (INFO `tierkv_atomic_batches`).
fn atomic_batches(c: &mut redis::Connection) -> u64 {
    let info: String = cmd("INFO").arg("stats").query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("tierkv_atomic_batches:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// A server over a new store of `engine` whose keys are limited to 1 KiB.
fn small_keys(engine: &str) -> common::TestServer {
    let options = Options::default().engine(engine).limits(Limits {
        max_key_len: 1024,
        max_value_len: 64 << 10,
    });
    common::start_with(options, common::test_config())
}

/// Pushes and pops skip the write batch on a volatile engine (nothing to make
/// crash-atomic there) and keep it where it makes them crash-atomic (prism): one batch
/// per command.
#[test]
fn pushes_and_pops_write_a_batch_only_where_it_is_crash_atomic() {
    for (engine, batched) in [("dram:hash", false), ("dram:btree", false), ("prism", true)] {
        let srv = common::start(engine);
        let mut c = srv.client();
        let before = atomic_batches(&mut c);
        assert_eq!(words::<i64>(&mut c, "LPUSH l b a"), 2, "{engine}");
        assert_eq!(words::<i64>(&mut c, "RPUSH l c d e"), 5, "{engine}");
        assert_eq!(words::<i64>(&mut c, "LPUSHX l z"), 6, "{engine}");
        assert_eq!(words::<i64>(&mut c, "RPUSHX nope x"), 0, "{engine}");
        assert_eq!(words::<String>(&mut c, "LPOP l"), "z", "{engine}");
        let popped: Vec<String> = words(&mut c, "RPOP l 2");
        assert_eq!(popped, ["e", "d"], "{engine}");
        let all: Vec<String> = words(&mut c, "LRANGE l 0 -1");
        assert_eq!(all, ["a", "b", "c"], "{engine}");
        // Five commands wrote (RPUSHX of a missing key writes nothing).
        let batches = atomic_batches(&mut c) - before;
        assert_eq!(batches, if batched { 5 } else { 0 }, "{engine}");
    }
}

/// A push refused (its key fits the key limit, its elements' store keys do not: the
/// arguments themselves are checked against the value limit before any command runs)
/// changes nothing, on the batch-less path of a volatile engine as with a batch (prism),
/// and the lists around it are untouched.
#[test]
fn a_refused_push_changes_nothing() {
    let long = "k".repeat(1010);
    for engine in ["dram:hash", "dram:btree", "prism"] {
        let srv = small_keys(engine);
        let mut c = srv.client();
        assert_eq!(words::<i64>(&mut c, "RPUSH l b c"), 2, "{engine}");
        // Nothing may be added (DBSIZE counts keys by a walk on every engine).
        let size: i64 = words(&mut c, "DBSIZE");
        for push in ["LPUSH", "RPUSH"] {
            let e = common::error_of(&mut c, cmd(push).arg(&long).arg("a1").arg("a2"));
            assert!(
                e.contains("over the store's key limit"),
                "{engine} {push}: {e}"
            );
        }
        assert_eq!(c.exists::<_, i64>(&long).unwrap(), 0, "{engine}");
        assert_eq!(words::<i64>(&mut c, "DBSIZE"), size, "{engine}");
        assert_eq!(words::<i64>(&mut c, "LPUSH l a"), 3, "{engine}");
        assert_eq!(words::<i64>(&mut c, "RPUSH l d"), 4, "{engine}");
        let all: Vec<String> = words(&mut c, "LRANGE l 0 -1");
        assert_eq!(all, ["a", "b", "c", "d"], "{engine}");
        let popped: Vec<String> = words(&mut c, "LPOP l 10");
        assert_eq!(popped, ["a", "b", "c", "d"], "{engine}");
        assert_eq!(words::<i64>(&mut c, "EXISTS l"), 0, "{engine}");
    }
}

/// One random command on the lists `a` and `b`.
fn random_list_command(rng: &mut impl rand::Rng) -> redis::Cmd {
    let key = |rng: &mut dyn rand::RngCore| {
        if rng.next_u32().is_multiple_of(2) {
            "a"
        } else {
            "b"
        }
    };
    // Elements 0-2 fit a chunk slot; 3-5 are longer than a slot holds (stored on their own).
    let elem = |rng: &mut dyn rand::RngCore| match rng.next_u32() % 6 {
        n @ 0..=2 => format!("e{n}"),
        n => format!("e{n}{}", "-".repeat(40)),
    };
    let idx = |rng: &mut dyn rand::RngCore| i64::from(rng.next_u32() % 15) - 7;
    let mut c;
    match rng.random_range(0..14) {
        0..=2 => {
            c = cmd(["LPUSH", "RPUSH", "LPUSHX", "RPUSHX"][rng.random_range(0..4)]);
            c.arg(key(rng));
            // Now and then a long push, so lists span several chunks of 32.
            let n = if rng.random_bool(0.1) { 40 } else { 3 };
            for _ in 0..rng.random_range(1..=n) {
                c.arg(elem(rng));
            }
        }
        3..=4 => {
            c = cmd(if rng.random_bool(0.5) { "LPOP" } else { "RPOP" });
            c.arg(key(rng));
            if rng.random_bool(0.4) {
                c.arg(rng.random_range(0..4));
            }
        }
        5..=6 => {
            c = cmd("LRANGE");
            c.arg(key(rng)).arg(idx(rng)).arg(idx(rng));
        }
        7 => {
            c = cmd("LINDEX");
            c.arg(key(rng)).arg(idx(rng));
        }
        8 => {
            c = cmd("LSET");
            c.arg(key(rng)).arg(idx(rng)).arg(elem(rng));
        }
        9 => {
            c = cmd("LREM");
            c.arg(key(rng)).arg(idx(rng) / 3).arg(elem(rng));
        }
        10 => {
            c = cmd("LTRIM");
            c.arg(key(rng)).arg(idx(rng)).arg(idx(rng));
        }
        11 => {
            c = cmd("LINSERT");
            c.arg(key(rng))
                .arg(if rng.random_bool(0.5) {
                    "BEFORE"
                } else {
                    "AFTER"
                })
                .arg(elem(rng))
                .arg(elem(rng));
        }
        12 => {
            c = cmd("LMOVE");
            c.arg(key(rng)).arg(key(rng));
            for _ in 0..2 {
                c.arg(if rng.random_bool(0.5) {
                    "LEFT"
                } else {
                    "RIGHT"
                });
            }
        }
        _ => {
            c = cmd(if rng.random_bool(0.5) { "LLEN" } else { "LPOS" });
            c.arg(key(rng));
            if rng.random_bool(0.5) {
                c.arg(elem(rng));
            } else {
                c.arg("nothing");
            }
        }
    }
    c
}

/// The same random list commands give the same replies on an unordered volatile engine
/// (point reads, pushes and pops without a batch), an ordered volatile one (range reads)
/// and prism (batches), and as redis-server's when there is one.
#[test]
fn lists_reply_alike_on_every_engine() {
    use rand::SeedableRng;
    let seed = common::seed();
    let mut engines = vec!["dram:hash", "dram:btree", "prism"];
    let servers: Vec<_> = engines.iter().map(|e| common::start(e)).collect();
    let mut clients: Vec<_> = servers.iter().map(common::TestServer::client).collect();
    // With a redis-server at hand (CI installs one), Redis is the reference.
    let redis = common::redis_server::redis_binary().map(|b| common::redis_server::start_redis(&b));
    if let Some(r) = &redis {
        engines.insert(0, "redis-server");
        clients.insert(0, r.client());
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    for i in 0..1000 {
        let c = random_list_command(&mut rng);
        let replies: Vec<String> = clients
            .iter_mut()
            .map(|con| format!("{:?}", c.query::<Value>(con)))
            .collect();
        for (e, r) in engines.iter().zip(&replies).skip(1) {
            assert_eq!(
                r,
                &replies[0],
                "seed {seed}, command {i} ({:?}): {e} differs from {}",
                String::from_utf8_lossy(&c.get_packed_command()),
                engines[0]
            );
        }
    }
    // The lists themselves, whole.
    for key in ["a", "b"] {
        let lists: Vec<Vec<String>> = clients
            .iter_mut()
            .map(|con| cmd("LRANGE").arg(key).arg(0).arg(-1).query(con).unwrap())
            .collect();
        assert!(
            lists.iter().all(|l| l == &lists[0]),
            "seed {seed}: {lists:?}"
        );
    }
}

#[test]
fn a_big_list_is_deleted_in_o1_and_reclaimed() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    for chunk in 0..4 {
        let mut push = cmd("RPUSH");
        push.arg("big");
        for i in 0..500 {
            push.arg(format!("e{}", chunk * 500 + i));
        }
        push.query::<i64>(&mut c).unwrap();
    }
    assert_eq!(words::<String>(&mut c, "LINDEX big 1234"), "e1234");
    assert_eq!(words::<i64>(&mut c, "DBSIZE"), 1);
    assert_eq!(c.del::<_, i64>("big").unwrap(), 1);
    // 2000 small elements are 63 chunks (32 per chunk): that many store keys to reclaim.
    let keys = 2000_u64.div_ceil(32);
    let t = Instant::now();
    loop {
        let info: String = cmd("INFO").arg("stats").query(&mut c).unwrap();
        let n: u64 = info
            .lines()
            .find_map(|l| l.strip_prefix("tierkv_reclaimed_elements:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap();
        if n >= keys {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "{n} reclaimed");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn blpop_is_woken_by_a_push_from_another_client() {
    let srv = common::start("dram:btree");
    let addr = srv.addr;
    let (ready, go) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let mut c = redis::Client::open(format!("redis://{addr}/"))
            .unwrap()
            .get_connection()
            .unwrap();
        let t = Instant::now();
        ready.send(()).unwrap();
        let got: (String, String) = words(&mut c, "BLPOP q1 q2 0");
        (got, t.elapsed())
    });
    // The push comes at least 300 ms after the waiter started its BLPOP.
    go.recv().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mut c = srv.client();
    assert_eq!(words::<i64>(&mut c, "RPUSH q2 job1"), 1);
    let (got, waited) = waiter.join().unwrap();
    assert_eq!(got, ("q2".to_string(), "job1".to_string()));
    assert!(waited >= Duration::from_millis(250), "{waited:?}");
    assert_eq!(
        words::<i64>(&mut c, "LLEN q2"),
        0,
        "the element went to the waiter"
    );
}

#[test]
fn blocking_timeouts_and_multi() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    let t = Instant::now();
    let v: Value = words(&mut c, "BRPOP nothing 0.2");
    assert_eq!(v, Value::Nil);
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_millis(190) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
    let v: Value = words(&mut c, "BLMOVE nothing dst LEFT RIGHT 0.05");
    assert_eq!(v, Value::Nil);
    let e = common::error_of(&mut c, cmd("BLPOP").arg("k").arg("-1"));
    assert_eq!(e, "ERR timeout is negative");
    // Inside MULTI a blocking command answers at once.
    assert_eq!(words::<String>(&mut c, "MULTI"), "OK");
    assert_eq!(words::<String>(&mut c, "BLPOP nothing 0"), "QUEUED");
    assert_eq!(words::<String>(&mut c, "RPUSH x 1"), "QUEUED");
    assert_eq!(words::<String>(&mut c, "BLPOP x 0"), "QUEUED");
    let v: Value = words(&mut c, "EXEC");
    assert_eq!(
        v,
        Value::Array(vec![
            Value::Nil,
            Value::Int(1),
            Value::Array(vec![
                Value::BulkString(b"x".to_vec()),
                Value::BulkString(b"1".to_vec())
            ]),
        ])
    );
    // A command pipelined after a blocking one waits for it.
    let mut raw = srv.raw();
    let mut req = common::resp(&[b"BLPOP", b"p", b"0.1"]);
    req.extend(common::resp(&[b"PING"]));
    let got = common::exchange(&mut raw, &req, |b| b.ends_with(b"+PONG\r\n"));
    assert_eq!(got, b"*-1\r\n+PONG\r\n");
}

#[test]
fn blocked_clients_hold_no_worker() {
    // Six clients blocked forever hold no thread (two network threads; commands run on
    // them for dram, on two workers for a persistent engine): the server still serves
    // everyone else.
    let srv = common::start("dram:btree");
    let addr = srv.addr;
    let waiters: Vec<_> = (0..6)
        .map(|i| {
            std::thread::spawn(move || {
                let mut c = redis::Client::open(format!("redis://{addr}/"))
                    .unwrap()
                    .get_connection()
                    .unwrap();
                let got: (String, String) = words(&mut c, &format!("BLPOP w{i} 0"));
                got.1
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut c = srv.client();
    for i in 0..50 {
        c.set::<_, _, ()>(format!("k{i}"), i).unwrap();
    }
    for i in 0..6 {
        assert_eq!(
            words::<i64>(&mut c, &format!("LPUSH w{i} job{i}")),
            1,
            "client {i}"
        );
    }
    for (i, w) in waiters.into_iter().enumerate() {
        assert_eq!(w.join().unwrap(), format!("job{i}"));
    }
    // Shutdown with a client still blocked is prompt.
    let mut blocked = srv.raw();
    blocked
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    std::io::Write::write_all(&mut blocked, &common::resp(&[b"BLPOP", b"never", b"0"])).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let t = Instant::now();
    srv.shutdown().unwrap();
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}

/// A list written before chunks existed (layout 1: metadata kind `l`, one store key per
/// element) reads and changes as before, on an ordered and an unordered engine, while new
/// lists are chunked; elements longer than a chunk slot holds live under their own keys.
#[test]
fn lists_of_layout_1_and_long_elements_read_and_change_alike() {
    use tierkv_server::encoding::{Kind, Meta};
    for engine in ["dram:btree", "dram:hash", "prism"] {
        let dir = tempfile::tempdir().unwrap();
        let db = tierkv::Db::open(dir.path(), Options::default().engine(engine)).unwrap();
        // "old" = [e0 .. e39] at positions -5..35, written as the old server did.
        let generation = 0x0123_4567_89AB_CDEF;
        let meta = Meta {
            kind: Kind::List,
            generation,
            count: 40,
            head: -5,
            tail: 35,
            chunked: false,
        };
        let prefix = tierkv_server::keyspace::element_prefix(0, b"old", generation);
        for (i, p) in (-5_i64..35).enumerate() {
            let mut k = prefix.clone();
            // Layout 1's position suffix: sign bit flipped, big-endian.
            #[expect(clippy::big_endian_bytes, reason = "the stored format is big-endian")]
            let suffix = ((p as u64) ^ (1 << 63)).to_be_bytes();
            k.extend_from_slice(&suffix);
            db.put(&k, format!("e{i}").as_bytes()).unwrap();
        }
        db.put(b"old", &meta.encode()).unwrap();
        let handle =
            tierkv_server::spawn(db, tierkv::DurabilityMode::default(), common::test_config())
                .unwrap();
        let mut c = redis::Client::open(format!("redis://{}/", handle.addr()))
            .unwrap()
            .get_connection()
            .unwrap();
        let mut model: Vec<String> = (0..40).map(|i| format!("e{i}")).collect();
        let long = "L".repeat(100);
        for key in ["old", "new"] {
            if key == "new" {
                let mut push = cmd("RPUSH");
                push.arg("new");
                for v in &model {
                    push.arg(v);
                }
                push.query::<i64>(&mut c).unwrap();
            }
            let mut m = model.clone();
            let all: Vec<String> = words(&mut c, &format!("LRANGE {key} 0 -1"));
            assert_eq!(all, m, "{engine} {key}");
            assert_eq!(words::<i64>(&mut c, &format!("LPUSH {key} a {long}")), 42);
            m.insert(0, "a".into());
            m.insert(0, long.clone());
            assert_eq!(words::<String>(&mut c, &format!("RPOP {key}")), "e39");
            m.pop();
            words::<String>(&mut c, &format!("LSET {key} 10 {long}"));
            m[10] = long.clone();
            words::<String>(&mut c, &format!("LSET {key} 0 short"));
            m[0] = "short".into();
            assert_eq!(words::<i64>(&mut c, &format!("LREM {key} 1 e20")), 1);
            m.retain(|v| v != "e20");
            assert_eq!(
                words::<i64>(&mut c, &format!("LINSERT {key} BEFORE e30 {long}")),
                41
            );
            let at = m.iter().position(|v| v == "e30").unwrap();
            m.insert(at, long.clone());
            words::<String>(&mut c, &format!("LTRIM {key} 1 -3"));
            m = m[1..m.len() - 2].to_vec();
            let all: Vec<String> = words(&mut c, &format!("LRANGE {key} 0 -1"));
            assert_eq!(all, m, "{engine} {key}");
            let pos: i64 = words(&mut c, &format!("LPOS {key} e35"));
            assert_eq!(m[pos as usize], "e35", "{engine} {key}");
            assert_eq!(words::<String>(&mut c, &format!("LINDEX {key} 9")), m[9]);
            let popped: Vec<String> = words(&mut c, &format!("LPOP {key} 100"));
            assert_eq!(popped, m, "{engine} {key}");
            assert_eq!(words::<i64>(&mut c, &format!("EXISTS {key}")), 0);
        }
        model.clear();
        handle.shutdown().unwrap();
    }
}
