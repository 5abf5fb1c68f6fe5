//! The DRAM search layer: anchor key -> leaf, rebuilt from the pmem leaf list at open.
//!
//! PACTree (SOSP '21 §4.2) keeps a lock-free DRAM search layer above the persistent data
//! nodes and updates it asynchronously; we update it synchronously, inside the split that
//! creates a leaf (the split holds the left leaf locked while it inserts the right one),
//! which keeps the reader protocol short: find the leaf here, read it optimistically, then
//! check its split count (`leaf.rs`).
//!
//! Invariants:
//! - The anchors in the map are exactly the anchors of the leaves on the pmem list except
//!   during a split, between linking a new leaf and inserting it here; the left leaf is
//!   locked for that whole window.
//! - The head leaf's anchor is the empty key, so every key has a floor entry.
//! - Entries are never removed (leaves are not merged while the index is open), so a leaf
//!   found here stays valid, and so does the map node that holds it.
//!
//! Thread safety: a lock-free skip list (`crossbeam_skiplist::base::SkipList`, like
//! PACTree's lock-free search layer). A lookup runs under a `crossbeam_epoch` guard the
//! caller holds and borrows the leaf from the list for the guard's life: it takes no lock
//! and clones no `Arc`, so it writes no cache line another core reads (the guard's pin
//! writes only this thread's epoch record, and is nested, so free, inside the engine's own
//! pin). An insert is one lock-free skip-list insert (a split's new right leaf).

use std::ops::Bound;
use std::sync::Arc;

use crossbeam_epoch::Guard;
use crossbeam_skiplist::base::SkipList;

use super::leaf::Leaf;

/// A leaf found in the search layer, with its split count at the time it was found.
pub(crate) struct Found<'g> {
    /// The leaf, borrowed from the layer for the life of the caller's guard.
    pub(crate) leaf: &'g Arc<Leaf>,
    /// `leaf.splits()` read when the leaf was found.
    pub(crate) splits: u64,
}

impl Found<'_> {
    /// True if the leaf has not split since it was found, so it still covers every key it
    /// was found for.
    pub(crate) fn still_covers(&self) -> bool {
        self.leaf.splits() == self.splits
    }
}

/// The search layer.
pub(crate) struct SearchLayer {
    map: SkipList<Box<[u8]>, Arc<Leaf>>,
}

impl SearchLayer {
    /// A layer over `leaves` (in any order).
    pub(crate) fn from_leaves(leaves: impl IntoIterator<Item = Arc<Leaf>>) -> SearchLayer {
        let layer = SearchLayer {
            map: SkipList::new(crossbeam_epoch::default_collector().clone()),
        };
        for leaf in leaves {
            layer.insert(leaf);
        }
        layer
    }

    /// The leaf whose anchor is the greatest one `<= key`.
    ///
    /// The split count is read after the lookup, with no lock ordering it against a split
    /// that inserts the right sibling R and then bumps the count: a lookup that missed R
    /// may read the bumped count. So once the count is read the floor's successor is
    /// checked to be above `key`: R's insert happens before the bump, so a reader that read
    /// the bumped count sees R there (anchor `<= key`) and looks again.
    pub(crate) fn find<'g>(&'g self, key: &[u8], guard: &'g Guard) -> Option<Found<'g>> {
        loop {
            let entry = self.map.upper_bound(Bound::Included(key), guard)?;
            let leaf = entry.value();
            let splits = leaf.splits();
            // IMPORTANT: the re-check above; without it two writers of one key can lock
            // two different leaves.
            if entry.next().is_none_or(|next| &**next.key() > key) {
                return Some(Found { leaf, splits });
            }
        }
    }

    /// The anchor of the first leaf after the one anchored at `anchor`, if any.
    pub(crate) fn next_anchor(&self, anchor: &[u8]) -> Option<Box<[u8]>> {
        let guard = crossbeam_epoch::pin();
        self.map
            .lower_bound(Bound::Excluded(anchor), &guard)
            .map(|entry| entry.key().clone())
    }

    /// Adds a leaf (a split's new right sibling).
    pub(crate) fn insert(&self, leaf: Arc<Leaf>) {
        let guard = crossbeam_epoch::pin();
        self.map
            .insert(leaf.anchor.clone(), leaf, &guard)
            .release(&guard);
    }

    /// Every leaf, in anchor order (a snapshot).
    pub(crate) fn leaves(&self) -> Vec<Arc<Leaf>> {
        let guard = crossbeam_epoch::pin();
        self.map.iter(&guard).map(|e| e.value().clone()).collect()
    }

    /// The number of leaves.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// DRAM bytes the layer holds (an estimate): per leaf its handle, its anchor twice (map
    /// key and handle) and the skip-list node (key, value, height and refcount words, and
    /// on average two tower pointers).
    pub(crate) fn dram_bytes(&self) -> u64 {
        let guard = crossbeam_epoch::pin();
        let node = size_of::<Box<[u8]>>() + size_of::<Arc<Leaf>>() + 4 * size_of::<usize>();
        let per_leaf = size_of::<Leaf>() + 2 * size_of::<usize>() + node;
        self.map
            .iter(&guard)
            .map(|e| (per_leaf + 2 * e.key().len()) as u64)
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
        let g = crossbeam_epoch::pin();
        assert_eq!(&*l.find(b"a", &g).unwrap().leaf.anchor, b"");
        assert_eq!(&*l.find(b"g", &g).unwrap().leaf.anchor, b"g");
        assert_eq!(&*l.find(b"h", &g).unwrap().leaf.anchor, b"g");
        assert_eq!(&*l.find(b"zzz", &g).unwrap().leaf.anchor, b"p");
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
        let g = crossbeam_epoch::pin();
        let found = l.find(b"k", &g).unwrap();
        assert!(found.still_covers());
        found.leaf.lock().note_split();
        assert!(!found.still_covers());
    }
}
