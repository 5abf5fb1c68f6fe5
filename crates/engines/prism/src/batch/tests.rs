//! Unit tests of the batch commit and its recovery (`FORMAT.md` § Write batches).

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

use std::sync::Arc;

use tierkv_core::{Error, KvStore, WriteBatch};

use super::{BATCH_CHUNK_TAG, ROOT_BATCH, log_format};
use crate::PrismStore;
use crate::test_support::{store_context, store_fixture};

const SPEC: &str = "prism@pwb_count=2,pwb_size=64KiB,chunk_size=16KiB,svc_size=64KiB";

fn reopen(dir: &std::path::Path) -> tierkv_core::Result<Arc<PrismStore>> {
    PrismStore::open(&store_context(dir, SPEC, 32, 16, false))
}

fn sample() -> WriteBatch {
    let mut b = WriteBatch::new();
    for i in 0..20 {
        b.put(format!("k{i:02}"), format!("batch-value-{i}"));
    }
    b.delete("gone");
    b
}

fn log_chunks(store: &PrismStore) -> usize {
    store.core().alloc.iter_chunks(BATCH_CHUNK_TAG).count()
}

/// Writes `batch`'s log and, when `commit`, the commit word — without applying it: the
/// state a crash after B1 (or B2) leaves.
fn log_only(store: &PrismStore, batch: &WriteBatch, commit: bool) -> u64 {
    let core = store.core();
    let bytes = log_format::encode(batch, 9).unwrap();
    let off = core.alloc.alloc_chunk(BATCH_CHUNK_TAG).unwrap();
    core.pool.write_persist(off, &bytes).unwrap();
    if commit {
        core.pool.set_root(ROOT_BATCH, off).unwrap();
    }
    off
}

#[test]
fn a_batch_is_applied_durably_and_leaves_no_log() {
    let fx = store_fixture(SPEC);
    fx.store.put(b"gone", b"x").unwrap();
    fx.store.write_batch(&sample()).unwrap();
    assert_eq!(
        fx.store.get(b"k07").unwrap().as_deref(),
        Some(&b"batch-value-7"[..])
    );
    assert_eq!(fx.store.get(b"gone").unwrap(), None);
    assert_eq!(fx.store.core().pool.root(ROOT_BATCH).unwrap(), 0);
    assert_eq!(log_chunks(&fx.store), 0);
    assert_eq!(fx.store.stats().counters["batches_committed"], 1);
    let keys: Vec<&[u8]> = vec![b"k00", b"gone", b"k19"];
    let got = fx.store.multi_get(&keys).unwrap();
    assert_eq!(got[0].as_deref(), Some(&b"batch-value-0"[..]));
    assert_eq!(got[1], None);
    fx.store.close().unwrap();
    drop(fx.store);
    let again = reopen(fx._dir.path()).unwrap();
    assert_eq!(
        again.get(b"k19").unwrap().as_deref(),
        Some(&b"batch-value-19"[..])
    );
    assert_eq!(again.stats().counters["batches_replayed"], 0);
}

#[test]
fn recovery_finishes_a_committed_batch() {
    let fx = store_fixture(SPEC);
    fx.store.put(b"gone", b"x").unwrap();
    log_only(&fx.store, &sample(), true);
    assert_eq!(fx.store.get(b"k03").unwrap(), None, "not applied yet");
    fx.store.close().unwrap();
    drop(fx.store);
    let again = reopen(fx._dir.path()).unwrap();
    assert_eq!(again.stats().counters["batches_replayed"], 1);
    for i in 0..20 {
        let want = format!("batch-value-{i}");
        assert_eq!(
            again.get(format!("k{i:02}").as_bytes()).unwrap(),
            Some(want.into_bytes())
        );
    }
    assert_eq!(again.get(b"gone").unwrap(), None);
    assert_eq!(again.core().pool.root(ROOT_BATCH).unwrap(), 0);
    assert_eq!(log_chunks(&again), 0);
    crate::check::run(again.core()).unwrap();
}

#[test]
fn recovery_drops_an_uncommitted_log() {
    let fx = store_fixture(SPEC);
    log_only(&fx.store, &sample(), false);
    fx.store.close().unwrap();
    drop(fx.store);
    let again = reopen(fx._dir.path()).unwrap();
    assert_eq!(again.get(b"k00").unwrap(), None);
    assert_eq!(
        log_chunks(&again),
        0,
        "the uncommitted log chunk was not freed"
    );
    assert_eq!(again.stats().counters["batches_replayed"], 0);
}

#[test]
fn a_corrupt_committed_log_refuses_to_open() {
    let fx = store_fixture(SPEC);
    let off = log_only(&fx.store, &sample(), true);
    let core = fx.store.core();
    core.pool
        .write_persist(off + log_format::HEADER_LEN as u64 + 20, b"??")
        .unwrap();
    fx.store.close().unwrap();
    drop(fx.store);
    match reopen(fx._dir.path()) {
        Err(Error::ChecksumMismatch { offset, .. }) => assert_eq!(offset, off),
        other => panic!("opened a store whose committed batch is corrupt: {other:?}"),
    }
}

#[test]
fn over_the_limits_and_empty_batches_touch_nothing() {
    let fx = store_fixture(SPEC);
    let mut b = WriteBatch::new();
    b.put("ok", "v").put("big", vec![0u8; 1 << 20]);
    assert!(matches!(
        fx.store.write_batch(&b),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(fx.store.get(b"ok").unwrap(), None);
    fx.store.write_batch(&WriteBatch::new()).unwrap();
    assert_eq!(fx.store.stats().counters["batches_committed"], 0);
    assert_eq!(log_chunks(&fx.store), 0);
}
