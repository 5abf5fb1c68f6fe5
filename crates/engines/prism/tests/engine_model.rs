//! Model-based test (STYLE §7): random get/put/delete/scan from several threads, checked
//! against a `BTreeMap` oracle, on a store with tiny PWBs, chunks, flash and cache so that
//! PWB reclamation, Value Storage GC and SVC eviction each run many times; then the store
//! is reopened and must hold exactly the same data.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use common::{Rig, SMALL, assert_check};
use tierkv_core::KvStore;
use tierkv_testkit::{ModelConfig, run_model};

#[test]
fn model_with_small_buffers_runs_reclamation_gc_and_eviction_many_times() {
    let rig = Rig::new(SMALL, 32, 1);
    let store = rig.create();
    let cfg = ModelConfig {
        threads: 4,
        ops_per_thread: 4_000,
        keys_per_thread: 200,
        value_len: 0..=600,
        put_pct: 50,
        delete_pct: 10,
        scan_pct: 5,
        shared_ops_per_thread: 1_000,
        ..ModelConfig::default()
    };
    let report = run_model(store.clone(), &cfg);
    assert!(report.hits > 0 && report.scans > 0);
    store.quiesce_cache();
    let s = store.stats();
    eprintln!("counters: {:?}", s.counters);
    eprintln!("gauges: {:?}", s.gauges);
    assert!(
        s.counters["pwb_reclaims"] >= 20,
        "PWB reclamation ran {} times",
        s.counters["pwb_reclaims"]
    );
    assert!(
        s.counters["gc_runs"] >= 3,
        "GC ran {} times",
        s.counters["gc_runs"]
    );
    assert!(
        s.counters["svc_evictions"] >= 20,
        "SVC evicted {} times",
        s.counters["svc_evictions"]
    );
    assert!(s.reads_from_flash > 0 && s.reads_from_pmem > 0 && s.reads_from_dram > 0);
    assert_check(&*store);

    let before = store.scan(b"", usize::MAX).unwrap();
    assert_eq!(before.len(), report.final_keys);
    store.close().unwrap();
    drop(store);
    let again = rig.reopen().unwrap();
    assert_eq!(again.scan(b"", usize::MAX).unwrap(), before);
    for (k, v) in &before {
        assert_eq!(again.get(k).unwrap().as_ref(), Some(v));
    }
    assert_check(&*again);
}
