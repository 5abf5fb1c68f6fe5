//! The room a set of inserts may take (not in PRISM, whose writes are single-key: the
//! write batches of issue 24; the split is PACTree's data-node split, SOSP '21 §4): how
//! many node slots and key-blob slots inserting given keys can allocate, so that a write
//! batch can reserve them before its commit point.
//!
//! # What allocates
//! An insert allocates a blob slot if its key is longer than [`INLINE_KEY_CAP`] (class of
//! its own length), and nothing else. A split allocates one node slot (the right sibling R)
//! and, if its *split key* S (the smallest key moved to R, which becomes R's anchor) is
//! long, one blob slot of S's class. An insert splits at most once: it splits only the
//! full leaf that covers its key, and then lands in one of the halves, which both have
//! room (below). So bounding what N inserts take means bounding the splits, and the split
//! keys of each blob class.
//!
//! # How a split divides a leaf
//! A split runs only on a full leaf: `f` live entries, `f` = fanout ≥ 2. The lower
//! `⌊f/2⌋` stay in L, the upper `⌈f/2⌉` move to R. So right after a split, L has `⌈f/2⌉`
//! free entries and R has `⌊f/2⌋`: every leaf a split leaves behind has at least
//! `h = ⌊f/2⌋ ≥ 1` free entries (the split is uneven for odd `f`; `h` is the smaller half).
//!
//! # The bound, per target leaf
//! Group the N keys by the leaf X the DRAM search layer maps them to now (the leaf whose
//! anchor is the greatest `<=` the key). While nothing else inserts, X's key range
//! `[anchor(X), anchor(next))` only gets subdivided among X and the leaves split off it,
//! and each of the `k` keys in that range is inserted into one of them. Let `r` be X's free
//! entries now. Call a *state* a leaf between two of its splits (L after a split is a new
//! state). Then:
//! - X's current state splits only when full, i.e. after at least `r` of the `k` inserts
//!   landed in it (removes only delay that). If `k <= r`, no split happens in the range.
//! - Otherwise X splits once in its current state, triggered by insert number `t >= r + 1`.
//!   Inserts `t..=k` — at most `k - r` — land in states made by splits. Such a state
//!   starts with at least `h` free entries, so it splits only after `h` inserts landed in
//!   it; a landed insert belongs to exactly one state. So at most `⌊(k - r) / h⌋` states
//!   made by splits split again.
//!
//! Splits in the range: `0` if `k <= r`, else at most `1 + ⌊(k - r) / h⌋`. Summed over the
//! target leaves this is at most `min(N, leaves) + ⌊N / h⌋` — about 1 + N/32 for
//! ascending keys at fanout 64, instead of the N the first reservation assumed.
//!
//! # Split keys by blob class
//! A split key is a key live in the range when the split runs: one of X's live keys now
//! or one of the `k` inserted keys (nothing else is inserted; a removed key is not
//! inserted again). A key is a split key at most once: after its split it is the smallest
//! key of R (R's anchor is that key), a later split of R keeps it in the lower half
//! (`⌊f/2⌋ ≥ 1` entries stay), and it never moves to another leaf. So the splits in the
//! range whose split key is in blob class `c` are at most
//! `min(splits, live keys of class c in X + inserted keys of class c in the range)`.
//!
//! The result counts the room itself; [`super::heap::SlotHeap::reserve`] then makes sure
//! that many slots of each kind are free (slots already free count). Over-counting is
//! harmless (a key that turns out present, a key listed twice, removes that free room);
//! under-counting would let a batch fail after its commit point, so every step above
//! rounds up.
//!
//! Thread safety: reads leaves optimistically; the bound holds while nothing else
//! inserts (a write batch holds the batch gate exclusively). If a target leaf splits
//! while the room is computed, the computation starts again.

use std::collections::HashMap;
use std::sync::Arc;

use tierkv_core::{Error, Result};

use super::format::{BLOB_CLASSES, INLINE_KEY_CAP, blob_class, full_bitmap, live_slots};
use super::leaf::Leaf;
use super::node::NodeRef;
use super::{PersistentKeyIndex, check_key};

const CLASSES: usize = BLOB_CLASSES.len();

/// Slots that some inserts may allocate: node slots, and blob slots per blob class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct InsertRoom {
    /// Node slots (one per split).
    pub(crate) nodes: usize,
    /// Blob slots per class: the long inserted keys, and the anchors of splits whose split
    /// key is long.
    pub(crate) blobs: [usize; CLASSES],
}

impl InsertRoom {
    /// All slots counted.
    #[cfg(test)]
    pub(crate) fn slots(&self) -> usize {
        self.nodes + self.blobs.iter().sum::<usize>()
    }
}

/// The inserted keys that fall into one target leaf's range.
struct Target {
    leaf: Arc<Leaf>,
    /// The leaf's split count when it was found (it must not change meanwhile).
    splits: u64,
    inserts: usize,
    /// Inserted keys per blob class (long keys only).
    long: [usize; CLASSES],
}

/// The blob class of a key of `len` bytes, `None` if it is stored inline.
fn long_class(len: usize) -> Result<Option<usize>> {
    if len <= INLINE_KEY_CAP {
        return Ok(None);
    }
    blob_class(len)
        .map(Some)
        .ok_or_else(|| Error::invalid(format!("key of {len} bytes")))
}

/// Splits in a target range with `free` free entries that gets `inserts` inserts, at a
/// fanout whose smaller split half is `half` (module doc).
pub(crate) fn splits_bound(inserts: usize, free: usize, half: usize) -> usize {
    if inserts <= free {
        0
    } else {
        1 + (inserts - free) / half.max(1)
    }
}

impl PersistentKeyIndex {
    /// The room inserting `keys` (absent from the index, each once, in any order,
    /// interleaved with any removes) may allocate while nothing else inserts (module doc).
    pub(crate) fn room_for_inserts<'k>(
        &self,
        keys: impl IntoIterator<Item = &'k [u8]>,
    ) -> Result<InsertRoom> {
        let keys: Vec<&[u8]> = keys.into_iter().collect();
        loop {
            if let Some(room) = self.try_room(&keys)? {
                return Ok(room);
            }
        }
    }

    /// One attempt of [`Self::room_for_inserts`]: `None` if a target leaf split meanwhile.
    fn try_room(&self, keys: &[&[u8]]) -> Result<Option<InsertRoom>> {
        let mut room = InsertRoom::default();
        let mut targets: HashMap<u64, Target> = HashMap::new();
        let guard = crossbeam_epoch::pin();
        for &key in keys {
            check_key(key)?;
            let class = long_class(key.len())?;
            let found = self.find_leaf(key, &guard)?;
            let t = targets.entry(found.leaf.off).or_insert_with(|| Target {
                splits: found.splits,
                leaf: found.leaf.clone(),
                inserts: 0,
                long: [0; CLASSES],
            });
            t.inserts += 1;
            if let Some(c) = class {
                t.long[c] += 1;
                room.blobs[c] += 1;
            }
        }
        for t in targets.values() {
            let (splits, live) = self.target_splits(t)?;
            room.nodes += splits;
            for ((blobs, live), long) in room.blobs.iter_mut().zip(live).zip(t.long) {
                *blobs += splits.min(live + long);
            }
        }
        let stable = targets.values().all(|t| t.leaf.splits() == t.splits);
        Ok(stable.then_some(room))
    }

    /// The splits the inserts of `t` may cause, and (only when that is not 0) the live
    /// keys of each blob class in its leaf now.
    fn target_splits(&self, t: &Target) -> Result<(usize, [usize; CLASSES])> {
        let node = NodeRef::new(&self.pool, t.leaf.off);
        t.leaf.read_optimistic(|| {
            let header = node.header()?;
            let live = header.bitmap & full_bitmap(header.fanout);
            let free = header.fanout - live.count_ones() as usize;
            let splits = splits_bound(t.inserts, free, header.fanout / 2);
            let mut classes = [0; CLASSES];
            if splits > 0 {
                for slot in live_slots(live) {
                    if let Some(c) = long_class(node.entry(slot)?.key.len())? {
                        classes[c] += 1;
                    }
                }
            }
            Ok((splits, classes))
        })
    }
}
