//! `check`: the key index's structural invariants (FORMAT.md § Invariants), verified on
//! pmem and against the DRAM state, for `tierkv check` and for tests.
//!
//! Each violated invariant becomes one line of the report; an empty report means all hold.
//! The check reads only (it never repairs) and expects a quiescent index: under concurrent
//! writes it may report transient differences.
//!
//! Thread safety: read-only; safe to call at any time, meaningful when quiescent.

use std::collections::BTreeSet;

use tierkv_core::Result;

use super::PersistentKeyIndex;
use super::format::fingerprint;
use super::heap::ChunkMap;
use super::recovery::{RecoveredLeaf, live_slots, read_list};

pub(super) fn check(index: &PersistentKeyIndex) -> Result<Vec<String>> {
    let mut report = Vec::new();
    let chunks = index.heap.chunk_map()?;
    if !chunks.unformatted.is_empty() {
        report.push(format!(
            "{} owned chunk(s) without a valid header",
            chunks.unformatted.len()
        ));
    }
    let head = index.pool.root(index.root)?;
    if head != index.head {
        report.push(format!(
            "root word {} holds {head}, the index's head leaf is {}",
            index.root, index.head
        ));
    }
    let leaves = match read_list(&index.pool, &chunks, head) {
        Ok(leaves) => leaves,
        Err(e) => {
            report.push(format!("leaf list unreadable: {e}"));
            return Ok(report);
        }
    };
    check_order(&leaves, &mut report);
    check_fingerprints(&leaves, &mut report);
    check_dram(index, &leaves, &mut report);
    match live_slots(&chunks, &leaves) {
        Ok(live) => check_heap(index, &chunks, &live, &mut report),
        Err(e) => report.push(format!("key blobs: {e}")),
    }
    Ok(report)
}

/// Anchors strictly increase from the empty key; every live key lies in its leaf's range
/// `[anchor, next anchor)`; so every key is unique across the index.
fn check_order(leaves: &[RecoveredLeaf], report: &mut Vec<String>) {
    if leaves.first().is_some_and(|h| !h.anchor_key.is_empty()) {
        report.push("the head leaf's anchor is not the empty key".into());
    }
    for (i, leaf) in leaves.iter().enumerate() {
        let next = leaves.get(i + 1).map(|l| l.anchor_key.as_slice());
        if next.is_some_and(|n| n <= leaf.anchor_key.as_slice()) {
            report.push(format!(
                "leaf {i} at {}: the next leaf's anchor is not above its own",
                leaf.off
            ));
        }
        let mut keys: Vec<&[u8]> = leaf.entries.iter().map(|e| e.key.as_slice()).collect();
        keys.sort_unstable();
        if keys.windows(2).any(|w| w.first() == w.get(1)) {
            report.push(format!("leaf {i} at {}: duplicate key", leaf.off));
        }
        let outside = leaf
            .entries
            .iter()
            .filter(|e| e.key < leaf.anchor_key || next.is_some_and(|n| e.key.as_slice() >= n))
            .count();
        if outside > 0 {
            report.push(format!(
                "leaf {i} at {}: {outside} key(s) outside [anchor, next anchor)",
                leaf.off
            ));
        }
    }
}

fn check_fingerprints(leaves: &[RecoveredLeaf], report: &mut Vec<String>) {
    for leaf in leaves {
        let stale = leaf
            .entries
            .iter()
            .filter(|e| leaf.header.fps.get(e.slot) != Some(&fingerprint(&e.key)))
            .count();
        if stale > 0 {
            report.push(format!(
                "leaf at {}: {stale} stale fingerprint(s)",
                leaf.off
            ));
        }
    }
}

/// The search layer names exactly the leaves on the list, and the key count matches.
fn check_dram(index: &PersistentKeyIndex, leaves: &[RecoveredLeaf], report: &mut Vec<String>) {
    let on_pmem: Vec<(&[u8], u64)> = leaves
        .iter()
        .map(|l| (l.anchor_key.as_slice(), l.off))
        .collect();
    let layer = index.layer.leaves();
    let in_dram: Vec<(&[u8], u64)> = layer.iter().map(|l| (&*l.anchor, l.off)).collect();
    if on_pmem != in_dram {
        report.push(format!(
            "search layer ({} leaves) differs from the leaf list ({} leaves)",
            in_dram.len(),
            on_pmem.len()
        ));
    }
    let keys: usize = leaves.iter().map(|l| l.entries.len()).sum();
    if keys != index.len() {
        report.push(format!(
            "{keys} live entries on pmem, len() says {}",
            index.len()
        ));
    }
}

/// The heap holds exactly the owned chunks, and no live slot is on a free list.
fn check_heap(
    index: &PersistentKeyIndex,
    chunks: &ChunkMap,
    live: &BTreeSet<u64>,
    report: &mut Vec<String>,
) {
    let (held, free) = index.heap.snapshot();
    let owned: Vec<u64> = chunks.formatted.keys().copied().collect();
    if held != owned {
        report.push(format!(
            "the allocator lists {} chunk(s) of tag {:#x}, the index holds {}",
            owned.len(),
            index.heap.tag(),
            held.len()
        ));
    }
    let both = live.intersection(&free).count();
    if both > 0 {
        report.push(format!("{both} live slot(s) on a free list"));
    }
}
