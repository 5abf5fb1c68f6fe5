//! Write batches on a full pool (issue 24 with GC's back-pressure, FORMAT.md § Write
//! batches step 1): once batches of puts of new keys are refused with `NoSpace`, a batch
//! is refused whole (none of its keys appears, before or after a reopen, and the members a
//! batch refused midway left behind are dropped by recovery), a batch of deletes commits,
//! and once GC has collected what the deletes freed a batch of puts commits whole.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use std::time::Duration;

use common::*;
use tierkv_core::media::pmem::DurabilityMode;
use tierkv_core::{Error, KvStore, WriteBatch};

const EXTRA: &str = "chunk_size=16KiB";

fn key(k: u32) -> Vec<u8> {
    format!("key{k:08}").into_bytes()
}

fn value(k: u32, tag: &str) -> Vec<u8> {
    format!("{tag}{k}").repeat(30).into_bytes()
}

fn puts(from: u32, n: u32, tag: &str) -> WriteBatch {
    (from..from + n)
        .map(|k| (key(k), Some(value(k, tag))))
        .collect()
}

#[test]
fn a_batch_without_room_is_refused_whole_and_deletes_make_room_for_one() {
    let dir = scratch_dir();
    let store = new_store(dir.path(), 1 << 20, DurabilityMode::Volatile, EXTRA);
    let (mut next, mut refused, mut committed) = (0u32, 0, 0u32);
    while refused < 1 {
        match store.write_batch(&puts(next, 20, "v")) {
            Ok(()) => (committed, refused) = (next + 20, 0),
            Err(Error::NoSpace { .. }) => refused += 1,
            Err(e) => panic!("batch at {next}: {e}"),
        }
        next += 20;
        assert!(next < 100_000, "the pool never filled");
    }
    assert!(
        committed >= 200,
        "only {committed} keys before the pool was full"
    );
    // The batch refused last, written again with other values once there is room.
    let late = next - 20;
    let absent =
        |s: &dyn KvStore, from: u32| (from..from + 20).all(|k| s.get(&key(k)).unwrap().is_none());
    assert!(absent(&*store, late), "a refused batch left keys behind");
    let mut d = WriteBatch::new();
    for k in (0..committed).filter(|k| k % 2 == 0) {
        d.delete(key(k));
    }
    store.write_batch(&d).unwrap();
    let mut done = false;
    for _ in 0..200 {
        if store.write_batch(&puts(late, 20, "r")).is_ok() {
            done = true;
            break;
        }
        store.gc_step().unwrap();
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(done, "no room came back after deleting half the keys");
    store.close().unwrap();
    drop(store);
    let store = reopen(&dir.path().join("pool"), EXTRA);
    store.check().unwrap();
    for k in 0..committed {
        let want = (k % 2 == 1).then(|| value(k, "v"));
        assert_eq!(store.get(&key(k)).unwrap(), want, "key {k}");
    }
    for k in late..late + 20 {
        assert_eq!(store.get(&key(k)).unwrap(), Some(value(k, "r")));
    }
    println!(
        "{committed} keys in batches before the pool was full; {} uncommitted members dropped at reopen",
        store.stats().counters["focus_uncommitted_dropped"]
    );
}
