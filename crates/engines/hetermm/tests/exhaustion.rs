//! Running out of a counter is a clean error that never damages the store: with the block
//! numbers lowered (`HeterOptions::max_blocks`, a test-only option), `put` + `flush()` in a
//! loop — every `flush()` closes the tail block, so each takes a block number — ends in a
//! `NoSpace` error; the acknowledged values stay readable, deletes work, the store closes,
//! and it reopens with everything, for both log settings.
//!
//! And the real end: a store whose flush frontier is moved to the last logical blocks its
//! geometry allows (addresses just below 2^63, pages past 2^40 — where the pages array's
//! old tags lost their top bits) writes, flushes, reads and recovers there, with its first
//! blocks still at the bottom of the space, and then refuses writes cleanly.

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use std::collections::BTreeMap;

use common::*;
use tierkv_core::media::pmem::{DurabilityMode, PmemPool};
use tierkv_core::{Error, KvStore};
use tierkv_hetermm::HeterOptions;
use tierkv_hetermm::geometry::block_numbers;

fn options(oplog: bool) -> HeterOptions {
    let mut o = small_options(64, if oplog { "" } else { "oplog=off" });
    o.max_blocks = 60;
    o
}

#[test]
fn running_out_of_logical_block_numbers_is_a_clean_error_and_the_store_reopens() {
    for oplog in [true, false] {
        let dir = scratch_dir();
        let path = dir.path().join("pool");
        let store = open(
            create_pool(&path, 8 << 20, DurabilityMode::Volatile),
            options(oplog),
            "btree",
            true,
        );
        let mut model = BTreeMap::new();
        let mut refused = None;
        for i in 0..10_000u32 {
            let k = format!("key{i:05}").into_bytes();
            let v = vec![(i % 251) as u8; 300];
            let r = store.put(&k, &v).and_then(|()| {
                model.insert(k, v);
                store.flush()
            });
            match r {
                Ok(()) => {}
                Err(e @ Error::NoSpace { .. }) => {
                    refused = Some((i, e));
                    break;
                }
                Err(e) => panic!("oplog={oplog}: put/flush {i}: {e}"),
            }
        }
        let (at, why) = refused.expect("the block numbers never ran out");
        println!("oplog={oplog}: refused at write {at}: {why}");
        for (k, v) in &model {
            assert_eq!(store.get(k).unwrap().as_ref(), Some(v), "oplog={oplog}");
        }
        let first = model.keys().next().unwrap().clone();
        store.delete(&first).unwrap();
        model.remove(&first);
        store
            .close()
            .unwrap_or_else(|e| panic!("oplog={oplog}: close: {e}"));
        drop(store);
        let pool = PmemPool::open(&config(&path, 0, DurabilityMode::Volatile)).unwrap();
        let store = try_open(pool, options(oplog), "btree", false)
            .unwrap_or_else(|e| panic!("oplog={oplog}: reopen: {e}"));
        for (k, v) in &model {
            assert_eq!(
                store.get(k).unwrap().as_ref(),
                Some(v),
                "oplog={oplog}: reopened"
            );
        }
        assert_eq!(
            store.get(&first).unwrap(),
            None,
            "oplog={oplog}: the delete"
        );
        assert!(
            matches!(store.put(b"more", b"x"), Err(Error::NoSpace { .. })),
            "oplog={oplog}: still no block numbers for new writes"
        );
        store.check().unwrap();
        store.close().unwrap();
    }
}

/// Opens a store with a few records in its first blocks, closes it and moves its flush
/// frontier to `frontier` (a logical address) in the pool file; returns the pool's path,
/// the records and the pool.
fn store_with_frontier(
    dir: &tempfile::TempDir,
    frontier: impl FnOnce(u32) -> u64,
) -> (
    std::path::PathBuf,
    BTreeMap<Vec<u8>, Vec<u8>>,
    std::sync::Arc<PmemPool>,
) {
    let path = dir.path().join("pool");
    let store = open(
        create_pool(&path, 8 << 20, DurabilityMode::Volatile),
        small_options(64, ""),
        "btree",
        true,
    );
    let mut model = BTreeMap::new();
    for i in 0..200u32 {
        let (k, v) = (format!("low{i:04}").into_bytes(), vec![i as u8; 100]);
        store.put(&k, &v).unwrap();
        model.insert(k, v);
    }
    store.flush().unwrap();
    store.close().unwrap();
    drop(store);
    let pool = move_flush_frontier(&path, |m| {
        assert_eq!(m, 15, "small_options' block_bits");
        frontier(m)
    });
    (path, model, pool)
}

#[test]
fn the_last_logical_blocks_below_2_to_the_63_work_and_the_end_is_a_clean_error() {
    let dir = scratch_dir();
    let (path, mut model, pool) = store_with_frontier(&dir, |m| (block_numbers(m) - 200) << m);
    let store = try_open(pool, small_options(64, ""), "btree", false).unwrap();
    let mut refused = None;
    let mut high = Vec::new();
    for i in 0..1_000u32 {
        let k = format!("high{i:04}").into_bytes();
        let v = vec![(i % 251) as u8; 200];
        // Written twice: the second put updates the record in place in its DRAM page.
        let r = store
            .put(&k, &[0xee; 150])
            .and_then(|()| store.put(&k, &v))
            .and_then(|()| {
                model.insert(k.clone(), v);
                store.flush()
            });
        match r {
            Ok(()) => high.push(store.address(&k).unwrap().get()),
            Err(e @ Error::NoSpace { .. }) => {
                refused = Some((i, e));
                break;
            }
            Err(e) => panic!("put/flush {i}: {e}"),
        }
    }
    let (at, why) = refused.expect("the block numbers never ran out");
    println!("refused at write {at}: {why}");
    assert!(at >= 20, "only {at} writes before the end");
    assert!(
        high.iter().all(|&a| a > 1 << 62),
        "the new records are at the top of the space"
    );
    // Reads of the top blocks (pmem translation through every radix level) and of the
    // first ones, twice (the second round may hit the read cache).
    for _ in 0..2 {
        for (k, v) in &model {
            assert_eq!(store.get(k).unwrap().as_ref(), Some(v));
        }
    }
    store.delete(b"low0000").unwrap();
    model.remove(b"low0000".as_slice());
    store.close().unwrap();
    drop(store);
    let pool = PmemPool::open(&config(&path, 0, DurabilityMode::Volatile)).unwrap();
    let store = try_open(pool, small_options(64, ""), "btree", false).unwrap();
    for (k, v) in &model {
        assert_eq!(store.get(k).unwrap().as_ref(), Some(v), "reopened");
    }
    assert_eq!(store.get(b"low0000").unwrap(), None);
    assert!(matches!(
        store.put(b"more", b"x"),
        Err(Error::NoSpace { .. })
    ));
    store.check().unwrap();
    store.close().unwrap();
}

#[test]
fn a_flush_frontier_past_the_last_logical_block_is_corruption() {
    let dir = scratch_dir();
    let (_, _, pool) = store_with_frontier(&dir, |m| block_numbers(m) << m);
    let e = try_open(pool, small_options(64, ""), "btree", false)
        .err()
        .expect("opened");
    assert!(e.is_corruption(), "{e}");
    assert!(e.to_string().contains("past the last logical block"), "{e}");
}

#[test]
fn the_model_holds_at_the_top_of_the_logical_address_space() {
    // Flushing, reorganisation, log reclamation and the read cache, with addresses just
    // below 2^63 (pages past 2^48, block numbers past 2^47).
    for (variant, scan_pct) in [("btree", 5), ("hash", 0), ("lockfree", 0)] {
        model_scenario_near_the_end(variant, scan_pct, 100_000);
    }
}
