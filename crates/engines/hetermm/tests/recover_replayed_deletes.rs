//! Regression (found by `tierkv stress --mode kill`): a delete of a record already in pmem
//! is keyed to the block at off_ReadOnly; when that block was still empty, a forced flush
//! did not reach it. So (a) recovery replayed a delete, retired the old log after its forced
//! flush, and a second crash resurrected the key; (b) with the log off, `flush()` did not
//! make such a delete durable.

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use std::path::Path;
use std::sync::Arc;

use common::*;
use tierkv_core::KvStore;
use tierkv_core::media::pmem::{CrashImageOptions, DurabilityMode, PmemPool};
use tierkv_hetermm::HeterStore;

const KEYS: u32 = 300;

fn key(k: u32) -> Vec<u8> {
    format!("key{k:04}").into_bytes()
}

/// Crashes `pool` (an image), and recovers it as a Tracked pool at `path`.
fn crash_and_recover(
    pool: &PmemPool,
    seed: u64,
    path: &Path,
    extra: &str,
) -> (Arc<PmemPool>, Arc<HeterStore>) {
    std::fs::write(
        path,
        pool.crash_image(seed, CrashImageOptions::torn_words())
            .unwrap(),
    )
    .unwrap();
    let pool = PmemPool::open(&config(path, 0, DurabilityMode::Tracked)).unwrap();
    let store = open(pool.clone(), small_options(64, extra), "btree", false);
    (pool, store)
}

#[test]
fn a_replayed_delete_survives_a_second_crash() {
    let seed = seed("replayed_delete");
    let dir = scratch_dir();
    let pool = create_pool(&dir.path().join("pool"), 8 << 20, DurabilityMode::Tracked);
    let store = open(pool.clone(), small_options(64, ""), "btree", true);
    for k in 0..KEYS {
        store.put(&key(k), &[k as u8; 40]).unwrap();
    }
    store.flush().unwrap();
    for k in (0..KEYS).step_by(3) {
        store.delete(&key(k)).unwrap();
    }
    let (pool1, first) = crash_and_recover(&pool, seed, &dir.path().join("img1"), "");
    assert!(counter(&first.stats(), "replayed_entries") > 0);
    // Crash again right after recovery: the deletes must not depend on the retired log.
    let (_pool2, second) = crash_and_recover(&pool1, seed + 1, &dir.path().join("img2"), "");
    for k in 0..KEYS {
        let want = (k % 3 != 0).then(|| vec![k as u8; 40]);
        assert_eq!(second.get(&key(k)).unwrap(), want, "seed {seed}: key {k}");
    }
}

#[test]
fn with_the_log_off_flush_makes_deletes_of_flushed_records_durable() {
    let seed = seed("log_off_flush_delete");
    let dir = scratch_dir();
    let pool = create_pool(&dir.path().join("pool"), 8 << 20, DurabilityMode::Tracked);
    let store = open(pool.clone(), small_options(64, "oplog=off"), "btree", true);
    for k in 0..KEYS {
        store.put(&key(k), &[k as u8; 40]).unwrap();
    }
    store.flush().unwrap();
    for k in (0..KEYS).step_by(3) {
        store.delete(&key(k)).unwrap();
    }
    store.flush().unwrap();
    let (_p, recovered) = crash_and_recover(&pool, seed, &dir.path().join("img"), "oplog=off");
    for k in 0..KEYS {
        let want = (k % 3 != 0).then(|| vec![k as u8; 40]);
        assert_eq!(
            recovered.get(&key(k)).unwrap(),
            want,
            "seed {seed}: key {k}"
        );
    }
}
