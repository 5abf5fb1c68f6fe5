//! Model-based tests of `prismdb` against the testkit's oracle, with a tiny fast tier so
//! that write-triggered compactions, demotions, tombstone drops and class moves run all the
//! time; then the store is checked, reopened and compared again.

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use common::{Rig, TINY, counter, reopen_unchanged};
use tierkv_core::KvStore;
use tierkv_testkit::{ModelConfig, run_model};

fn model(threads: usize, ops: usize, seed: u64) {
    let rig = Rig::new(TINY, 4);
    let store = rig.create();
    let cfg = ModelConfig {
        threads,
        ops_per_thread: ops,
        keys_per_thread: 400,
        value_len: 0..=600,
        seed,
        ..ModelConfig::default()
    };
    let report = run_model(store.clone(), &cfg);
    assert!(report.ops > 0);
    let s = store.stats();
    println!("{:?}", s.counters);
    assert!(
        counter(&*store, "prismdb_compactions_write") > 0,
        "no compaction ran"
    );
    assert!(
        counter(&*store, "prismdb_demoted") > 0,
        "nothing was demoted"
    );
    assert!(s.reads_from_flash > 0, "no read reached flash");
    assert!(
        counter(&*store, "prismdb_throttled_writes") > 0,
        "writes above the high watermark were not slowed"
    );
    let (store, before) = reopen_unchanged(&rig, store);
    for (k, v) in before.iter().step_by(7) {
        assert_eq!(store.get(k).unwrap().as_ref(), Some(v));
    }
}

#[test]
fn model_four_threads_with_constant_compactions() {
    model(4, 4_000, common::seed("model_four_threads", 0x5052_4953));
}

#[test]
fn model_thirty_two_threads_do_not_deadlock() {
    model(32, 400, common::seed("model_thirty_two_threads", 0x3332));
}
