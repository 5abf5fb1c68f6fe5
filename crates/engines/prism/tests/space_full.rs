//! Running out of space (issue 23): a full flash device and a full pmem pool are
//! recoverable. Writes are refused with `NoSpace`, every acknowledged key stays readable,
//! deletes are always accepted (before and after a reopen), and once they have freed
//! space new keys can be written again.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use std::collections::BTreeMap;

use common::{Rig, SMALL, assert_all_present, assert_check};
use tierkv_core::{Error, KvStore};

type Acked = BTreeMap<Vec<u8>, Vec<u8>>;

/// Puts distinct keys `prefix.000000..` with `len`-byte values until a put is refused;
/// returns what was acknowledged and the refusal.
fn fill(store: &dyn KvStore, prefix: &str, len: usize, max: u64) -> (Acked, Option<Error>) {
    let mut acked = BTreeMap::new();
    for i in 0..max {
        let k = format!("{prefix}.{i:06}").into_bytes();
        let mut v = format!("{prefix}#{i}#").into_bytes();
        v.resize(len, b'a' + (i % 26) as u8);
        match store.put(&k, &v) {
            Ok(()) => {
                acked.insert(k, v);
            }
            Err(e) => return (acked, Some(e)),
        }
    }
    (acked, None)
}

/// Deletes every second key of `acked` (all must be accepted); returns the survivors.
fn delete_half(store: &dyn KvStore, acked: Acked) -> Acked {
    let mut kept = BTreeMap::new();
    for (i, (k, v)) in acked.into_iter().enumerate() {
        if i.is_multiple_of(2) {
            if let Err(e) = store.delete(&k) {
                panic!("delete {} refused: {e}", String::from_utf8_lossy(&k));
            }
            assert_eq!(store.get(&k).unwrap(), None);
        } else {
            kept.insert(k, v);
        }
    }
    kept
}

#[test]
fn a_full_flash_device_takes_deletes_after_reopen_and_then_writes_again() {
    // 2 MiB of flash in 16 KiB chunks, 4 PWBs of 64 KiB.
    let rig = Rig::new(SMALL, 16, 2);
    let store = rig.create();
    let (acked, err) = fill(&*store, "a", 600, 100_000);
    let err = err.expect("a 2 MiB device never filled");
    println!("full after {} keys: {err}", acked.len());
    assert!(
        matches!(err, Error::NoSpace { .. }),
        "a full device is NoSpace, not {err}"
    );
    assert_all_present(&*store, &acked);
    drop(store);

    let store = rig.reopen().unwrap();
    // Let the background threads meet the full device.
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_all_present(&*store, &acked);
    let kept = delete_half(&*store, acked);
    // Deleting freed half the values: new keys fit again (a put may first wait for the
    // reclaimer's GC to free chunks).
    let (more, err) = fill(&*store, "b", 600, 200);
    assert!(err.is_none(), "after deletes a put was refused: {err:?}");
    assert_all_present(&*store, &kept);
    assert_all_present(&*store, &more);
    store.flush().unwrap();
    assert_check(&*store);
    drop(store);
    let store = rig.reopen().unwrap();
    assert_all_present(&*store, &kept);
    assert_all_present(&*store, &more);
}

#[test]
fn a_full_pmem_pool_takes_new_keys_after_deleting_half_and_reopening() {
    // An 8 MiB pool: the HSIT and the key index run out long before the flash does.
    let rig = Rig::new("prism@svc_size=128KiB", 8, 64);
    let store = rig.create();
    let (acked, err) = fill(&*store, "a", 100, 1_000_000);
    let err = err.expect("an 8 MiB pool never filled");
    println!("full after {} keys: {err}", acked.len());
    assert!(matches!(err, Error::NoSpace { .. }), "{err}");
    assert_all_present(&*store, &acked);
    let n = acked.len();
    let kept = delete_half(&*store, acked);
    drop(store);

    let store = rig.reopen().unwrap();
    assert_all_present(&*store, &kept);
    // Half the keys are gone: at least a third as many new keys fit again.
    let (more, err) = fill(&*store, "b", 100, (n / 3) as u64);
    assert!(
        err.is_none(),
        "after deleting {} of {n} keys and reopening, only {} new keys fit: {err:?}",
        n - kept.len(),
        more.len()
    );
    assert_all_present(&*store, &kept);
    assert_all_present(&*store, &more);
    assert_check(&*store);
}
