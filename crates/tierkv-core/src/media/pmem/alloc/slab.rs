//! Small objects: allocation from and freeing into size-class slabs (`mod.rs`, table
//! rows "new slab", "alloc from a slab", "free into a slab", "release empty slab").
//!
//! A thread allocates from its shard's current slab for the class (a hint, validated under
//! the chunk's lock). When that is full it claims an unclaimed slab with free slots, or
//! makes a new slab from a free chunk, or — when no chunk is free — shares another shard's
//! slab. A slab that becomes empty is released to the free chunks unless some shard has it
//! as its current slab or it is the class's only slab with free slots (so that alloc/free
//! of one object does not format and release a chunk each time); when chunks run out,
//! every empty slab is released (`reclaim_empty_slabs`).
//!
//! Thread safety: see the lock order in `mod.rs`.

use std::sync::atomic::Ordering;

use parking_lot::MutexGuard;

use super::dram::{ChunkDram, SlabDram, split};
use super::layout::ChunkState;
use super::{NO_HINT, PmemAllocator, thread_shard};
use crate::api::error::{Error, Result};

impl PmemAllocator {
    /// Allocates one object of size class `class`.
    pub(super) fn alloc_small(&self, class: u8) -> Result<u64> {
        let shard = thread_shard(self.shards);
        let hint = self
            .hint(shard, class)
            .map_or(NO_HINT, |h| h.load(Ordering::Relaxed));
        if hint != NO_HINT
            && let Some(off) = self.alloc_in(hint, class)?
        {
            return Ok(off);
        }
        loop {
            let k = self.claim_slab(class, shard)?;
            if let Some(h) = self.hint(shard, class) {
                h.store(k, Ordering::Relaxed);
            }
            if let Some(off) = self.alloc_in(k, class)? {
                return Ok(off);
            }
        }
    }

    /// Allocates from chunk `k` if it is a slab of `class` with a free slot (and not being
    /// evacuated).
    pub(super) fn alloc_in(&self, k: u32, class: u8) -> Result<Option<u64>> {
        let mut guard = self.lock_chunk(k)?;
        let ChunkDram::Slab(slab) = &mut *guard else {
            return Ok(None);
        };
        if slab.class != class || slab.evacuating {
            return Ok(None);
        }
        let Some(i) = slab.take() else {
            return Ok(None);
        };
        let (word_off, bit) = self.bitmap_word(k, i);
        // IMPORTANT: the bit is durable before the offset is handed out.
        self.pool.fetch_or_u64(word_off, bit)?;
        self.pool.persist(word_off, 8)?;
        if slab.is_full()
            && let Some(p) = self.partial.get(usize::from(class))
        {
            p.lock().remove(&k);
        }
        let g = self.geometry(class)?;
        Ok(Some(self.layout.chunk_off(k) + g.object_rel(i)))
    }

    /// Frees the object at `off` in slab chunk `k` (whose lock `guard` is).
    pub(super) fn free_small(
        &self,
        k: u32,
        mut guard: MutexGuard<'_, ChunkDram>,
        off: u64,
    ) -> Result<()> {
        let ChunkDram::Slab(slab) = &mut *guard else {
            return Err(self.corrupt(off, format!("offset {off} is not in a slab")));
        };
        let class = slab.class;
        let g = self.geometry(class)?;
        let rel = off - self.layout.chunk_off(k);
        let i = g.object_at(rel).ok_or_else(|| {
            self.corrupt(
                off,
                format!(
                    "free of offset {off}, which is not the start of a {}-byte object",
                    g.size
                ),
            )
        })?;
        if !slab.is_set(i) {
            return Err(self.corrupt(
                off,
                format!("free of offset {off}, which is not allocated (double free?)"),
            ));
        }
        let (word_off, bit) = self.bitmap_word(k, i);
        // IMPORTANT: `free` returns only once the cleared bit is durable.
        self.pool.fetch_and_u64(word_off, !bit)?;
        self.pool.persist(word_off, 8)?;
        let was_full = slab.is_full();
        slab.clear(i);
        let now_empty = slab.used == 0;
        if slab.evacuating {
            // Listed in no free-slot set (`evacuate.rs`): released with its last object.
            return if now_empty {
                self.release_slab(k, &mut guard)
            } else {
                Ok(())
            };
        }
        let Some(partial) = self.partial.get(usize::from(class)) else {
            return Ok(());
        };
        let mut p = partial.lock();
        if now_empty && p.len() > 1 && p.get(&k) == Some(&None) {
            p.remove(&k);
            drop(p);
            return self.release_slab(k, &mut guard);
        }
        if was_full {
            p.insert(k, None);
        }
        Ok(())
    }

    /// Picks a slab of `class` with free slots for `shard`, making one if needed.
    fn claim_slab(&self, class: u8, shard: usize) -> Result<u32> {
        if let Some(k) = self.claim_unclaimed(class, shard) {
            return Ok(k);
        }
        match self.new_slab(class, shard) {
            Err(e @ Error::NoSpace { .. }) => self.share_claimed(class, shard).ok_or(e),
            r => r,
        }
    }

    /// Claims an unclaimed slab of `class` with free slots (dropping `shard`'s old claim).
    fn claim_unclaimed(&self, class: u8, shard: usize) -> Option<u32> {
        let me = u16::try_from(shard).ok()?;
        let mut p = self.partial.get(usize::from(class))?.lock();
        for owner in p.values_mut().filter(|o| **o == Some(me)) {
            *owner = None;
        }
        let (k, owner) = p.iter_mut().find(|(_, o)| o.is_none())?;
        *owner = Some(me);
        Some(*k)
    }

    /// Any slab of `class` with free slots, claimed or not (used when chunks run out).
    fn share_claimed(&self, class: u8, shard: usize) -> Option<u32> {
        let p = self.partial.get(usize::from(class))?.lock();
        let n = p.len();
        if n == 0 {
            return None;
        }
        p.keys().nth(shard % n).copied()
    }

    /// Makes a new, empty slab of `class` from a free chunk, claimed by `shard`.
    fn new_slab(&self, class: u8, shard: usize) -> Result<u32> {
        let g = *self.geometry(class)?;
        let k = self.take_free_run(1)?;
        let mut guard = self.lock_chunk(k)?;
        let chunk_off = self.layout.chunk_off(k);
        // IMPORTANT: the bitmap is zero and durable before the state word says Slab.
        self.pool.fill(chunk_off, g.bitmap_bytes as usize, 0)?;
        self.pool.persist(chunk_off, g.bitmap_bytes as usize)?;
        self.set_state(k, ChunkState::Slab { class })?;
        *guard = ChunkDram::Slab(SlabDram::empty(class, &g));
        self.in_transit.fetch_sub(1, Ordering::Relaxed);
        if let Some(p) = self.partial.get(usize::from(class)) {
            p.lock().insert(k, u16::try_from(shard).ok());
        }
        Ok(k)
    }

    /// Releases empty slab `k` (already out of its class's set) to the free chunks.
    pub(super) fn release_slab(&self, k: u32, guard: &mut MutexGuard<'_, ChunkDram>) -> Result<()> {
        // All its bits are zero and durable, so Free loses nothing.
        self.set_state(k, ChunkState::Free)?;
        **guard = ChunkDram::Free;
        self.free_chunks.lock().insert(k);
        Ok(())
    }

    /// Releases every empty slab (claimed or not) to the free chunks; returns whether any
    /// was released. Called when no chunk is free.
    pub(super) fn reclaim_empty_slabs(&self) -> Result<bool> {
        let mut released = false;
        for (class, partial) in self.partial.iter().enumerate() {
            let candidates: Vec<u32> = partial.lock().keys().copied().collect();
            for k in candidates {
                let mut guard = self.lock_chunk(k)?;
                let empty = matches!(&*guard, ChunkDram::Slab(s) if usize::from(s.class) == class && s.used == 0);
                if empty && partial.lock().remove(&k).is_some() {
                    self.release_slab(k, &mut guard)?;
                    released = true;
                }
            }
        }
        Ok(released)
    }

    /// The absolute offset of the bitmap word holding object `i` of chunk `k`, and its bit.
    fn bitmap_word(&self, k: u32, i: u32) -> (u64, u64) {
        let (wi, bit) = split(i);
        (self.layout.chunk_off(k) + 8 * wi as u64, bit)
    }

    pub(super) fn geometry(&self, class: u8) -> Result<&super::SlabGeometry> {
        self.classes
            .get(class)
            .ok_or_else(|| Error::invalid(format!("size class {class} does not exist")))
    }
}
