//! Opening the key index after a clean shutdown or a crash (FORMAT.md § Recovery).
//!
//! Steps, each idempotent so that a crash during recovery is recovered by the next one:
//! 1. read the headers of the chunks the index owns (allocator tag `chunk_tag(root)`);
//! 2. walk the leaf list from the head leaf (root word), decoding and verifying every
//!    leaf, its anchor and its live entries (checksums, blob keys); a cycle, a leaf outside
//!    the index's node chunks or an anchor out of order is corruption;
//! 3. check that every key is at or above its leaf's anchor and unique in its leaf;
//! 4. finish interrupted splits: in each leaf, clear the live entries whose key is not
//!    below the next leaf's anchor (they were copied to that leaf before it was linked);
//! 5. rewrite fingerprints that do not match their keys (they are persisted with the
//!    commit of an insert but not before it, so a crash can leave them stale);
//! 6. merge each run of adjacent leaves whose keys together fill at most
//!    [`MERGE_FILL`] of a leaf into its first leaf (deletes leave leaves sparse, and a
//!    sparse leaf serves only its own key range: without this, a pool filled once and then
//!    thinned by deletes took no new key outside the old ranges, issue 23);
//! 7. compute the live slots (leaves, anchor and entry blobs), rebuild the heap's free
//!    lists and free every owned chunk without a live slot (leak collection);
//! 8. build the DRAM search layer and the key count.
//!
//! Steps 2-5 read on several scoped threads for a long list (each thread a contiguous run
//! of leaves); the repairs themselves are written by the opening thread.
//!
//! Thread safety: runs before the index is shared.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Instant;

use tierkv_core::media::pmem::{PmemAllocator, PmemPool};
use tierkv_core::{Error, Result, Tier};

use super::format::{
    ChunkKind, Entry, NODE_NEXT, NodeHeader, blob_class, decode_node, fingerprint, node_size,
};
use super::heap::{ChunkMap, SlotHeap, chunk_tag};
use super::leaf::Leaf;
use super::node::{LiveEntry, NodeRef, load_key};
use super::search_layer::SearchLayer;
use super::{PersistentKeyIndex, RecoveryReport, assemble};

/// One leaf as read from pmem.
pub(super) struct RecoveredLeaf {
    pub(super) off: u64,
    pub(super) header: NodeHeader,
    pub(super) anchor: Entry,
    pub(super) anchor_key: Vec<u8>,
    pub(super) entries: Vec<LiveEntry>,
}

fn corrupt(at: u64, what: impl Into<String>) -> Error {
    Error::corruption(Tier::Pmem, at, what)
}

pub(super) fn open(
    pool: Arc<PmemPool>,
    alloc: Arc<PmemAllocator>,
    root: usize,
) -> Result<PersistentKeyIndex> {
    let head = pool.root(root)?;
    if head == 0 {
        return Err(corrupt(
            0,
            format!("pool root word {root} holds no key index"),
        ));
    }
    let owner = u32::try_from(root).map_err(|_| Error::invalid("key index root word"))?;
    let chunks = ChunkMap::read(&pool, &alloc, chunk_tag(root)?, owner)?;
    let started = Instant::now();
    let mut report = RecoveryReport::default();
    let mut leaves = read_list(&pool, &chunks, head)?;
    check_anchor_order(&leaves)?;
    let repairs = parallel_map(&leaves, |i, leaf| {
        let next = leaves.get(i + 1).map(|n| n.anchor_key.as_slice());
        analyse(leaf, next)
    })?;
    for (leaf, repair) in leaves.iter_mut().zip(repairs) {
        report.split_leftovers_cleared += clear_leftovers(&pool, leaf, repair.leftovers)?;
        report.fingerprints_rebuilt += rewrite_fingerprints(&pool, leaf, &repair.stale_fps)?;
    }
    report.leaves_merged = merge_sparse(&pool, &mut leaves)?;
    let live = live_slots(&chunks, &leaves)?;
    let fanout = leaves.first().map_or(0, |l| l.header.fanout);
    let (heap, freed) =
        SlotHeap::recover(pool.clone(), alloc, root, node_size(fanout), &chunks, &live)?;
    report.chunks_freed = freed;
    let count = leaves.iter().map(|l| l.entries.len()).sum();
    let layer = SearchLayer::from_leaves(
        leaves
            .into_iter()
            .map(|l| Arc::new(Leaf::new(l.off, l.anchor_key.into_boxed_slice()))),
    );
    let mut index = assemble(pool, heap, layer, root, head, fanout, count);
    report.duration = started.elapsed();
    index.recovery = report;
    Ok(index)
}

/// Leaves per recovery thread at least: a shorter list is handled on one thread.
pub(super) const LEAVES_PER_THREAD: usize = 2048;
/// The most threads recovery uses.
const MAX_THREADS: usize = 8;

/// `f(i, item)` for every item, in order, on up to [`MAX_THREADS`] scoped threads (one per
/// [`LEAVES_PER_THREAD`] items); the first error wins.
fn parallel_map<T: Sync, R: Send>(
    items: &[T],
    f: impl Fn(usize, &T) -> Result<R> + Sync,
) -> Result<Vec<R>> {
    let threads = std::thread::available_parallelism()
        .map_or(1, std::num::NonZero::get)
        .min(MAX_THREADS)
        .min(items.len() / LEAVES_PER_THREAD)
        .max(1);
    let per_thread = items.len().div_ceil(threads).max(1);
    let f = &f;
    let parts: Vec<Result<Vec<R>>> = std::thread::scope(|s| {
        let handles: Vec<_> = items
            .chunks(per_thread)
            .enumerate()
            .map(|(part, chunk)| {
                s.spawn(move || {
                    let base = part * per_thread;
                    chunk
                        .iter()
                        .enumerate()
                        .map(|(i, item)| f(base + i, item))
                        .collect()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    let mut out = Vec::with_capacity(items.len());
    for part in parts {
        out.extend(part?);
    }
    Ok(out)
}

/// Walks the leaf list from `head`, then decodes every leaf (with its keys), on several
/// threads for a long list, checking that each is a node slot of the index and that all
/// share one fanout.
pub(super) fn read_list(
    pool: &PmemPool,
    chunks: &ChunkMap,
    head: u64,
) -> Result<Vec<RecoveredLeaf>> {
    let offsets = list_offsets(pool, chunks, head)?;
    let leaves = parallel_map(&offsets, |_, &off| read_leaf(pool, chunks, off))?;
    let fanout = leaves.first().map(|h| h.header.fanout);
    for (i, leaf) in leaves.iter().enumerate() {
        if Some(leaf.header.fanout) != fanout {
            return Err(corrupt(leaf.off, "key index: leaves of different fanouts"));
        }
        if leaf.header.next != offsets.get(i + 1).copied().unwrap_or(0) {
            return Err(corrupt(
                leaf.off,
                "key index: a leaf's next changed during recovery",
            ));
        }
    }
    Ok(leaves)
}

/// The offsets of the leaves on the list from `head`, each checked to be a node slot of
/// the index; a cycle is corruption.
fn list_offsets(pool: &PmemPool, chunks: &ChunkMap, head: u64) -> Result<Vec<u64>> {
    let mut offsets = Vec::new();
    let mut seen = HashSet::new();
    let mut off = head;
    while off != 0 {
        if !seen.insert(off) {
            return Err(corrupt(off, "key index: the leaf list has a cycle"));
        }
        chunks.locate(off, ChunkKind::Nodes)?;
        offsets.push(off);
        off = pool.load_u64(off + NODE_NEXT as u64)?;
    }
    Ok(offsets)
}

/// Decodes the leaf at `off` (a node slot of the index) and loads its keys.
fn read_leaf(pool: &PmemPool, chunks: &ChunkMap, off: u64) -> Result<RecoveredLeaf> {
    let chunk = chunks.locate(off, ChunkKind::Nodes)?;
    let slot_size = chunks
        .formatted
        .get(&chunk)
        .map_or(0, |h| h.slot_size as usize);
    let node = decode_node(pool.read(off, slot_size)?, off)?;
    let fanout = node.header.fanout;
    if node_size(fanout) != slot_size {
        return Err(corrupt(
            off,
            format!("key index: leaf of fanout {fanout} in {slot_size}-byte slots"),
        ));
    }
    let entries = node
        .entries
        .iter()
        .map(|&(slot, entry)| {
            Ok(LiveEntry {
                slot,
                key: load_key(pool, &entry.key)?,
                entry,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(RecoveredLeaf {
        off,
        header: node.header,
        anchor: node.anchor,
        anchor_key: load_key(pool, &node.anchor.key)?,
        entries,
    })
}

/// The head's anchor is the empty key and anchors strictly increase along the list.
fn check_anchor_order(leaves: &[RecoveredLeaf]) -> Result<()> {
    if let Some(head) = leaves.first().filter(|h| !h.anchor_key.is_empty()) {
        return Err(corrupt(
            head.off,
            "key index: the head leaf's anchor is not the empty key",
        ));
    }
    for pair in leaves.windows(2) {
        if let [a, b] = pair
            && a.anchor_key >= b.anchor_key
        {
            return Err(corrupt(b.off, "key index: leaf anchors out of order"));
        }
    }
    Ok(())
}

/// What recovery must fix in one leaf.
struct LeafRepair {
    /// Live entries whose key is not below the next leaf's anchor: a split copied them to
    /// the next leaf and was interrupted before clearing them here.
    leftovers: u64,
    /// `(slot, fingerprint)` of the other live entries whose fingerprint is stale.
    stale_fps: Vec<(usize, u8)>,
}

/// Checks the keys of one leaf (each at or above its anchor, none twice) and finds what
/// needs repair, given the next leaf's anchor. Reads only.
fn analyse(leaf: &RecoveredLeaf, next_anchor: Option<&[u8]>) -> Result<LeafRepair> {
    if let Some(low) = leaf.entries.iter().find(|e| e.key < leaf.anchor_key) {
        let what = format!(
            "key index: slot {} holds a key below the leaf's anchor",
            low.slot
        );
        return Err(corrupt(leaf.off, what));
    }
    let mut keys: Vec<&[u8]> = leaf.entries.iter().map(|e| e.key.as_slice()).collect();
    keys.sort_unstable();
    if keys.windows(2).any(|w| w.first() == w.get(1)) {
        return Err(corrupt(
            leaf.off,
            "key index: a key appears twice in one leaf",
        ));
    }
    let is_leftover = |e: &LiveEntry| next_anchor.is_some_and(|n| e.key.as_slice() >= n);
    let leftovers = leaf
        .entries
        .iter()
        .filter(|e| is_leftover(e))
        .fold(0u64, |m, e| m | 1 << e.slot);
    let stale_fps = leaf
        .entries
        .iter()
        .filter(|e| !is_leftover(e))
        .map(|e| (e.slot, fingerprint(&e.key)))
        .filter(|&(slot, fp)| leaf.header.fps.get(slot) != Some(&fp))
        .collect();
    Ok(LeafRepair {
        leftovers,
        stale_fps,
    })
}

/// Finishes a split interrupted after its commit: clears the `leftovers` bits of the leaf
/// (the next leaf holds copies of those entries); returns how many it cleared.
fn clear_leftovers(pool: &PmemPool, leaf: &mut RecoveredLeaf, leftovers: u64) -> Result<usize> {
    if leftovers == 0 {
        return Ok(0);
    }
    leaf.header.bitmap &= !leftovers;
    NodeRef::new(pool, leaf.off).retire(leaf.header.bitmap)?;
    leaf.entries.retain(|e| leftovers & 1 << e.slot == 0);
    Ok(leftovers.count_ones() as usize)
}

/// Step 6 merges adjacent leaves while their live keys together fill at most this share of
/// a leaf (numerator, denominator): the merged leaf keeps room for inserts in its range.
pub(super) const MERGE_FILL: (usize, usize) = (3, 4);

/// Merges runs of sparse adjacent leaves (step 6); returns how many leaves left the list.
///
/// Merging R into its left neighbour L (L keeps its anchor; R's entries keep their blobs):
/// 1. write each of R's entries into a free slot of L, with its fingerprint (persisted);
/// 2. set their bits in L's bitmap with one 8-byte store, persist the header;
/// 3. commit: L's `next` := R's `next`, one 8-byte store, persisted. R is unreachable.
///
/// A crash before 3 leaves R on the list and L holding copies of keys at or above R's
/// anchor: step 4 of the next recovery clears them, exactly as for a split interrupted
/// after its commit. After 3, R and its anchor blob are unreachable and step 7 frees them
/// (R's entry blobs stay live: L's entries reference them now).
fn merge_sparse(pool: &PmemPool, leaves: &mut Vec<RecoveredLeaf>) -> Result<usize> {
    let fanout = leaves.first().map_or(0, |l| l.header.fanout);
    let limit = fanout * MERGE_FILL.0 / MERGE_FILL.1;
    let mut merged = 0;
    let mut i = 0;
    while i + 1 < leaves.len() {
        let fits = match (leaves.get(i), leaves.get(i + 1)) {
            (Some(l), Some(r)) => l.entries.len() + r.entries.len() <= limit,
            _ => false,
        };
        if !fits {
            i += 1;
            continue;
        }
        let right = leaves.remove(i + 1);
        let left = leaves
            .get_mut(i)
            .ok_or_else(|| Error::invalid("key index: merge without a left leaf"))?;
        merge_into(pool, left, right)?;
        merged += 1;
    }
    Ok(merged)
}

/// Moves the live entries of `right` into free slots of `left` and unlinks `right`
/// (protocol in [`merge_sparse`]); `left` in memory follows.
fn merge_into(pool: &PmemPool, left: &mut RecoveredLeaf, right: RecoveredLeaf) -> Result<()> {
    copy_entries(pool, left, right.entries)?;
    pool.crash_point("prism.key_index.merge_copied");
    // IMPORTANT: commit point of the merge: `right` leaves the list.
    NodeRef::new(pool, left.off).link_next(right.header.next)?;
    pool.crash_point("prism.key_index.merge_committed");
    left.header.next = right.header.next;
    Ok(())
}

/// Steps 1-2 of a merge: writes `entries` into free slots of `left` and publishes them
/// (durable on return); `left` in memory follows.
pub(super) fn copy_entries(
    pool: &PmemPool,
    left: &mut RecoveredLeaf,
    entries: Vec<LiveEntry>,
) -> Result<()> {
    let node = NodeRef::new(pool, left.off);
    let mut free = (0..left.header.fanout).filter(|s| left.header.bitmap & 1 << s == 0);
    let mut bitmap = left.header.bitmap;
    for e in entries {
        let slot = free
            .next()
            .ok_or_else(|| Error::invalid("key index: merged leaves do not fit one leaf"))?;
        let fp = fingerprint(&e.key);
        node.write_entry(slot, &e.entry)?;
        node.write_fingerprint(slot, fp)?;
        if let Some(f) = left.header.fps.get_mut(slot) {
            *f = fp;
        }
        bitmap |= 1 << slot;
        left.entries.push(LiveEntry { slot, ..e });
    }
    node.publish(bitmap)?;
    left.header.bitmap = bitmap;
    Ok(())
}

/// Rewrites stale fingerprints of a leaf and persists them; returns how many it rewrote.
fn rewrite_fingerprints(
    pool: &PmemPool,
    leaf: &RecoveredLeaf,
    stale: &[(usize, u8)],
) -> Result<usize> {
    if stale.is_empty() {
        return Ok(0);
    }
    let node = NodeRef::new(pool, leaf.off);
    for &(slot, fp) in stale {
        node.write_fingerprint(slot, fp)?;
    }
    node.persist_fingerprints()?;
    Ok(stale.len())
}

/// The pool offsets of every live slot: the leaves and the blobs their anchors and live
/// entries reference. A blob outside the index's blob chunks of the right class, or
/// referenced twice, is corruption.
pub(super) fn live_slots(chunks: &ChunkMap, leaves: &[RecoveredLeaf]) -> Result<BTreeSet<u64>> {
    let mut live: BTreeSet<u64> = leaves.iter().map(|l| l.off).collect();
    for leaf in leaves {
        let refs =
            std::iter::once(&leaf.anchor.key).chain(leaf.entries.iter().map(|e| &e.entry.key));
        for key in refs {
            let Some(off) = key.blob() else { continue };
            let class = blob_class(key.len()).ok_or_else(|| corrupt(off, "key blob too long"))?;
            chunks.locate(off, ChunkKind::Blobs(class))?;
            if !live.insert(off) {
                return Err(corrupt(off, "key index: a key blob is referenced twice"));
            }
        }
    }
    Ok(live)
}
