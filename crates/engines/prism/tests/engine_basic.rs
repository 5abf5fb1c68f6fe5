//! The KvStore contract on PRISM: reads from each tier, scans, limits, errors after close.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use common::{Rig, SMALL, assert_check};
use tierkv_core::{Error, KvStore};

#[test]
fn a_value_is_read_from_pmem_then_flash_then_dram() {
    let rig = Rig::new(SMALL, 32, 4);
    let store = rig.create();
    store.put(b"k", b"value").unwrap();
    assert_eq!(store.get(b"k").unwrap().as_deref(), Some(&b"value"[..]));
    assert_eq!(store.stats().reads_from_pmem, 1);
    store.flush().unwrap();
    assert_eq!(store.get(b"k").unwrap().as_deref(), Some(&b"value"[..]));
    assert_eq!(store.stats().reads_from_flash, 1);
    assert_eq!(store.get(b"k").unwrap().as_deref(), Some(&b"value"[..]));
    assert_eq!(store.stats().reads_from_dram, 1);
    // An update supersedes the cached copy.
    store.put(b"k", b"a longer value than before").unwrap();
    assert_eq!(
        store.get(b"k").unwrap().as_deref(),
        Some(&b"a longer value than before"[..])
    );
    assert_check(&*store);
}

#[test]
fn deletes_hide_keys_in_every_tier_and_absent_deletes_are_fine() {
    let rig = Rig::new(SMALL, 32, 4);
    let store = rig.create();
    store.delete(b"never").unwrap();
    store.put(b"a", b"1").unwrap();
    store.put(b"b", b"2").unwrap();
    store.flush().unwrap();
    store.get(b"b").unwrap();
    store.delete(b"a").unwrap();
    store.delete(b"b").unwrap();
    assert_eq!(store.get(b"a").unwrap(), None);
    assert_eq!(store.get(b"b").unwrap(), None);
    assert!(store.scan(b"", 10).unwrap().is_empty());
    store.put(b"a", b"again").unwrap();
    assert_eq!(store.get(b"a").unwrap().as_deref(), Some(&b"again"[..]));
    assert_check(&*store);
}

#[test]
fn scans_are_ordered_mix_tiers_and_chain_values_brought_from_flash() {
    let rig = Rig::new(SMALL, 32, 4);
    let store = rig.create();
    for i in 0..200u32 {
        store
            .put(format!("s{i:04}").as_bytes(), &i.to_le_bytes().repeat(40))
            .unwrap();
    }
    store.flush().unwrap();
    for i in (0..200u32).step_by(3) {
        store
            .put(format!("s{i:04}").as_bytes(), b"in the pwb")
            .unwrap();
    }
    let rows = store.scan(b"s0050", 100).unwrap();
    assert_eq!(rows.len(), 100);
    for (n, (k, v)) in rows.iter().enumerate() {
        let i = 50 + n as u32;
        assert_eq!(k, format!("s{i:04}").as_bytes());
        let want = if i.is_multiple_of(3) {
            b"in the pwb".to_vec()
        } else {
            i.to_le_bytes().repeat(40)
        };
        assert_eq!(v, &want);
    }
    let s = store.stats();
    assert!(s.counters["read_batches"] > 0);
    assert!(store.scan(b"t", 10).unwrap().is_empty());
    assert_eq!(store.scan(b"s0198", 10).unwrap().len(), 2);
}

#[test]
fn oversized_values_and_empty_keys_are_invalid_arguments() {
    let rig = Rig::new(SMALL, 32, 4);
    let store = rig.create();
    // Half a 64 KiB PWB is the largest record.
    let big = vec![0u8; 40 << 10];
    assert!(matches!(
        store.put(b"k", &big),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        store.put(b"", b"v"),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(store.get(b""), Err(Error::InvalidArgument(_))));
    let ok = vec![7u8; 8 << 10];
    store.put(b"k", &ok).unwrap();
    store.flush().unwrap();
    assert_eq!(store.get(b"k").unwrap(), Some(ok));
}

#[test]
fn every_call_after_close_is_closed() {
    let rig = Rig::new(SMALL, 32, 4);
    let store = rig.create();
    store.put(b"k", b"v").unwrap();
    store.close().unwrap();
    store.close().unwrap();
    assert!(matches!(store.get(b"k"), Err(Error::Closed)));
    assert!(matches!(store.put(b"k", b"v"), Err(Error::Closed)));
    assert!(matches!(store.delete(b"k"), Err(Error::Closed)));
    assert!(matches!(store.scan(b"", 1), Err(Error::Closed)));
    assert!(matches!(store.flush(), Err(Error::Closed)));
}

#[test]
fn reopening_with_another_pwb_count_is_refused() {
    let rig = Rig::new(SMALL, 32, 4);
    drop(rig.create());
    let clash = rig.with_spec("prism@pwb_count=5");
    assert!(matches!(clash.reopen(), Err(Error::InvalidArgument(_))));
}
