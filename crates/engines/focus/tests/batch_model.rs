//! Model-based test of write batches (issue 24; STYLE §7): the testkit's batch model —
//! random batches, puts, deletes, gets and `multi_get`s from three partition threads, each
//! checked against its `BTreeMap` oracle, while two group writers rewrite whole groups of
//! shared keys in one batch and a reader `multi_get`s each group (it must see one batch
//! whole) — in a 1 MiB pool of 16 KiB chunks, so that GC collects chunks holding batch
//! members and commit records meanwhile (a thread steps GC beside the background one);
//! then the store is reopened (recovery by commit
//! records) and must hold the same data.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::*;
use tierkv_core::KvStore;
use tierkv_core::media::pmem::DurabilityMode;
use tierkv_testkit::{BatchModelConfig, run_batch_model};

const EXTRA: &str = "chunk_size=16KiB,gc_threshold=0.9";

#[test]
fn batches_mixed_with_puts_and_deletes_match_the_oracle_and_survive_a_reopen() {
    let dir = scratch_dir();
    let store = new_store(dir.path(), 1 << 20, DurabilityMode::Volatile, EXTRA);
    let cfg = BatchModelConfig {
        seed: seed("focus_batches_mixed_with_puts_and_deletes_match_the_oracle"),
        ..BatchModelConfig::default()
    };
    let dynamic: Arc<dyn KvStore> = store.clone();
    // GC steps beside the model too: the background GC alone may not collect a chunk in
    // so short a run (it failed to in about one run of three).
    let stop = Arc::new(AtomicBool::new(false));
    let stepper = {
        let (store, stop) = (store.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match store.gc_step() {
                    Ok(_) | Err(tierkv_core::Error::NoSpace { .. }) => {}
                    Err(e) => panic!("gc_step: {e}"),
                }
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        })
    };
    let r = run_batch_model(dynamic, &cfg);
    stop.store(true, Ordering::Relaxed);
    stepper.join().unwrap();
    let c = store.stats().counters;
    println!(
        "{r:?}; batches {}, gc chunks {}, gc commits {}",
        c["focus_batches"], c["focus_gc_chunks"], c["focus_gc_commits"]
    );
    assert!(
        r.batches > 100 && r.group_batches == 2 * cfg.group_batches,
        "{r:?}"
    );
    assert!(r.group_reads > 0 && r.multi_gets > 0, "{r:?}");
    assert!(c["focus_gc_chunks"] > 0, "GC never ran");
    let before = store.scan(b"", usize::MAX).unwrap();
    store.close().unwrap();
    drop(store);
    let store = reopen(&dir.path().join("pool"), EXTRA);
    store.check().unwrap();
    assert_eq!(store.scan(b"", usize::MAX).unwrap(), before);
}

/// Batches and single puts racing on the same keys: a `multi_get` never sees values of two
/// batches, and the reopened store (newest version per key by sequence number) holds
/// exactly what the live index held: per key, sequence order is application order.
#[test]
fn batches_racing_puts_on_the_same_keys_recover_in_the_order_they_were_applied() {
    let dir = scratch_dir();
    let store = new_store(dir.path(), 4 << 20, DurabilityMode::Volatile, EXTRA);
    let seed = seed("focus_batches_racing_puts_on_the_same_keys");
    let live = tierkv_testkit::run_racing_puts_and_batches(&*store, 12, 200, seed);
    store.close().unwrap();
    drop(store);
    let store = reopen(&dir.path().join("pool"), EXTRA);
    let keys: Vec<Vec<u8>> = (0..12).map(|n| format!("rk/{n:02}").into_bytes()).collect();
    let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    assert_eq!(store.multi_get(&refs).unwrap(), live);
    assert!(live.iter().all(Option::is_some));
}
