//! `check` (skiplist order at every height, level invariants, allocation accounting) run
//! after every write of a single writer in a 2 MiB pool with 4 KiB MemTables, while
//! flushes, zero-copy merges, moves under pressure and lazy copies run in the background.

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use common::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv_core::KvStore;
use tierkv_core::media::pmem::DurabilityMode;

#[test]
fn check_passes_after_every_write_while_background_work_runs() {
    let seed = seed("check_after_every_write");
    let dir = scratch_dir();
    let pool = create_pool(&dir.path().join("pool"), 2 << 20, DurabilityMode::Volatile);
    let store = open(
        pool,
        "memtable=4KiB,levels=4,stall_timeout_ms=60000,progress_wait_ms=60000",
        true,
    );
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for i in 0..3000u32 {
        let k = format!("key{:03}", rng.random_range(0..60)).into_bytes();
        let mut v = format!("{i}:").into_bytes();
        v.resize(rng.random_range(20..300), b'a');
        if rng.random_range(0..100) < 85 {
            store.put(&k, &v).unwrap();
        } else {
            store.delete(&k).unwrap();
        }
        if let Err(e) = store.check() {
            panic!(
                "seed {seed}, op {i}: {e}; tables {:?}",
                store.tables_per_level()
            );
        }
    }
    let s = store.stats();
    assert!(
        counter(&s, "nodes_relinked") > 100 && counter(&s, "compactions_l2") > 5,
        "{:?}",
        s.counters
    );
    store.close().unwrap();
}
