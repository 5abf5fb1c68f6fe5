//! Issue 17's "seed 1008" (a live get returned an older put after a newer delete of the same
//! key was acknowledged): every window in which a table, a node or a tombstone moves
//! between the structures a reader consults, read at exactly that step. Rounds of puts and
//! deletes over the same keys (tombstones land above older puts at every level), each
//! ended by `flush` and a wait for the background; the background threads are paused at
//! every named point of flush, zero-copy merge and lazy copy that holds no lock a reader
//! takes, and while one is paused a checker thread gets every key and scans them all, each
//! answer compared with the acknowledged state (the writer is idle then, so it is exact).
//! The points inside a node move hold the level's lock exclusively: there the checker
//! only gets, which read around the move under way without the lock (`zerocopy.rs`,
//! readers) and must not wait for it (a scan waits for the move's end).

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use common::*;
use tierkv_core::KvStore;
use tierkv_core::media::pmem::{CrashPoint, DurabilityMode};

const PARAMS: &str = "memtable=4KiB,levels=3,stall_timeout_ms=60000,progress_wait_ms=60000";

/// Points where the engine thread holds no level lock, no version lock and no writer lock.
const PAUSED: &[&str] = tierkv_mio::points::UNLOCKED;

/// Points inside a zero-copy node move (its level's lock held exclusively, the move
/// counts odd): gets only.
const IN_MOVE: &[&str] = tierkv_mio::points::NODE_MOVE;

/// Longest a check at a point may take: a get that waited for the paused move (or for
/// the level's lock) would take the pause's whole 60 s.
const PROMPT: Duration = Duration::from_secs(20);

fn key(k: u32) -> Vec<u8> {
    format!("key{k:03}").into_bytes()
}

fn value(k: u32, round: u32) -> Vec<u8> {
    let mut v = format!("k{k}|r{round}|").into_bytes();
    v.resize(24 + (k as usize * 5 + round as usize * 3) % 40, b'.');
    v
}

/// Every key's get and one scan of them all against `want`; the first difference.
fn check(store: &dyn KvStore, want: &BTreeMap<u32, Option<Vec<u8>>>) -> Option<String> {
    check_gets(store, want).or_else(|| check_scan(store, want))
}

/// Every key's get against `want`; the first difference.
fn check_gets(store: &dyn KvStore, want: &BTreeMap<u32, Option<Vec<u8>>>) -> Option<String> {
    for (k, w) in want {
        let got = store.get(&key(*k)).unwrap();
        if &got != w {
            let show = |v: &Option<Vec<u8>>| {
                v.as_ref()
                    .map_or("absent".to_owned(), |v| String::from_utf8_lossy(v).into())
            };
            return Some(format!(
                "get key {k}: found {}, acknowledged {}",
                show(&got),
                show(w)
            ));
        }
    }
    None
}

/// One scan of every key against `want`; the first difference.
fn check_scan(store: &dyn KvStore, want: &BTreeMap<u32, Option<Vec<u8>>>) -> Option<String> {
    let scanned: BTreeMap<Vec<u8>, Vec<u8>> =
        store.scan(b"", 10_000).unwrap().into_iter().collect();
    let live: BTreeMap<Vec<u8>, Vec<u8>> = want
        .iter()
        .filter_map(|(k, v)| v.clone().map(|v| (key(*k), v)))
        .collect();
    (scanned != live).then(|| {
        format!(
            "scan: {} pairs, {} live (first difference at {:?})",
            scanned.len(),
            live.len(),
            scanned
                .iter()
                .zip(live.iter())
                .find(|(a, b)| a != b)
                .map(|(a, _)| String::from_utf8_lossy(a.0).into_owned())
        )
    })
}

#[test]
fn reads_at_every_step_of_flush_zero_copy_and_lazy_copy_see_the_acknowledged_state() {
    let seed = seed("reads_at_named_points");
    let dir = scratch_dir();
    let pool = create_pool(&dir.path().join("pool"), 4 << 20, DurabilityMode::Tracked);
    let store = open(pool.clone(), PARAMS, true);
    let want: Arc<parking_lot::Mutex<BTreeMap<u32, Option<Vec<u8>>>>> = Arc::default();
    let (to_checker, pauses) = mpsc::channel::<(&'static str, mpsc::Sender<()>)>();
    let stop_checker = to_checker.clone();
    let to_checker = parking_lot::Mutex::new(to_checker);
    // One engine thread paused at a time. The flusher and the mergers reach their points
    // independently; were two paused together, the checker's scan for one would wait for
    // the other's node move, whose thread waits for the checker: both would sit until the
    // pause's timeout (seen under load, when threads meet their points together). A point
    // met while another thread is paused passes unread.
    let one_paused = parking_lot::Mutex::new(());
    pool.arm_crash_points(Arc::new(move |cp| {
        let CrashPoint::Named(name) = cp else { return };
        let Some(name) = PAUSED.iter().chain(IN_MOVE).find(|p| **p == name) else {
            return;
        };
        let Some(_paused) = one_paused.try_lock() else {
            return;
        };
        let (done, resumed) = mpsc::channel();
        if to_checker.lock().send((name, done)).is_ok() {
            // The engine thread stays at this step until the checker has read.
            let _ = resumed.recv_timeout(Duration::from_secs(60));
        }
    }))
    .unwrap();
    let checker = {
        let (store, want) = (store.clone(), want.clone());
        std::thread::spawn(move || {
            let mut seen: BTreeMap<&'static str, u64> = BTreeMap::new();
            let mut failures = Vec::new();
            while let Ok((name, done)) = pauses.recv() {
                if name.is_empty() {
                    break;
                }
                // The writer holds `want` across each write: read only while it is idle
                // (never wait for it: it may be waiting for the paused thread).
                if let Some(w) = want.try_lock() {
                    let started = std::time::Instant::now();
                    let wrong = if IN_MOVE.contains(&name) {
                        check_gets(&*store, &w)
                    } else {
                        check(&*store, &w)
                    };
                    if let Some(f) = wrong {
                        failures.push(format!("at {name}: {f}"));
                    }
                    if started.elapsed() > PROMPT {
                        failures.push(format!("at {name}: gets waited {:?}", started.elapsed()));
                    }
                    *seen.entry(name).or_default() += 1;
                }
                let _ = done.send(());
            }
            (seen, failures)
        })
    };
    let keys = 40u32;
    let mut rng = seed | 1;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut idle_failures = Vec::new();
    for round in 0..60u32 {
        // A third of the keys deleted, the rest put (or left alone now and then): the
        // tombstones sit above older puts in every level the older puts have reached.
        for k in 0..keys {
            let r = next() % 10;
            let mut w = want.lock();
            if r < 3 {
                store.delete(&key(k)).unwrap();
                w.insert(k, None);
            } else if r < 9 {
                let v = value(k, round);
                store.put(&key(k), &v).unwrap();
                w.insert(k, Some(v));
            }
        }
        store.flush().unwrap();
        assert!(store.wait_idle(Duration::from_secs(60)), "round {round}");
        let w = want.lock().clone();
        if let Some(f) = check(&*store, &w) {
            idle_failures.push(format!("round {round}, idle: {f}"));
        }
    }
    pool.disarm_crash_points();
    stop_checker.send(("", mpsc::channel().0)).unwrap();
    let (seen, failures) = checker.join().unwrap();
    store.check().unwrap();
    store.close().unwrap();
    println!("paused reads by point: {seen:?}");
    let failures: Vec<String> = failures.into_iter().chain(idle_failures).collect();
    assert!(
        failures.is_empty(),
        "{} wrong reads, the first: {:#?}",
        failures.len(),
        &failures[..failures.len().min(6)]
    );
    for p in PAUSED.iter().chain(IN_MOVE) {
        assert!(
            seen.get(p).copied().unwrap_or(0) >= 3,
            "{p} not reached: {seen:?}"
        );
    }
}
