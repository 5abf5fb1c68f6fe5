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
//! is not a variant; the `focus` engine uses it directly.
//!
//! Every operation is linearizable: an update replaces the value in one step, so a
//! concurrent reader sees the old or the new value, never an absent key.
//! Thread safety: all methods take `&self` and may be called from any thread.

use std::collections::BTreeMap;
use std::hash::BuildHasherDefault;
use std::ops::Bound;

use parking_lot::RwLock;

use super::skipindex::SkipIndex;
use super::treekey::TreeKey;
use crate::api::error::{Error, Result};

/// The index variants, by name.
pub const INDEX_VARIANTS: &[&str] = &["btree", "hash", "lockfree"];

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
        "btree" => Ok(Box::new(SkipIndex::default())),
        "hash" => Ok(Box::new(HashIndex::<V>::default())),
        "lockfree" => Ok(Box::new(LockFreeIndex::default())),
        other => Err(Error::invalid(format!(
            "no index named {other:?} (indexes: {})",
            INDEX_VARIANTS.join(", ")
        ))),
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

/// An unordered index: dashmap's sharded hash map, hashing keys with `S` (by default
/// std's keyed SipHash; an engine may pick a faster keyed hasher).
pub struct HashIndex<V, S = std::hash::RandomState> {
    map: dashmap::DashMap<Box<[u8]>, V, S>,
}

impl<V, S: std::hash::BuildHasher + Default + Clone> Default for HashIndex<V, S> {
    fn default() -> Self {
        HashIndex {
            map: dashmap::DashMap::with_hasher(S::default()),
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
    fn for_each(&self, f: &mut dyn FnMut(&[u8], &V)) {
        for r in self.map.iter() {
            f(r.key(), r.value());
        }
    }
}

/// An unordered lock-free index: papaya's hash map.
pub struct LockFreeIndex<V> {
    map: papaya::HashMap<Box<[u8]>, V, FastHasher>,
}

impl<V> Default for LockFreeIndex<V> {
    fn default() -> Self {
        LockFreeIndex {
            // NOTE: blocking resizes (every writer helps finish a resize before it goes on),
            // not papaya's default incremental ones: a table filled through `compute` (how
            // HeterMM installs every address) with incremental resizing was left degraded,
            // 4,000,000 8-byte keys taking 9x longer to load and 9x longer per get than the
            // same table filled through `insert`; with blocking resizes both match `insert`.
            map: papaya::HashMap::builder()
                .hasher(FastHasher::default())
                .resize_mode(papaya::ResizeMode::Blocking)
                .build(),
        }
    }
}

impl<V: Clone + Send + Sync> ConcurrentIndex<V> for LockFreeIndex<V> {
    fn get(&self, key: &[u8]) -> Option<V> {
        self.map.pin().get(key).cloned()
    }
    fn insert(&self, key: &[u8], value: V) -> Option<V> {
        self.map.pin().insert(key.into(), value).cloned()
    }
    fn remove(&self, key: &[u8]) -> Option<V> {
        self.map.pin().remove(key).cloned()
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
        let m = self.map.pin();
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
        self.map.len()
    }
    fn is_ordered(&self) -> bool {
        false
    }
    fn for_each(&self, f: &mut dyn FnMut(&[u8], &V)) {
        for (k, v) in self.map.pin().iter() {
            f(k, v);
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
