//! Opening the key index after a clean shutdown or a crash (FORMAT.md § Recovery).
//!
//! Steps, each idempotent so that a crash during recovery is recovered by the next one:
//! 1. read the headers of the chunks the index owns (allocator tag `chunk_tag(root)`);
//! 2. walk the leaf list from the head leaf (root word), decoding and verifying every
//!    leaf, its anchor and its live entries (checksums, blob keys); a cycle, a leaf outside
//!    the index's node chunks or an anchor out of order is corruption;
//! 3. finish interrupted splits: in each leaf, clear the live entries whose key is not
//!    below the next leaf's anchor (they were copied to that leaf before it was linked);
//! 4. check that every remaining key is at or above its leaf's anchor and unique;
//! 5. rewrite fingerprints that do not match their keys (they are persisted with the
//!    commit of an insert but not before it, so a crash can leave them stale);
//! 6. compute the live slots (leaves, anchor and entry blobs), rebuild the heap's free
//!    lists and free every owned chunk without a live slot (leak collection);
//! 7. build the DRAM search layer and the key count.
//!
//! Thread safety: runs before the index is shared; single-threaded.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Instant;

use tierkv_core::media::pmem::{PmemAllocator, PmemPool};
use tierkv_core::{Error, Result, Tier};

use super::format::{
    ChunkKind, Entry, NodeHeader, blob_class, decode_node, fingerprint, node_size,
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
    report.split_leftovers_cleared = repair_splits(&pool, &mut leaves)?;
    for leaf in &leaves {
        check_keys_in_leaf(leaf)?;
    }
    report.fingerprints_rebuilt = repair_fingerprints(&pool, &leaves)?;
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

/// Walks the leaf list from `head`, decoding every leaf (with keys) and checking that each
/// is a node slot of the index and that all share one fanout.
pub(super) fn read_list(
    pool: &PmemPool,
    chunks: &ChunkMap,
    head: u64,
) -> Result<Vec<RecoveredLeaf>> {
    let mut leaves: Vec<RecoveredLeaf> = Vec::new();
    let mut seen = HashSet::new();
    let mut off = head;
    while off != 0 {
        if !seen.insert(off) {
            return Err(corrupt(off, "key index: the leaf list has a cycle"));
        }
        let chunk = chunks.locate(off, ChunkKind::Nodes)?;
        let slot_size = chunks
            .formatted
            .get(&chunk)
            .map_or(0, |h| h.slot_size as usize);
        let node = decode_node(pool.read(off, slot_size)?, off)?;
        let fanout = node.header.fanout;
        if node_size(fanout) != slot_size
            || leaves.first().is_some_and(|h| h.header.fanout != fanout)
        {
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
        leaves.push(RecoveredLeaf {
            off,
            header: node.header,
            anchor: node.anchor,
            anchor_key: load_key(pool, &node.anchor.key)?,
            entries,
        });
        off = node.header.next;
    }
    Ok(leaves)
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

/// Finishes splits interrupted after their commit: clears, in each leaf, the live entries
/// whose key is not below the next leaf's anchor (the next leaf holds copies of them).
/// Returns how many entries it cleared.
fn repair_splits(pool: &PmemPool, leaves: &mut [RecoveredLeaf]) -> Result<usize> {
    let mut cleared = 0;
    let next_anchors: Vec<Option<Vec<u8>>> = leaves
        .iter()
        .skip(1)
        .map(|l| Some(l.anchor_key.clone()))
        .chain([None])
        .collect();
    for (leaf, next) in leaves.iter_mut().zip(next_anchors) {
        let Some(next) = next else { continue };
        let stale = leaf
            .entries
            .iter()
            .filter(|e| e.key >= next)
            .fold(0u64, |m, e| m | 1 << e.slot);
        if stale != 0 {
            leaf.header.bitmap &= !stale;
            NodeRef::new(pool, leaf.off).retire(leaf.header.bitmap)?;
            leaf.entries.retain(|e| e.key < next);
            cleared += stale.count_ones() as usize;
        }
    }
    Ok(cleared)
}

/// Every key of the leaf is at or above its anchor, and no key appears twice.
fn check_keys_in_leaf(leaf: &RecoveredLeaf) -> Result<()> {
    if let Some(low) = leaf.entries.iter().find(|e| e.key < leaf.anchor_key) {
        return Err(corrupt(
            leaf.off,
            format!(
                "key index: slot {} holds a key below the leaf's anchor",
                low.slot
            ),
        ));
    }
    let mut keys: Vec<&[u8]> = leaf.entries.iter().map(|e| e.key.as_slice()).collect();
    keys.sort_unstable();
    if keys.windows(2).any(|w| w.first() == w.get(1)) {
        return Err(corrupt(
            leaf.off,
            "key index: a key appears twice in one leaf",
        ));
    }
    Ok(())
}

/// Rewrites the fingerprints that do not match their keys and persists them; returns how
/// many it rewrote.
fn repair_fingerprints(pool: &PmemPool, leaves: &[RecoveredLeaf]) -> Result<usize> {
    let mut rebuilt = 0;
    for leaf in leaves {
        let node = NodeRef::new(pool, leaf.off);
        let mut dirty = false;
        for e in &leaf.entries {
            let fp = fingerprint(&e.key);
            if leaf.header.fps.get(e.slot) != Some(&fp) {
                node.write_fingerprint(e.slot, fp)?;
                dirty = true;
                rebuilt += 1;
            }
        }
        if dirty {
            node.persist_fingerprints()?;
        }
    }
    Ok(rebuilt)
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
