//! kill -9 of `serve --engine prism` during a stream of MULTI/EXEC transactions and MSETs
//! from several clients (issue 25 item 1, issue 24 item 4): after each restart every
//! acknowledged transaction is whole, and no transaction — acknowledged or in flight at
//! the kill — is half applied.
//!
//! Each transaction has an id and writes `KEYS` keys of its own (`tx:{id}:{j}`, value the
//! id) plus, overwriting, its client's `KEYS` slot keys (`slot:{client}:{j}`, value the
//! id). Whole means all its own keys are there; not torn means all or none of them are
//! there, and the slot keys of a client all hold one and the same id, no older than the
//! client's last acknowledged one. By `id % 4`: 0 goes as MULTI/SET.../EXEC, 1 as one
//! MSET, 2 as MULTI / RPUSH `list:{client}` (KEYS elements, each the id) / HSET
//! `hash:{id}` (KEYS fields) / the slot SETs / EXEC — collections written per element
//! with their metadata, in one batch — and 3 as one HSET `hash:{id}` of KEYS fields (a
//! single command: fields and metadata). For 2 and 3 whole means the hash has all its
//! fields (and, for 2, the list holds the id KEYS times); torn means a hash with some
//! fields, a list holding an id fewer than KEYS times, or a list and hash that disagree.
//! Rounds: `TIERKV_CRASH_ROUNDS` (default 8, about 2 s).
//!
//! With the batches switched off (writes one by one) this test found a torn transaction
//! in one of six rounds.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers: a failure here is a test failure"
)]

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use redis::{Commands, cmd};

use common::proc::Proc;

const CLIENTS: u64 = 4;
const KEYS: usize = 4;
/// Ids of one client in one round: `round * ROUND_SPAN + client * CLIENT_SPAN + i`.
const ROUND_SPAN: u64 = 100_000_000;
const CLIENT_SPAN: u64 = 1_000_000;

fn start(dir: &Path, engine: Option<&str>) -> Proc {
    Proc::start_small(dir, engine)
}

/// One transaction: its own keys and the client's slots, as EXEC (even) or MSET (odd).
fn write_tx(c: &mut redis::Connection, client: u64, id: u64) -> redis::RedisResult<()> {
    let mut pairs = Vec::new();
    for j in 0..KEYS {
        pairs.push((format!("tx:{id}:{j}"), id));
        pairs.push((format!("slot:{client}:{j}"), id));
    }
    let fields: Vec<(String, u64)> = (0..KEYS).map(|j| (format!("f{j}"), id)).collect();
    match id % 4 {
        0 => {
            let mut p = redis::pipe();
            p.atomic();
            for (k, v) in &pairs {
                p.set(k, v).ignore();
            }
            p.query::<()>(c)
        }
        1 => c.mset::<_, _, ()>(&pairs),
        2 => {
            let mut p = redis::pipe();
            p.atomic();
            p.rpush(format!("list:{client}"), vec![id; KEYS]).ignore();
            p.hset_multiple(format!("hash:{id}"), &fields).ignore();
            for (k, v) in pairs.iter().filter(|(k, _)| k.starts_with("slot:")) {
                p.set(k, v).ignore();
            }
            p.query::<()>(c)
        }
        _ => c.hset_multiple::<_, _, _, ()>(format!("hash:{id}"), &fields),
    }
}

/// Whether the writes of `id` are there: `Some(true)` all, `Some(false)` none, `None`
/// some (torn).
fn presence(c: &mut redis::Connection, id: u64, list: &HashMap<u64, usize>) -> Option<bool> {
    let whole = |present: usize| match present {
        0 => Some(false),
        n if n == KEYS => Some(true),
        _ => None,
    };
    if id % 4 >= 2 {
        let hash: HashMap<String, u64> = c.hgetall(format!("hash:{id}")).unwrap();
        assert!(hash.values().all(|&v| v == id), "hash {id}: {hash:?}");
        let in_hash = whole(hash.len());
        if id % 4 == 3 {
            return in_hash;
        }
        let in_list = whole(list.get(&id).copied().unwrap_or(0));
        return if in_hash == in_list { in_hash } else { None };
    }
    let keys: Vec<String> = (0..KEYS).map(|j| format!("tx:{id}:{j}")).collect();
    let got: Vec<Option<u64>> = cmd("MGET").arg(&keys).query(c).unwrap();
    assert!(got.iter().flatten().all(|&v| v == id), "tx {id}: {got:?}");
    whole(got.iter().filter(|v| v.is_some()).count())
}

/// What one client did in a round: the last acknowledged id (if any) and the last id sent.
struct ClientLog {
    acked: AtomicU64,
    sent: AtomicU64,
}

/// Runs the clients until `total` transactions are acknowledged, then kills the server.
fn crash_round(p: &mut Proc, round: u64, total: usize) -> Vec<Arc<ClientLog>> {
    let done = Arc::new(AtomicUsize::new(0));
    let logs: Vec<_> = (0..CLIENTS)
        .map(|_| {
            Arc::new(ClientLog {
                acked: AtomicU64::new(u64::MAX),
                sent: AtomicU64::new(u64::MAX),
            })
        })
        .collect();
    let threads: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let (addr, done, log) = (p.addr, done.clone(), logs[client as usize].clone());
            std::thread::spawn(move || {
                let mut c = redis::Client::open(format!("redis://{addr}/"))
                    .unwrap()
                    .get_connection()
                    .unwrap();
                let base = round * ROUND_SPAN + client * CLIENT_SPAN;
                for i in 0..CLIENT_SPAN {
                    log.sent.store(base + i, Ordering::SeqCst);
                    if write_tx(&mut c, client, base + i).is_err() {
                        return;
                    }
                    log.acked.store(base + i, Ordering::SeqCst);
                    done.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    while done.load(Ordering::SeqCst) < total {
        std::thread::sleep(Duration::from_millis(2));
    }
    p.kill9();
    for t in threads {
        t.join().unwrap();
    }
    logs
}

/// Counts of one check.
#[derive(Default, Debug)]
struct Figures {
    checked: usize,
    torn: usize,
    lost: usize,
    in_flight_applied: usize,
    in_flight_absent: usize,
}

/// Checks the transactions of `round` after a restart.
fn check_round(c: &mut redis::Connection, round: u64, logs: &[Arc<ClientLog>]) -> Figures {
    let mut f = Figures::default();
    for (client, log) in logs.iter().enumerate() {
        let (acked, sent) = (
            log.acked.load(Ordering::SeqCst),
            log.sent.load(Ordering::SeqCst),
        );
        let base = round * ROUND_SPAN + client as u64 * CLIENT_SPAN;
        if sent == u64::MAX {
            continue;
        }
        let list: Vec<u64> = c.lrange(format!("list:{client}"), 0, -1).unwrap();
        let mut in_list: HashMap<u64, usize> = HashMap::new();
        for id in &list {
            *in_list.entry(*id).or_default() += 1;
        }
        for id in base..=sent {
            let present = presence(c, id, &in_list);
            f.checked += 1;
            if present.is_none() {
                f.torn += 1;
                eprintln!("torn: tx {id} is partly there");
            }
            let is_acked = acked != u64::MAX && id <= acked;
            if is_acked && present != Some(true) {
                f.lost += 1;
                eprintln!("lost: acknowledged tx {id}: {present:?}");
            }
            if !is_acked {
                if present == Some(true) {
                    f.in_flight_applied += 1;
                } else {
                    f.in_flight_absent += 1;
                }
            }
        }
        // The slots were last written by the last acknowledged id that writes them.
        let acked = (base..=acked.min(sent))
            .rev()
            .find(|id| id % 4 != 3)
            .filter(|_| acked != u64::MAX)
            .unwrap_or(u64::MAX);
        let slots: Vec<String> = (0..KEYS).map(|j| format!("slot:{client}:{j}")).collect();
        let got: Vec<Option<u64>> = cmd("MGET").arg(&slots).query(c).unwrap();
        let first = got[0];
        if got.iter().any(|v| *v != first) {
            f.torn += 1;
            eprintln!("torn: client {client}'s slots hold {got:?}");
        }
        if acked != u64::MAX && first.is_none_or(|v| v < acked) {
            f.lost += 1;
            eprintln!("lost: client {client} acked {acked}, its slots hold {got:?}");
        }
    }
    f
}

#[test]
fn kill_9_during_execs_and_msets_leaves_no_transaction_half_applied() {
    let rounds: u64 = std::env::var("TIERKV_CRASH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    let engine = "prism@pwb_count=2,pwb_size=256KiB,chunk_size=64KiB";
    let dir = tempfile::tempdir().unwrap();
    let mut total = Figures::default();
    let mut p = start(dir.path(), Some(engine));
    for round in 0..rounds {
        // A different number acknowledged each round moves the kill around.
        let logs = crash_round(&mut p, round, 150 + 97 * (round as usize % 7));
        p = start(dir.path(), None);
        let mut c = p.client();
        let info: String = cmd("INFO").arg("tierkv").query(&mut c).unwrap();
        assert!(info.contains("crash_atomic_multi_key:1"), "{info}");
        let f = check_round(&mut c, round, &logs);
        println!("round {round}: {f:?}");
        total.checked += f.checked;
        total.torn += f.torn;
        total.lost += f.lost;
        total.in_flight_applied += f.in_flight_applied;
        total.in_flight_absent += f.in_flight_absent;
    }
    println!("{rounds} rounds: {total:?}");
    assert_eq!(total.torn, 0, "{total:?}");
    assert_eq!(total.lost, 0, "{total:?}");
    assert!(total.checked > 0);
    let mut c = p.client();
    let batches: String = cmd("INFO").arg("stats").query(&mut c).unwrap();
    assert!(batches.contains("tierkv_atomic_batches:"), "{batches}");
    drop(c);
    p.sigterm();
    let (status, log) = p.wait();
    assert!(status.success(), "exit {status}\n{log}");
}

/// `INFO stats`'s count of reclaimed elements.
fn reclaimed(c: &mut redis::Connection) -> u64 {
    let info: String = cmd("INFO").arg("stats").query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("tierkv_reclaimed_elements:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

#[test]
fn elements_of_a_collection_deleted_just_before_a_kill_are_reclaimed_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = start(dir.path(), Some("prism"));
    let mut c = p.client();
    for chunk in 0..4 {
        let fields: Vec<(String, u64)> = (0..500).map(|i| (format!("f{chunk}-{i}"), i)).collect();
        c.hset_multiple::<_, _, _, ()>("big", &fields).unwrap();
    }
    c.hset::<_, _, _, ()>("keep", "f", "v").unwrap();
    // DEL answers at once; the kill lands before the sweep (100 ms ticks) got far.
    assert_eq!(c.del::<_, i64>("big").unwrap(), 1);
    p.kill9();
    let p = start(dir.path(), None);
    let mut c = p.client();
    assert_eq!(c.hlen::<_, i64>("big").unwrap(), 0);
    // Some elements may have gone before the kill; wait for the count to settle.
    let mut last = (reclaimed(&mut c), std::time::Instant::now());
    while last.1.elapsed() < Duration::from_millis(500) {
        std::thread::sleep(Duration::from_millis(50));
        let now = reclaimed(&mut c);
        if now != last.0 {
            last = (now, std::time::Instant::now());
        }
    }
    assert_eq!(c.hget::<_, _, String>("keep", "f").unwrap(), "v");
    assert_eq!(common::run::<i64>(&mut c, "DBSIZE"), 1);
    drop(c);
    p.sigterm();
    let (status, log) = p.wait();
    assert!(status.success(), "exit {status}\n{log}");
    // What the store holds: the two keys and keep's one element, nothing of big.
    let db = tierkv::Db::open_existing(dir.path(), tierkv::Options::default()).unwrap();
    let all = db.scan::<&[u8], _>(.., 10_000).unwrap();
    let keys: Vec<String> = all
        .iter()
        .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
        .collect();
    assert_eq!(all.len(), 2, "{keys:?}");
    assert!(keys.iter().any(|k| k == "keep"), "{keys:?}");
}
