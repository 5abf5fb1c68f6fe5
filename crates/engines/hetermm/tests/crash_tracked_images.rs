//! Power failure on pmem (DESIGN §4, failure model 2): writers put and delete on their own
//! keys while the main thread takes Tracked crash images at random moments (whole lines or
//! torn words), recovers each image into a fresh store and checks that every acknowledged
//! write holds — and nothing else: each key holds the value of an operation issued on it no
//! earlier than its last acknowledged one (a later one may have been in flight). Flushing,
//! reorganisation and log reclamation run throughout, so images fall in all their steps.

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use common::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv_core::KvStore;
use tierkv_core::media::pmem::{CrashImageOptions, DurabilityMode, PmemPool};

const WRITERS: usize = 3;
const KEYS: u64 = 150;
const IMAGES: u64 = 220;

fn key(t: usize, k: u64) -> Vec<u8> {
    format!("w{t}/{k:04}").into_bytes()
}

fn value(t: usize, k: u64, n: u64) -> Vec<u8> {
    let mut v = format!("{t}:{k}:{n}:").into_bytes();
    v.resize(v.len() + (n * 37 % 300) as usize, b'a' + (n % 26) as u8);
    v
}

/// Per key: the operations issued (true = put), and the number of the last acknowledged.
#[derive(Default)]
struct History {
    ops: Vec<Vec<bool>>,
    acked: Vec<Option<u64>>,
}

fn writer(
    t: usize,
    store: Arc<tierkv_hetermm::HeterStore>,
    hist: &Mutex<History>,
    issued: &AtomicU64,
    stop: &AtomicBool,
    seed: u64,
) {
    let _guard = StopOnPanic(stop);
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ t as u64);
    while !stop.load(Ordering::Relaxed) {
        let k = rng.random_range(0..KEYS);
        let put = rng.random_range(0..100) < 85;
        let n = {
            let mut h = hist.lock().unwrap();
            let ops = &mut h.ops[k as usize];
            ops.push(put);
            ops.len() as u64 - 1
        };
        issued.fetch_add(1, Ordering::SeqCst);
        if put {
            store.put(&key(t, k), &value(t, k, n)).unwrap();
        } else {
            store.delete(&key(t, k)).unwrap();
        }
        hist.lock().unwrap().acked[k as usize] = Some(n);
    }
}

/// Sets `stop` when a writer thread ends by panicking, so that the main thread, which waits
/// for writers to make progress, does not wait forever for a writer that is gone.
struct StopOnPanic<'a>(&'a AtomicBool);

impl Drop for StopOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::SeqCst);
        }
    }
}

#[test]
fn every_acknowledged_write_survives_every_crash_image() {
    let seed = seed("crash_tracked_images");
    let dir = scratch_dir();
    let pool = create_pool(&dir.path().join("pool"), 8 << 20, DurabilityMode::Tracked);
    let store = open(pool.clone(), small_options(64, ""), "btree", true);
    let hists: Vec<Mutex<History>> = (0..WRITERS)
        .map(|_| {
            Mutex::new(History {
                ops: vec![Vec::new(); KEYS as usize],
                acked: vec![None; KEYS as usize],
            })
        })
        .collect();
    let issued = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let mut replayed_images = 0;
    std::thread::scope(|s| {
        for (t, hist) in hists.iter().enumerate() {
            let (store, issued, stop) = (store.clone(), &issued, &stop);
            s.spawn(move || writer(t, store, hist, issued, stop, seed));
        }
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        for i in 0..IMAGES {
            let target = issued.load(Ordering::SeqCst) + rng.random_range(1..200);
            let waiting = std::time::Instant::now();
            while issued.load(Ordering::SeqCst) < target && !stop.load(Ordering::SeqCst) {
                assert!(
                    waiting.elapsed() < std::time::Duration::from_secs(60),
                    "seed {seed}: writers made no progress for 60 s (image {i})"
                );
                std::thread::yield_now();
            }
            if stop.load(Ordering::SeqCst) {
                break; // a writer panicked: the scope re-raises its panic
            }
            let acked: Vec<Vec<Option<u64>>> = hists
                .iter()
                .map(|h| h.lock().unwrap().acked.clone())
                .collect();
            let opts = if i % 2 == 0 {
                CrashImageOptions::lines()
            } else {
                CrashImageOptions::torn_words()
            };
            let image = pool.crash_image(seed.wrapping_add(i), opts).unwrap();
            let ops: Vec<Vec<Vec<bool>>> = hists
                .iter()
                .map(|h| h.lock().unwrap().ops.clone())
                .collect();
            if verify_image(
                &dir.path().join(format!("img{i}")),
                &image,
                &acked,
                &ops,
                seed,
                i,
            ) {
                replayed_images += 1;
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    let s = store.stats();
    println!(
        "{IMAGES} images verified ({replayed_images} replayed log entries); the store under test ran {} flushes, {} reorganisations, {} log blocks reclaimed",
        counter(&s, "flushes"),
        counter(&s, "reorganisations"),
        counter(&s, "log_blocks_reclaimed")
    );
    assert!(
        counter(&s, "flushes") > 20 && counter(&s, "reorganisations") > 5,
        "{s:?}"
    );
    assert!(
        replayed_images > 10,
        "images must also catch data only in the log"
    );
    store.close().unwrap();
}

/// Recovers `image` and checks every key; returns whether recovery replayed log entries.
fn verify_image(
    path: &std::path::Path,
    image: &[u8],
    acked: &[Vec<Option<u64>>],
    ops: &[Vec<Vec<bool>>],
    seed: u64,
    i: u64,
) -> bool {
    std::fs::write(path, image).unwrap();
    let pool = PmemPool::open(&config(path, 0, DurabilityMode::Volatile)).unwrap();
    let ctx = format!("seed {seed}, image {i}");
    let store = try_open(pool, small_options(64, ""), "btree", false).unwrap_or_else(|e| {
        let kept = std::env::temp_dir().join(format!("hetermm-failed-image-{seed}-{i}"));
        let _ = std::fs::copy(path, &kept);
        panic!(
            "{ctx}: recovery failed: {e} (image kept in {})",
            kept.display()
        )
    });
    for (t, keys) in acked.iter().enumerate() {
        for (k, last) in keys.iter().enumerate() {
            let got = store.get(&key(t, k as u64)).unwrap();
            let history = &ops[t][k];
            let from = last.unwrap_or(0) as usize;
            let allowed = (from..history.len()).any(|n| match (&got, history[n]) {
                (Some(v), true) => *v == value(t, k as u64, n as u64),
                (None, false) => true,
                _ => false,
            }) || (last.is_none() && got.is_none());
            assert!(
                allowed,
                "{ctx}: key {} holds {:?}; last acknowledged op {last:?} of {:?}",
                String::from_utf8_lossy(&key(t, k as u64)),
                got.as_ref()
                    .map(|v| String::from_utf8_lossy(&v[..v.len().min(16)]).into_owned()),
                history
            );
        }
    }
    store
        .check()
        .unwrap_or_else(|e| panic!("{ctx}: check after recovery: {e}"));
    let replayed = counter(&store.stats(), "replayed_entries") > 0;
    store.close().unwrap();
    drop(store);
    std::fs::remove_file(path).unwrap();
    replayed
}
