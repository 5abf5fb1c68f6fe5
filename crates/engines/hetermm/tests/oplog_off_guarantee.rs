//! The weaker guarantee with `oplog=off` (store.rs, FORMAT.md § Crash consistency): after a
//! crash, a key untouched since the last `flush()` holds exactly its flushed value; a key
//! written since holds its flushed value or one of the values written since (never
//! anything else); writes still in DRAM at the crash may be lost — and in some images are.
//! A clean close loses nothing.

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv_core::KvStore;
use tierkv_core::media::pmem::{CrashImageOptions, DurabilityMode, PmemPool};

const KEYS: u64 = 400;

fn key(k: u64) -> Vec<u8> {
    format!("key{k:04}").into_bytes()
}

fn value(k: u64, version: u64) -> Vec<u8> {
    let mut v = format!("{k}:{version}:").into_bytes();
    v.resize(v.len() + (version * 13 % 200) as usize, b'x');
    v
}

#[test]
fn with_the_log_off_a_crash_loses_only_writes_made_since_the_last_flush() {
    let seed = seed("oplog_off");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let dir = scratch_dir();
    let pool = create_pool(&dir.path().join("pool"), 8 << 20, DurabilityMode::Tracked);
    let store = open(pool.clone(), small_options(64, "oplog=off"), "btree", true);
    let mut flushed: BTreeMap<u64, Option<u64>> = BTreeMap::new();
    let mut version = 0;
    let mut lost_somewhere = 0;
    for round in 0..30u64 {
        for _ in 0..300 {
            let k = rng.random_range(0..KEYS);
            version += 1;
            store.put(&key(k), &value(k, version)).unwrap();
            flushed.insert(k, Some(version));
        }
        store.flush().unwrap();
        // Since the flush: writes that may be lost.
        let mut since: BTreeMap<u64, BTreeSet<Option<u64>>> = BTreeMap::new();
        for _ in 0..rng.random_range(50..600) {
            let k = rng.random_range(0..KEYS);
            version += 1;
            if rng.random_range(0..10) == 0 {
                store.delete(&key(k)).unwrap();
                since.entry(k).or_default().insert(None);
            } else {
                store.put(&key(k), &value(k, version)).unwrap();
                since.entry(k).or_default().insert(Some(version));
            }
        }
        let image = pool
            .crash_image(seed ^ round, CrashImageOptions::torn_words())
            .unwrap();
        let path = dir.path().join(format!("img{round}"));
        std::fs::write(&path, &image).unwrap();
        let recovered = open(
            PmemPool::open(&config(&path, 0, DurabilityMode::Volatile)).unwrap(),
            small_options(64, "oplog=off"),
            "btree",
            false,
        );
        for k in 0..KEYS {
            let got = recovered.get(&key(k)).unwrap();
            let at_flush = flushed.get(&k).copied().flatten();
            let as_flushed = got == at_flush.map(|v| value(k, v));
            let later = since
                .get(&k)
                .is_some_and(|s| s.iter().any(|w| got == w.map(|v| value(k, v))));
            assert!(
                as_flushed || later,
                "seed {seed}, round {round}: key {k} holds {got:?}"
            );
            if since.contains_key(&k) && as_flushed && !later {
                lost_somewhere += 1;
            }
        }
        recovered.check().unwrap();
        recovered.close().unwrap();
        drop(recovered);
        std::fs::remove_file(&path).unwrap();
        // What was written since the flush becomes the new flushed state once flushed.
        for (k, s) in since {
            let newest = s.into_iter().max_by_key(|v| v.map_or(0, |x| x));
            flushed.insert(k, newest.flatten());
        }
        // Deletes leave no version; track them by the order they were made instead.
        store.flush().unwrap();
        for k in 0..KEYS {
            let got = store.get(&key(k)).unwrap();
            flushed.insert(
                k,
                got.map(|v| {
                    String::from_utf8_lossy(&v)
                        .split(':')
                        .nth(1)
                        .unwrap()
                        .parse()
                        .unwrap()
                }),
            );
        }
    }
    println!("{lost_somewhere} acknowledged writes were lost across the images (the log was off)");
    assert!(
        lost_somewhere > 0,
        "with the log off, writes still in DRAM must be lost in some image"
    );
    store.close().unwrap();
    drop(store);
    drop(pool);
    let recovered = open(
        PmemPool::open(&config(
            dir.path().join("pool"),
            0,
            DurabilityMode::Volatile,
        ))
        .unwrap(),
        small_options(64, "oplog=off"),
        "btree",
        false,
    );
    for (k, v) in &flushed {
        assert_eq!(
            recovered.get(&key(*k)).unwrap(),
            v.map(|v| value(*k, v)),
            "after a clean close"
        );
    }
}
