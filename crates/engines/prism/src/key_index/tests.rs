//! Unit tests of the key index that need its internals: interrupted splits, stale
//! fingerprints, leaked chunks and slots, and the checks that find damage. Scenarios that
//! use only the public API are in `crates/engines/prism/tests/key_index_*.rs`.

use std::sync::Arc;

use tierkv_core::media::pmem::{PmemAllocator, PmemConfig, PmemPool};
use tierkv_core::{DurabilityMode, EmulatedLatency, Error};

use super::format::{self, NODE_BITMAP, NODE_FPS, full_bitmap};
use super::*;

const ROOT: usize = 3;
const CHUNK: u64 = 16 << 10;

pub(super) struct Fixture {
    dir: tempfile::TempDir,
    pool: Arc<PmemPool>,
    pub(super) alloc: Arc<PmemAllocator>,
}

fn config(dir: &tempfile::TempDir, size: u64) -> PmemConfig {
    PmemConfig {
        path: dir.path().join("pool"),
        size,
        mode: DurabilityMode::Volatile,
        latency: EmulatedLatency::default(),
    }
}

fn fixture() -> Fixture {
    fixture_of(4 << 20)
}

pub(super) fn fixture_of(size: u64) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let pool = PmemPool::create(&config(&dir, size)).unwrap();
    let start = pool.data_start();
    let alloc = PmemAllocator::format(pool.clone(), start, pool.len() - start, CHUNK).unwrap();
    Fixture {
        dir,
        pool,
        alloc: Arc::new(alloc),
    }
}

impl Fixture {
    pub(super) fn create(&self, fanout: usize) -> PersistentKeyIndex {
        PersistentKeyIndex::create_with(
            self.pool.clone(),
            self.alloc.clone(),
            ROOT,
            KeyIndexOptions { fanout },
        )
        .unwrap()
    }

    /// Drops the pool (the caller dropped every index) and opens it again.
    fn reopen(self) -> Fixture {
        let Fixture { dir, pool, alloc } = self;
        let start = pool.data_start();
        drop(alloc);
        drop(pool);
        let pool = PmemPool::open(&config(&dir, 0)).unwrap();
        let alloc = Arc::new(PmemAllocator::open(pool.clone(), start).unwrap());
        Fixture { dir, pool, alloc }
    }

    fn open(&self) -> Result<PersistentKeyIndex> {
        PersistentKeyIndex::open(self.pool.clone(), self.alloc.clone(), ROOT)
    }

    fn owned_chunks(&self) -> usize {
        self.alloc.iter_chunks(chunk_tag(ROOT).unwrap()).count()
    }
}

fn key(i: usize) -> Vec<u8> {
    format!("key-{i:05}").into_bytes()
}

fn long_key(i: usize) -> Vec<u8> {
    let mut k = format!("long-{i:05}-").into_bytes();
    k.resize(41 + i % 700, b'x');
    k
}

fn all(index: &PersistentKeyIndex) -> Vec<(Vec<u8>, u64)> {
    index.scan(b"", usize::MAX).unwrap()
}

#[test]
fn insert_get_remove_round_trip_with_inline_and_blob_keys() {
    let f = fixture();
    let index = f.create(8);
    for i in 0..200 {
        assert_eq!(index.insert_if_absent(&key(i), i as u64).unwrap(), Ok(()));
        assert_eq!(
            index
                .insert_if_absent(&long_key(i), 1000 + i as u64)
                .unwrap(),
            Ok(())
        );
    }
    assert_eq!(index.insert_if_absent(&key(7), 99).unwrap(), Err(7));
    assert_eq!(index.insert_if_absent(&long_key(7), 99).unwrap(), Err(1007));
    assert_eq!(index.len(), 400);
    for i in 0..200 {
        assert_eq!(index.get(&key(i)).unwrap(), Some(i as u64));
        assert_eq!(index.get(&long_key(i)).unwrap(), Some(1000 + i as u64));
    }
    for i in (0..200).step_by(3) {
        assert_eq!(index.remove(&long_key(i)).unwrap(), Some(1000 + i as u64));
        assert_eq!(index.remove(&long_key(i)).unwrap(), None);
    }
    assert_eq!(index.get(&long_key(3)).unwrap(), None);
    assert!(index.stats().splits > 0);
    assert_eq!(index.check().unwrap(), Vec::<String>::new());
    f.alloc.check().unwrap();
}

#[test]
fn keys_outside_the_limits_are_invalid_arguments() {
    let f = fixture();
    let index = f.create(8);
    for bad in [vec![], vec![b'k'; MAX_KEY_LEN + 1]] {
        assert!(matches!(
            index.insert_if_absent(&bad, 1),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(index.get(&bad), Err(Error::InvalidArgument(_))));
        assert!(matches!(index.remove(&bad), Err(Error::InvalidArgument(_))));
    }
    let max = vec![b'm'; MAX_KEY_LEN];
    assert_eq!(index.insert_if_absent(&max, 5).unwrap(), Ok(()));
    assert_eq!(index.get(&max).unwrap(), Some(5));
    // Invalid arguments do not poison the index.
    assert_eq!(index.insert_if_absent(b"after", 6).unwrap(), Ok(()));
}

#[test]
fn create_refuses_a_used_root_word_and_bad_fanouts() {
    let f = fixture();
    let _index = f.create(8);
    assert!(matches!(
        PersistentKeyIndex::create(f.pool.clone(), f.alloc.clone(), ROOT),
        Err(Error::InvalidArgument(_))
    ));
    for fanout in [0, 1, MAX_FANOUT + 1] {
        let r = PersistentKeyIndex::create_with(
            f.pool.clone(),
            f.alloc.clone(),
            ROOT + 1,
            KeyIndexOptions { fanout },
        );
        assert!(
            matches!(r, Err(Error::InvalidArgument(_))),
            "fanout {fanout}"
        );
    }
}

#[test]
fn open_of_an_unused_root_word_is_an_error() {
    let f = fixture();
    let r = PersistentKeyIndex::open(f.pool.clone(), f.alloc.clone(), ROOT);
    assert!(r.unwrap_err().is_corruption());
}

#[test]
fn reopen_keeps_every_key_and_the_fanout() {
    let f = fixture();
    let index = f.create(4);
    for i in 0..300 {
        index
            .insert_if_absent(&long_key(i), i as u64)
            .unwrap()
            .unwrap();
    }
    for i in (0..300).step_by(2) {
        index.remove(&long_key(i)).unwrap().unwrap();
    }
    let before = all(&index);
    let leaves = index.stats().leaves;
    drop(index);
    let f = f.reopen();
    let index = f.open().unwrap();
    assert_eq!(all(&index), before);
    assert_eq!(index.fanout(), 4);
    assert_eq!(index.len(), 150);
    // Half-empty leaves of fanout 4 hold 1-2 keys: open merged some of them.
    let merged = index.recovery_report().leaves_merged;
    assert!(merged > 0);
    assert_eq!(index.stats().leaves, leaves - merged);
    assert_eq!(index.check().unwrap(), Vec::<String>::new());
    f.alloc.check().unwrap();
}

#[test]
fn reopen_reads_a_long_leaf_list_on_several_threads() {
    let f = fixture_of(64 << 20);
    let index = f.create(2);
    for i in 0..12_000 {
        index.insert_if_absent(&key(i), i as u64).unwrap().unwrap();
    }
    let leaves = index.stats().leaves;
    assert!(
        leaves > 2 * recovery::LEAVES_PER_THREAD,
        "{leaves} leaves: the list is read on one thread"
    );
    let before = all(&index);
    drop(index);
    let f = f.reopen();
    let index = f.open().unwrap();
    assert_eq!(all(&index), before);
    assert_eq!(index.stats().leaves, leaves);
    assert_eq!(index.check().unwrap(), Vec::<String>::new());
}

/// Inserts keys 0..4 into a fanout-4 index, then key 4, which splits the head leaf:
/// keys 0, 1 stay, keys 2, 3 move to the new leaf, key 4 joins them. Returns the index
/// and the head leaf's bitmap before the split.
fn split_once(f: &Fixture) -> (PersistentKeyIndex, u64) {
    let index = f.create(4);
    for i in 0..4 {
        index
            .insert_if_absent(&long_key(i), i as u64)
            .unwrap()
            .unwrap();
    }
    index.insert_if_absent(&long_key(4), 4).unwrap().unwrap();
    assert_eq!(index.stats().leaves, 2);
    (index, full_bitmap(4))
}

#[test]
fn recovery_finishes_a_split_interrupted_after_its_link() {
    let f = fixture();
    let (index, full) = split_once(&f);
    // Key 3 is removed from the right leaf after the split; then the crash undoes the
    // left leaf's retire, as if it had never been persisted.
    index.remove(&long_key(3)).unwrap().unwrap();
    let head = f.pool.root(ROOT).unwrap();
    f.pool.store_u64(head + NODE_BITMAP as u64, full).unwrap();
    assert!(
        !index.check().unwrap().is_empty(),
        "check must see the leftovers"
    );
    drop(index);
    let f = f.reopen();
    let index = f.open().unwrap();
    let keys: Vec<Vec<u8>> = all(&index).into_iter().map(|(k, _)| k).collect();
    assert_eq!(
        keys,
        vec![long_key(0), long_key(1), long_key(2), long_key(4)]
    );
    assert_eq!(index.len(), 4);
    assert_eq!(index.check().unwrap(), Vec::<String>::new());
    f.alloc.check().unwrap();
}

#[test]
fn recovery_frees_a_right_leaf_that_was_never_linked() {
    let f = fixture();
    let (index, _) = split_once(&f);
    let head = f.pool.root(ROOT).unwrap();
    let right = f.pool.load_u64(head + format::NODE_NEXT as u64).unwrap();
    // Unlink the right leaf and give its keys back to the head: the state before the link.
    f.pool
        .store_u64(head + format::NODE_NEXT as u64, 0)
        .unwrap();
    f.pool
        .store_u64(head + NODE_BITMAP as u64, full_bitmap(4))
        .unwrap();
    drop(index);
    let f = f.reopen();
    let index = f.open().unwrap();
    let keys: Vec<Vec<u8>> = all(&index).into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, (0..4).map(long_key).collect::<Vec<_>>());
    assert_eq!(index.stats().leaves, 1);
    let (_, free) = index.heap.snapshot();
    assert!(
        free.contains(&right),
        "the unlinked leaf's slot is free again"
    );
    assert_eq!(index.check().unwrap(), Vec::<String>::new());
}

#[test]
fn recovery_rebuilds_stale_fingerprints() {
    let f = fixture();
    let index = f.create(8);
    index.insert_if_absent(b"alpha", 1).unwrap().unwrap();
    let head = f.pool.root(ROOT).unwrap();
    let fp = format::fingerprint(b"alpha");
    f.pool
        .write(head + NODE_FPS as u64, &[fp.wrapping_add(1)])
        .unwrap();
    assert_eq!(
        index.get(b"alpha").unwrap(),
        None,
        "a stale fingerprint hides the key"
    );
    assert_eq!(index.check().unwrap().len(), 1);
    drop(index);
    let f = f.reopen();
    let index = f.open().unwrap();
    assert_eq!(index.get(b"alpha").unwrap(), Some(1));
    assert_eq!(index.recovery_report().fingerprints_rebuilt, 1);
    assert_eq!(index.check().unwrap(), Vec::<String>::new());
}

#[test]
fn recovery_frees_owned_chunks_that_hold_nothing_live() {
    let f = fixture();
    let index = f.create(4);
    for i in 0..40 {
        index
            .insert_if_absent(&long_key(i), i as u64)
            .unwrap()
            .unwrap();
    }
    for i in 0..40 {
        index.remove(&long_key(i)).unwrap().unwrap();
    }
    let tag = chunk_tag(ROOT).unwrap();
    // A chunk taken just before a crash, before its header was written.
    f.alloc.alloc_chunk(tag).unwrap();
    let before = f.owned_chunks();
    drop(index);
    let f = f.reopen();
    let index = f.open().unwrap();
    // Only node chunks with leaves remain; every blob chunk and the headerless one went.
    assert!(
        f.owned_chunks() < before,
        "{} -> {}",
        before,
        f.owned_chunks()
    );
    assert_eq!(index.check().unwrap(), Vec::<String>::new());
    f.alloc.check().unwrap();
    index.insert_if_absent(&long_key(1), 1).unwrap().unwrap();
    assert_eq!(index.check().unwrap(), Vec::<String>::new());
}

#[test]
fn create_frees_chunks_left_by_a_create_that_crashed() {
    let f = fixture();
    let tag = chunk_tag(ROOT).unwrap();
    f.alloc.alloc_chunk(tag).unwrap();
    f.alloc.alloc_chunk(tag).unwrap();
    let index = f.create(8);
    assert_eq!(f.owned_chunks(), 1, "only the head leaf's chunk");
    assert_eq!(index.check().unwrap(), Vec::<String>::new());
}

#[test]
fn check_reports_a_count_that_disagrees_with_pmem() {
    let f = fixture();
    let index = f.create(8);
    index.insert_if_absent(b"k", 1).unwrap().unwrap();
    index.count.store(5, std::sync::atomic::Ordering::Relaxed);
    let report = index.check().unwrap();
    assert_eq!(report.len(), 1, "{report:?}");
    assert!(report[0].contains("len()"), "{report:?}");
}

#[test]
fn partitions_cover_the_key_space_in_order() {
    let f = fixture();
    let index = f.create(4);
    for i in 0..500 {
        index.insert_if_absent(&key(i), i as u64).unwrap().unwrap();
    }
    for n in [1, 2, 3, 7, 10_000] {
        let parts = index.partitions(n);
        assert!(!parts.is_empty() && parts.len() <= n.max(1));
        assert_eq!(parts[0].start, b"");
        assert_eq!(parts.last().unwrap().end, None);
        for w in parts.windows(2) {
            assert_eq!(w[0].end.as_ref(), Some(&w[1].start));
            assert!(w[0].start < w[1].start);
        }
        let mut seen = Vec::new();
        for p in &parts {
            index
                .for_each_in(p, &mut |k, v| {
                    assert!(p.contains(k));
                    seen.push((k.to_vec(), v));
                    Ok(())
                })
                .unwrap();
        }
        assert_eq!(seen, all(&index), "partitions of {n}");
    }
}

#[test]
fn for_each_in_stops_at_the_first_error() {
    let f = fixture();
    let index = f.create(4);
    for i in 0..50 {
        index.insert_if_absent(&key(i), i as u64).unwrap().unwrap();
    }
    let mut calls = 0;
    let r = index.for_each_in(&KeyRange::all(), &mut |_, _| {
        calls += 1;
        if calls == 10 {
            Err(Error::invalid("stop"))
        } else {
            Ok(())
        }
    });
    assert!(matches!(r, Err(Error::InvalidArgument(_))));
    assert_eq!(calls, 10);
}

#[test]
fn scan_honours_start_and_limit_across_leaves() {
    let f = fixture();
    let index = f.create(4);
    for i in (0..200).rev() {
        index.insert_if_absent(&key(i), i as u64).unwrap().unwrap();
    }
    assert_eq!(index.scan(b"", 0).unwrap(), vec![]);
    let got = index.scan(&key(57), 10).unwrap();
    let want: Vec<_> = (57..67).map(|i| (key(i), i as u64)).collect();
    assert_eq!(got, want);
    let got = index.scan(b"key-00057x", 2).unwrap();
    assert_eq!(got, vec![(key(58), 58), (key(59), 59)]);
    assert_eq!(index.scan(b"zzz", 10).unwrap(), vec![]);
    assert_eq!(index.scan(&key(195), 100).unwrap().len(), 5);
}

/// Inserts `key(0..n)` and `long_key(0..n/4)`, then removes all but every `keep`-th of
/// each; returns what is left, sorted.
fn thin_out(index: &PersistentKeyIndex, n: usize, keep: usize) -> Vec<(Vec<u8>, u64)> {
    let mut left = Vec::new();
    for i in 0..n {
        let long = i < n / 4;
        let mut keys = vec![(key(i), i as u64)];
        if long {
            keys.push((long_key(i), 10_000 + i as u64));
        }
        for (k, v) in keys {
            assert_eq!(index.insert_if_absent(&k, v).unwrap(), Ok(()));
            left.push((k, v));
        }
    }
    left.retain(|(k, v)| {
        let i = (*v % 10_000) as usize;
        if i.is_multiple_of(keep) {
            return true;
        }
        assert_eq!(index.remove(k).unwrap(), Some(*v));
        false
    });
    left.sort();
    left
}

#[test]
fn open_merges_sparse_leaves_and_the_freed_leaves_take_new_keys() {
    let f = fixture();
    let index = f.create(8);
    let left = thin_out(&index, 800, 4);
    let leaves_before = index.stats().leaves;
    drop(index);
    let f = f.reopen();
    let index = f.open().unwrap();
    let report = index.recovery_report();
    let leaves_after = index.stats().leaves;
    println!("{leaves_before} leaves -> {leaves_after}: {report:?}");
    assert!(report.leaves_merged > 0, "{report:?}");
    assert_eq!(leaves_after, leaves_before - report.leaves_merged);
    // 8 * 3/4 = 6 keys per merged leaf at most, 2 at least per pair that did not merge.
    assert!(
        leaves_after * 3 <= leaves_before,
        "{leaves_before} -> {leaves_after}"
    );
    assert_eq!(all(&index), left);
    assert_eq!(index.check().unwrap(), Vec::<String>::new());
    f.alloc.check().unwrap();
    // New keys outside the old ranges fit, and everything survives another reopen.
    let mut expect = left;
    for i in 0..200 {
        let k = format!("new-{i:05}").into_bytes();
        assert_eq!(index.insert_if_absent(&k, 50_000 + i).unwrap(), Ok(()));
        expect.push((k, 50_000 + i));
    }
    expect.sort();
    assert_eq!(all(&index), expect);
    drop(index);
    let f = f.reopen();
    let index = f.open().unwrap();
    assert_eq!(all(&index), expect);
    assert_eq!(index.check().unwrap(), Vec::<String>::new());
}

#[test]
fn a_merge_interrupted_before_its_commit_is_undone_at_the_next_open() {
    let f = fixture();
    let index = f.create(8);
    let left = thin_out(&index, 200, 4);
    drop(index);
    let f = f.reopen();
    // A crash after merge steps 1-2 and before the commit: the first leaf holds copies of
    // the second's keys, and the second is still linked.
    {
        let chunks =
            heap::ChunkMap::read(&f.pool, &f.alloc, chunk_tag(ROOT).unwrap(), ROOT as u32).unwrap();
        let head = f.pool.root(ROOT).unwrap();
        let mut leaves = recovery::read_list(&f.pool, &chunks, head).unwrap();
        let mut it = leaves.drain(..2);
        let (mut l, r) = (it.next().unwrap(), it.next().unwrap());
        assert!(l.entries.len() + r.entries.len() <= 8);
        assert!(!r.entries.is_empty());
        recovery::copy_entries(&f.pool, &mut l, r.entries).unwrap();
    }
    let index = f.open().unwrap();
    let report = index.recovery_report();
    assert!(report.split_leftovers_cleared > 0, "{report:?}");
    assert!(report.leaves_merged > 0, "{report:?}");
    assert_eq!(all(&index), left);
    assert_eq!(index.check().unwrap(), Vec::<String>::new());
    f.alloc.check().unwrap();
}

#[test]
fn a_crash_at_each_named_point_of_a_recovery_merge_recovers_the_same_keys() {
    use tierkv_core::media::pmem::{CrashImageOptions, CrashPoint};
    let f = fixture();
    let index = f.create(8);
    let left = thin_out(&index, 160, 4);
    drop(index);
    let Fixture { dir, pool, alloc } = f;
    let start = pool.data_start();
    drop(alloc);
    drop(pool);
    // The merging open runs on a Tracked pool, cut at each of its named points.
    let mut cfg = config(&dir, 0);
    cfg.mode = DurabilityMode::Tracked;
    let pool = PmemPool::open(&cfg).unwrap();
    let alloc = Arc::new(PmemAllocator::open(pool.clone(), start).unwrap());
    type Images = parking_lot::Mutex<Vec<(String, Vec<u8>)>>;
    let images: Arc<Images> = Arc::default();
    let (out, weak) = (images.clone(), Arc::downgrade(&pool));
    pool.arm_crash_points(Arc::new(move |cp: CrashPoint<'_>| {
        if let (CrashPoint::Named(name), Some(p)) = (cp, weak.upgrade()) {
            let mut out = out.lock();
            let seed = out.len() as u64;
            let opts = if seed.is_multiple_of(2) {
                CrashImageOptions::lines()
            } else {
                CrashImageOptions::torn_words()
            };
            out.push((name.to_owned(), p.crash_image(seed, opts).unwrap()));
        }
    }))
    .unwrap();
    let index = PersistentKeyIndex::open(pool.clone(), alloc.clone(), ROOT).unwrap();
    pool.disarm_crash_points();
    let merged = index.recovery_report().leaves_merged;
    assert!(merged > 0);
    assert_eq!(all(&index), left);
    drop(index);
    let images = std::mem::take(&mut *images.lock());
    let mut seen: std::collections::BTreeMap<String, usize> = Default::default();
    for (i, (name, image)) in images.iter().enumerate() {
        let path = dir.path().join(format!("image-{i}"));
        std::fs::write(&path, image).unwrap();
        let p = PmemPool::open(&PmemConfig {
            path: path.clone(),
            size: 0,
            mode: DurabilityMode::Volatile,
            latency: EmulatedLatency::default(),
        })
        .unwrap();
        let a = Arc::new(PmemAllocator::open(p.clone(), start).unwrap());
        let recovered = PersistentKeyIndex::open(p, a.clone(), ROOT).unwrap();
        assert_eq!(all(&recovered), left, "crash at {name} (image {i})");
        assert_eq!(recovered.check().unwrap(), Vec::<String>::new(), "{name}");
        a.check().unwrap();
        drop(recovered);
        std::fs::remove_file(&path).unwrap();
        *seen.entry(name.clone()).or_default() += 1;
    }
    println!("{merged} leaves merged; images by point: {seen:?}");
    for name in [
        "prism.key_index.merge_copied",
        "prism.key_index.merge_committed",
    ] {
        assert!(
            seen.get(name).copied().unwrap_or(0) >= 3,
            "{name}: {seen:?}"
        );
    }
}
