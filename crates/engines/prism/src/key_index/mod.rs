//! # Persistent Key Index (PRISM §4.1, §6; PACTree, SOSP '21)
//!
//! A concurrent, crash-consistent range index from byte keys (1 B to 1 KiB) to HSIT slot
//! numbers (`u64`). Its persistent part lives on the pmem pool, so recovery rebuilds it
//! without reading flash (PRISM §5.5); its DRAM part is rebuilt from pmem at open.
//!
//! In the spirit of PACTree (DESIGN §5):
//! - **Leaf layer on pmem** (`format.rs`, `node.rs`): a singly linked list of leaf nodes in
//!   key order, starting at the *head leaf* whose offset is the pool root word the index
//!   was created at. A leaf holds up to `fanout` (default 64) unsorted entries, a 64-bit
//!   validity bitmap (the commit word), one-byte fingerprints and its *anchor* (the
//!   smallest key it may hold, fixed for its life). Keys up to 40 bytes are inline; longer
//!   ones live in key blobs.
//! - **Search layer in DRAM** (`search_layer.rs`): anchor -> leaf in a lock-free skip
//!   list, updated synchronously by the split that creates a leaf; a lookup writes no
//!   shared cache line.
//! - **Version locks in DRAM** (`leaf.rs`): writers lock one leaf; readers validate
//!   optimistically (seqlock) and never block writers of other leaves.
//! - **Slot heap** (`heap.rs`): nodes and blobs are slots of allocator chunks the index
//!   owns; reachability from the leaf list decides what is live at open.
//! - **Splits** (`write.rs`), **scans and recovery partitions** (`scan.rs`), **recovery**
//!   (`recovery.rs`) and **`check`** (`check.rs`).
//! - **Room for a batch's inserts** (`reserve.rs`): a bound on the slots N inserts may
//!   allocate (splits and split anchors per target leaf), reserved before a batch commits.
//!
//! Deviations from PACTree, and why: the search layer is a lock-free skip list updated
//! inside the split rather than a lock-free trie updated by a background thread (one less
//! thread, no "search layer lags behind" case for readers); version locks
//! are in DRAM, not on pmem (no pmem write per lock, nothing to reset after a crash); no
//! merges while the store is open (a leaf thinned by deletes stays on the list and is
//! reused by later inserts in its key range); recovery merges runs of sparse adjacent
//! leaves, so that space freed by deletes serves any key after a reopen (issue 23).
//!
//! Crash consistency (argued case by case in `FORMAT.md`): an insert persists its entry
//! (and blob), then sets its bitmap bit with one atomic 8-byte store and persists it; a
//! remove clears the bit and persists it; a split persists the new leaf, then links it
//! with one atomic 8-byte store of the left leaf's `next` (its commit point), then clears
//! the moved bits in the left leaf. Recovery clears, in every leaf, the live keys that are
//! not below the next leaf's anchor (the leftovers of a split interrupted after its
//! commit), rebuilds fingerprints, frees the unreachable slots and chunks, and rebuilds the
//! search layer.
//!
//! Thread safety: [`PersistentKeyIndex`] is `Send + Sync`; every method takes `&self`.
//! After a failed write to pmem (a failed persist, corrupt bytes) the index refuses further
//! writes with [`Error::Poisoned`] until it is reopened (STYLE §5). `check` is meant for a
//! quiescent index.
//!
//! Glossary (PACTree / PRISM names): *leaf* = PACTree data node; *anchor* = the low key of
//! a leaf; *search layer* = PACTree's DRAM index over anchors; *slot* (of a leaf) = one
//! entry position; *HSIT slot* = the value this index stores.

#![forbid(unsafe_code)]

mod check;
pub mod format;
mod heap;
mod leaf;
mod node;
mod recovery;
mod reserve;
mod scan;
mod search_layer;
mod write;

#[cfg(test)]
mod format_tests;
#[cfg(test)]
mod reserve_tests;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use crossbeam_epoch::Guard;
use tierkv_core::media::pmem::{PmemAllocator, PmemPool};
use tierkv_core::{Error, Result, Tier};

pub use format::{MAX_FANOUT, MAX_KEY_LEN, MIN_FANOUT, decode_node};
pub use heap::chunk_tag;

use format::{Entry, KeyRef, NodeHeader, node_size};
use heap::SlotHeap;
use leaf::Leaf;
use node::{NodeRef, write_new_node};
use search_layer::{Found, SearchLayer};

/// Options of a new index (stored in its nodes; `open` reads them back).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyIndexOptions {
    /// Entries per leaf, [`MIN_FANOUT`]..=[`MAX_FANOUT`]; default 64 (PACTree's data
    /// node size). Tests use small values to split often.
    pub fanout: usize,
}

impl Default for KeyIndexOptions {
    fn default() -> Self {
        KeyIndexOptions { fanout: MAX_FANOUT }
    }
}

/// A half-open key range `[start, end)` (`end = None`: to the last key), as handed out by
/// [`PersistentKeyIndex::partitions`] for parallel recovery (PRISM §5.5).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct KeyRange {
    /// The first key in the range (inclusive).
    pub start: Vec<u8>,
    /// The first key after the range (exclusive), or `None` for no upper bound.
    pub end: Option<Vec<u8>>,
}

impl KeyRange {
    /// Every key.
    pub fn all() -> KeyRange {
        KeyRange::default()
    }

    /// True if `key` is in the range.
    pub fn contains(&self, key: &[u8]) -> bool {
        key >= self.start.as_slice() && self.end.as_deref().is_none_or(|end| key < end)
    }
}

/// Counters of the index.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyIndexStats {
    /// Keys in the index.
    pub keys: usize,
    /// Leaves on the list.
    pub leaves: usize,
    /// Splits since open.
    pub splits: u64,
    /// Pmem bytes held (whole allocator chunks).
    pub pmem_bytes: u64,
}

/// What the last `open` found and repaired (all zero after `create`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Live entries cleared from leaves because a split copied them to the next leaf and
    /// was interrupted before clearing them (FORMAT.md § Crash analysis).
    pub split_leftovers_cleared: usize,
    /// Fingerprints rewritten because a crash left them stale.
    pub fingerprints_rebuilt: usize,
    /// Sparse leaves merged into their left neighbour (and freed).
    pub leaves_merged: usize,
    /// Owned chunks returned to the allocator because nothing live was in them.
    pub chunks_freed: usize,
    /// How long `open` took.
    pub duration: std::time::Duration,
}

/// The Persistent Key Index: key -> HSIT slot, on pmem, concurrent, crash-consistent.
pub struct PersistentKeyIndex {
    pool: Arc<PmemPool>,
    heap: SlotHeap,
    layer: SearchLayer,
    /// Pool root word holding the head leaf's offset.
    root: usize,
    /// Offset of the head leaf.
    head: u64,
    fanout: usize,
    count: AtomicUsize,
    splits: AtomicU64,
    poisoned: AtomicBool,
    recovery: RecoveryReport,
}

impl PersistentKeyIndex {
    /// Creates an empty index with default options whose head leaf is recorded in pool
    /// root word `root`. Fails if that root word is already in use.
    pub fn create(pool: Arc<PmemPool>, alloc: Arc<PmemAllocator>, root: usize) -> Result<Self> {
        Self::create_with(pool, alloc, root, KeyIndexOptions::default())
    }

    /// [`PersistentKeyIndex::create`] with explicit options.
    pub fn create_with(
        pool: Arc<PmemPool>,
        alloc: Arc<PmemAllocator>,
        root: usize,
        options: KeyIndexOptions,
    ) -> Result<Self> {
        let fanout = options.fanout;
        if !(MIN_FANOUT..=MAX_FANOUT).contains(&fanout) {
            return Err(Error::invalid(format!(
                "key index fanout {fanout} (allowed {MIN_FANOUT}..={MAX_FANOUT})"
            )));
        }
        if pool.root(root)? != 0 {
            return Err(Error::invalid(format!(
                "pool root word {root} is already in use"
            )));
        }
        // Chunks of our tag with the root word still 0 are leftovers of a create that
        // crashed before its commit: nothing links them.
        let tag = chunk_tag(root)?;
        for chunk in alloc.iter_chunks(tag) {
            alloc.free_chunk(chunk.offset)?;
        }
        let heap = SlotHeap::new(pool.clone(), alloc, root, node_size(fanout))?;
        let head = heap.alloc_node()?;
        let anchor = Entry {
            value: 0,
            key: KeyRef::inline(b"").ok_or_else(|| Error::invalid("empty anchor"))?,
        };
        write_new_node(&pool, head, &NodeHeader::new(fanout, 0), &anchor, &[])?;
        // IMPORTANT: the commit point of create.
        pool.set_root(root, head)?;
        let layer = SearchLayer::from_leaves([Arc::new(Leaf::new(head, Box::default()))]);
        Ok(assemble(pool, heap, layer, root, head, fanout, 0))
    }

    /// Opens the index whose head leaf is in pool root word `root`: finishes splits a crash
    /// interrupted, rebuilds fingerprints, frees what was allocated but never linked, and
    /// rebuilds the DRAM search layer (FORMAT.md § Recovery).
    pub fn open(pool: Arc<PmemPool>, alloc: Arc<PmemAllocator>, root: usize) -> Result<Self> {
        recovery::open(pool, alloc, root)
    }

    /// The HSIT slot stored under `key`.
    pub fn get(&self, key: &[u8]) -> Result<Option<u64>> {
        check_key(key)?;
        let guard = crossbeam_epoch::pin();
        loop {
            let found = self.find_leaf(key, &guard)?;
            let node = NodeRef::new(&self.pool, found.leaf.off);
            let hit = found.leaf.read_optimistic(|| {
                let header = node.header()?;
                Ok(node.find(&header, key)?.map(|(_, entry)| entry.value))
            })?;
            if found.still_covers() {
                return Ok(hit);
            }
        }
    }

    /// Reserves the room that inserting `keys` (absent from the index) may take, so that
    /// those inserts cannot fail for want of space while nothing else inserts (removes may
    /// interleave): a blob slot per key too long to inline, and per leaf the keys fall
    /// into, a node slot per split they may cause — none if the leaf has a free entry for
    /// each, else at most `1 + ⌊(keys - free entries) / ⌊fanout/2⌋⌋` — and for each blob
    /// class a slot per such split whose split key may be of that class (`reserve.rs`
    /// argues the bound). `NoSpace` when the pool cannot hold that; nothing is inserted
    /// either way.
    pub fn reserve_inserts<'k>(&self, keys: impl IntoIterator<Item = &'k [u8]>) -> Result<()> {
        self.writable()?;
        let room = self.room_for_inserts(keys)?;
        self.heap.reserve(room.nodes, &room.blobs)
    }

    /// Inserts `key -> slot` unless `key` is present: `Ok(Ok(()))` once the new entry is
    /// durable, `Ok(Err(existing))` with the slot already stored. On an error other than
    /// [`Error::InvalidArgument`] or [`Error::NoSpace`] the insert may or may not have
    /// taken effect and the index is poisoned.
    pub fn insert_if_absent(&self, key: &[u8], slot: u64) -> Result<Result<(), u64>> {
        check_key(key)?;
        self.writable()?;
        let result = self.insert_impl(key, slot);
        self.poison_on_failure(result)
    }

    /// Removes `key`; returns its slot. The removal is durable on return. On an error
    /// other than [`Error::InvalidArgument`] it may or may not have taken effect and the
    /// index is poisoned.
    pub fn remove(&self, key: &[u8]) -> Result<Option<u64>> {
        check_key(key)?;
        self.writable()?;
        let result = self.remove_impl(key);
        self.poison_on_failure(result)
    }

    /// Up to `limit` entries with keys `>= start`, in key order. Not a snapshot: each leaf
    /// is read consistently, and an entry inserted or removed during the scan may or may
    /// not appear.
    pub fn scan(&self, start: &[u8], limit: usize) -> Result<Vec<(Vec<u8>, u64)>> {
        scan::scan(self, start, limit)
    }

    /// Up to `n` disjoint key ranges covering every key, in key order, with about the same
    /// number of leaves each: the partitions PRISM recovers in parallel (§5.5).
    pub fn partitions(&self, n: usize) -> Vec<KeyRange> {
        scan::partitions(&self.layer, n)
    }

    /// Calls `f` on every entry in `range`, in key order; stops at the first error.
    pub fn for_each_in(
        &self,
        range: &KeyRange,
        f: &mut dyn FnMut(&[u8], u64) -> Result<()>,
    ) -> Result<()> {
        scan::visit(
            self,
            &range.start,
            range.end.as_deref(),
            &mut |key, slot| f(key, slot).map(|()| true),
        )
    }

    /// DRAM bytes of the search layer (an estimate).
    pub fn dram_bytes(&self) -> u64 {
        self.layer.dram_bytes()
    }

    /// The number of keys.
    pub fn len(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// True when the index holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entries per leaf.
    pub fn fanout(&self) -> usize {
        self.fanout
    }

    /// The index's counters.
    pub fn stats(&self) -> KeyIndexStats {
        KeyIndexStats {
            keys: self.len(),
            leaves: self.layer.len(),
            splits: self.splits.load(Ordering::Relaxed),
            pmem_bytes: self.heap.pmem_bytes(),
        }
    }

    /// What the `open` that built this index found and repaired.
    pub fn recovery_report(&self) -> RecoveryReport {
        self.recovery
    }

    /// Verifies the structural invariants on pmem and their agreement with the DRAM state
    /// (FORMAT.md § Invariants); returns one line per violation (empty: all hold). Run it
    /// on a quiescent index. An error means the check itself could not proceed.
    pub fn check(&self) -> Result<Vec<String>> {
        check::check(self)
    }

    fn find_leaf<'g>(&'g self, key: &[u8], guard: &'g Guard) -> Result<Found<'g>> {
        self.layer.find(key, guard).ok_or_else(|| {
            Error::corruption(Tier::Dram, 0, "key index search layer has no head leaf")
        })
    }

    fn writable(&self) -> Result<()> {
        if self.poisoned.load(Ordering::Acquire) {
            return Err(Error::Poisoned(
                "an earlier key-index write to pmem failed".to_string(),
            ));
        }
        Ok(())
    }

    fn poison_on_failure<T>(&self, result: Result<T>) -> Result<T> {
        if let Err(e) = &result
            && !matches!(e, Error::NoSpace { .. } | Error::InvalidArgument(_))
        {
            self.poisoned.store(true, Ordering::Release);
        }
        result
    }
}

impl std::fmt::Debug for PersistentKeyIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PersistentKeyIndex")
            .field("root", &self.root)
            .field("head", &self.head)
            .field("fanout", &self.fanout)
            .field("keys", &self.len())
            .finish_non_exhaustive()
    }
}

/// Rejects keys the index cannot store: empty, or longer than [`MAX_KEY_LEN`].
fn check_key(key: &[u8]) -> Result<()> {
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(Error::invalid(format!(
            "key of {} bytes (the key index stores 1..={MAX_KEY_LEN})",
            key.len()
        )));
    }
    Ok(())
}

/// A new index over already-built parts (create and recovery share it).
fn assemble(
    pool: Arc<PmemPool>,
    heap: SlotHeap,
    layer: SearchLayer,
    root: usize,
    head: u64,
    fanout: usize,
    count: usize,
) -> PersistentKeyIndex {
    PersistentKeyIndex {
        pool,
        heap,
        layer,
        root,
        head,
        fanout,
        count: AtomicUsize::new(count),
        splits: AtomicU64::new(0),
        poisoned: AtomicBool::new(false),
        recovery: RecoveryReport::default(),
    }
}
