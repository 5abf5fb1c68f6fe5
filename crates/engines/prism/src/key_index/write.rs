//! The write paths of the key index: insert, remove and the leaf split (PACTree's data
//! node split, made crash-consistent without a log).
//!
//! Every write locks exactly one leaf (the one the search layer names for the key) and
//! re-checks, once locked, that the leaf has not split since it was found; a split locks
//! only the leaf it splits (the new right sibling is unreachable until linked, and is not
//! in the search layer — so no other writer can touch it — until the split is complete).
//!
//! Split protocol (FORMAT.md § Crash consistency, "split"), with the left leaf L locked:
//! 1. copy the upper half of L's live entries (by key) into a fresh node R whose anchor is
//!    the smallest moved key and whose next is L's next; persist R whole;
//! 2. IMPORTANT: L.next = R (one atomic store), persist — the commit point;
//! 3. clear the moved bits in L's bitmap (one atomic store), persist;
//! 4. insert R into the search layer, bump L's split count, unlock L.
//!
//! A crash before 2 leaves R unreachable (freed at open). A crash between 2 and 3 leaves
//! the moved keys live in both L and R; recovery clears them in L (every live key of a
//! leaf must be below the next leaf's anchor). R's entries share their key blobs with L's
//! moved entries; no writer can reach R before step 4, so those blobs are intact whenever
//! recovery needs to read L's leftovers. R's anchor gets its own copy of a blob key.
//!
//! Thread safety: see `leaf.rs` (one writer per leaf) and `search_layer.rs`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tierkv_core::{Error, Result};

use super::PersistentKeyIndex;
use super::format::{Entry, KeyRef, NodeHeader, encode_blob, fingerprint, full_bitmap};
use super::leaf::{Leaf, LeafGuard};
use super::node::{LiveEntry, NodeRef, write_new_node};

/// What a write step decided, with its leaf locked.
enum Step<T> {
    /// The write is over.
    Done(T),
    /// Find the leaf again and retry (the leaf split).
    Retry,
}

/// A locked leaf that covers the key being written.
struct Locked<'a, 'g> {
    guard: &'a LeafGuard<'g>,
    node: NodeRef<'a>,
    header: NodeHeader,
}

impl PersistentKeyIndex {
    /// Runs `step` with the leaf covering `key` locked, and with its node and header, until
    /// it returns [`Step::Done`]. A leaf that split between the search-layer lookup and the
    /// lock is not the right one any more; the lookup is then repeated.
    fn with_locked_leaf<T>(
        &self,
        key: &[u8],
        mut step: impl FnMut(&Locked<'_, '_>) -> Result<Step<T>>,
    ) -> Result<T> {
        let pin = crossbeam_epoch::pin();
        loop {
            let found = self.find_leaf(key, &pin)?;
            let guard = found.leaf.lock();
            if !found.still_covers() {
                continue;
            }
            let node = NodeRef::new(&self.pool, found.leaf.off);
            let header = node.header()?;
            if let Step::Done(result) = step(&Locked {
                guard: &guard,
                node,
                header,
            })? {
                return Ok(result);
            }
        }
    }

    pub(super) fn insert_impl(&self, key: &[u8], slot: u64) -> Result<Result<(), u64>> {
        self.with_locked_leaf(key, |leaf| {
            let Locked {
                guard,
                node,
                header,
            } = leaf;
            if let Some((_, entry)) = node.find(header, key)? {
                return Ok(Step::Done(Err(entry.value)));
            }
            let free = !header.bitmap & full_bitmap(header.fanout);
            if free == 0 {
                self.split(guard, node, header)?;
                return Ok(Step::Retry);
            }
            self.insert_into(node, header, free.trailing_zeros() as usize, key, slot)?;
            self.count.fetch_add(1, Ordering::Relaxed);
            Ok(Step::Done(Ok(())))
        })
    }

    /// Writes `key -> slot` into free slot `at` of the locked leaf `node`, then commits it.
    fn insert_into(
        &self,
        node: &NodeRef<'_>,
        header: &NodeHeader,
        at: usize,
        key: &[u8],
        slot: u64,
    ) -> Result<()> {
        let key_ref = self.store_key(key)?;
        let written = node
            .write_entry(
                at,
                &Entry {
                    value: slot,
                    key: key_ref,
                },
            )
            .and_then(|()| node.write_fingerprint(at, fingerprint(key)));
        if let Err(e) = written {
            self.release_key(&key_ref);
            return Err(e);
        }
        // IMPORTANT: commit point; the entry and its blob are durable already.
        node.publish(header.bitmap | 1 << at)
    }

    pub(super) fn remove_impl(&self, key: &[u8]) -> Result<Option<u64>> {
        crate::faults::fail_at(crate::faults::Point::IndexRemove)?;
        self.with_locked_leaf(key, |Locked { node, header, .. }| {
            let Some((at, entry)) = node.find(header, key)? else {
                return Ok(Step::Done(None));
            };
            // IMPORTANT: commit point; the blob is reusable only once the bit is durably clear.
            node.retire(header.bitmap & !(1 << at))?;
            self.release_key(&entry.key);
            self.count.fetch_sub(1, Ordering::Relaxed);
            Ok(Step::Done(Some(entry.value)))
        })
    }

    /// A durable reference to `key`: inline, or a freshly written and persisted blob.
    fn store_key(&self, key: &[u8]) -> Result<KeyRef> {
        if let Some(inline) = KeyRef::inline(key) {
            return Ok(inline);
        }
        let len = u16::try_from(key.len()).map_err(|_| Error::invalid("key too long"))?;
        let off = self.heap.alloc_blob(key.len())?;
        if let Err(e) = self.pool.write_persist(off, &encode_blob(key)) {
            self.heap.free_blob(off, key.len());
            return Err(e);
        }
        Ok(KeyRef::Blob { len, off })
    }

    /// Returns the blob of a key reference that is durably unreferenced.
    fn release_key(&self, key: &KeyRef) {
        if let Some(off) = key.blob() {
            self.heap.free_blob(off, key.len());
        }
    }

    /// Splits the full, locked leaf `node` (see the module doc).
    fn split(&self, guard: &LeafGuard<'_>, node: &NodeRef<'_>, header: &NodeHeader) -> Result<()> {
        let mut live = node.live_entries(header)?;
        live.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        let upper = live.split_off(live.len() / 2);
        let first = upper
            .first()
            .ok_or_else(|| Error::invalid("split of a leaf with fewer than two keys"))?;
        let split_key = first.key.clone();
        let right_off = self.heap.alloc_node()?;
        if let Err(e) = self.write_right(right_off, header, &split_key, &upper) {
            self.heap.free_node(right_off);
            return Err(e);
        }
        // IMPORTANT: commit point of the split: R becomes reachable.
        node.link_next(right_off)?;
        let moved = upper.iter().fold(0u64, |m, e| m | 1 << e.slot);
        let retired = node.retire(header.bitmap & !moved);
        // The moved keys are gone from L in memory even if that persist failed, so R must
        // become visible regardless (the failure poisons the index; recovery repairs L).
        self.layer
            .insert(Arc::new(Leaf::new(right_off, split_key.into_boxed_slice())));
        guard.note_split();
        self.splits.fetch_add(1, Ordering::Relaxed);
        retired
    }

    /// Writes and persists the new right sibling at `off`: `upper` packed into slots 0..,
    /// anchored at `split_key`, linked to L's old next.
    fn write_right(
        &self,
        off: u64,
        left: &NodeHeader,
        split_key: &[u8],
        upper: &[LiveEntry],
    ) -> Result<()> {
        let mut header = NodeHeader::new(left.fanout, left.next);
        let mut entries = Vec::with_capacity(upper.len());
        for (i, e) in upper.iter().enumerate() {
            header.bitmap |= 1 << i;
            if let Some(fp) = header.fps.get_mut(i) {
                *fp = fingerprint(&e.key);
            }
            entries.push((i, e.entry));
        }
        let anchor = Entry {
            value: 0,
            key: self.store_key(split_key)?,
        };
        let written = write_new_node(&self.pool, off, &header, &anchor, &entries);
        if written.is_err() {
            self.release_key(&anchor.key);
        }
        written
    }
}
