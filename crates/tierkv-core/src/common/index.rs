//! Concurrent in-DRAM indexes from maintained crates, behind one trait.
//!
//! The `dram` engine stores values in them; HeterMM (`engines::hetermm`) stores logical
//! addresses in them. Both select one by the same variant name, so a HeterMM index can be
//! measured against itself holding everything in DRAM:
//!
//! | variant    | structure                                            | ordered | crates |
//! |------------|------------------------------------------------------|---------|--------|
//! | `btree`    | lock-free hash map + lock-free skip list, one writer lock per key ([`SkipIndex`]) | yes | papaya, crossbeam-skiplist |
//! | `hash`     | sharded hash map, a reader-writer lock per shard     | no      | dashmap |
//! | `lockfree` | lock-free hash map (epoch reclamation), blocking resizes | no  | papaya |
//!
//! `btree` keeps its name (users and tests pass it) but is not a B-tree: a lock-free hash
//! map finds a key's cell and a lock-free skip list keeps the keys in order; its reads take
//! no lock and its writers lock only their key ([`super::skipindex`] says why this
//! structure). `hash` readers take their shard's read lock (dashmap: 4x the CPU count of
//! shards, rounded up to a power of two; no global lock, but a shared lock word).
//! [`BTreeIndex`], the `std` B-tree behind one reader-writer lock that `btree` used to be,
//! is not a variant; it stays as the baseline the `btree` timing test measures against
//! (the `focus` engine used it until 2026-11-27 and now uses [`SkipIndex`] too).
//!
//! Every operation is linearizable: an update replaces the value in one step, so a
//! concurrent reader sees the old or the new value, never an absent key.
//!
//! # Cursor iteration (unordered indexes)
//! The unordered variants cannot [`ConcurrentIndex::scan`] from a key, so they offer
//! [`ConcurrentIndex::scan_cursor`] instead: a `u64` cursor (0 starts; a returned 0 means
//! the iteration is over), usable as a Redis SCAN cursor as it is. Both split their keys
//! into [`CURSOR_SHARDS`] shards by hash, and a cursor is the number of the next shard to
//! visit; a call returns *whole* shards, one after the other, until it holds at least the
//! count hint of entries (so it may return more, as Redis's SCAN may). A key lives in
//! one shard for its whole life (the shard is a function of its bytes), so:
//! - a key present from the first call to the last is returned, exactly once (its shard
//!   is visited once, under the shard's lock or a snapshot of its sub-map);
//! - a key absent throughout is never returned;
//! - a key inserted or removed meanwhile may or may not be (never twice).
//!
//! A full iteration visits every shard once: O(keys + shards) in total whatever the count
//! hint (one shard costs O(its keys)). The shards:
//! - `hash`: dashmap's own shards (its `raw-api`: each shard is a lock and a hashbrown
//!   table; a shard is read whole under its read lock, which holds off that shard's
//!   writers for the copy), [`CURSOR_SHARDS`] of them instead of dashmap's default of 4x
//!   the CPU count (8 on 2 cores: 125,000 keys per shard at 1M keys). More shards cost
//!   a point operation nothing (the shard is picked by a shift of the hash dashmap
//!   computes anyway) and only a cache-padded lock each (32 KiB per index).
//! - `lockfree`: papaya has no shards nor a resumable iteration, so the index is
//!   [`CURSOR_SHARDS`] papaya maps; a key's map is picked by bits 32.. of a foldhash of
//!   the key, keyed per index (not papaya's own SipHash, whose bits pick the slot inside a
//!   map: keys sharing those bits would crowd one probe run). A map is read whole through
//!   its iterator (a snapshot-free walk: entries inserted or removed meanwhile may or may
//!   not be seen, as above). The extra hash costs a point operation a few nanoseconds;
//!   each map has its own epoch collector.
//!
//! At 1M keys a shard holds about 4,000 keys, so a page is at most a few thousand keys
//! (a key set built to hit one shard makes that shard's page as large as the set; the
//! per-index seeds make that hard to aim from outside).
//! Thread safety: all methods take `&self` and may be called from any thread.

use std::collections::BTreeMap;
use std::hash::BuildHasherDefault;
use std::ops::Bound;

use parking_lot::RwLock;

use super::skipindex::{EpochCell, SkipIndex, WordCell, WordValue};
use super::treekey::TreeKey;
use crate::api::error::{Error, Result};

/// The index variants, by name.
pub const INDEX_VARIANTS: &[&str] = &["btree", "hash", "lockfree"];

/// Shards of the unordered indexes, visited one by one by a cursor iteration (module doc):
/// a power of two.
pub const CURSOR_SHARDS: usize = 256;

/// One step of a cursor iteration ([`ConcurrentIndex::scan_cursor`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CursorPage<V> {
    /// The entries of the shards visited, in no particular order.
    pub entries: Vec<(Vec<u8>, V)>,
    /// The cursor of the next step; 0 when the iteration is over.
    pub next: u64,
}

impl<V> CursorPage<V> {
    /// The page of a cursor past the last shard: nothing, and over.
    fn done() -> Self {
        CursorPage {
            entries: Vec::new(),
            next: 0,
        }
    }
}

/// Visits whole shards from `cursor` (the next shard's number; 0 starts) until `count`
/// entries (at least 1) were collected or the shards ran out; `visit(i, out)` appends shard
/// `i`'s entries.
fn shard_walk<V>(
    cursor: u64,
    count: usize,
    shards: usize,
    mut visit: impl FnMut(usize, &mut Vec<(Vec<u8>, V)>),
) -> CursorPage<V> {
    let Some(mut i) = usize::try_from(cursor).ok().filter(|i| *i < shards) else {
        return CursorPage::done();
    };
    let mut entries = Vec::new();
    while i < shards && entries.len() < count.max(1) {
        visit(i, &mut entries);
        i += 1;
    }
    CursorPage {
        entries,
        next: if i < shards { i as u64 } else { 0 },
    }
}

/// A concurrent map from byte keys to `V`.
pub trait ConcurrentIndex<V>: Send + Sync {
    /// The value under `key`.
    fn get(&self, key: &[u8]) -> Option<V>;
    /// Calls `f` with the value under `key`, borrowed where the index can lend it (no
    /// clone); returns whether the key was there. The default clones through
    /// [`ConcurrentIndex::get`].
    fn get_with(&self, key: &[u8], f: &mut dyn FnMut(&V)) -> bool {
        match self.get(key) {
            Some(v) => {
                f(&v);
                true
            }
            None => false,
        }
    }
    /// Sets `key` to `value`; returns the previous value.
    fn insert(&self, key: &[u8], value: V) -> Option<V>;
    /// Removes `key`; returns the previous value.
    fn remove(&self, key: &[u8]) -> Option<V>;
    /// Atomically replaces the value under `key` with `f(current)` (`None` removes it);
    /// returns the previous value. `f` may be called more than once on lock-free indexes.
    fn compute(&self, key: &[u8], f: &mut dyn FnMut(Option<&V>) -> Option<V>) -> Option<V>;
    /// Up to `limit` entries with keys `>= start`, in key order;
    /// [`Error::Unsupported`] on an unordered index.
    fn scan(&self, start: &[u8], limit: usize) -> Result<Vec<(Vec<u8>, V)>>;
    /// Number of keys.
    fn len(&self) -> usize;
    /// True when there are no keys.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// True when [`ConcurrentIndex::scan`] is supported.
    fn is_ordered(&self) -> bool;
    /// One step of a cursor iteration (module doc, "Cursor iteration"): the entries of
    /// whole shards from `cursor` on (0 starts) until at least `count` entries (a hint;
    /// more may come, fewer only at the end), and the next cursor (0: over). A key
    /// present throughout an iteration is returned exactly once, a key absent throughout
    /// never. A cursor past the end returns nothing and 0. [`Error::Unsupported`] on an
    /// ordered index (which scans from a key instead), as this default does.
    fn scan_cursor(&self, cursor: u64, count: usize) -> Result<CursorPage<V>> {
        let _ = (cursor, count);
        Err(Error::Unsupported(
            "cursor iteration on an ordered index (scan from a key instead)".into(),
        ))
    }
    /// Calls `f` for every entry (in key order on an ordered index). Entries inserted or
    /// removed meanwhile may or may not be seen.
    fn for_each(&self, f: &mut dyn FnMut(&[u8], &V));
    /// Inserts `items`, whose keys must be strictly ascending: the same as inserting each,
    /// but an ordered index that is empty builds itself from them in one pass (recovery
    /// rebuilds indexes this way).
    fn insert_sorted(&self, items: &mut dyn Iterator<Item = (&[u8], V)>) {
        for (k, v) in items {
            self.insert(k, v);
        }
    }
}

/// Builds the index a variant name selects.
pub fn new_index<V>(variant: &str) -> Result<Box<dyn ConcurrentIndex<V>>>
where
    V: Clone + Send + Sync + 'static,
{
    match variant {
        "btree" => Ok(Box::new(SkipIndex::<V, EpochCell<V>>::default())),
        "hash" => Ok(Box::new(HashIndex::<V>::default())),
        "lockfree" => Ok(Box::new(LockFreeIndex::default())),
        other => Err(Error::invalid(format!(
            "no index named {other:?} (indexes: {})",
            INDEX_VARIANTS.join(", ")
        ))),
    }
}

/// [`new_index`] for one-word values (addresses): the `btree` variant holds each value in
/// an atomic word ([`WordCell`]), so an update allocates nothing and leaves nothing to
/// reclaim; the other variants are [`new_index`]'s.
pub fn new_word_index<V: WordValue>(variant: &str) -> Result<Box<dyn ConcurrentIndex<V>>> {
    match variant {
        "btree" => Ok(Box::new(SkipIndex::<V, WordCell<V>>::default())),
        other => new_index(other),
    }
}

/// An ordered index: a `BTreeMap` behind one reader-writer lock (every read takes the lock;
/// not a variant: `btree` is [`SkipIndex`]).
pub struct BTreeIndex<V> {
    map: RwLock<BTreeMap<TreeKey, V>>,
}

impl<V> Default for BTreeIndex<V> {
    fn default() -> Self {
        BTreeIndex {
            map: RwLock::new(BTreeMap::new()),
        }
    }
}

impl<V: Clone + Send + Sync> ConcurrentIndex<V> for BTreeIndex<V> {
    fn get(&self, key: &[u8]) -> Option<V> {
        self.map.read().get(&TreeKey::new(key)).cloned()
    }
    fn insert(&self, key: &[u8], value: V) -> Option<V> {
        self.map.write().insert(TreeKey::new(key), value)
    }
    fn remove(&self, key: &[u8]) -> Option<V> {
        self.map.write().remove(&TreeKey::new(key))
    }
    fn compute(&self, key: &[u8], f: &mut dyn FnMut(Option<&V>) -> Option<V>) -> Option<V> {
        use std::collections::btree_map::Entry;
        // One descent of the tree (the entry), not a lookup and then an insert: the key is
        // copied even when it is present, which costs far less than a second descent.
        let mut m = self.map.write();
        match m.entry(TreeKey::new(key)) {
            Entry::Occupied(mut e) => {
                let old = e.get().clone();
                match f(Some(&old)) {
                    Some(v) => {
                        e.insert(v);
                    }
                    None => {
                        e.remove();
                    }
                }
                Some(old)
            }
            Entry::Vacant(e) => {
                if let Some(v) = f(None) {
                    e.insert(v);
                }
                None
            }
        }
    }
    fn scan(&self, start: &[u8], limit: usize) -> Result<Vec<(Vec<u8>, V)>> {
        let m = self.map.read();
        Ok(
            m.range((Bound::Included(TreeKey::new(start)), Bound::Unbounded))
                .take(limit)
                .map(|(k, v)| (k.as_bytes().to_vec(), v.clone()))
                .collect(),
        )
    }
    fn len(&self) -> usize {
        self.map.read().len()
    }
    fn is_ordered(&self) -> bool {
        true
    }
    fn for_each(&self, f: &mut dyn FnMut(&[u8], &V)) {
        for (k, v) in self.map.read().iter() {
            f(k.as_bytes(), v);
        }
    }
    fn insert_sorted(&self, items: &mut dyn Iterator<Item = (&[u8], V)>) {
        let mut m = self.map.write();
        if m.is_empty() {
            // Sorted input: `collect` bulk-builds the tree without a search per key.
            *m = items.map(|(k, v)| (TreeKey::new(k), v)).collect();
        } else {
            for (k, v) in items {
                m.insert(TreeKey::new(k), v);
            }
        }
    }
}

type FastHasher = BuildHasherDefault<std::hash::DefaultHasher>;

/// An unordered index: dashmap's sharded hash map ([`CURSOR_SHARDS`] shards), hashing
/// keys with `S` (by default std's keyed SipHash; an engine may pick a faster keyed
/// hasher).
pub struct HashIndex<V, S = std::hash::RandomState> {
    map: dashmap::DashMap<Box<[u8]>, V, S>,
}

impl<V, S: std::hash::BuildHasher + Default + Clone> Default for HashIndex<V, S> {
    fn default() -> Self {
        HashIndex {
            map: dashmap::DashMap::with_hasher_and_shard_amount(S::default(), CURSOR_SHARDS),
        }
    }
}

impl<V, S> ConcurrentIndex<V> for HashIndex<V, S>
where
    V: Clone + Send + Sync,
    S: std::hash::BuildHasher + Clone + Send + Sync,
{
    fn get(&self, key: &[u8]) -> Option<V> {
        self.map.get(key).map(|r| r.value().clone())
    }
    fn get_with(&self, key: &[u8], f: &mut dyn FnMut(&V)) -> bool {
        self.map.get(key).map(|r| f(r.value())).is_some()
    }
    fn insert(&self, key: &[u8], value: V) -> Option<V> {
        if let Some(mut slot) = self.map.get_mut(key) {
            return Some(std::mem::replace(slot.value_mut(), value));
        }
        self.map.insert(key.into(), value)
    }
    fn remove(&self, key: &[u8]) -> Option<V> {
        self.map.remove(key).map(|(_, v)| v)
    }
    fn compute(&self, key: &[u8], f: &mut dyn FnMut(Option<&V>) -> Option<V>) -> Option<V> {
        use dashmap::mapref::entry::Entry;
        match self.map.entry(key.into()) {
            Entry::Occupied(mut e) => {
                let old = e.get().clone();
                match f(Some(&old)) {
                    Some(v) => {
                        e.insert(v);
                    }
                    None => {
                        e.remove();
                    }
                }
                Some(old)
            }
            Entry::Vacant(e) => {
                if let Some(v) = f(None) {
                    e.insert(v);
                }
                None
            }
        }
    }
    fn scan(&self, _start: &[u8], _limit: usize) -> Result<Vec<(Vec<u8>, V)>> {
        Err(Error::Unsupported(
            "scan on a hash index (use the btree variant)".into(),
        ))
    }
    fn len(&self) -> usize {
        self.map.len()
    }
    fn is_ordered(&self) -> bool {
        false
    }
    fn scan_cursor(&self, cursor: u64, count: usize) -> Result<CursorPage<V>> {
        let shards = self.map.shards();
        Ok(shard_walk(cursor, count, shards.len(), |i, out| {
            let Some(shard) = shards.get(i) else {
                return;
            };
            let table = shard.read();
            // SAFETY: the buckets are read while the shard's read lock is held (`table`),
            // so no writer can move or free them meanwhile; each reference ends before
            // the guard is dropped (the key and value are copied out).
            unsafe {
                out.reserve(table.len());
                for bucket in table.iter() {
                    let (k, v) = bucket.as_ref();
                    out.push((k.to_vec(), v.get().clone()));
                }
            }
        }))
    }
    fn for_each(&self, f: &mut dyn FnMut(&[u8], &V)) {
        for r in self.map.iter() {
            f(r.key(), r.value());
        }
    }
}

/// One shard of [`LockFreeIndex`].
type LockFreeShard<V> = papaya::HashMap<Box<[u8]>, V, FastHasher>;

/// An unordered lock-free index: [`CURSOR_SHARDS`] papaya hash maps, a key's map picked
/// by a keyed foldhash of the key (module doc, "Cursor iteration").
pub struct LockFreeIndex<V> {
    maps: Box<[LockFreeShard<V>]>,
    /// Picks a key's map.
    router: foldhash::fast::RandomState,
}

impl<V> Default for LockFreeIndex<V> {
    fn default() -> Self {
        LockFreeIndex {
            // NOTE: blocking resizes (every writer helps finish a resize before it goes on),
            // not papaya's default incremental ones: a table filled through `compute` (how
            // HeterMM installs every address) with incremental resizing was left degraded,
            // 4,000,000 8-byte keys taking 9x longer to load and 9x longer per get than the
            // same table filled through `insert`; with blocking resizes both match `insert`.
            maps: (0..CURSOR_SHARDS)
                .map(|_| {
                    papaya::HashMap::builder()
                        .hasher(FastHasher::default())
                        .resize_mode(papaya::ResizeMode::Blocking)
                        .build()
                })
                .collect(),
            router: foldhash::fast::RandomState::default(),
        }
    }
}

impl<V> LockFreeIndex<V> {
    /// The map `key` lives in (for its whole life: a function of its bytes).
    fn map(&self, key: &[u8]) -> &LockFreeShard<V> {
        use std::hash::BuildHasher;
        let i = (self.router.hash_one(key) >> 32) as usize & (CURSOR_SHARDS - 1);
        // NOTE: `maps` has CURSOR_SHARDS entries, so `i` is in range; indexing cannot fail.
        &self.maps[i]
    }
}

impl<V: Clone + Send + Sync> ConcurrentIndex<V> for LockFreeIndex<V> {
    fn get(&self, key: &[u8]) -> Option<V> {
        self.map(key).pin().get(key).cloned()
    }
    fn insert(&self, key: &[u8], value: V) -> Option<V> {
        self.map(key).pin().insert(key.into(), value).cloned()
    }
    fn remove(&self, key: &[u8]) -> Option<V> {
        self.map(key).pin().remove(key).cloned()
    }
    fn compute(&self, key: &[u8], f: &mut dyn FnMut(Option<&V>) -> Option<V>) -> Option<V> {
        use papaya::{Compute, Operation};
        // IMPORTANT: `f` is called once per round, on a snapshot of the entry, and its result
        // is applied only while the entry is still that snapshot (compared by the entry's
        // address, which papaya does not reuse while this guard is held); otherwise the
        // round starts again. Handing `f` to papaya's `compute` directly broke "the last
        // call counts": papaya keeps the result of a call for an absent key and applies it
        // later, without calling again, if the key is absent again — after `f` was called
        // for a present one. HeterMM took that later call's record for the installed one,
        // marked the really installed record as an orphan and withdrew its log entry (a live
        // get found no record; a crash lost an acknowledged write).
        let m = self.map(key).pin();
        loop {
            let snapshot = m.get(key);
            let at = snapshot.map(|v| v as *const V);
            let new = f(snapshot);
            let r = m.compute(key.into(), |cur| {
                if cur.map(|(_, v)| v as *const V) != at {
                    return Operation::Abort(true);
                }
                match (cur, &new) {
                    (_, Some(v)) => Operation::Insert(v.clone()),
                    (Some(_), None) => Operation::Remove,
                    (None, None) => Operation::Abort(false),
                }
            });
            match r {
                Compute::Aborted(true) => {}
                Compute::Inserted(_, _) | Compute::Aborted(false) => return None,
                Compute::Updated { old: (_, v), .. } | Compute::Removed(_, v) => {
                    return Some(v.clone());
                }
            }
        }
    }
    fn scan(&self, _start: &[u8], _limit: usize) -> Result<Vec<(Vec<u8>, V)>> {
        Err(Error::Unsupported(
            "scan on a hash index (use the btree variant)".into(),
        ))
    }
    fn len(&self) -> usize {
        self.maps.iter().map(papaya::HashMap::len).sum()
    }
    fn is_ordered(&self) -> bool {
        false
    }
    fn scan_cursor(&self, cursor: u64, count: usize) -> Result<CursorPage<V>> {
        Ok(shard_walk(cursor, count, self.maps.len(), |i, out| {
            if let Some(m) = self.maps.get(i) {
                let m = m.pin();
                out.reserve(m.len());
                for (k, v) in m.iter() {
                    out.push((k.to_vec(), v.clone()));
                }
            }
        }))
    }
    fn for_each(&self, f: &mut dyn FnMut(&[u8], &V)) {
        for m in self.maps.iter() {
            for (k, v) in m.pin().iter() {
                f(k, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression (hetermm:lockfree under racing writers: a get found no record, a crash lost
    /// an acknowledged put): `compute` on the lock-free index applied the result of an
    /// earlier call of `f` — papaya kept what `f` returned for the absent key and applied it
    /// when the key was absent again, after `f` had been called for a present one. Here
    /// racing writers insert the key after the first call's snapshot and remove it after
    /// the second's; the value installed must be the one the last call returned.
    #[test]
    fn lockfree_compute_installs_what_the_last_call_of_f_returned() {
        let idx = LockFreeIndex::<u64>::default();
        idx.insert(b"other", 7);
        let mut calls: Vec<Option<u64>> = Vec::new();
        idx.compute(b"k", &mut |cur| {
            let n = calls.len() as u64;
            calls.push(cur.copied());
            match n {
                0 => {
                    idx.insert(b"k", 100);
                }
                1 => {
                    idx.remove(b"k");
                }
                _ => {}
            }
            Some(n + 1)
        });
        assert_eq!(idx.get(b"k"), Some(calls.len() as u64), "calls: {calls:?}");
    }

    fn exercise(variant: &str) {
        exercise_index(&*new_index::<u64>(variant).unwrap());
    }

    fn exercise_index(idx: &dyn ConcurrentIndex<u64>) {
        assert!(idx.is_empty());
        assert_eq!(idx.insert(b"b", 2), None);
        assert_eq!(idx.insert(b"a", 1), None);
        assert_eq!(idx.insert(b"b", 3), Some(2));
        assert_eq!(idx.get(b"b"), Some(3));
        assert_eq!(idx.len(), 2);
        assert_eq!(idx.compute(b"a", &mut |v| v.map(|x| x + 10)), Some(1));
        assert_eq!(idx.get(b"a"), Some(11));
        assert_eq!(idx.compute(b"c", &mut |_| Some(7)), None);
        assert_eq!(idx.compute(b"c", &mut |_| None), Some(7));
        assert_eq!(idx.compute(b"zz", &mut |_| None), None);
        assert_eq!(idx.get(b"c"), None);
        assert_eq!(idx.remove(b"a"), Some(11));
        assert_eq!(idx.remove(b"a"), None);
        let mut seen = Vec::new();
        idx.for_each(&mut |k, v| seen.push((k.to_vec(), *v)));
        assert_eq!(seen, vec![(b"b".to_vec(), 3)]);
        if idx.is_ordered() {
            idx.insert(b"c", 4);
            let s = idx.scan(b"b", 10).unwrap();
            assert_eq!(s, vec![(b"b".to_vec(), 3), (b"c".to_vec(), 4)]);
            assert_eq!(idx.scan(b"bb", 1).unwrap(), vec![(b"c".to_vec(), 4)]);
        } else {
            assert!(matches!(idx.scan(b"", 1), Err(Error::Unsupported(_))));
        }
        if idx.is_ordered() {
            assert!(matches!(idx.scan_cursor(0, 1), Err(Error::Unsupported(_))));
        }
    }

    fn unordered() -> Vec<Box<dyn ConcurrentIndex<u64>>> {
        vec![
            Box::new(HashIndex::<u64>::default()),
            Box::new(LockFreeIndex::<u64>::default()),
        ]
    }

    /// Every entry of a full cursor iteration with count hint `count`, and the calls made.
    fn iterate(idx: &dyn ConcurrentIndex<u64>, count: usize) -> (Vec<(Vec<u8>, u64)>, usize) {
        let (mut out, mut cursor, mut calls) = (Vec::new(), 0, 0);
        loop {
            let page = idx.scan_cursor(cursor, count).unwrap();
            calls += 1;
            assert!(
                page.next == 0 || page.entries.len() >= count.max(1),
                "a page before the end holds at least the count hint"
            );
            out.extend(page.entries);
            cursor = page.next;
            if cursor == 0 {
                return (out, calls);
            }
        }
    }

    #[test]
    fn a_cursor_iteration_returns_every_key_once_whatever_the_count() {
        for idx in unordered() {
            let (none, calls) = iterate(&*idx, 10);
            assert!(none.is_empty());
            assert_eq!(calls, 1, "an empty index: one call, over");
            for i in 0..5000u64 {
                idx.insert(format!("key{i}").as_bytes(), i);
            }
            for count in [1, 10, 100, 1_000_000] {
                let (mut got, calls) = iterate(&*idx, count);
                got.sort();
                let mut want: Vec<_> = (0..5000u64)
                    .map(|i| (format!("key{i}").into_bytes(), i))
                    .collect();
                want.sort();
                assert_eq!(got, want, "count {count}");
                assert!(calls <= CURSOR_SHARDS, "count {count}: {calls} calls");
                if count >= 5000 {
                    assert_eq!(calls, 1);
                }
            }
            // A cursor past the end: nothing, over.
            for c in [CURSOR_SHARDS as u64, u64::MAX] {
                assert_eq!(idx.scan_cursor(c, 10).unwrap(), CursorPage::done());
            }
        }
    }

    /// Redis SCAN's guarantees under concurrent writers: a key present throughout is
    /// returned (exactly once: a key never moves between shards), a key removed before
    /// the iteration began never is.
    #[test]
    fn a_cursor_iteration_under_concurrent_writers_keeps_scans_guarantees() {
        for idx in unordered() {
            for i in 0..4000u64 {
                idx.insert(format!("stay{i}").as_bytes(), i);
                idx.insert(format!("gone{i}").as_bytes(), i);
            }
            for i in 0..4000u64 {
                idx.remove(format!("gone{i}").as_bytes());
            }
            let stop = std::sync::atomic::AtomicBool::new(false);
            std::thread::scope(|s| {
                let w = &idx;
                let stop = &stop;
                s.spawn(move || {
                    let mut i = 0u64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let k = format!("churn{}", i % 3000);
                        if i.is_multiple_of(2) {
                            w.insert(k.as_bytes(), i);
                        } else {
                            w.remove(k.as_bytes());
                        }
                        // Updates of present keys must not hide them either.
                        w.insert(format!("stay{}", i % 4000).as_bytes(), i);
                        i += 1;
                    }
                });
                for count in [1, 64, 100_000] {
                    for _ in 0..3 {
                        let (got, _) = iterate(&**w, count);
                        let mut stay = std::collections::HashMap::new();
                        for (k, _) in &got {
                            assert!(!k.starts_with(b"gone"), "a removed key came back");
                            if k.starts_with(b"stay") {
                                *stay.entry(k.clone()).or_insert(0) += 1;
                            }
                        }
                        assert_eq!(stay.len(), 4000, "count {count}: a present key missed");
                        assert!(stay.values().all(|n| *n == 1), "a key returned twice");
                    }
                }
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
            });
        }
    }

    #[test]
    fn insert_sorted_into_an_empty_or_a_full_index_is_inserting_each() {
        for v in INDEX_VARIANTS {
            let keys: Vec<Vec<u8>> = (0u32..500)
                .map(|i| format!("k{i:05}").into_bytes())
                .collect();
            let empty = new_index::<u64>(v).unwrap();
            empty.insert_sorted(&mut keys.iter().enumerate().map(|(i, k)| (&k[..], i as u64)));
            assert_eq!(empty.len(), 500, "{v}");
            assert_eq!(empty.get(b"k00007"), Some(7), "{v}");
            let full = new_index::<u64>(v).unwrap();
            full.insert(b"k00007", 99);
            full.insert(b"zzz", 1);
            full.insert_sorted(&mut keys.iter().enumerate().map(|(i, k)| (&k[..], i as u64)));
            assert_eq!(full.len(), 501, "{v}");
            assert_eq!(full.get(b"k00007"), Some(7), "{v}");
            if empty.is_ordered() {
                assert_eq!(empty.scan(b"k00498", 5).unwrap().len(), 2);
            }
        }
    }

    #[test]
    fn every_variant_behaves_as_a_map() {
        for v in INDEX_VARIANTS {
            exercise(v);
        }
        exercise_index(&BTreeIndex::default());
        assert!(new_index::<u64>("nope").is_err());
    }

    #[test]
    fn concurrent_updates_never_hide_a_key() {
        for variant in INDEX_VARIANTS {
            let idx: std::sync::Arc<dyn ConcurrentIndex<u64>> =
                new_index::<u64>(variant).unwrap().into();
            idx.insert(b"k", 0);
            std::thread::scope(|s| {
                let w = idx.clone();
                s.spawn(move || {
                    for i in 1..20_000 {
                        w.insert(b"k", i);
                    }
                });
                for _ in 0..20_000 {
                    assert!(
                        idx.get(b"k").is_some(),
                        "{variant}: key vanished during update"
                    );
                }
            });
        }
    }
}
