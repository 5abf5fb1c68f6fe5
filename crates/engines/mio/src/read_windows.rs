//! Issue 17's "seed 1008" (a live get returned an older put after a newer delete of the
//! same key was acknowledged), the windows of a reader whose version is older than the
//! step it reads at: a get clones the version, then (perhaps much later, after waiting
//! for the level locks) reads the tables it lists, while flushes, zero-copy merges, moves
//! and lazy copies change the store. The background threads are paused at every named
//! point that holds no lock a reader takes (`tests/reads_at_named_points.rs` lists them);
//! at each pause a checker reads every key through the current version and through
//! versions it pinned at earlier pauses (the last few, and some many rounds old, so that
//! the space their tables held has been reused meanwhile unless they keep it), and
//! compares with the acknowledged history (the writer is idle while it reads): a read
//! through a version pinned at some moment may return the key's state at that moment or
//! any later one, never an earlier one.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use parking_lot::Mutex;
use tierkv_core::media::pmem::{CrashPoint, DurabilityMode};
use tierkv_core::{EngineSpec, KvStore, Limits};
use tierkv_testkit::rig::{create_pool, scratch_dir, seed};

use crate::MioOptions;
use crate::store::MioStore;
use crate::version::Version;

const PAUSED: &[&str] = crate::points::UNLOCKED;

/// Per key, every state it has had, oldest first (`None`: absent).
type History = BTreeMap<u32, Vec<Option<Vec<u8>>>>;

fn key(k: u32) -> Vec<u8> {
    format!("key{k:03}").into_bytes()
}

fn value(k: u32, round: u32) -> Vec<u8> {
    let mut v = format!("k{k}|r{round}|").into_bytes();
    v.resize(24 + (k as usize * 5 + round as usize * 3) % 40, b'.');
    v
}

fn show(v: &Option<Vec<u8>>) -> String {
    v.as_ref()
        .map_or("absent".to_owned(), |v| String::from_utf8_lossy(v).into())
}

/// A version a reader cloned at a pause, with how many states each key had had then.
struct Pin {
    round: u32,
    at: &'static str,
    version: Arc<Version>,
    seen: BTreeMap<u32, usize>,
}

#[test]
fn readers_holding_versions_from_earlier_steps_and_rounds_never_read_an_overwritten_value() {
    let seed = seed("read_windows_pinned");
    let d = scratch_dir();
    let pool = create_pool(&d.path().join("pool"), 4 << 20, DurabilityMode::Tracked);
    let spec: EngineSpec =
        "mio@memtable=4KiB,levels=3,stall_timeout_ms=60000,progress_wait_ms=60000"
            .parse()
            .unwrap();
    let opts = MioOptions::from_params(spec.params()).unwrap();
    let limits = Limits {
        max_key_len: 64,
        max_value_len: 4096,
    };
    let store: Arc<MioStore> = crate::open_store(pool.clone(), opts, limits, true).unwrap();
    let want: Arc<Mutex<History>> =
        Arc::new(Mutex::new((0..40u32).map(|k| (k, vec![None])).collect()));
    let round = Arc::new(AtomicU32::new(0));
    let (tx, pauses) = mpsc::channel::<(&'static str, mpsc::Sender<()>)>();
    let stop = tx.clone();
    let tx = Mutex::new(tx);
    pool.arm_crash_points(Arc::new(move |cp| {
        let CrashPoint::Named(name) = cp else { return };
        let Some(name) = PAUSED.iter().find(|p| **p == name) else {
            return;
        };
        let (done, resumed) = mpsc::channel();
        if tx.lock().send((name, done)).is_ok() {
            let _ = resumed.recv_timeout(Duration::from_secs(60));
        }
    }))
    .unwrap();
    let checker = {
        let (store, want, round) = (store.clone(), want.clone(), round.clone());
        std::thread::spawn(move || {
            let inner = &store.inner;
            let (mut recent, mut old): (Vec<Pin>, Vec<Pin>) = (Vec::new(), Vec::new());
            let (mut reads, mut pauses_seen, mut failures) = (0u64, 0u64, Vec::new());
            while let Ok((name, done)) = pauses.recv() {
                if name.is_empty() {
                    break;
                }
                // Never wait for the writer (it may wait for the paused thread).
                if let Some(hist) = want.try_lock() {
                    let r = round.load(Ordering::Acquire);
                    let current = Pin {
                        round: r,
                        at: name,
                        version: inner.version(),
                        seen: hist.iter().map(|(k, h)| (*k, h.len())).collect(),
                    };
                    for p in recent.iter().chain(&old).chain(std::iter::once(&current)) {
                        for (k, n) in &p.seen {
                            let got = inner.get_in(&p.version, &key(*k)).unwrap_or_else(|e| {
                                panic!("key {k} through the version pinned at {}: {e}", p.at)
                            });
                            reads += 1;
                            let h = &hist[k];
                            if !h[n - 1..].contains(&got) {
                                failures.push(format!(
                                    "version pinned in round {} at {}, read in round {r} at \
                                     {name}: key {k} found {}, its state at the pin {}, now {}",
                                    p.round,
                                    p.at,
                                    show(&got),
                                    show(&h[n - 1]),
                                    show(&h[h.len() - 1])
                                ));
                            }
                        }
                    }
                    pauses_seen += 1;
                    if pauses_seen % 40 == 0 {
                        old.push(current);
                        if old.len() > 4 {
                            old.remove(0);
                        }
                    } else {
                        recent.push(current);
                        if recent.len() > 6 {
                            recent.remove(0);
                        }
                    }
                }
                let _ = done.send(());
            }
            (reads, failures)
        })
    };
    let mut rng = seed | 1;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for r in 0..60u32 {
        round.store(r, Ordering::Release);
        for k in 0..40u32 {
            let x = next() % 10;
            let mut w = want.lock();
            let h = w.entry(k).or_default();
            if x < 3 {
                store.delete(&key(k)).unwrap();
                h.push(None);
            } else if x < 9 {
                let v = value(k, r);
                store.put(&key(k), &v).unwrap();
                h.push(Some(v));
            }
        }
        store.flush().unwrap();
        assert!(store.wait_idle(Duration::from_secs(60)), "round {r}");
    }
    pool.disarm_crash_points();
    stop.send(("", mpsc::channel().0)).unwrap();
    let (reads, failures) = checker.join().unwrap();
    println!("{reads} reads through current and pinned versions");
    assert!(
        failures.is_empty(),
        "{} wrong reads, the first: {:#?}",
        failures.len(),
        &failures[..failures.len().min(6)]
    );
    assert!(reads > 10_000, "{reads} reads");
    store.close().unwrap();
}
