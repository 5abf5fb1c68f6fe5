//! The log's persist outside the index lock (issue 22, FORMAT.md § Writes, § Readers and
//! in-flight puts), on every index variant:
//!
//! a put is acknowledged only once its log entry is durable, and a get returns only values
//! whose entries are durable: Tracked crash images cut while writers and readers run recover
//! every key to at least the newest value acknowledged to a writer *or returned to a
//! reader* before the cut. (`reader_not_blocked.rs`: readers do not wait for other keys'
//! persists.)

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::*;
use tierkv_core::KvStore;
use tierkv_core::media::pmem::{
    CrashImageOptions, DurabilityMode, EmulatedLatency, PmemConfig, PmemPool,
};

const VARIANTS: [&str; 3] = ["btree", "hash", "lockfree"];
const WRITERS: u64 = 3;
const KEYS_PER_WRITER: u64 = 6;

fn key(w: u64, i: u64) -> Vec<u8> {
    format!("w{w}/k{i}").into_bytes()
}

/// A value holding `n` (its first 16 bytes); its length varies with `n`, so some puts go in
/// place and others out of place.
fn value(n: u64) -> Vec<u8> {
    let len = [16usize, 40, 24, 200, 16, 90][(n % 6) as usize];
    let mut v = format!("{n:016}").into_bytes();
    v.resize(len, b'.');
    v
}

fn number(v: &[u8]) -> u64 {
    std::str::from_utf8(&v[..16]).unwrap().parse().unwrap()
}

/// Per key: the newest number acknowledged to its writer, and the newest a reader returned.
struct Seen {
    acked: Vec<AtomicU64>,
    read: Vec<AtomicU64>,
}

fn slot(w: u64, i: u64) -> usize {
    (w * KEYS_PER_WRITER + i) as usize
}

fn crash_images(variant: &str) {
    let dir = scratch_dir();
    let cfg = PmemConfig {
        latency: EmulatedLatency {
            read_ns_per_line: 0,
            persist_ns: 20_000,
        },
        ..config(dir.path().join("pool"), 16 << 20, DurabilityMode::Tracked)
    };
    let pool = PmemPool::create(&cfg).unwrap();
    let store = open(pool.clone(), small_options(64, ""), variant, true);
    let n = (WRITERS * KEYS_PER_WRITER) as usize;
    let seen = Seen {
        acked: (0..n).map(|_| AtomicU64::new(0)).collect(),
        read: (0..n).map(|_| AtomicU64::new(0)).collect(),
    };
    let stop = AtomicBool::new(false);
    let mut cuts = Vec::new();
    std::thread::scope(|s| {
        for w in 0..WRITERS {
            let (store, seen, stop) = (&store, &seen, &stop);
            s.spawn(move || {
                let mut n = 1u64;
                while !stop.load(Ordering::SeqCst) {
                    let i = n % KEYS_PER_WRITER;
                    store.put(&key(w, i), &value(n)).unwrap();
                    seen.acked[slot(w, i)].store(n, Ordering::SeqCst);
                    n += 1;
                }
            });
        }
        for r in 0..2u64 {
            let (store, seen, stop) = (&store, &seen, &stop);
            s.spawn(move || {
                let mut x = r;
                while !stop.load(Ordering::SeqCst) {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let (w, i) = ((x >> 33) % WRITERS, (x >> 40) % KEYS_PER_WRITER);
                    if let Some(v) = store.get(&key(w, i)).unwrap() {
                        seen.read[slot(w, i)].fetch_max(number(&v), Ordering::SeqCst);
                    }
                }
            });
        }
        for round in 0..6u64 {
            std::thread::sleep(Duration::from_millis(40));
            // Everything acknowledged or returned before the cut must survive it.
            let floor: Vec<u64> = (0..n)
                .map(|k| {
                    seen.acked[k]
                        .load(Ordering::SeqCst)
                        .max(seen.read[k].load(Ordering::SeqCst))
                })
                .collect();
            let path = dir.path().join(format!("img{round}"));
            let opts = if round % 2 == 0 {
                CrashImageOptions::lines()
            } else {
                CrashImageOptions::torn_words()
            };
            pool.write_crash_image(round + 7, opts, &path).unwrap();
            cuts.push((path, floor));
        }
        stop.store(true, Ordering::SeqCst);
    });
    let acked: u64 = seen.acked.iter().map(|a| a.load(Ordering::SeqCst)).sum();
    assert!(acked > 0, "no put was acknowledged");
    store.close().unwrap();
    for (path, floor) in cuts {
        let p = PmemPool::open(&config(&path, 0, DurabilityMode::Volatile)).unwrap();
        let s = open(p, small_options(64, ""), variant, false);
        for w in 0..WRITERS {
            for i in 0..KEYS_PER_WRITER {
                let want = floor[slot(w, i)];
                let got = s.get(&key(w, i)).unwrap().map_or(0, |v| number(&v));
                assert!(
                    got >= want,
                    "{variant}, {}: key {w}/{i} recovered {got}, but {want} was acknowledged \
                     or read before the cut",
                    path.display()
                );
            }
        }
        s.close().unwrap();
    }
}

#[test]
fn btree_acknowledged_and_read_values_survive_a_cut() {
    crash_images("btree");
}

#[test]
fn hash_acknowledged_and_read_values_survive_a_cut() {
    crash_images("hash");
}

#[test]
fn lockfree_acknowledged_and_read_values_survive_a_cut() {
    crash_images("lockfree");
}

/// A cut right after each put returns (one thread, nothing in flight): the image holds it.
#[test]
fn an_image_cut_at_the_acknowledgement_holds_the_put() {
    for variant in VARIANTS {
        let dir = scratch_dir();
        let pool = create_pool(&dir.path().join("pool"), 16 << 20, DurabilityMode::Tracked);
        let store = open(pool.clone(), small_options(64, ""), variant, true);
        for n in 1..=12u64 {
            let k = key(0, n % 3);
            store.put(&k, &value(n)).unwrap();
            let path = dir.path().join(format!("ack{n}"));
            pool.write_crash_image(n, CrashImageOptions::lines(), &path)
                .unwrap();
            let p = PmemPool::open(&config(&path, 0, DurabilityMode::Volatile)).unwrap();
            let s = open(p, small_options(64, ""), variant, false);
            assert_eq!(
                s.get(&k).unwrap(),
                Some(value(n)),
                "{variant}: put {n} was acknowledged before its entry was durable"
            );
            s.close().unwrap();
        }
        store.close().unwrap();
    }
}
