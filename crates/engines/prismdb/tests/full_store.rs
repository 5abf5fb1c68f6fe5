//! A full store (FORMAT.md §3 "Room for deletes", "Room on flash"; issue 23): a small pool
//! over a small flash device is filled until puts are refused with `NoSpace`; then every
//! delete must succeed (tombstones take the slots reserved for them, and compactions that
//! drop tombstones use the flash reserve), the deleted keys are gone and the others intact,
//! new keys fit again once compactions have dropped the tombstones, and all of it survives
//! a reopen. (Before the fix every delete of a key on flash failed on the full store with
//! "fast tier full and compaction failed: no space left on flash".)

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tierkv_core::media::pmem::DurabilityMode;
use tierkv_core::{Error, KvStore};

use common::{Rig, assert_check, counter, value_for};

const SPEC: &str = "prismdb@partitions=3,bounds=k1|k2,chunk_size=16KiB,bucket_keys=16,\
tracker_min=16";

/// Key `i`, spread over the three partitions.
fn key(i: u32) -> Vec<u8> {
    format!("k{}{i:06}", i % 3).into_bytes()
}

/// A value of 40..2000 bytes (several slab classes).
fn value(i: u32) -> Vec<u8> {
    let mut v = value_for(&key(i), u64::from(i));
    v.resize(40 + (i as usize * 7919) % 1960, b'v');
    v
}

fn verify(store: &dyn KvStore, model: &BTreeMap<Vec<u8>, Vec<u8>>, deleted: &[Vec<u8>]) {
    for (k, v) in model {
        assert_eq!(store.get(k).unwrap().as_ref(), Some(v), "key {k:?}");
    }
    for k in deleted {
        assert_eq!(store.get(k).unwrap(), None, "deleted key {k:?} is back");
    }
    let all = store.scan(b"", usize::MAX).unwrap();
    assert_eq!(all.len(), model.len(), "a full scan");
}

#[test]
fn deletes_on_a_full_store_succeed_and_make_room_for_new_keys() {
    let mut rig = Rig::new(SPEC, 2).with_flash(4);
    rig.mode = DurabilityMode::Volatile;
    let store = rig.create();
    let capacity = (2u64 + 4) << 20;
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut refused = 0;
    let mut i = 0u32;
    while refused < 10 {
        let (k, v) = (key(i), value(i));
        match store.put(&k, &v) {
            Ok(()) => {
                model.insert(k, v);
            }
            Err(Error::NoSpace { .. }) => refused += 1,
            Err(e) => panic!("put {i}: {e}"),
        }
        i += 1;
        assert!(i < 200_000, "6 MiB of tiers took 200,000 values");
    }
    let live: u64 = model.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum();
    println!(
        "full at {live} live bytes ({:.1}% of the tiers), {} keys",
        100.0 * live as f64 / capacity as f64,
        model.len()
    );
    // Refusing early is a defect too: the tiers hold at least a quarter of their room.
    assert!(live * 4 >= capacity, "refused at {live} live bytes");
    verify(store.as_ref(), &model, &[]);

    // Delete every other key: each delete must succeed on the full store.
    let victims: Vec<Vec<u8>> = model.keys().step_by(2).cloned().collect();
    let mut freed = 0u64;
    for k in &victims {
        store
            .delete(k)
            .unwrap_or_else(|e| panic!("delete of {k:?} on a full store: {e}"));
        let v = model.remove(k).unwrap();
        freed += (k.len() + v.len()) as u64;
    }
    verify(store.as_ref(), &model, &victims);

    // New keys worth a quarter of the freed bytes fit again (each retried for up to 10 s
    // while compactions drop the tombstones).
    let mut written = 0u64;
    let mut j = 1_000_000u32;
    while written * 4 < freed {
        let (k, v) = (key(j), value(j));
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match store.put(&k, &v) {
                Ok(()) => break,
                Err(Error::NoSpace { .. }) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("new key after deleting {freed} bytes, {written} written: {e}"),
            }
        }
        written += (k.len() + v.len()) as u64;
        model.insert(k, v);
        j += 1;
    }
    verify(store.as_ref(), &model, &victims);
    assert!(
        counter(store.as_ref(), "prismdb_tombstones_dropped") > 0,
        "no compaction dropped a tombstone"
    );
    assert_check(store.as_ref());
    store.close().unwrap();
    drop(store);
    let store = rig.reopen().unwrap();
    verify(store.as_ref(), &model, &victims);
    assert_check(store.as_ref());
}
