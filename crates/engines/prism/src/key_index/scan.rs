//! Ordered traversal of the key index: `scan`, the recovery partitions and `for_each_in`
//! (PRISM §5.5: "recovery ... for randomly partitioned key ranges from the key index").
//!
//! A traversal reads one leaf at a time: it finds the leaf covering its cursor in the
//! search layer, reads the leaf's live entries optimistically (a consistent view), sorts
//! them, and moves the cursor to the next anchor in the search layer. A split between two
//! steps can make a key show up in two consecutive views (read from the left leaf before
//! the split, from the right one after it); the traversal skips every key not above the
//! last one it emitted, so each key is emitted once and in order. It never misses a key
//! present for the whole traversal: a split inserts the right leaf into the search layer
//! before it unlocks the left one (`write.rs`), so a view of the left leaf without the
//! moved keys is only ever validated once the next-anchor lookup will find the right leaf.
//! It is not a snapshot.
//!
//! The callback runs outside every lock and optimistic section, so it may block.
//!
//! Thread safety: readers only; concurrent writers are allowed.

use tierkv_core::Result;

use super::node::NodeRef;
use super::search_layer::SearchLayer;
use super::{KeyRange, PersistentKeyIndex};

/// Up to `limit` entries with keys `>= start`, in key order.
pub(super) fn scan(
    index: &PersistentKeyIndex,
    start: &[u8],
    limit: usize,
) -> Result<Vec<(Vec<u8>, u64)>> {
    let mut out = Vec::with_capacity(limit.min(1024));
    if limit == 0 {
        return Ok(out);
    }
    visit(index, start, None, &mut |key, slot| {
        out.push((key.to_vec(), slot));
        Ok(out.len() < limit)
    })?;
    Ok(out)
}

/// Calls `f` on every entry with `start <= key < end` in key order until `f` returns
/// `Ok(false)` or an error.
pub(super) fn visit(
    index: &PersistentKeyIndex,
    start: &[u8],
    end: Option<&[u8]>,
    f: &mut dyn FnMut(&[u8], u64) -> Result<bool>,
) -> Result<()> {
    let below_end = |key: &[u8]| end.is_none_or(|e| key < e);
    let mut cursor = start.to_vec();
    let mut last: Option<Vec<u8>> = None;
    loop {
        let view = leaf_view(index, &cursor)?;
        for (key, slot) in view.entries {
            if key.as_slice() < start || last.as_ref().is_some_and(|l| key <= *l) {
                continue;
            }
            if !below_end(&key) || !f(&key, slot)? {
                return Ok(());
            }
            last = Some(key);
        }
        match index.layer.next_anchor(&view.anchor) {
            Some(next) if below_end(&next) => cursor = next.into_vec(),
            _ => return Ok(()),
        }
    }
}

/// A consistent view of one leaf.
struct LeafView {
    /// The leaf's anchor.
    anchor: Box<[u8]>,
    /// Its live entries, sorted by key.
    entries: Vec<(Vec<u8>, u64)>,
}

/// A consistent view of the leaf covering `key`.
fn leaf_view(index: &PersistentKeyIndex, key: &[u8]) -> Result<LeafView> {
    let guard = crossbeam_epoch::pin();
    loop {
        let found = index.find_leaf(key, &guard)?;
        let node = NodeRef::new(&index.pool, found.leaf.off);
        let live = found.leaf.read_optimistic(|| {
            let header = node.header()?;
            node.live_entries(&header)
        })?;
        if !found.still_covers() {
            continue;
        }
        let mut entries: Vec<_> = live.into_iter().map(|e| (e.key, e.entry.value)).collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let anchor = found.leaf.anchor.clone();
        return Ok(LeafView { anchor, entries });
    }
}

/// Up to `n` (at least one) ranges covering the whole key space, split at leaf anchors so
/// that each holds about the same number of leaves.
pub(super) fn partitions(layer: &SearchLayer, n: usize) -> Vec<KeyRange> {
    let leaves = layer.leaves();
    let parts = n.clamp(1, leaves.len().max(1));
    let bounds: Vec<Vec<u8>> = (1..parts)
        .filter_map(|i| leaves.get(i * leaves.len() / parts))
        .map(|leaf| leaf.anchor.to_vec())
        .collect();
    let mut ranges = Vec::with_capacity(parts);
    let mut start = Vec::new();
    for bound in bounds {
        ranges.push(KeyRange {
            start: std::mem::replace(&mut start, bound.clone()),
            end: Some(bound),
        });
    }
    ranges.push(KeyRange { start, end: None });
    ranges
}
