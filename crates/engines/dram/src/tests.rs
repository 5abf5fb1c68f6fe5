//! Unit and model-based tests of the dram engine.

use std::sync::Arc;

use tierkv_core::common::index::INDEX_VARIANTS;
use tierkv_core::{Error, KvStore, Limits, WriteBatch};
use tierkv_testkit::{BatchModelConfig, ModelConfig, run_model};

use super::DramStore;

fn store(variant: &str) -> Arc<dyn KvStore> {
    Arc::new(DramStore::new(variant, Limits::default()).unwrap())
}

#[test]
fn model_btree_from_four_threads() {
    let r = run_model(store("btree"), &ModelConfig::default());
    assert!(r.hits > 1_000 && r.scans > 500, "{r:?}");
}

#[test]
fn model_hash_from_four_threads() {
    let cfg = ModelConfig {
        scan_pct: 0,
        ..ModelConfig::default()
    };
    let r = run_model(store("hash"), &cfg);
    assert!(r.hits > 1_000, "{r:?}");
}

#[test]
fn model_lockfree_from_four_threads() {
    let cfg = ModelConfig {
        scan_pct: 0,
        ..ModelConfig::default()
    };
    let r = run_model(store("lockfree"), &cfg);
    assert!(r.hits > 1_000, "{r:?}");
}

#[test]
fn model_many_seeds_small() {
    for seed in 0..20 {
        let cfg = ModelConfig {
            threads: 3,
            ops_per_thread: 400,
            keys_per_thread: 20,
            shared_ops_per_thread: 200,
            seed,
            ..ModelConfig::default()
        };
        run_model(store("btree"), &cfg);
    }
}

#[test]
fn hash_variants_refuse_scans() {
    for v in ["hash", "lockfree"] {
        let s = store(v);
        s.put(b"a", b"1").unwrap();
        assert!(matches!(s.scan(b"a", 10), Err(Error::Unsupported(_))));
    }
}

#[test]
fn limits_are_enforced() {
    let s = DramStore::new(
        "btree",
        Limits {
            max_key_len: 4,
            max_value_len: 8,
        },
    )
    .unwrap();
    assert!(matches!(s.put(b"", b"v"), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        s.put(b"abcde", b"v"),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        s.put(b"k", &[0; 9]),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(s.get(b""), Err(Error::InvalidArgument(_))));
    s.put(b"abcd", &[1; 8]).unwrap();
}

#[test]
fn closed_store_refuses_everything() {
    for v in INDEX_VARIANTS {
        let s = store(v);
        s.put(b"k", b"v").unwrap();
        s.close().unwrap();
        s.close().unwrap();
        assert!(matches!(s.get(b"k"), Err(Error::Closed)));
        assert!(matches!(s.put(b"k", b"v"), Err(Error::Closed)));
        assert!(matches!(s.delete(b"k"), Err(Error::Closed)));
        assert!(matches!(s.scan(b"k", 1), Err(Error::Closed)));
    }
}

#[test]
fn stats_count_bytes_and_dram() {
    let s = store("btree");
    s.put(b"key", b"value").unwrap();
    s.get(b"key").unwrap();
    let st = s.stats();
    assert_eq!(st.user_bytes_written, 8);
    assert_eq!(st.user_bytes_read, 5);
    assert_eq!(st.reads_from_dram, 1);
    assert!(st.dram_bytes >= 8);
    s.delete(b"key").unwrap();
    assert_eq!(s.stats().dram_bytes, 0);
}

/// `get_many_with` lends the present keys' values in order with their indexes, skips
/// the missing ones, counts what `get_with` would count, and checks the limits and the
/// open state like it.
#[test]
fn get_many_with_reads_like_get_with_per_key() {
    for variant in INDEX_VARIANTS.iter().copied() {
        let s = store(variant);
        s.put(b"a", b"1").unwrap();
        s.put(b"c", b"333").unwrap();
        let keys: [&[u8]; 4] = [b"a", b"b", b"c", b"a"];
        let mut seen = Vec::new();
        let found = s
            .get_many_with(&keys, &mut |i, v| seen.push((i, v.to_vec())))
            .unwrap();
        assert_eq!(found, 3, "{variant}");
        assert_eq!(
            seen,
            [(0, b"1".to_vec()), (2, b"333".to_vec()), (3, b"1".to_vec())],
            "{variant}"
        );
        let st = s.stats();
        assert_eq!(
            (st.reads_from_dram, st.user_bytes_read),
            (3, 5),
            "{variant}"
        );
        let empty: [&[u8]; 1] = [b""];
        assert!(
            s.get_many_with(&empty, &mut |_, _| ()).is_err(),
            "{variant}"
        );
        s.close().unwrap();
        assert!(matches!(
            s.get_many_with(&keys, &mut |_, _| ()),
            Err(Error::Closed)
        ));
    }
}

#[test]
fn batch_model_with_isolated_multi_get_on_every_index() {
    for variant in INDEX_VARIANTS {
        let r = tierkv_testkit::run_batch_model(store(variant), &BatchModelConfig::default());
        assert!(
            r.batches > 300 && r.group_batches == 300 && r.multi_gets > 100,
            "{variant}: {r:?}"
        );
        assert!(
            r.group_reads > 0,
            "{variant}: the group reader never ran: {r:?}"
        );
    }
}

#[test]
fn a_batch_over_the_limits_applies_nothing() {
    let s = store("btree");
    let mut b = WriteBatch::new();
    b.put("a", "1")
        .put("b", vec![0u8; Limits::default().max_value_len + 1]);
    assert!(matches!(s.write_batch(&b), Err(Error::InvalidArgument(_))));
    assert_eq!(s.get(b"a").unwrap(), None);
    s.close().unwrap();
    assert!(matches!(
        s.write_batch(&WriteBatch::new()),
        Err(Error::Closed)
    ));
}

/// A scan holds every stripe shared, so it sees none or all of each batch (a batch over
/// ten keys spread over the stripes, rewritten with one value per batch).
#[test]
fn scans_see_none_or_all_of_each_batch() {
    let s = store("btree");
    let keys: Vec<Vec<u8>> = (0..10u8).map(|i| vec![b'k', i]).collect();
    let write = |n: u32| {
        let mut b = WriteBatch::new();
        for k in &keys {
            b.put(k.clone(), n.to_le_bytes());
        }
        s.write_batch(&b).unwrap();
    };
    write(0);
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|t| {
        t.spawn(|| {
            for n in 1..3_000 {
                write(n);
            }
            done.store(true, std::sync::atomic::Ordering::Release);
        });
        let mut scans = 0;
        while !done.load(std::sync::atomic::Ordering::Acquire) {
            let rows = s.scan(b"k", 10).unwrap();
            assert_eq!(rows.len(), 10);
            assert!(
                rows.iter().all(|(_, v)| *v == rows[0].1),
                "a scan saw part of a batch: {rows:?}"
            );
            scans += 1;
        }
        assert!(scans > 0);
    });
}

/// Point reads take no lock (a seqlock check on their stripe): a reader that reads the
/// keys of a batch one by one, in the order the batch applies them, never sees a later
/// batch and then an earlier one. Batch `n` writes `n` to every key when `n` is even and
/// deletes every key when it is odd, so the absent path is checked too.
#[test]
fn point_reads_see_none_or_all_of_each_batch() {
    for variant in ["hash", "btree"] {
        let s = store(variant);
        let keys: Vec<Vec<u8>> = (0..10u8).map(|i| vec![b'k', i]).collect();
        let write = |n: u32| {
            let mut b = WriteBatch::new();
            for k in &keys {
                if n.is_multiple_of(2) {
                    b.put(k.clone(), n.to_le_bytes());
                } else {
                    b.delete(k.clone());
                }
            }
            s.write_batch(&b).unwrap();
        };
        write(0);
        // The order in which a batch applies its keys.
        let mut probe = WriteBatch::new();
        for k in &keys {
            probe.delete(k.clone());
        }
        let order: Vec<Vec<u8>> = probe.iter().map(|(k, _)| k.to_vec()).collect();
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|t| {
            t.spawn(|| {
                for n in 1..4_000 {
                    write(n);
                }
                done.store(true, std::sync::atomic::Ordering::Release);
            });
            let (mut reads, mut lent) = (0u64, 0u64);
            while !done.load(std::sync::atomic::Ordering::Acquire) {
                // The oldest batch the reader's next read may come from.
                let mut floor = 0u32;
                for (i, k) in order.iter().enumerate() {
                    let seen = if i % 2 == 0 {
                        s.get(k).unwrap()
                    } else {
                        let mut v = None;
                        s.get_with(k, &mut |b| v = Some(b.to_vec())).unwrap();
                        lent += 1;
                        v
                    };
                    match seen {
                        Some(v) => {
                            let n = u32::from_le_bytes(v.try_into().unwrap());
                            assert!(n >= floor, "{variant}: read batch {n} after {floor}");
                            floor = n;
                        }
                        None if floor.is_multiple_of(2) => floor += 1,
                        None => {}
                    }
                    reads += 1;
                }
            }
            assert!(reads > 0 && lent > 0);
        });
    }
}

/// Every pair of a full cursor iteration (`scan_cursor` from 0 until it returns 0).
fn iterate(s: &dyn KvStore, count: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
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

#[test]
fn a_cursor_iteration_returns_exactly_the_live_keys_with_their_values() {
    assert!(matches!(
        store("btree").scan_cursor(0, 10),
        Err(Error::Unsupported(_))
    ));
    for v in ["hash", "lockfree"] {
        let s = store(v);
        assert!(iterate(&*s, 10).is_empty(), "{v}");
        for i in 0..3000u32 {
            s.put(format!("k{i}").as_bytes(), &i.to_le_bytes()).unwrap();
        }
        for i in (0..3000u32).step_by(3) {
            s.delete(format!("k{i}").as_bytes()).unwrap();
        }
        let mut want: Vec<_> = (0..3000u32)
            .filter(|i| !i.is_multiple_of(3))
            .map(|i| (format!("k{i}").into_bytes(), i.to_le_bytes().to_vec()))
            .collect();
        want.sort();
        for count in [1, 10, 100_000] {
            let mut got = iterate(&*s, count);
            got.sort();
            assert_eq!(got, want, "{v}, count {count}");
        }
        s.close().unwrap();
        assert!(matches!(s.scan_cursor(0, 10), Err(Error::Closed)), "{v}");
    }
}

/// Under writers: every key present throughout is returned once with a value it held,
/// keys deleted before the iteration never, and each page sees none or all of a batch.
#[test]
fn a_cursor_iteration_under_writers_sees_the_stable_keys_and_whole_batches() {
    for v in ["hash", "lockfree"] {
        let s = store(v);
        for i in 0..2000u32 {
            s.put(format!("stay{i}").as_bytes(), b"v").unwrap();
            s.put(format!("gone{i}").as_bytes(), b"v").unwrap();
            s.delete(format!("gone{i}").as_bytes()).unwrap();
        }
        let batch_keys: Vec<Vec<u8>> = (0..10u8).map(|i| vec![b'b', i]).collect();
        let write = |n: u32| {
            let mut b = WriteBatch::new();
            for k in &batch_keys {
                b.put(k.clone(), n.to_le_bytes());
            }
            s.write_batch(&b).unwrap();
        };
        write(0);
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|t| {
            t.spawn(|| {
                for n in 1..2_000u32 {
                    write(n);
                    let k = format!("churn{}", n % 500);
                    s.put(k.as_bytes(), b"c").unwrap();
                    s.put(format!("stay{}", n % 2000).as_bytes(), b"w").unwrap();
                    if n.is_multiple_of(2) {
                        s.delete(k.as_bytes()).unwrap();
                    }
                }
                done.store(true, std::sync::atomic::Ordering::Release);
            });
            let mut rounds = 0;
            while rounds < 3 || !done.load(std::sync::atomic::Ordering::Acquire) {
                let (mut cursor, mut stay, mut batch) = (0, 0, Vec::new());
                loop {
                    let page = s.scan_cursor(cursor, 50).unwrap();
                    let mut in_page = Vec::new();
                    for (k, val) in page.entries {
                        assert!(!k.starts_with(b"gone"), "{v}: a deleted key");
                        if k.starts_with(b"stay") {
                            assert!(val == b"v" || val == b"w", "{v}: {val:?}");
                            stay += 1;
                        }
                        if k.first() == Some(&b'b') {
                            in_page.push(val);
                        }
                    }
                    // The batch's keys spread over several shards, so over several
                    // pages; within one page they must agree.
                    assert!(
                        in_page.windows(2).all(|w| w[0] == w[1]),
                        "{v}: a page saw part of a batch: {in_page:?}"
                    );
                    batch.extend(in_page);
                    cursor = page.next;
                    if cursor == 0 {
                        break;
                    }
                }
                assert_eq!(stay, 2000, "{v}: stable keys returned once each");
                assert_eq!(batch.len(), 10, "{v}");
                rounds += 1;
            }
        });
    }
}
