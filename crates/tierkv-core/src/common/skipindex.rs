//! The `btree` index variant: a concurrent ordered map whose reads take no lock at all.
//!
//! HeterMM (§3, Fig. 4) plugs a concurrent B+-tree into its DRAM index slot; the `dram`
//! engine (the test oracle) uses the same variant. This is not a B+-tree but a lock-free
//! skip list (`crossbeam-skiplist`, epoch reclamation) with one small cell per key; the
//! variant keeps the name `btree` because users and tests pass it.
//!
//! Why this and not the alternatives: a hand-written B+-tree with optimistic lock coupling
//! (Leis et al.) would search faster (fewer cache misses per lookup than a skip list's
//! pointer chase) but is a large body of `unsafe` code to prove; `scc::TreeIndex` is a
//! B+-tree with lock-free reads, but its API changes between minor versions and it has no
//! per-key update either. `crossbeam-skiplist` is maintained with the crossbeam epoch
//! collector this workspace already uses, its `base::SkipList` lets a read run under the
//! caller's epoch guard (no reference-count write on the node, so hot keys do not bounce a
//! cache line between readers), and it orders keys by `Ord`, so the 16-byte inline
//! [`TreeKey`] still compares as one 128-bit integer.
//!
//! # The cell
//! A skip-list node's value is fixed once linked, so each node holds a [`Slot`]: a writer
//! lock, a `dead` flag and an epoch-protected pointer to the current value. States:
//! *vacant* (pointer null, not dead: a node just linked by a writer that has not installed
//! its value yet), *live* (pointer set) and *dead* (pointer null, dead: unlinked or being
//! unlinked, never live again).
//!
//! Invariants and why each operation is linearizable:
//! 1. Every change of a slot happens under its writer lock, and a writer that finds the slot
//!    dead searches the list again (the dead node is unlinked before the lock is released,
//!    so the search finds a live node or none). Hence an update never lands in an unlinked
//!    node, and `compute` on one key is atomic: `f` sees the value it replaces.
//! 2. An update swaps the pointer in one store (linearization point); the node stays
//!    linked, so a concurrent `get` sees the old or the new value, never an absent key.
//! 3. A removal sets `dead`, then nulls the pointer (release: a reader that sees the null
//!    sees `dead`; linearization point), then unlinks the node, all under the lock. A reader
//!    that finds a null pointer in a dead slot searches again; in a vacant slot the key is
//!    absent at that moment, which is the answer.
//! 4. A replaced or removed value is freed through the epoch (`defer_destroy`), after every
//!    reader that could have loaded it has unpinned.
//! 5. `len` counts live slots: +1 on vacant → live, −1 on live → dead, under the slot's lock,
//!    so it is exact whenever no write is in flight.
//!
//! `scan` and `for_each` walk the list in key order under one epoch guard and take each live
//! slot's value at the moment they pass it: weakly consistent across keys (a write racing the
//! walk may or may not be seen), but every value returned is one its key held.
//!
//! `compute` calls `f` exactly once, under the key's writer lock and pinned in the crossbeam
//! epoch (a long `f` delays reclamation of replaced values, nothing else). `f` must not touch
//! the same key of the same index (the lock is not re-entrant).
//!
//! Thread safety: all methods take `&self` and may be called from any thread.
#![deny(unsafe_code)]

use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crossbeam::epoch::{self, Atomic, Guard, Owned, Shared};
use crossbeam_skiplist::base::SkipList;
use parking_lot::Mutex;

use super::index::ConcurrentIndex;
use super::treekey::TreeKey;
use crate::api::error::Result;

/// The cell a skip-list node holds for one key (module doc, "The cell").
struct Slot<V> {
    /// Serializes the writers of this key.
    writer: Mutex<()>,
    /// Set (under `writer`, before the value is nulled) when the node leaves the list.
    dead: AtomicBool,
    /// The current value; null when vacant or dead.
    value: Atomic<V>,
}

impl<V> Slot<V> {
    fn vacant() -> Slot<V> {
        Slot {
            writer: Mutex::new(()),
            dead: AtomicBool::new(false),
            value: Atomic::null(),
        }
    }

    /// The value as a reader pinned in `guard` sees it.
    #[expect(unsafe_code, reason = "dereferences an epoch-protected pointer")]
    fn load<'g>(&self, guard: &'g Guard) -> Option<&'g V> {
        // SAFETY: a non-null pointer here came from `Owned::new`; it is replaced or nulled
        // only under `writer`, and the old pointee is freed by `defer_destroy`, i.e. after
        // every guard pinned before the swap — `guard` is pinned now, so the pointee lives
        // at least as long as `guard`.
        unsafe { self.value.load(Ordering::Acquire, guard).as_ref() }
    }

    /// Replaces the value with `new` (null for none) under the writer lock; returns whether
    /// there was one. The old value is freed once no reader can hold it.
    #[expect(unsafe_code, reason = "defers freeing the replaced value to the epoch")]
    fn swap(&self, new: Shared<'_, V>, guard: &Guard) -> bool {
        let prev = self.value.swap(new, Ordering::AcqRel, guard);
        if prev.is_null() {
            return false;
        }
        // SAFETY: `prev` was just unlinked from the slot by this swap (made under the writer
        // lock, so no other writer saw it unlinked too), so it is freed exactly once; readers
        // that loaded it are pinned and keep it alive until they unpin.
        unsafe { guard.defer_destroy(prev) };
        true
    }
}

impl<V> Drop for Slot<V> {
    #[expect(unsafe_code, reason = "frees the value of a node no thread can reach")]
    fn drop(&mut self) {
        // SAFETY: the slot is dropped when the skip list finalizes its node (or drops the
        // list): no thread holds a reference to the node any more, so nothing else can
        // load, swap or free the pointer.
        let v = unsafe { self.value.load(Ordering::Relaxed, epoch::unprotected()) };
        if !v.is_null() {
            // SAFETY: the pointer came from `Owned::new` and is still held by this slot (a
            // swapped-out value is no longer here), so this is its only owner.
            drop(unsafe { v.into_owned() });
        }
    }
}

/// The `btree` variant: a lock-free skip list of per-key cells (module doc).
pub struct SkipIndex<V> {
    list: SkipList<TreeKey, Slot<V>>,
    /// Live keys (invariant 5).
    live: AtomicUsize,
}

impl<V> Default for SkipIndex<V> {
    fn default() -> Self {
        SkipIndex {
            list: SkipList::new(epoch::default_collector().clone()),
            live: AtomicUsize::new(0),
        }
    }
}

impl<V: Clone + Send + Sync + 'static> SkipIndex<V> {
    /// Runs one update of `slot` under its writer lock: `f(current)` becomes the value
    /// (`None` kills the slot and calls `unlink`). Returns the previous value, or `None`
    /// when the slot was already dead (the caller searches again).
    fn update(
        &self,
        slot: &Slot<V>,
        unlink: &dyn Fn(),
        f: &mut dyn FnMut(Option<&V>) -> Option<V>,
        guard: &Guard,
    ) -> Option<Option<V>> {
        let _w = slot.writer.lock();
        if slot.dead.load(Ordering::Relaxed) {
            return None;
        }
        let cur = slot.load(guard);
        let old = cur.cloned();
        match f(cur) {
            Some(v) => {
                if !slot.swap(Owned::new(v).into_shared(guard), guard) {
                    self.live.fetch_add(1, Ordering::Relaxed);
                }
            }
            None => {
                // IMPORTANT: dead before the value goes (invariant 3): the swap releases it.
                slot.dead.store(true, Ordering::Relaxed);
                if slot.swap(Shared::null(), guard) {
                    self.live.fetch_sub(1, Ordering::Relaxed);
                }
                unlink();
            }
        }
        Some(old)
    }

    /// `compute` pinned in `guard`; `look_first` searches for an existing node before
    /// linking a vacant one (false when the key is most likely new).
    fn compute_in(
        &self,
        key: TreeKey,
        f: &mut dyn FnMut(Option<&V>) -> Option<V>,
        guard: &Guard,
        look_first: bool,
    ) -> Option<V> {
        loop {
            if look_first && let Some(e) = self.list.get(&key, guard) {
                let unlink = || {
                    e.remove();
                };
                if let Some(old) = self.update(e.value(), &unlink, f, guard) {
                    return old;
                }
                std::hint::spin_loop();
                continue;
            }
            let e = self
                .list
                .get_or_insert_with(key.clone(), Slot::vacant, guard);
            let unlink = || {
                e.remove(guard);
            };
            let done = self.update(e.value(), &unlink, f, guard);
            e.release(guard);
            match done {
                Some(old) => return old,
                None => std::hint::spin_loop(),
            }
        }
    }

    /// Calls `f` on every live entry with a key `>= start`, in key order, until it returns
    /// false.
    fn walk(&self, start: Bound<TreeKey>, f: &mut dyn FnMut(&[u8], &V) -> bool) {
        let guard = epoch::pin();
        for e in self.list.range((start, Bound::Unbounded), &guard) {
            if let Some(v) = e.value().load(&guard)
                && !f(e.key().as_bytes(), v)
            {
                return;
            }
        }
    }
}

impl<V: Clone + Send + Sync + 'static> ConcurrentIndex<V> for SkipIndex<V> {
    fn get(&self, key: &[u8]) -> Option<V> {
        let key = TreeKey::new(key);
        let guard = epoch::pin();
        loop {
            let slot = self.list.get(&key, &guard)?;
            if let Some(v) = slot.value().load(&guard) {
                return Some(v.clone());
            }
            if !slot.value().dead.load(Ordering::Relaxed) {
                return None; // vacant: not inserted yet
            }
            // Dead: its remover unlinks it before it unlocks; a live node may follow.
            std::hint::spin_loop();
        }
    }

    fn insert(&self, key: &[u8], value: V) -> Option<V> {
        let mut value = Some(value);
        self.compute_in(
            TreeKey::new(key),
            &mut |_| value.take(),
            &epoch::pin(),
            true,
        )
    }

    fn remove(&self, key: &[u8]) -> Option<V> {
        let key = TreeKey::new(key);
        let guard = epoch::pin();
        loop {
            // No node, no key: nothing to link and unlink.
            let e = self.list.get(&key, &guard)?;
            let unlink = || {
                e.remove();
            };
            if let Some(old) = self.update(e.value(), &unlink, &mut |_| None, &guard) {
                return old;
            }
            std::hint::spin_loop();
        }
    }

    fn compute(&self, key: &[u8], f: &mut dyn FnMut(Option<&V>) -> Option<V>) -> Option<V> {
        self.compute_in(TreeKey::new(key), f, &epoch::pin(), true)
    }

    fn scan(&self, start: &[u8], limit: usize) -> Result<Vec<(Vec<u8>, V)>> {
        let mut out = Vec::new();
        if limit > 0 {
            self.walk(Bound::Included(TreeKey::new(start)), &mut |k, v| {
                out.push((k.to_vec(), v.clone()));
                out.len() < limit
            });
        }
        Ok(out)
    }

    fn len(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    fn is_ordered(&self) -> bool {
        true
    }

    fn for_each(&self, f: &mut dyn FnMut(&[u8], &V)) {
        self.walk(Bound::Unbounded, &mut |k, v| {
            f(k, v);
            true
        });
    }

    fn insert_sorted(&self, items: &mut dyn Iterator<Item = (&[u8], V)>) {
        // NOTE: no bulk build in a skip list; an empty index links each key without the
        // lookup first (one search per key), and the guard is re-pinned now and then so
        // that a long build does not hold back reclamation.
        let look_first = !self.list.is_empty();
        let mut guard = epoch::pin();
        for (n, (k, v)) in items.enumerate() {
            let mut v = Some(v);
            self.compute_in(TreeKey::new(k), &mut |_| v.take(), &guard, look_first);
            if n % 1024 == 1023 {
                guard.repin();
            }
        }
    }
}

#[cfg(test)]
mod tests;
