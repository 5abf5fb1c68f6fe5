//! Repository defragmentation (`src/defrag.rs`): a pool filled with small values, most of
//! them deleted, then written with large values. Before defragmentation the deletes left
//! every slab partly used, their free slots served only small nodes, and the large writes
//! were refused on a pool more than half free; now the sparse slabs are emptied and their
//! chunks take the large values. Content is checked against a model after every phase,
//! after `check`, and after a reopen.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::*;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv_core::media::pmem::{DurabilityMode, PmemPool};
use tierkv_core::{Error, KvStore};
use tierkv_mio::MioStore;

/// Default waits (refusals come within a second when nothing drains).
const PARAMS: &str = "memtable=16KiB,levels=3";

fn verify(store: &MioStore, model: &BTreeMap<Vec<u8>, Vec<u8>>, what: &str) {
    for (k, v) in model {
        let got = store.get(k).unwrap();
        assert_eq!(
            got.as_deref(),
            Some(v.as_slice()),
            "{what}: key {}",
            String::from_utf8_lossy(k)
        );
    }
}

/// Closes `store`, opens the pool at `path` again, checks it and its content.
fn reopen(
    store: Arc<MioStore>,
    path: &std::path::Path,
    model: &BTreeMap<Vec<u8>, Vec<u8>>,
    what: &str,
) -> Arc<MioStore> {
    store.close().unwrap();
    drop(store);
    let pool = PmemPool::open(&config(path, 0, DurabilityMode::Volatile)).unwrap();
    let store = open(pool, PARAMS, false);
    store.check().unwrap();
    verify(&store, model, what);
    store
}

/// Puts `make(i)` for i = 0.. until `want` bytes are written or a put is refused (three
/// times, 50 ms apart); returns the bytes written.
fn put_until(
    store: &MioStore,
    model: &mut BTreeMap<Vec<u8>, Vec<u8>>,
    want: u64,
    mut make: impl FnMut(u32) -> (Vec<u8>, Vec<u8>),
) -> u64 {
    let mut written = 0u64;
    for i in 0.. {
        if written >= want {
            break;
        }
        let (k, v) = make(i);
        let mut r = Ok(());
        for attempt in 0..3 {
            if attempt > 0 {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            r = store.put(&k, &v);
            if !matches!(r, Err(Error::NoSpace { .. })) {
                break;
            }
        }
        match r {
            Ok(()) => {
                written += (k.len() + v.len()) as u64;
                model.insert(k, v);
            }
            Err(Error::NoSpace { .. }) => break,
            Err(e) => panic!("put: {e}"),
        }
    }
    written
}

/// Fills with small values, deletes three quarters of them at random (no slab is left
/// empty), then puts large values (nodes of the largest slab class, 2 KiB) for
/// half of the freed bytes, closing and reopening the store every `reopen_every` large puts
/// (a close stops defragmentation between two node moves).
fn fragment_then_grow(seed: u64, dir: &std::path::Path, reopen_every: Option<u32>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let path = dir.join("pool");
    // 4 MiB: 16 KiB chunks, slab objects up to 2 KiB.
    let pool = create_pool(&path, 4 << 20, DurabilityMode::Volatile);
    let mut store = open(pool, PARAMS, true);
    let mut model = BTreeMap::new();
    let small = put_until(&store, &mut model, u64::MAX, |i| {
        let k = format!("s{i:06}").into_bytes();
        let mut v = format!("{i}:").into_bytes();
        v.resize(150 + (i as usize * 7) % 80, b'a' + (i % 26) as u8);
        (k, v)
    });
    verify(&store, &model, "after the fill");
    let mut keys: Vec<Vec<u8>> = model.keys().cloned().collect();
    keys.shuffle(&mut rng);
    let mut freed = 0u64;
    for k in &keys[..keys.len() * 3 / 4] {
        store.delete(k).unwrap();
        freed += (k.len() + model.remove(k).unwrap().len()) as u64;
    }
    verify(&store, &model, "after the deletes");
    let (mut large, mut moved, mut chunks, mut next) = (0u64, 0u64, 0u64, 0u32);
    let step = reopen_every.unwrap_or(u32::MAX);
    while large < freed / 2 {
        let got = put_until(
            &store,
            &mut model,
            (freed / 2 - large).min(u64::from(step) * 1_500),
            |_| {
                next += 1;
                let k = format!("L{next:06}").into_bytes();
                let mut v = format!("{next}:").into_bytes();
                v.resize(1_500 + rng.random_range(0..400), b'A' + (next % 26) as u8);
                (k, v)
            },
        );
        large += got;
        let s = store.stats();
        chunks += counter(&s, "defrag_chunks_freed");
        moved += counter(&s, "defrag_nodes_moved");
        if got == 0 || reopen_every.is_none() {
            break;
        }
        store = reopen(store, &path, &model, "after a reopen during the large puts");
    }
    println!(
        "seed {seed}: {small} bytes of small values, {freed} deleted, {large} of large values \
         written again; defrag: {chunks} chunks freed, {moved} nodes moved"
    );
    assert!(
        large >= freed / 2,
        "only {large} of the {} bytes of large values fit after {freed} bytes were deleted",
        freed / 2
    );
    assert!(chunks > 0);
    verify(&store, &model, "after the large values");
    store.check().unwrap();
    let store = reopen(store, &path, &model, "after a reopen");
    assert_eq!(
        store.scan(b"", usize::MAX).unwrap().len(),
        model.len(),
        "scan sees every key once"
    );
    store.close().unwrap();
}

#[test]
fn large_values_fit_where_deleted_small_values_were() {
    let dir = scratch_dir();
    fragment_then_grow(seed("mio_defrag"), dir.path(), None);
}

#[test]
fn reopening_during_defragmentation_loses_nothing() {
    let dir = scratch_dir();
    fragment_then_grow(seed("mio_defrag_reopen"), dir.path(), Some(7));
}
