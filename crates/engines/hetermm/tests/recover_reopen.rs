//! Reopening: a store closed cleanly and opened again (twice) holds exactly what it held,
//! for every index, after its blocks were flushed, marked and reorganised; the recovery
//! counters say it rebuilt the index from pmem.

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use std::collections::BTreeMap;

use common::*;
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv_core::media::pmem::{DurabilityMode, PmemPool};
use tierkv_core::{Error, KvStore};

fn fill(store: &dyn KvStore, rng: &mut ChaCha8Rng, model: &mut BTreeMap<Vec<u8>, Vec<u8>>) {
    for i in 0..6_000u32 {
        let k = format!("key{:05}", rng.random_range(0..1_500)).into_bytes();
        if i % 7 == 0 {
            store.delete(&k).unwrap();
            model.remove(&k);
        } else {
            let mut v = vec![0u8; rng.random_range(0..400)];
            rng.fill_bytes(&mut v);
            store.put(&k, &v).unwrap();
            model.insert(k, v);
        }
    }
}

fn verify(store: &dyn KvStore, model: &BTreeMap<Vec<u8>, Vec<u8>>, ordered: bool) {
    for i in 0..1_500 {
        let k = format!("key{i:05}").into_bytes();
        assert_eq!(
            store.get(&k).unwrap().as_ref(),
            model.get(&k),
            "{}",
            String::from_utf8_lossy(&k)
        );
    }
    if ordered {
        let all = store.scan(b"", usize::MAX).unwrap();
        let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        assert!(all == want, "scan after reopen differs");
    }
}

#[test]
fn reopen_after_close_keeps_everything_for_every_index() {
    let seed = seed("reopen");
    for variant in ["btree", "hash", "lockfree"] {
        let dir = scratch_dir();
        let path = dir.path().join("pool");
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut model = BTreeMap::new();
        let store = open(
            create_pool(&path, 16 << 20, DurabilityMode::Msync),
            small_options(64, ""),
            variant,
            true,
        );
        fill(&*store, &mut rng, &mut model);
        let before = store.stats();
        assert!(
            counter(&before, "flushes") > 10 && counter(&before, "reorganisations") > 0,
            "{variant}: {before:?}"
        );
        store.close().unwrap();
        drop(store);
        for round in 0..2 {
            let pool = PmemPool::open(&config(&path, 0, DurabilityMode::Msync)).unwrap();
            let store = open(pool, small_options(64, ""), variant, false);
            let s = store.stats();
            assert!(
                counter(&s, "recovered_records") as usize >= model.len(),
                "{variant} round {round}: {s:?}"
            );
            assert!(s.recovery_micros > 0);
            verify(&*store, &model, variant == "btree");
            store.check().unwrap();
            if round == 0 {
                fill(&*store, &mut rng, &mut model);
            }
            store.close().unwrap();
        }
    }
}

#[test]
fn reopen_with_other_block_bits_is_refused_and_the_store_stays_openable() {
    let dir = scratch_dir();
    let path = dir.path().join("pool");
    let store = open(
        create_pool(&path, 8 << 20, DurabilityMode::Volatile),
        small_options(64, ""),
        "btree",
        true,
    );
    store.put(b"k", b"v").unwrap();
    store.close().unwrap();
    drop(store);
    let spec: tierkv_core::EngineSpec = "hetermm@page_bits=12,block_bits=16".parse().unwrap();
    let other = tierkv_hetermm::HeterOptions::from_params(spec.params(), 256 << 10).unwrap();
    let pool = PmemPool::open(&config(&path, 0, DurabilityMode::Volatile)).unwrap();
    let e = try_open(pool, other, "btree", false)
        .err()
        .expect("refused");
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    let pool = PmemPool::open(&config(&path, 0, DurabilityMode::Volatile)).unwrap();
    let store = open(pool, small_options(64, ""), "btree", false);
    assert_eq!(store.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
}
