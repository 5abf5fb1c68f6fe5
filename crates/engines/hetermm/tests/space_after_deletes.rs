//! New keys after deletes in a pool that was filled to refusal (bug found by `tierkv stress
//! --engine hetermm:btree --mode space --seed 3271 --writers-per-key 4`, 16 MiB pool): after
//! 1497 deletes freed 2.1 MB, a new key of 669 bytes was refused for 10 s — "669 blocks
//! hold 2739 KiB of records in 12016 KiB, 15 of 1022 chunks of 16 KiB free, a block takes
//! 16". Reorganisation had done what it could: logical blocks never merge (the index holds
//! their records' addresses), and each of the 669 had become a compact block of one or two
//! allocator chunks — a sixteenth of a block each — holding a few KiB of records, so
//! deleting records in it freed nothing, and a new block needs 16 free chunks in a row.
//! The round count made it: every fill adds blocks, and old ones die only with their last
//! record (a fill/delete/refill cycle in this pool grows from 150 to 370 blocks in 8 rounds).
//! Chunks are now a sixty-fourth of a block (`nvm/mod.rs` `CHUNKS_PER_BLOCK`), so a sparse
//! block keeps a quarter of what it kept.
//!
//! `a_pool_of_sparse_blocks_still_takes_new_keys` builds that end state directly and
//! deterministically (each block left with one small record, through `flush`, which closes
//! the tail block); `new_keys_are_accepted_after_deletes_on_a_pool_filled_by_racing_writers`
//! runs the stress tool's cycle (racing writers fill to refusal, half the keys deleted, a
//! quarter of the freed bytes written again as new keys within a bounded wait, close and
//! reopen) for a few rounds.

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv_core::media::pmem::{DurabilityMode, PmemPool};
use tierkv_core::{Error, KvStore};
use tierkv_hetermm::{HeterOptions, HeterStore};

const POOL: u64 = 16 << 20;
const KEYS: u64 = 20_000;
const ROUNDS: usize = 2;
const MAX_VALUE: usize = 16 << 10;
/// How long a new key may be refused after the deletes (the stress tool allows 10 s).
const WAIT: Duration = Duration::from_secs(5);

/// Half the values at most 64 bytes, the rest up to `MAX_VALUE` (the stress tool's skew).
fn value_len(rng: &mut ChaCha8Rng) -> usize {
    if rng.random_bool(0.5) {
        rng.random_range(12..=64)
    } else {
        rng.random_range(65..=MAX_VALUE)
    }
}

fn key(k: u64) -> Vec<u8> {
    format!("k{k:06}").into_bytes()
}

/// Logical blocks left with one small record each: 900 of them took 900 chunks of 16 KiB
/// before, more than the 750 a 16 MiB pool has beside its reserve.
const SPARSE_BLOCKS: u64 = 900;

/// Before the fix (chunks of 16 KiB): `step 744: the new key s000744 (100 bytes) was refused
/// for 5.004596539s: … 744 blocks hold 98 KiB of records in 11904 KiB, 0 log blocks, reserve
/// 16 of 17 blocks, 22 of 1022 chunks of 16 KiB free (longest free run 14, a block takes 16)`.
#[test]
fn a_pool_of_sparse_blocks_still_takes_new_keys() {
    let dir = scratch_dir();
    let pool = create_pool(&dir.path().join("pool"), POOL, DurabilityMode::Volatile);
    let store = open(pool, HeterOptions::default(), "btree", true);
    let filler = vec![0xf0u8; 8 << 10];
    for i in 0..SPARSE_BLOCKS {
        let survivor = key_value(i);
        put_within_wait(&store, &survivor.0, &survivor.1, i as usize);
        put_within_wait(&store, format!("f{i:06}").as_bytes(), &filler, i as usize);
        // Closes the tail block: it holds the survivor and the filler.
        store.flush().unwrap();
        store.delete(format!("f{i:06}").as_bytes()).unwrap();
    }
    let s = store.stats();
    println!(
        "{SPARSE_BLOCKS} sparse blocks: reorganisations {}, blocks freed {}, room passes {}",
        counter(&s, "reorganisations"),
        counter(&s, "blocks_freed"),
        counter(&s, "room_passes"),
    );
    assert!(
        counter(&s, "reorganisations") >= SPARSE_BLOCKS / 2,
        "the sparse blocks were reorganised: {s:?}"
    );
    store.check().unwrap();
    for i in 0..SPARSE_BLOCKS {
        let (k, v) = key_value(i);
        assert_eq!(store.get(&k).unwrap(), Some(v), "survivor {i}");
        assert_eq!(store.get(format!("f{i:06}").as_bytes()).unwrap(), None);
    }
    store.close().unwrap();
}

fn key_value(i: u64) -> (Vec<u8>, Vec<u8>) {
    (format!("s{i:06}").into_bytes(), vec![(i % 251) as u8; 100])
}

/// Fills the store with four writers (all drawing the same keys in the same order, so four
/// race on each key) until one is refused; `live` gets the length of the value last
/// acknowledged for each key (0: none).
fn fill(store: &Arc<HeterStore>, seed: u64, live: &[AtomicU64]) {
    let full = AtomicBool::new(false);
    std::thread::scope(|s| {
        for _ in 0..4 {
            let (store, live, full) = (store.clone(), live, &full);
            s.spawn(move || {
                let mut rng = ChaCha8Rng::seed_from_u64(seed);
                while !full.load(Ordering::Relaxed) {
                    let k = rng.random_range(0..KEYS);
                    let len = value_len(&mut rng);
                    match store.put(&key(k), &vec![(k % 251) as u8; len]) {
                        Ok(()) => live[k as usize].store(len as u64, Ordering::Relaxed),
                        Err(e @ Error::NoSpace { .. }) => {
                            if !full.swap(true, Ordering::Relaxed) {
                                println!("refused: {e}");
                            }
                        }
                        Err(e) => panic!("put: {e}"),
                    }
                }
            });
        }
    });
}

/// Puts `key` = `value`, retrying a refusal for up to `WAIT`; panics with what it saw.
fn put_within_wait(store: &Arc<HeterStore>, key: &[u8], value: &[u8], step: usize) {
    let started = Instant::now();
    loop {
        match store.put(key, value) {
            Ok(()) => return,
            Err(Error::NoSpace { .. }) if started.elapsed() < WAIT => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!(
                "step {step}: the new key {} ({} bytes) was refused for {:?}: {e}",
                String::from_utf8_lossy(key),
                value.len(),
                started.elapsed()
            ),
        }
    }
}

#[test]
fn new_keys_are_accepted_after_deletes_on_a_pool_filled_by_racing_writers() {
    for variant in ["btree", "hash"] {
        let seed = seed(&format!("space_after_deletes_{variant}"));
        let dir = scratch_dir();
        let path = dir.path().join("pool");
        let pool = create_pool(&path, POOL, DurabilityMode::Volatile);
        let mut store = open(pool, HeterOptions::default(), variant, true);
        let live: Vec<AtomicU64> = (0..KEYS).map(|_| AtomicU64::new(0)).collect();
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xdead);
        let mut fresh = KEYS;
        for round in 0..ROUNDS {
            fill(&store, seed.wrapping_add(round as u64 * 7919), &live);
            let at_refusal: u64 = live.iter().map(|l| l.load(Ordering::Relaxed)).sum();
            let mut freed = 0;
            let mut deletes = 0;
            for (k, l) in live.iter().enumerate() {
                if l.load(Ordering::Relaxed) > 0 && rng.random_bool(0.5) {
                    store.delete(&key(k as u64)).unwrap();
                    freed += l.swap(0, Ordering::Relaxed);
                    deletes += 1;
                }
            }
            let mut written = 0;
            while written < freed / 4 {
                let len = value_len(&mut rng);
                let k = rng.random_range(0..KEYS);
                if live[k as usize].load(Ordering::Relaxed) > 0 {
                    continue;
                }
                put_within_wait(&store, &key(k), &vec![(k % 251) as u8; len], round);
                live[k as usize].store(len as u64, Ordering::Relaxed);
                written += len as u64;
                fresh += 1;
            }
            let s = store.stats();
            println!(
                "{variant} round {round}: {at_refusal} live at refusal, {deletes} deletes freed {freed} bytes, {written} \
                 written again; reorganisations {}, room passes {}",
                counter(&s, "reorganisations"),
                counter(&s, "room_passes"),
            );
            // The stress tool closes and reopens the store after each round.
            store.close().unwrap();
            drop(store);
            let pool = PmemPool::open(&config(&path, 0, DurabilityMode::Volatile)).unwrap();
            store = open(pool, HeterOptions::default(), variant, false);
        }
        assert!(fresh > KEYS, "new keys were written");
        store
            .check()
            .unwrap_or_else(|e| panic!("{variant}: check: {e}"));
        for (k, l) in live.iter().enumerate() {
            let len = l.load(Ordering::Relaxed) as usize;
            if len > 0 {
                let v = store.get(&key(k as u64)).unwrap();
                assert!(v.is_some(), "{variant}: key {k} lost");
            }
        }
        store.close().unwrap();
    }
}
