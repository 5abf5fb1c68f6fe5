//! The DRAM search layer: anchor key -> leaf, rebuilt from the pmem leaf list at open.
//!
//! PACTree (SOSP '21 §4.2) keeps a DRAM search layer above the persistent data nodes and
//! updates it asynchronously; we update it synchronously, inside the split that creates a
//! leaf (the split holds the left leaf locked while it inserts the right one), which keeps
//! the reader protocol short: find the leaf here, read it optimistically, then check its
//! split count (`leaf.rs`).
//!
//! Invariants:
//! - The anchors in the map are exactly the anchors of the leaves on the pmem list except
//!   during a split, between linking a new leaf and inserting it here; the left leaf is
//!   locked for that whole window.
//! - The head leaf's anchor is the empty key, so every key has a floor entry.
//! - Entries are never removed (leaves are not merged), so a leaf found here stays valid.
//!
//! Thread safety: a reader-writer lock around a `BTreeMap`. Readers hold the read lock only
//! for one lookup (no pmem access under it); writers hold the write lock for one insert.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use parking_lot::RwLock;

use super::leaf::Leaf;

/// A leaf found in the search layer, with its split count at the time it was found.
pub(crate) struct Found {
    /// The leaf.
    pub(crate) leaf: Arc<Leaf>,
    /// `leaf.splits()` read under the search layer's lock.
    pub(crate) splits: u64,
}

impl Found {
    /// True if the leaf has not split since it was found, so it still covers every key it
    /// was found for.
    pub(crate) fn still_covers(&self) -> bool {
        self.leaf.splits() == self.splits
    }
}

/// The search layer.
#[derive(Default)]
pub(crate) struct SearchLayer {
    map: RwLock<BTreeMap<Box<[u8]>, Arc<Leaf>>>,
}

impl SearchLayer {
    /// A layer over `leaves` (in any order).
    pub(crate) fn from_leaves(leaves: impl IntoIterator<Item = Arc<Leaf>>) -> SearchLayer {
        let map = leaves
            .into_iter()
            .map(|leaf| (leaf.anchor.clone(), leaf))
            .collect();
        SearchLayer {
            map: RwLock::new(map),
        }
    }

    /// The leaf whose anchor is the greatest one `<= key`.
    pub(crate) fn find(&self, key: &[u8]) -> Option<Found> {
        let map = self.map.read();
        let (_, leaf) = map
            .range::<[u8], _>((Bound::Unbounded, Bound::Included(key)))
            .next_back()?;
        Some(Found {
            splits: leaf.splits(),
            leaf: leaf.clone(),
        })
    }

    /// The anchor of the first leaf after the one anchored at `anchor`, if any.
    pub(crate) fn next_anchor(&self, anchor: &[u8]) -> Option<Box<[u8]>> {
        let map = self.map.read();
        map.range::<[u8], _>((Bound::Excluded(anchor), Bound::Unbounded))
            .next()
            .map(|(k, _)| k.clone())
    }

    /// Adds a leaf (a split's new right sibling).
    pub(crate) fn insert(&self, leaf: Arc<Leaf>) {
        self.map.write().insert(leaf.anchor.clone(), leaf);
    }

    /// Every leaf, in anchor order (a snapshot).
    pub(crate) fn leaves(&self) -> Vec<Arc<Leaf>> {
        self.map.read().values().cloned().collect()
    }

    /// The number of leaves.
    pub(crate) fn len(&self) -> usize {
        self.map.read().len()
    }

    /// DRAM bytes the layer holds (an estimate): per leaf its handle, its anchor twice (map
    /// key and handle) and the map entry with B-tree node overhead.
    pub(crate) fn dram_bytes(&self) -> u64 {
        let map = self.map.read();
        let entry = size_of::<Box<[u8]>>() + size_of::<Arc<Leaf>>();
        let per_leaf = size_of::<Leaf>() + 2 * size_of::<usize>() + entry * 3 / 2;
        map.keys()
            .map(|anchor| (per_leaf + 2 * anchor.len()) as u64)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(anchors: &[&[u8]]) -> SearchLayer {
        SearchLayer::from_leaves(
            anchors
                .iter()
                .enumerate()
                .map(|(i, a)| Arc::new(Leaf::new(64 * (i as u64 + 1), Box::from(*a)))),
        )
    }

    #[test]
    fn find_returns_the_floor_anchor() {
        let l = layer(&[b"", b"g", b"p"]);
        assert_eq!(&*l.find(b"a").unwrap().leaf.anchor, b"");
        assert_eq!(&*l.find(b"g").unwrap().leaf.anchor, b"g");
        assert_eq!(&*l.find(b"h").unwrap().leaf.anchor, b"g");
        assert_eq!(&*l.find(b"zzz").unwrap().leaf.anchor, b"p");
        assert_eq!(l.len(), 3);
        let one_leaf = layer(&[b""]).dram_bytes();
        assert!(one_leaf as usize >= size_of::<Leaf>());
        assert_eq!(l.dram_bytes(), 3 * one_leaf + 2 * 2);
    }

    #[test]
    fn next_anchor_walks_in_order_and_ends() {
        let l = layer(&[b"p", b"", b"g"]);
        assert_eq!(l.next_anchor(b"").as_deref(), Some(&b"g"[..]));
        assert_eq!(l.next_anchor(b"g").as_deref(), Some(&b"p"[..]));
        assert_eq!(l.next_anchor(b"p"), None);
        let anchors: Vec<_> = l.leaves().iter().map(|x| x.anchor.clone()).collect();
        assert_eq!(
            anchors,
            vec![
                Box::from(&b""[..]),
                Box::from(&b"g"[..]),
                Box::from(&b"p"[..])
            ]
        );
    }

    #[test]
    fn found_leaf_stops_covering_after_a_split() {
        let l = layer(&[b""]);
        let found = l.find(b"k").unwrap();
        assert!(found.still_covers());
        found.leaf.lock().note_split();
        assert!(!found.still_covers());
    }
}
