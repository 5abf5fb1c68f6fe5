//! The `blocks` array of Eq. 1 (HeterMM §4.2): logical block number → base offset of its
//! pmem copy, with the "compressed" bit of §5.2; and the per-block bookkeeping that
//! flushing, marking and reorganisation share.
//!
//! The array is a four-level radix table of atomic words (12 bits a level, nodes made on
//! first use), so the read path translates an address with four loads and no lock, however
//! sparse the live block numbers become (old cold blocks live on while new numbers keep
//! growing). It spans every block number the block directory can name (48 bits): the 2^26
//! of the old two-level table ran out after 2^26 flushes (issue 22). A sparse table costs a
//! leaf (32 KiB) per live block in the worst case, the same as before; the interior levels
//! are shared by 2^24 consecutive numbers (32 TiB of blocks at 2 MiB). A word is
//! `base | COMPACT` (bases are chunk aligned) or 0. Reorganisation swaps a block's word to
//! its compact copy with one store; the old copy is freed only after the epochs show that
//! no reader can still use the old base.
//!
//! Thread safety: the radix words are atomics (stored `Release` by the flusher and the
//! reclaimer, loaded `Acquire` by readers). [`BlockInfo`]s sit behind a mutex each; the
//! flusher (marks) and the reclaimer (reorganisation) take it, so a mark never lands on a
//! copy that is being replaced. Lock order: a block's mutex, then the table's map.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use tierkv_core::{Error, Result, Tier};

/// Bits of block number each level of the radix table resolves.
const LEVEL_BITS: u32 = 12;
const LEVEL_MASK: u64 = (1 << LEVEL_BITS) - 1;
/// Block numbers this table can hold: all that a directory word can name.
pub const MAX_BLOCKS: u64 = crate::format::dir::MAX_BLOCK_NO + 1;
const _: () = assert!(MAX_BLOCKS == 1 << (4 * LEVEL_BITS));

/// A level of the radix table: `1 << LEVEL_BITS` children, each made on first use.
type Level<T> = Box<[OnceLock<T>]>;
/// A leaf: the words of `1 << LEVEL_BITS` consecutive block numbers.
type Leaf = Box<[AtomicU64]>;

fn level<T>() -> Level<T> {
    (0..1 << LEVEL_BITS).map(|_| OnceLock::new()).collect()
}

/// Child `i` of a level, made if `make` (else `None` when it was never made).
fn child<T>(level: &Level<T>, i: u64, make: bool, new: impl FnOnce() -> T) -> Option<&T> {
    let cell = &level[(i & LEVEL_MASK) as usize];
    if make {
        Some(cell.get_or_init(new))
    } else {
        cell.get()
    }
}
/// The "compressed" bit of a radix word.
const COMPACT: u64 = 1;

/// How a block is stored on pmem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// A full block: records at their offsets, an invalid bitmap in the prefix.
    Full,
    /// A compact block of `slots` records found through its hash table.
    Compact {
        /// Records (= hash slots).
        slots: u32,
    },
}

/// What the background threads know about one published block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockInfo {
    /// Offset of the run holding it.
    pub off: u64,
    /// Bytes of that run.
    pub run_len: u64,
    /// Full or compact.
    pub layout: Layout,
    /// Bytes of records in it that are not marked invalid.
    pub live: u64,
    /// Bytes of records it can hold (full) or held when it was made (compact).
    pub capacity: u64,
    /// Reorganisation generation (in its directory word).
    pub generation: u16,
}

impl BlockInfo {
    /// The fraction of its capacity that is invalid.
    pub fn invalid_fraction(&self) -> f64 {
        if self.capacity == 0 {
            return 1.0;
        }
        1.0 - self.live.min(self.capacity) as f64 / self.capacity as f64
    }
}

/// One block's lock and state.
pub type BlockCell = Arc<Mutex<BlockInfo>>;

/// A test hook of [`BlockTable::publish`]: sees the block number (`regressions.rs`).
#[cfg(test)]
pub type PublishHook = Arc<dyn Fn(u64) + Send + Sync>;

/// The blocks array and the block bookkeeping.
pub struct BlockTable {
    radix: Level<Level<Level<Leaf>>>,
    infos: Mutex<BTreeMap<u64, BlockCell>>,
    capacity: u64,
    /// Runs in [`BlockTable::publish`] once the block's cell can be found by other threads
    /// (the reclaimer), before `publish` returns: where the flusher may be preempted.
    #[cfg(test)]
    pub publish_hook: Mutex<Option<PublishHook>>,
}

impl Default for BlockTable {
    fn default() -> Self {
        BlockTable::with_capacity(MAX_BLOCKS)
    }
}

impl BlockTable {
    /// A table for block numbers below `capacity` (at most [`MAX_BLOCKS`]; tests lower it).
    pub fn with_capacity(capacity: u64) -> BlockTable {
        BlockTable {
            radix: level(),
            infos: Mutex::new(BTreeMap::new()),
            capacity: capacity.min(MAX_BLOCKS),
            #[cfg(test)]
            publish_hook: Mutex::new(None),
        }
    }

    /// Block numbers this table holds: every block number is below it. Callers refuse to
    /// hand out an address in a block past it *before* they change anything, so
    /// [`BlockTable::publish`] never fails on a block whose directory word is durable.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    fn word(&self, b: u64, make: bool) -> Option<&AtomicU64> {
        if b >= self.capacity {
            return None;
        }
        let upper = child(&self.radix, b >> (3 * LEVEL_BITS), make, level)?;
        let middle = child(upper, b >> (2 * LEVEL_BITS), make, level)?;
        let leaf = child(middle, b >> LEVEL_BITS, make, || {
            (0..1 << LEVEL_BITS).map(|_| AtomicU64::new(0)).collect()
        })?;
        leaf.get((b & LEVEL_MASK) as usize)
    }

    /// Eq. 1, lower half: the base of block `b` and whether it is compact.
    pub fn base(&self, b: u64) -> Option<(u64, bool)> {
        let w = self.word(b, false)?.load(Ordering::Acquire);
        (w != 0).then_some((w & !COMPACT, w & COMPACT != 0))
    }

    /// Publishes block `b`'s first copy in the array and records its info (a flush, or
    /// recovery). A block is published once: later copies are swapped in by the reclaimer
    /// under the block's lock ([`BlockTable::swap_base`]).
    ///
    /// IMPORTANT: the cell goes into the table complete, and nothing here writes it again:
    /// once the map's lock is released the reclaimer can find the block and reorganise it
    /// (swap the cell to a compact copy, free this run). Until bbd7d0a `publish` locked the
    /// cell after releasing the map's lock and stored `info` a second time: a reorganisation
    /// that ran in between was undone — the cell named the freed run at generation 0 again
    /// (the base stayed on the copy) — and the next one copied the block again out of the
    /// freed run, published a second generation-1 copy (which recovery refuses) and freed
    /// the run twice (stress space seed 3271, 2026-11-26; `regressions.rs`
    /// `a_reorganisation_racing_the_publish_of_its_block_is_not_undone`).
    ///
    /// Publishing a block that is already published is refused, as corruption (a check: no
    /// path is known to do it). Overwriting its cell would hand it back a run that a
    /// reorganisation may have freed since, with the same two consequences.
    pub fn publish(&self, b: u64, info: BlockInfo) -> Result<()> {
        let w = self.word(b, true).ok_or_else(|| {
            Error::no_space(
                Tier::Pmem,
                format!(
                    "logical block {b} is past the {} blocks the table holds",
                    self.capacity
                ),
            )
        })?;
        let compact = matches!(info.layout, Layout::Compact { .. });
        {
            let mut infos = self.infos.lock();
            if let Some(cell) = infos.get(&b) {
                let cell = cell.clone();
                drop(infos);
                // Lock order: a block's cell before the table's map.
                let was = *cell.lock();
                return Err(Error::corruption(
                    Tier::Pmem,
                    info.off,
                    format!(
                        "block {b} published a second time, at {} (it is published at {}, \
                         generation {})",
                        info.off, was.off, was.generation
                    ),
                ));
            }
            // The word before the cell, under the map's lock: the reclaimer finds the block
            // only through its cell, and its swap must come after this store.
            w.store(
                info.off | if compact { COMPACT } else { 0 },
                Ordering::Release,
            );
            infos.insert(b, Arc::new(Mutex::new(info)));
        }
        #[cfg(test)]
        {
            let hook = self.publish_hook.lock().clone();
            if let Some(h) = hook {
                h(b);
            }
        }
        Ok(())
    }

    /// Updates the array word of block `b` to its (new) copy without touching its info
    /// (the caller holds the info's lock and updates it).
    pub fn swap_base(&self, b: u64, off: u64, compact: bool) {
        if let Some(w) = self.word(b, true) {
            w.store(off | if compact { COMPACT } else { 0 }, Ordering::Release);
        }
    }

    /// Removes block `b` from the array and the bookkeeping.
    pub fn remove(&self, b: u64) {
        if let Some(w) = self.word(b, false) {
            w.store(0, Ordering::Release);
        }
        self.infos.lock().remove(&b);
    }

    /// Block `b`'s cell.
    pub fn info(&self, b: u64) -> Option<BlockCell> {
        self.infos.lock().get(&b).cloned()
    }

    /// A snapshot of every block's info (for policies, stats and checks).
    pub fn snapshot(&self) -> Vec<(u64, BlockInfo)> {
        let cells: Vec<(u64, BlockCell)> = self
            .infos
            .lock()
            .iter()
            .map(|(b, c)| (*b, c.clone()))
            .collect();
        cells.into_iter().map(|(b, c)| (b, *c.lock())).collect()
    }

    /// Published blocks.
    pub fn len(&self) -> usize {
        self.infos.lock().len()
    }

    /// True when no block is published.
    pub fn is_empty(&self) -> bool {
        self.infos.lock().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(off: u64, layout: Layout) -> BlockInfo {
        BlockInfo {
            off,
            run_len: 4096,
            layout,
            live: 10,
            capacity: 40,
            generation: 0,
        }
    }

    #[test]
    fn sparse_block_numbers_translate() {
        let t = BlockTable::default();
        assert_eq!(t.base(3), None);
        t.publish(3, info(8192, Layout::Full)).unwrap();
        t.publish(1 << 20, info(16384, Layout::Compact { slots: 2 }))
            .unwrap();
        assert_eq!(t.base(3), Some((8192, false)));
        assert_eq!(t.base(1 << 20), Some((16384, true)));
        // Numbers far past the old table's 2^26, up to the directory's last one.
        for (i, b) in [1 << 26, (1 << 36) + 5, (1 << 47) + 3, MAX_BLOCKS - 1]
            .into_iter()
            .enumerate()
        {
            assert_eq!(t.base(b), None);
            t.publish(b, info(65536 * (i as u64 + 1), Layout::Full))
                .unwrap();
            assert_eq!(t.base(b), Some((65536 * (i as u64 + 1), false)));
            assert_eq!(t.base(b - 1), None);
            assert_eq!(t.base(b ^ (1 << 13)), None, "another leaf");
        }
        assert_eq!(t.base(3), Some((8192, false)));
        assert!(t.publish(MAX_BLOCKS, info(4096, Layout::Full)).is_err());
        let small = BlockTable::with_capacity(100);
        assert!(small.publish(100, info(4096, Layout::Full)).is_err());
        assert_eq!(small.base(100), None);
        let again = t
            .publish(3, info(32768, Layout::Full))
            .unwrap_err()
            .to_string();
        assert!(again.contains("block 3 published a second time"), "{again}");
        assert_eq!(t.base(3), Some((8192, false)), "the first copy stays");
        assert_eq!(t.len(), 6);
        t.remove(3);
        assert_eq!(t.base(3), None);
        assert_eq!(t.snapshot().len(), 5);
        assert_eq!(info(0, Layout::Full).invalid_fraction(), 0.75);
    }
}
