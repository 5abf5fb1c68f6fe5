//! Cursor iteration (`KvStore::scan_cursor`) of `hetermm:hash` and `hetermm:lockfree`: a
//! full iteration returns exactly the live keys with their values, also after a reopen
//! (the index rebuilt by recovery), and while writers run with pages flushed under it
//! (4 KiB pages, 48 pages of DRAM; the test asserts flushes happened): every key present throughout comes
//! back once with a value it held, a key deleted before the iteration never. `btree`
//! refuses (it scans in order instead).

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};

use common::{counter, create_pool, open, scratch_dir, small_options};
use tierkv_core::media::pmem::DurabilityMode;
use tierkv_core::{Error, KvPair, KvStore};

fn iterate(s: &dyn KvStore, count: usize) -> Vec<KvPair> {
    let (mut out, mut cursor) = (Vec::new(), 0);
    loop {
        let page = s.scan_cursor(cursor, count).unwrap();
        out.extend(page.entries);
        cursor = page.next;
        if cursor == 0 {
            return out;
        }
    }
}

fn value(i: u32, round: u32) -> Vec<u8> {
    let mut v = format!("{i}:{round}:").into_bytes();
    v.resize(40 + (i % 50) as usize, b'x');
    v
}

#[test]
fn a_cursor_iteration_returns_exactly_the_live_keys_also_after_a_reopen() {
    let dir = scratch_dir();
    let pool = create_pool(&dir.path().join("b"), 16 << 20, DurabilityMode::Volatile);
    let s = open(pool, small_options(64, ""), "btree", true);
    assert!(matches!(s.scan_cursor(0, 10), Err(Error::Unsupported(_))));
    s.close().unwrap();
    for variant in ["hash", "lockfree"] {
        let dir = scratch_dir();
        let path = dir.path().join("pool");
        let pool = create_pool(&path, 16 << 20, DurabilityMode::Msync);
        let s = open(pool.clone(), small_options(48, ""), variant, true);
        assert!(iterate(&*s, 10).is_empty(), "{variant}");
        for i in 0..2000u32 {
            s.put(format!("k{i}").as_bytes(), &value(i, 0)).unwrap();
        }
        for i in (0..2000u32).step_by(4) {
            s.delete(format!("k{i}").as_bytes()).unwrap();
        }
        let mut want: Vec<KvPair> = (0..2000u32)
            .filter(|i| !i.is_multiple_of(4))
            .map(|i| (format!("k{i}").into_bytes(), value(i, 0)))
            .collect();
        want.sort();
        for count in [1, 10, 100_000] {
            let mut got = iterate(&*s, count);
            got.sort();
            assert_eq!(got, want, "{variant}, count {count}");
        }
        s.close().unwrap();
        drop(s);
        drop(pool);
        let pool = tierkv_core::media::pmem::PmemPool::open(&common::config(
            &path,
            16 << 20,
            DurabilityMode::Msync,
        ))
        .unwrap();
        let s = open(pool, small_options(48, ""), variant, false);
        let mut got = iterate(&*s, 10);
        got.sort();
        assert_eq!(got, want, "{variant} after a reopen");
        s.close().unwrap();
    }
}

#[test]
fn a_cursor_iteration_under_writers_flushes_and_reorganisations() {
    for variant in ["hash", "lockfree"] {
        let dir = scratch_dir();
        let pool = create_pool(&dir.path().join("pool"), 16 << 20, DurabilityMode::Volatile);
        let s = open(pool, small_options(48, ""), variant, true);
        for i in 0..1500u32 {
            s.put(format!("stay{i}").as_bytes(), &value(i, 0)).unwrap();
            s.put(format!("gone{i}").as_bytes(), &value(i, 0)).unwrap();
        }
        for i in 0..1500u32 {
            s.delete(format!("gone{i}").as_bytes()).unwrap();
        }
        let done = AtomicBool::new(false);
        std::thread::scope(|t| {
            t.spawn(|| {
                for round in 1..=6u32 {
                    for i in 0..1500u32 {
                        // Rewrites (out of place once flushed) and churn keys.
                        s.put(format!("stay{i}").as_bytes(), &value(i, round))
                            .unwrap();
                        let c = format!("churn{}", i % 300);
                        s.put(c.as_bytes(), &value(i, round)).unwrap();
                        if i.is_multiple_of(2) {
                            s.delete(c.as_bytes()).unwrap();
                        }
                    }
                }
                done.store(true, Ordering::Release);
            });
            let mut rounds = 0;
            while rounds < 3 || !done.load(Ordering::Acquire) {
                let mut stay = std::collections::HashMap::new();
                for (k, v) in iterate(&*s, 37) {
                    assert!(!k.starts_with(b"gone"), "{variant}: a deleted key");
                    if let Some(i) = k.strip_prefix(b"stay") {
                        let i: u32 = std::str::from_utf8(i).unwrap().parse().unwrap();
                        let held = (0..=6).any(|r| v == value(i, r));
                        assert!(held, "{variant}: stay{i} read as {v:?}");
                        *stay.entry(i).or_insert(0) += 1;
                    }
                }
                assert_eq!(stay.len(), 1500, "{variant}: a present key missed");
                assert!(stay.values().all(|n| *n == 1), "{variant}: a key twice");
                rounds += 1;
            }
        });
        let st = s.stats();
        assert!(counter(&st, "flushes") > 0, "{variant}: no flush happened");
        s.check().unwrap();
        s.close().unwrap();
    }
}
