//! Process crash inside write batches (issue 24): a child process (this test binary re-run
//! with `TIERKV_BATCH_CHILD` set) writes batches of 1..=100 keys from three threads
//! (`BatchKit::run_logged`) into a store with 16 KiB MemTables whose pool is in Volatile
//! mode, logging each batch's begin and acknowledgement; the parent SIGKILLs it at a
//! random moment, reopens the store and judges it with the kit: every batch whole or
//! absent, none acknowledged lost.

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use std::time::Duration;

use common::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv_core::KvStore;
use tierkv_core::media::pmem::{DurabilityMode, PmemPool};
use tierkv_testkit::{BatchKit, BatchKitConfig, BatchReport, batch_child, batch_child_env};

const PARAMS: &str = "memtable=16KiB,levels=3";
const ENTRY: &str = "batch_sigkill_child_entry";

fn kit(seed: u64) -> BatchKit {
    BatchKit::new(BatchKitConfig {
        seed,
        batches_per_thread: u64::MAX,
        ..BatchKitConfig::default()
    })
}

/// The child: creates the store and writes batches until killed.
#[test]
fn batch_sigkill_child_entry() {
    let Some((dir, seed)) = batch_child_env() else {
        return;
    };
    let pool = create_pool(&dir.join("pool"), 16 << 20, DurabilityMode::Volatile);
    let store = open(pool, PARAMS, true);
    let out = parking_lot::Mutex::new(std::io::stdout());
    kit(seed).run_logged(&*store, &out);
}

#[test]
fn sigkill_inside_batches_loses_no_batch_and_tears_none() {
    if batch_child_env().is_some() {
        return;
    }
    let seed = seed("mio_sigkill_inside_batches_loses_no_batch_and_tears_none");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut total = BatchReport::default();
    let mut replayed = 0;
    for round in 0..3u64 {
        let tmp = scratch_dir();
        let kit = kit(seed.wrapping_add(round));
        let after = Duration::from_millis(rng.random_range(100..900));
        let ledger =
            kit.run_child_until_killed(batch_child(ENTRY, tmp.path(), kit.config().seed), after);
        let pool = PmemPool::open(&config(
            tmp.path().join("pool"),
            0,
            DurabilityMode::Volatile,
        ))
        .unwrap();
        let store = tierkv_mio::open_store(pool, options(PARAMS), limits(), false).unwrap();
        store.check().unwrap();
        replayed += counter(&store.stats(), "replayed_records");
        total.merge(kit.check(&*store, &ledger, &format!("round {round}")));
        store.close().unwrap();
    }
    println!(
        "sigkill: {} kills, {} batches checked, {} torn, {} lost, {replayed} log records replayed",
        total.images, total.batches_checked, total.torn, total.lost
    );
    total.assert_clean();
    assert!(total.batches_checked >= 3 * 7, "{total:?}");
}
