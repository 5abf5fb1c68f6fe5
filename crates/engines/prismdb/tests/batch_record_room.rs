//! Room for batch records (FORMAT.md §3 "Room for batch records"): a write batch's record
//! takes whole pool chunks, and on a store whose slabs hold every chunk puts may take,
//! freeing slots (what compactions do) seldom frees a whole chunk. Before the record
//! reserve, such a batch waited its full 30 s (`SPACE_WAIT`) for a chunk while the
//! compactions freed slots and promotions took them back; in the CI space run of seed 2313
//! (`tierkv-stress --engine prismdb --mode space --pmem-size 4MiB --flash-size 16MiB`)
//! "a write of the fill took 30004.0 ms". Now the slabs leave the reserve alone, so the
//! batch finds its record at once.

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tierkv_core::media::pmem::DurabilityMode;
use tierkv_core::{KvStore, WriteBatch};

use common::{Rig, assert_check, value_for};

/// Compactions start only at a full fast tier (or when a writer waits), so the fill below
/// reaches the chunk limit before any table exists.
const SPEC: &str = "prismdb@partitions=3,bounds=k1|k2,chunk_size=16KiB,bucket_keys=16,\
tracker_min=16,high_watermark=1.0,low_watermark=0.95";

fn key(i: u32) -> Vec<u8> {
    format!("k{}{i:06}", i % 3).into_bytes()
}

/// A value of 40..2000 bytes (several slab classes).
fn value(i: u32) -> Vec<u8> {
    let mut v = value_for(&key(i), u64::from(i));
    v.resize(40 + (i as usize * 7919) % 1960, b'v');
    v
}

fn gauge(store: &dyn KvStore, name: &str) -> f64 {
    store.stats().gauges.get(name).copied().unwrap_or(f64::NAN)
}

#[test]
fn a_batch_on_a_store_whose_slabs_hold_every_chunk_gets_its_record_at_once() {
    let mut rig = Rig::new(SPEC, 2).with_flash(64);
    rig.mode = DurabilityMode::Volatile;
    let store = rig.create();
    let for_puts = gauge(store.as_ref(), "prismdb_pmem_chunks_for_puts");
    let chunks = || gauge(store.as_ref(), "prismdb_pmem_chunks_held");
    // 2 MiB in 16 KiB chunks: 127 chunks, 5 of them (a 10,000-operation record) kept out
    // of the slabs, 5 (3 partitions + 2) for deletes.
    assert_eq!(for_puts, 117.0, "chunks the slabs of puts may hold");

    // Puts until the slabs hold every chunk puts may take.
    let mut model = BTreeMap::new();
    let mut i = 0u32;
    while chunks() < for_puts {
        let (k, v) = (key(i), value(i));
        store
            .put(&k, &v)
            .unwrap_or_else(|e| panic!("put {i} with {} chunks held: {e}", chunks()));
        model.insert(k, v);
        i += 1;
    }
    println!(
        "slabs hold {} chunks of {for_puts} after {i} keys",
        chunks()
    );
    // The premise: nothing on flash yet (so the deletes below free their slots at once,
    // no tombstone), and from now on nothing frees a chunk.
    assert_eq!(gauge(store.as_ref(), "prismdb_flash_tables"), 0.0);
    store.stop_background();

    // 16 keys spread over the fill (no chunk empties) are deleted and written again in
    // one batch: their slots are free, and the batch's record must come from the chunks
    // the slabs left alone. Without them it waited 30 s and was refused.
    let again: Vec<u32> = (0..16).map(|j| j * (i / 16)).collect();
    for &n in &again {
        store.delete(&key(n)).unwrap();
    }
    let held = chunks();
    let t = Instant::now();
    let mut batch = WriteBatch::new();
    for &n in &again {
        batch.put(key(n), value(n));
    }
    store
        .write_batch(&batch)
        .unwrap_or_else(|e| panic!("a batch on a store whose slabs hold every chunk: {e}"));
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "the batch took {:?}",
        t.elapsed()
    );
    assert_eq!(
        chunks(),
        held,
        "the record's chunk went back after the commit"
    );
    for (k, v) in &model {
        assert_eq!(store.get(k).unwrap().as_ref(), Some(v), "key {k:?}");
    }
    assert_check(store.as_ref());
    store.close().unwrap();
    drop(store);
    let store = rig.reopen().unwrap();
    for (k, v) in &model {
        assert_eq!(
            store.get(k).unwrap().as_ref(),
            Some(v),
            "key {k:?} after reopen"
        );
    }
    assert_check(store.as_ref());
}
