//! Recovery and bad input: a store with data on both tiers, tombstones and class moves
//! reopens with the same contents over several cycles and reports its recovery in `stats`;
//! layout options come from the superblock at reopen; bad keys and values are refused;
//! a pool without a PrismDB superblock, a damaged superblock and table files without a
//! manifest are refused with errors, never reformatted.

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use std::collections::BTreeMap;

use tierkv_core::media::pmem::PmemPool;
use tierkv_core::{Error, KvStore, Limits};
use tierkv_prismdb::PrismDbStore;
use tierkv_prismdb::compaction::{Trigger, compact};

use common::{Rig, assert_check, counter, value_for};

const SPEC: &str = "prismdb@partitions=3,bounds=k1|k2,chunk_size=16KiB,table_size=64KiB,\
high_watermark=0.95,low_watermark=0.9,bucket_keys=16,tracker_min=16";

fn key(i: u32) -> Vec<u8> {
    format!("k{i:04}").into_bytes()
}

#[test]
fn reopen_cycles_keep_both_tiers_and_report_recovery() {
    let rig = Rig::new(SPEC, 4);
    let mut model = BTreeMap::new();
    let mut store = rig.create();
    for cycle in 0..4u64 {
        store.stop_background();
        for i in 0..300u32 {
            let k = key((i * 13 + cycle as u32 * 7) % 2900);
            let v = value_for(&k, cycle * 1000 + u64::from(i));
            store.put(&k, &v).unwrap();
            model.insert(k, v);
        }
        for i in (0..2900).step_by(11 + cycle as usize) {
            store.delete(&key(i)).unwrap();
            model.remove(&key(i));
        }
        let sh = store.shared().clone();
        if cycle % 2 == 0 {
            for p in &sh.parts {
                compact(&sh, p, Trigger::Write, true).unwrap();
            }
        }
        drop(sh);
        store.close().unwrap();
        drop(store);
        store = rig.reopen().unwrap();
        let got: BTreeMap<_, _> = store.scan(b"", usize::MAX).unwrap().into_iter().collect();
        assert_eq!(got, model, "cycle {cycle}");
        assert_check(&*store);
        let s = store.stats();
        assert!(s.recovery_micros > 0);
        let on_pmem: usize = store
            .shared()
            .parts
            .iter()
            .map(|p| p.state.read().index.len())
            .sum();
        // The tracker is sized to 20% of each partition's keys (at least tracker_min = 16).
        for p in &store.shared().parts {
            let keys = {
                let st = p.state.read();
                st.index.len() as f64 + st.tables.entries() as f64
            };
            assert_eq!(p.tracker.lock().capacity(), ((keys * 0.2) as usize).max(16));
        }
        assert_eq!(
            counter(&*store, "prismdb_recovered_objects"),
            on_pmem as u64
        );
        // Scans starting inside and across partitions.
        let from_k1: Vec<_> = model
            .range(b"k1".to_vec()..)
            .take(50)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(store.scan(b"k1", 50).unwrap(), from_k1);
    }
    assert!(
        store
            .shared()
            .parts
            .iter()
            .any(|p| !p.state.read().tables.tables.is_empty())
    );
}

#[test]
fn layout_options_are_taken_from_the_superblock_at_reopen() {
    let rig = Rig::new(SPEC, 4);
    let store = rig.create();
    store.put(b"k15", b"v").unwrap();
    store.close().unwrap();
    drop(store);
    let pool = PmemPool::open(&rig.pool_config(&rig.pool_path())).unwrap();
    let other = rig.options("prismdb@partitions=5,classes=128|1024");
    let store = PrismDbStore::open_media(pool, rig.plain_device(), other, Limits::default(), false)
        .unwrap();
    assert_eq!(store.shared().parts.len(), 3);
    assert_eq!(store.get(b"k15").unwrap(), Some(b"v".to_vec()));
}

#[test]
fn bad_keys_and_values_are_refused() {
    let rig = Rig::new(SPEC, 4);
    let store = rig.create();
    assert!(matches!(
        store.put(b"", b"v"),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        store.put(&vec![b'k'; 2000], b"v"),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        store.put(b"k", &vec![0; 6000]),
        Err(Error::InvalidArgument(_))
    ));
    store.put(b"k", &vec![7; 4096]).unwrap();
    assert_eq!(store.get(b"k").unwrap(), Some(vec![7; 4096]));
    store.close().unwrap();
    assert!(matches!(store.get(b"k"), Err(Error::Closed)));
}

#[test]
fn foreign_pools_damaged_superblocks_and_unlisted_tables_are_refused() {
    let rig = Rig::new(SPEC, 4);
    // A pool that never held a store.
    let pool = PmemPool::create(&rig.pool_config(&rig.pool_path())).unwrap();
    let err = PrismDbStore::open_media(
        pool,
        rig.device(),
        rig.options(SPEC),
        Limits::default(),
        false,
    )
    .unwrap_err();
    assert!(err.is_corruption(), "{err}");
    std::fs::remove_file(rig.pool_path()).unwrap();
    // A damaged superblock.
    let (store, pool) = rig.create_with_pool();
    store.close().unwrap();
    drop(store);
    let off = pool.data_start() + 20;
    pool.write(off, &[0xAA; 4]).unwrap();
    pool.persist(off, 4).unwrap();
    drop(pool);
    let err = rig.reopen().unwrap_err();
    assert!(err.is_corruption(), "{err}");
    // Table files of a partition whose manifests are all gone.
    let rig = Rig::new(SPEC, 4);
    let store = rig.create();
    store.stop_background();
    for i in 0..200 {
        store.put(&key(i), &value_for(&key(i), 1)).unwrap();
    }
    let sh = store.shared().clone();
    compact(&sh, &sh.parts[0], Trigger::Write, true).unwrap();
    drop(sh);
    store.close().unwrap();
    drop(store);
    for e in std::fs::read_dir(rig.flash_dir()).unwrap() {
        let p = e.unwrap().path();
        if p.to_string_lossy().ends_with(".man")
            && p.file_name().unwrap().to_string_lossy().starts_with("p00")
        {
            std::fs::remove_file(p).unwrap();
        }
    }
    let err = rig.reopen().unwrap_err();
    assert!(err.is_corruption(), "{err}");
}
