//! Model-based test of write batches (issue 24; STYLE §7): the testkit's batch model —
//! random batches, puts, deletes, gets and `multi_get`s from three partition threads, each
//! checked against its `BTreeMap` oracle, while two group writers rewrite whole groups of
//! shared keys in one batch and a reader `multi_get`s each group (it must see one batch
//! whole) — on 8 KiB MemTables, so that switches, flushes and compactions run between and
//! around batches; then the store is reopened (replay of the batch records still in logs)
//! and must hold the same data.

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use tierkv_core::KvStore;
use tierkv_core::media::pmem::{DurabilityMode, PmemPool};
use tierkv_testkit::{BatchModelConfig, run_batch_model};

const PARAMS: &str = "memtable=8KiB,levels=3,stall_timeout_ms=60000,progress_wait_ms=60000";

#[test]
fn batches_mixed_with_puts_and_deletes_match_the_oracle_and_survive_a_reopen() {
    let dir = scratch_dir();
    let path = dir.path().join("pool");
    let pool = create_pool(&path, 8 << 20, DurabilityMode::Volatile);
    let store = open(pool, PARAMS, true);
    let cfg = BatchModelConfig {
        seed: seed("mio_batches_mixed_with_puts_and_deletes_match_the_oracle"),
        ..BatchModelConfig::default()
    };
    let dynamic: Arc<dyn KvStore> = store.clone();
    let r = run_batch_model(dynamic, &cfg);
    let s = store.stats();
    println!(
        "{r:?}; batches {}, flushes {}, nodes relinked {}",
        counter(&s, "batches"),
        counter(&s, "flushes"),
        counter(&s, "nodes_relinked")
    );
    assert!(
        r.batches > 100 && r.group_batches == 2 * cfg.group_batches,
        "{r:?}"
    );
    assert!(r.group_reads > 0 && r.multi_gets > 0, "{r:?}");
    assert!(counter(&s, "flushes") >= 10, "too few flushes: {s:?}");
    assert!(store.wait_idle(Duration::from_secs(30)));
    let before = store.scan(b"", usize::MAX).unwrap();
    store.close().unwrap();
    drop(store);
    let pool = PmemPool::open(&config(&path, 0, DurabilityMode::Volatile)).unwrap();
    let store = tierkv_mio::open_store(pool, options(PARAMS), limits(), false).unwrap();
    store.check().unwrap();
    assert_eq!(store.scan(b"", usize::MAX).unwrap(), before);
}

/// Batches and single puts racing on the same keys: a `multi_get` never sees values of two
/// batches, and the reopened store (replay orders writes by seq) holds exactly what the
/// live store held.
#[test]
fn batches_racing_puts_on_the_same_keys_recover_in_the_order_they_were_applied() {
    let dir = scratch_dir();
    let path = dir.path().join("pool");
    let pool = create_pool(&path, 8 << 20, DurabilityMode::Volatile);
    let store = open(pool, PARAMS, true);
    let seed = seed("mio_batches_racing_puts_on_the_same_keys");
    let live = tierkv_testkit::run_racing_puts_and_batches(&*store, 12, 200, seed);
    store.close().unwrap();
    drop(store);
    let pool = PmemPool::open(&config(&path, 0, DurabilityMode::Volatile)).unwrap();
    let store = tierkv_mio::open_store(pool, options(PARAMS), limits(), false).unwrap();
    let keys: Vec<Vec<u8>> = (0..12).map(|n| format!("rk/{n:02}").into_bytes()).collect();
    let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    assert_eq!(store.multi_get(&refs).unwrap(), live);
    assert!(live.iter().all(Option::is_some));
}
