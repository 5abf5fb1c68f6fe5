//! Looking at the allocator without changing it: `check` (every metadata invariant,
//! persistent and DRAM), `stats`, and the iterators engines use for leak collection.
//!
//! `check` holds every lock (in the order of `mod.rs`), so it sees one state between
//! operations, and verifies:
//! 1. every chunk-state word is valid, and runs are followed by exactly their
//!    continuations (no orphan survives `open`);
//! 2. every slab's class exists, no bitmap bit (padding included) is set at or past the
//!    slab's capacity, and the DRAM bitmap equals the persistent one;
//! 3. the DRAM state of every chunk equals its state word;
//! 4. the free-chunk set holds exactly the Free chunks not in transit, and each class's set
//!    of slabs with free slots holds exactly its slabs that are not full.
//!
//! Thread safety: `check` blocks allocations for its duration; `stats` and the iterators
//! lock one chunk at a time (a snapshot per chunk, not of the whole region).

use std::collections::BTreeSet;

use parking_lot::MutexGuard;

use super::dram::{ChunkDram, first_bit_beyond_capacity};
use super::layout::ChunkState;
use super::recovery::read_words;
use super::{AllocStats, Allocation, ClassSlabs, OBJECT_TAG, PmemAllocator};
use crate::api::error::{Error, Result, Tier};

/// What `check` accumulates while walking the chunks.
#[derive(Default)]
struct Tally {
    /// The run being walked: its head and the chunk after its end.
    run_head: u32,
    run_end: u32,
    /// Free chunks missing from the free set (must equal `in_transit`).
    free_not_listed: usize,
    /// Per class: slabs that are not full.
    not_full: Vec<usize>,
}

impl PmemAllocator {
    /// Verifies every metadata invariant (see the module doc of `check.rs`);
    /// [`Error::Corruption`] names the first violation.
    pub fn check(&self) -> Result<()> {
        let chunks: Vec<MutexGuard<'_, ChunkDram>> = self.chunks.iter().map(|c| c.lock()).collect();
        let partial: Vec<_> = self.partial.iter().map(|p| p.lock()).collect();
        let free = self.free_chunks.lock();
        let mut walk = Tally {
            not_full: vec![0; partial.len()],
            ..Tally::default()
        };
        for (k, dram) in chunks.iter().enumerate() {
            self.check_chunk(k as u32, dram, &partial, &free, &mut walk)?;
        }
        if u64::from(walk.run_end) > self.layout.chunk_count {
            return Err(self.bad(walk.run_head, "its run passes the end of the region".into()));
        }
        self.check_sets(
            &chunks,
            &free,
            walk.free_not_listed,
            &partial,
            &walk.not_full,
        )
    }

    /// One chunk's state word against its DRAM state, in the walk's context.
    fn check_chunk(
        &self,
        k: u32,
        dram: &ChunkDram,
        partial: &[MutexGuard<'_, ClassSlabs>],
        free: &BTreeSet<u32>,
        walk: &mut Tally,
    ) -> Result<()> {
        let state = self.persistent_state(k)?;
        match (state, dram) {
            (ChunkState::Cont { back }, ChunkDram::Cont)
                if k < walk.run_end && back == k - walk.run_head => {}
            (_, _) if k < walk.run_end => {
                let (h, e) = (walk.run_head, walk.run_end);
                return Err(self.bad(k, format!("{state:?} inside the run of chunks {h}..{e}")));
            }
            (ChunkState::Free, ChunkDram::Free) => {
                walk.free_not_listed += usize::from(!free.contains(&k));
            }
            (ChunkState::Run { tag, len }, ChunkDram::Run { tag: t, len: l })
                if (tag, len) == (*t, *l) =>
            {
                (walk.run_head, walk.run_end) = (k, k.saturating_add(len));
            }
            (ChunkState::Slab { class }, ChunkDram::Slab(s)) if s.class == class => {
                self.check_slab(k, class, s.words(), s.used)?;
                let listed = partial
                    .get(usize::from(class))
                    .is_some_and(|p| p.contains_key(&k));
                if listed != s.offers_slots() {
                    let (used, cap) = (s.used, s.capacity);
                    let not = if listed { "" } else { "not " };
                    let ev = if s.evacuating {
                        " (being evacuated)"
                    } else {
                        ""
                    };
                    let what = format!(
                        "slab with {used} of {cap} used{ev} is {not}in its class's free-slot set"
                    );
                    return Err(self.bad(k, what));
                }
                if let Some(n) = walk.not_full.get_mut(usize::from(class)) {
                    *n += usize::from(s.offers_slots());
                }
            }
            (_, dram) => {
                return Err(self.bad(k, format!("state word says {state:?}, DRAM says {dram:?}")));
            }
        }
        Ok(())
    }

    /// Free set and per-class sets hold nothing but what the walk counted.
    fn check_sets(
        &self,
        chunks: &[MutexGuard<'_, ChunkDram>],
        free: &BTreeSet<u32>,
        free_not_listed: usize,
        partial: &[MutexGuard<'_, ClassSlabs>],
        not_full: &[usize],
    ) -> Result<()> {
        let in_transit = self.in_transit.load(std::sync::atomic::Ordering::Relaxed);
        if free_not_listed != in_transit {
            return Err(self.bad(0, format!("{free_not_listed} free chunks are missing from the free set but {in_transit} are in transit")));
        }
        if let Some(k) = free.iter().find(|k| {
            !matches!(
                chunks.get(**k as usize).map(|g| &**g),
                Some(ChunkDram::Free)
            )
        }) {
            return Err(self.bad(*k, "in the free set but not free".into()));
        }
        for (class, (p, n)) in partial.iter().zip(not_full).enumerate() {
            if p.len() != *n {
                return Err(self.bad(
                    0,
                    format!(
                        "size class {class}: {} slabs listed with free slots, {n} exist",
                        p.len()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// A slab's persistent bitmap against its DRAM bitmap and capacity.
    fn check_slab(&self, k: u32, class: u8, dram_words: &[u64], used: u32) -> Result<()> {
        let g = self.geometry(class)?;
        let off = self.layout.chunk_off(k);
        let words = read_words(&self.pool, off, g.bitmap_words())?;
        if let Some(bit) = first_bit_beyond_capacity(&words, g.capacity) {
            return Err(Error::corruption(
                Tier::Pmem,
                off + bit / 8,
                format!(
                    "allocator slab chunk {k}: bit {bit} is set past the slab's capacity of {} objects",
                    g.capacity
                ),
            ));
        }
        let persisted = words.get(..dram_words.len()).unwrap_or_default();
        if persisted != dram_words {
            return Err(self.bad(k, "slab bitmap in DRAM differs from the pool".into()));
        }
        let ones: u32 = dram_words.iter().map(|w| w.count_ones()).sum();
        if ones != used {
            return Err(self.bad(
                k,
                format!("slab counts {used} objects but its bitmap has {ones}"),
            ));
        }
        Ok(())
    }

    fn persistent_state(&self, k: u32) -> Result<ChunkState> {
        let off = self.layout.state_off(k);
        let w = self.pool.load_u64(off)?;
        ChunkState::decode(w).ok_or_else(|| self.bad(k, format!("invalid state word {w:#018x}")))
    }

    fn bad(&self, k: u32, what: String) -> Error {
        Error::corruption(
            Tier::Pmem,
            self.layout.state_off(k),
            format!("allocator chunk {k}: {what}"),
        )
    }

    /// Usage now (each chunk read under its own lock).
    pub fn stats(&self) -> AllocStats {
        let cs = self.layout.chunk_size;
        let mut s = AllocStats {
            chunk_size: cs,
            chunks: self.layout.chunk_count,
            repaired_at_open: self.repaired_at_open,
            ..AllocStats::default()
        };
        for c in self.chunks.iter() {
            match &*c.lock() {
                ChunkDram::Free => {
                    s.free_chunks += 1;
                    s.free_bytes += cs;
                }
                ChunkDram::Run { .. } | ChunkDram::Cont => {
                    s.run_chunks += 1;
                    s.used_bytes += cs;
                }
                ChunkDram::Slab(slab) => {
                    let size = self.classes.get(slab.class).map_or(0, |g| g.size);
                    s.slab_chunks += 1;
                    s.used_bytes += u64::from(slab.used) * size;
                    s.free_bytes += u64::from(slab.capacity - slab.used) * size;
                }
            }
        }
        s
    }

    /// Every live allocation made by [`PmemAllocator::alloc`], in offset order (for leak
    /// collection at recovery; see the module doc).
    pub fn iter_allocated(&self) -> impl Iterator<Item = Allocation> + use<> {
        let mut out = Vec::new();
        for (k, c) in self.chunks.iter().enumerate() {
            let chunk_off = self.layout.chunk_off(k as u32);
            match &*c.lock() {
                ChunkDram::Run {
                    tag: OBJECT_TAG,
                    len,
                } => out.push(Allocation {
                    offset: chunk_off,
                    size: u64::from(*len) * self.layout.chunk_size,
                }),
                ChunkDram::Slab(slab) => {
                    let Some(g) = self.classes.get(slab.class) else {
                        continue;
                    };
                    for (wi, w) in slab.words().iter().enumerate() {
                        let mut bits = *w;
                        while bits != 0 {
                            let i = wi as u32 * 64 + bits.trailing_zeros();
                            bits &= bits - 1;
                            out.push(Allocation {
                                offset: chunk_off + g.object_rel(i),
                                size: g.size,
                            });
                        }
                    }
                }
                _ => {}
            }
        }
        out.into_iter()
    }

    /// Every live chunk allocation with `tag` (from `alloc_chunk`/`alloc_chunks`), in
    /// offset order.
    pub fn iter_chunks(&self, tag: u32) -> impl Iterator<Item = Allocation> + use<> {
        let mut out = Vec::new();
        for (k, c) in self.chunks.iter().enumerate() {
            if let ChunkDram::Run { tag: t, len } = &*c.lock()
                && *t == tag
                && tag != OBJECT_TAG
            {
                out.push(Allocation {
                    offset: self.layout.chunk_off(k as u32),
                    size: u64::from(*len) * self.layout.chunk_size,
                });
            }
        }
        out.into_iter()
    }
}
