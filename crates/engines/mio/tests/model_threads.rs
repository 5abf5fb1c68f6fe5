//! Model-based tests (STYLE §7): random get / put / delete / scan from several threads
//! against the testkit's oracle, with a tiny MemTable and few levels so that one-piece
//! flushes, level compactions and merges into the repository run many times per test;
//! then the store is reopened and verified again (recovery); and the same at 32 threads.

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use std::time::Duration;

use common::*;
use tierkv_core::KvStore;
use tierkv_core::media::pmem::DurabilityMode;
use tierkv_testkit::{ModelConfig, run_model, verify_all};

fn scenario(threads: usize, ops: usize, params: &str, test: &str) {
    let dir = scratch_dir();
    let path = dir.path().join("pool");
    let pool = create_pool(&path, 32 << 20, DurabilityMode::Volatile);
    let store = open(pool, params, true);
    let cfg = ModelConfig {
        threads,
        ops_per_thread: ops,
        shared_ops_per_thread: ops / 4,
        seed: seed(test),
        ..ModelConfig::default()
    };
    let r = run_model(store.clone(), &cfg);
    assert!(r.hits > 100, "{r:?}");
    assert!(
        store.wait_idle(Duration::from_secs(20)),
        "background work did not settle"
    );
    let s = store.stats();
    println!(
        "{test}: {:#?}\ntables per level {:?}",
        s.counters,
        store.tables_per_level()
    );
    let compactions: u64 = (0..4)
        .map(|l| counter(&s, &format!("compactions_l{l}")))
        .sum();
    assert!(
        counter(&s, "flushes") >= 20,
        "flushes {}",
        counter(&s, "flushes")
    );
    assert!(counter(&s, "compactions_l0") >= 5, "l0 compactions");
    assert!(compactions >= 10, "compactions {compactions}");
    if !params.contains("compaction=copy") {
        assert!(
            counter(&s, "nodes_relinked") >= 1_000,
            "zero-copy compactions relinked nodes"
        );
    }
    println!("{}", store.check().unwrap().join("\n"));
    // Everything the model holds, read back from the store and after a reopen.
    let all = store.scan(b"", usize::MAX).unwrap();
    let oracle: std::collections::BTreeMap<Vec<u8>, Vec<u8>> = all.into_iter().collect();
    store.close().unwrap();
    drop(store);
    let pool =
        tierkv_core::media::pmem::PmemPool::open(&config(&path, 0, DurabilityMode::Volatile))
            .unwrap();
    let store = open(pool, params, false);
    verify_all(&*store, &oracle, true, cfg.seed);
    println!("{}", store.check().unwrap().join("\n"));
    store.close().unwrap();
}

#[test]
fn model_four_threads_tiny_memtable() {
    scenario(4, 4_000, "memtable=16KiB,levels=4", "model_four_threads");
}

#[test]
fn model_thirty_two_threads_without_deadlock() {
    scenario(32, 600, "memtable=16KiB,levels=5", "model_32_threads");
}

#[test]
fn model_four_threads_copy_compaction() {
    scenario(
        4,
        3_000,
        "memtable=16KiB,levels=4,compaction=copy",
        "model_copy",
    );
}
