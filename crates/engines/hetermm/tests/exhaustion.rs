//! Running out of a counter is a clean error that never damages the store: with the block
//! numbers lowered (`HeterOptions::max_blocks`, a test-only option), `put` + `flush()` in a
//! loop — every `flush()` closes the tail block, so each takes a block number — ends in a
//! `NoSpace` error; the acknowledged values stay readable, deletes work, the store closes,
//! and it reopens with everything, for both log settings.

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use std::collections::BTreeMap;

use common::*;
use tierkv_core::media::pmem::{DurabilityMode, PmemPool};
use tierkv_core::{Error, KvStore};
use tierkv_hetermm::HeterOptions;

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
