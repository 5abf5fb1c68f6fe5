//! Bad input (DESIGN §2, failure model 3): oversized values, empty keys, scans on hash
//! indexes, use after close, too little DRAM or pmem, a pool without a store, and damaged
//! pmem bytes (superblock, directory, a record in a flushed block) — each a clear error,
//! never a panic and never wrong data.

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use common::*;
use tierkv_core::media::pmem::{DurabilityMode, PmemPool};
use tierkv_core::{Error, KvStore};

#[test]
fn a_value_larger_than_a_page_is_refused_and_the_store_goes_on() {
    let dir = scratch_dir();
    let store = open(
        create_pool(&dir.path().join("p"), 8 << 20, DurabilityMode::Volatile),
        small_options(64, ""),
        "btree",
        true,
    );
    assert!(matches!(
        store.put(b"k", &[0; 4000]),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        store.put(b"", b"v"),
        Err(Error::InvalidArgument(_))
    ));
    store.put(b"k", &[7; 3000]).unwrap();
    assert_eq!(store.get(b"k").unwrap().unwrap(), vec![7; 3000]);
}

#[test]
fn hash_indexes_refuse_scans() {
    for v in ["hash", "lockfree"] {
        let dir = scratch_dir();
        let store = open(
            create_pool(&dir.path().join("p"), 8 << 20, DurabilityMode::Volatile),
            small_options(64, ""),
            v,
            true,
        );
        store.put(b"a", b"1").unwrap();
        assert!(
            matches!(store.scan(b"a", 10), Err(Error::Unsupported(_))),
            "{v}"
        );
    }
}

#[test]
fn a_closed_store_refuses_everything() {
    let dir = scratch_dir();
    let store = open(
        create_pool(&dir.path().join("p"), 8 << 20, DurabilityMode::Volatile),
        small_options(64, ""),
        "btree",
        true,
    );
    store.put(b"k", b"v").unwrap();
    store.close().unwrap();
    store.close().unwrap();
    assert!(matches!(store.get(b"k"), Err(Error::Closed)));
    assert!(matches!(store.put(b"k", b"v"), Err(Error::Closed)));
    assert!(matches!(store.delete(b"k"), Err(Error::Closed)));
    assert!(matches!(store.scan(b"k", 1), Err(Error::Closed)));
    assert!(matches!(store.flush(), Err(Error::Closed)));
}

#[test]
fn too_little_dram_or_pmem_is_an_invalid_argument() {
    let dir = scratch_dir();
    let e = try_open(
        create_pool(&dir.path().join("p1"), 8 << 20, DurabilityMode::Volatile),
        small_options(8, ""),
        "btree",
        true,
    )
    .err()
    .unwrap();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    let e = try_open(
        create_pool(&dir.path().join("p2"), 64 << 10, DurabilityMode::Volatile),
        small_options(64, ""),
        "btree",
        true,
    )
    .err()
    .unwrap();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
}

#[test]
fn a_pool_without_a_store_is_not_opened() {
    let dir = scratch_dir();
    let e = try_open(
        create_pool(&dir.path().join("p"), 8 << 20, DurabilityMode::Volatile),
        small_options(64, ""),
        "btree",
        false,
    )
    .err()
    .unwrap();
    assert!(e.is_corruption(), "{e}");
}

/// Creates a store holding flushed data, closes it, applies `damage` to the pool file and
/// reopens it.
fn reopen_damaged(damage: impl FnOnce(&PmemPool)) -> tierkv_core::Result<()> {
    let dir = scratch_dir();
    let path = dir.path().join("p");
    let store = open(
        create_pool(&path, 8 << 20, DurabilityMode::Volatile),
        small_options(64, ""),
        "btree",
        true,
    );
    for k in 0..500u32 {
        store
            .put(format!("key{k:04}").as_bytes(), &[3; 50])
            .unwrap();
    }
    store.close().unwrap();
    drop(store);
    let pool = PmemPool::open(&config(&path, 0, DurabilityMode::Volatile)).unwrap();
    damage(&pool);
    try_open(pool, small_options(64, ""), "btree", false).map(|_| ())
}

#[test]
fn a_damaged_superblock_is_reported() {
    let e = reopen_damaged(|p| p.write(p.data_start() + 20, &[0xff]).unwrap()).unwrap_err();
    assert!(e.is_corruption(), "{e}");
}

#[test]
fn a_garbage_directory_word_is_reported() {
    let e = reopen_damaged(|p| {
        let dir_off = p.data_start() + 4096;
        p.store_u64(dir_off + 8, 3 << 62).unwrap();
    })
    .unwrap_err();
    assert!(e.is_corruption(), "{e}");
}

#[test]
fn a_bit_flip_in_a_flushed_record_is_detected_never_returned() {
    let e = reopen_damaged(|p| {
        // Find a record in the first published block and flip a byte of its value.
        let bytes = p.read(0, p.len() as usize).unwrap();
        let at = bytes
            .windows(7)
            .position(|w| w == b"key0100")
            .expect("record");
        let off = at as u64 + 10;
        let old = p.read(off, 1).unwrap()[0];
        p.write(off, &[old ^ 0x10]).unwrap();
    })
    .unwrap_err();
    assert!(e.is_corruption(), "{e}");
}
