//! Bad input (DESIGN §2, failure model 3): oversized values, empty keys, scans on hash
//! indexes, use after close, too little DRAM or pmem, a pool without a store, and damaged
//! pmem bytes (superblock, directory, a record in a flushed block) — each a clear error,
//! never a panic and never wrong data.

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use common::*;
use tierkv_core::media::pmem::{DurabilityMode, PmemPool};
use tierkv_core::{Error, KvStore};

/// Opens (creates, or not) a store with `pages` DRAM pages over a new pool of `size` bytes.
fn fresh(
    dir: &tempfile::TempDir,
    name: &str,
    size: u64,
    pages: u64,
    variant: &str,
    created: bool,
) -> tierkv_core::Result<std::sync::Arc<tierkv_hetermm::HeterStore>> {
    let pool = create_pool(&dir.path().join(name), size, DurabilityMode::Volatile);
    try_open(pool, small_options(pages, ""), variant, created)
}

#[test]
fn a_value_larger_than_a_page_is_refused_and_the_store_goes_on() {
    let dir = scratch_dir();
    let store = fresh(&dir, "p", 8 << 20, 64, "btree", true).unwrap();
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
        let store = fresh(&dir, "p", 8 << 20, 64, v, true).unwrap();
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
    let store = fresh(&dir, "p", 8 << 20, 64, "btree", true).unwrap();
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
    let e = fresh(&dir, "p1", 8 << 20, 8, "btree", true).err().unwrap();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    let e = fresh(&dir, "p2", 64 << 10, 64, "btree", true)
        .err()
        .unwrap();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
}

/// Regression (stress, `reorg_threshold=0.99`, 4 MiB pool): once pmem was full, the
/// reclaimer's defragmentation pass ended on the `NoSpace` of a block it could not copy
/// without giving up, and writers waited for it forever. Now a full pool is a `NoSpace`
/// error for the writer, and the store still reads what it holds.
#[test]
fn a_full_pool_is_a_no_space_error_never_a_hang() {
    let dir = scratch_dir();
    let pool = create_pool(&dir.path().join("p"), 2 << 20, DurabilityMode::Volatile);
    let store = try_open(
        pool,
        small_options(64, "reorg_threshold=0.99"),
        "btree",
        true,
    )
    .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let writer = store.clone();
    std::thread::spawn(move || {
        let value = [5u8; 3000];
        let outcome = (0..100_000u32)
            .map(|i| {
                writer
                    .put(format!("key{i:06}").as_bytes(), &value)
                    .map(|()| i)
            })
            .find_map(|r| r.err().map(|e| (e, ())))
            .map(|(e, ())| e);
        let _ = tx.send(outcome);
    });
    let outcome = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("a writer of a full pool hung (no answer in 60 s)");
    let e = outcome.expect("2 MiB of pmem held 300 MB of values");
    assert!(matches!(e, Error::NoSpace { .. }), "{e}");
    assert_eq!(store.get(b"key000000").unwrap(), Some(vec![5u8; 3000]));
    // Closing flushes DRAM to pmem, which has no room for it: an error, said once.
    match store.close() {
        Ok(()) | Err(Error::NoSpace { .. }) => {}
        Err(e) => panic!("close of a full store: {e}"),
    }
}

#[test]
fn a_pool_without_a_store_is_not_opened() {
    let dir = scratch_dir();
    let e = fresh(&dir, "p", 8 << 20, 64, "btree", false).err().unwrap();
    assert!(e.is_corruption(), "{e}");
}

/// Creates a store holding flushed data, closes it, applies `damage` to the pool file
/// (told where the record of `key0100` is) and reopens it.
fn reopen_damaged(damage: impl FnOnce(&PmemPool, u64)) -> tierkv_core::Result<()> {
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
    store.flush().unwrap();
    let addr = store.address(b"key0100").unwrap();
    let record = store.pmem_offset(addr).unwrap().expect("flushed");
    store.close().unwrap();
    drop(store);
    let pool = PmemPool::open(&config(&path, 0, DurabilityMode::Volatile)).unwrap();
    damage(&pool, record);
    try_open(pool, small_options(64, ""), "btree", false).map(|_| ())
}

#[test]
fn a_damaged_superblock_is_reported() {
    let e = reopen_damaged(|p, _| p.write(p.data_start() + 20, &[0xff]).unwrap()).unwrap_err();
    assert!(e.is_corruption(), "{e}");
}

#[test]
fn a_garbage_directory_word_is_reported() {
    let e = reopen_damaged(|p, _| {
        let dir_off = p.data_start() + 4096;
        p.store_u64(dir_off + 8, 3 << 62).unwrap();
    })
    .unwrap_err();
    assert!(e.is_corruption(), "{e}");
}

#[test]
fn a_bit_flip_in_a_flushed_record_is_detected_never_returned() {
    let e = reopen_damaged(|p, record| {
        // A byte of the value of `key0100` (header 24 bytes, key 7 bytes).
        let off = record + 24 + 7 + 10;
        let old = p.read(off, 1).unwrap()[0];
        p.write(off, &[old ^ 0x10]).unwrap();
    })
    .unwrap_err();
    assert!(e.is_corruption(), "{e}");
}
