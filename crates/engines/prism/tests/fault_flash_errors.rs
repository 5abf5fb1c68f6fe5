//! Flash faults (DESIGN §4, failure model 4): I/O errors during PWB reclamation and GC,
//! read errors, and a full device. Each surfaces as an error, never as wrong data; the
//! store refuses writes once a background step failed (poisoned); after a reopen every
//! acknowledged write is there and `check` passes.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::{Rig, SMALL, assert_all_present, assert_check, value_for};
use tierkv_core::{Error, KvStore};
use tierkv_prism::PrismStore;

/// Puts distinct keys until a put fails; returns what was acknowledged and the error.
fn write_until_error(
    store: &dyn KvStore,
    start: u64,
    max: u64,
) -> (BTreeMap<Vec<u8>, Vec<u8>>, Option<Error>) {
    let mut acked = BTreeMap::new();
    for i in start..start + max {
        let k = format!("key{i:06}").into_bytes();
        let v = value_for(&k, i);
        match store.put(&k, &v) {
            Ok(()) => {
                acked.insert(k, v);
            }
            Err(e) => return (acked, Some(e)),
        }
    }
    (acked, None)
}

/// Checks `store` (still open after a failure) holds `acked`, closes it, lifts the
/// injected failures, reopens and checks again, `check` included.
fn reopen_intact(
    rig: &Rig,
    store: Arc<PrismStore>,
    acked: &BTreeMap<Vec<u8>, Vec<u8>>,
) -> Arc<PrismStore> {
    assert_all_present(&*store, acked);
    drop(store);
    if let Some(inj) = &rig.injector {
        inj.clear_failures();
    }
    let store = rig.reopen().unwrap();
    assert_all_present(&*store, acked);
    assert_check(&*store);
    store
}

#[test]
fn eio_during_reclamation_poisons_writes_and_loses_nothing() {
    let rig = Rig::new(SMALL, 32, 4).with_faults();
    let inj = rig.injector.clone().unwrap();
    let store = rig.create();
    let (mut acked, err) = write_until_error(&*store, 0, 200);
    assert!(err.is_none());
    inj.fail_all_writes(EIO);
    let (more, err) = write_until_error(&*store, 1_000, 100_000);
    acked.extend(more);
    match err {
        Some(Error::Poisoned(why)) => assert!(why.contains("write"), "{why}"),
        other => panic!("expected the store to be poisoned, got {other:?}"),
    }
    // Reads still work, from every tier.
    let store = reopen_intact(&rig, store, &acked);
    // And it takes writes again.
    store.put(b"after", b"reopen").unwrap();
    store.flush().unwrap();
}

#[test]
fn eio_during_gc_is_surfaced_and_the_store_reopens_intact() {
    // 1 MiB of flash in 16 KiB chunks: rewriting the same keys fills it with garbage.
    let rig = Rig::new(SMALL, 32, 1).with_faults();
    let inj = rig.injector.clone().unwrap();
    let store = rig.create();
    let mut acked = BTreeMap::new();
    // Every flushed chunk holds some values that stay live (cold keys) among others that
    // later writes supersede (hot keys): GC must copy to free anything.
    'fill: for round in 0..1_000u64 {
        for i in 0..30u64 {
            for k in [format!("hot{i:03}"), format!("cold{round:04}.{i:03}")] {
                let k = k.into_bytes();
                let v = value_for(&k, round);
                store.put(&k, &v).unwrap();
                acked.insert(k, v);
            }
        }
        store.flush().unwrap();
        if store.core().storages.iter().any(|s| s.needs_gc()) {
            break 'fill;
        }
    }
    inj.fail_all_writes(EIO);
    let err = store
        .gc_now()
        .expect_err("GC wrote nothing yet reported success");
    assert!(
        matches!(err, Error::Io { .. } | Error::Poisoned(_)),
        "{err}"
    );
    let store = reopen_intact(&rig, store, &acked);
    assert!(store.gc_now().is_ok());
    assert_all_present(&*store, &acked);
}

#[test]
fn a_read_error_is_an_error_not_data() {
    let rig = Rig::new(SMALL, 32, 4).with_faults();
    let inj = rig.injector.clone().unwrap();
    let store = rig.create();
    store.put(b"k", b"on flash").unwrap();
    store.flush().unwrap();
    inj.fail_nth_read(1, EIO);
    assert!(store.get(b"k").is_err());
    assert_eq!(store.get(b"k").unwrap().as_deref(), Some(&b"on flash"[..]));
}

#[test]
fn a_full_device_is_a_clear_error_and_the_store_stays_openable() {
    let rig = Rig::new(SMALL, 32, 1);
    let store = rig.create();
    let (acked, err) = write_until_error(&*store, 0, 1_000_000);
    let err = err.expect("a 1 MiB device never filled");
    let text = err.to_string();
    assert!(
        matches!(err, Error::NoSpace { .. } | Error::Poisoned(_)) && text.contains("space"),
        "{text}"
    );
    assert_all_present(&*store, &acked);
    drop(store);
    let store = rig.reopen().unwrap();
    assert_all_present(&*store, &acked);
    assert_check(&*store);
}

/// `EIO` on Linux.
const EIO: i32 = 5;
