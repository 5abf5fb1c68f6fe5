//! Slab evacuation: the allocator's part of defragmentation by an engine that can move its
//! objects (mio's repository, `crates/engines/mio/src/defrag.rs`).
//!
//! Slabs fragment: after deletes, a size class may hold many partly empty slab chunks whose
//! free slots only serve that class, while a request of another class (or a whole-chunk
//! one) needs a free chunk. An engine that can relocate objects asks [`PmemAllocator::slabs`]
//! for every slab's occupancy, picks a sparse one, and calls
//! [`PmemAllocator::evacuate_slab`]. While the returned [`SlabEvacuation`] lives, no
//! allocation lands in that slab (it leaves its class's free-slot set), the engine copies
//! each object with [`SlabEvacuation::alloc_elsewhere`] (a slot in *another existing* slab
//! of the class: never a new slab, which would defeat the purpose), relinks it, and frees
//! the old one; the slab goes back to the free chunks when its last object is freed. If the
//! engine stops early, dropping the evacuation makes the slab an ordinary one again.
//!
//! The evacuating mark is DRAM only and changes no persistent word: a crash in the middle
//! leaves an ordinary slab (the engine's own recovery decides which copy of a half-moved
//! object is referenced, and frees the other as a leak).
//!
//! Thread safety: lock order as in `mod.rs` (a chunk's state, then its class's set).

use super::PmemAllocator;
use super::dram::ChunkDram;
use crate::api::error::{Error, Result, Tier};

/// The occupancy of one slab chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlabUsage {
    /// The chunk's absolute pool offset.
    pub offset: u64,
    /// Its size class.
    pub class: u8,
    /// Bytes per object of the class.
    pub object_size: u64,
    /// Objects allocated.
    pub used: u32,
    /// Objects the chunk holds.
    pub capacity: u32,
}

/// A slab being evacuated (see the module doc); ends when dropped.
#[derive(Debug)]
pub struct SlabEvacuation<'a> {
    alloc: &'a PmemAllocator,
    chunk: u32,
    class: u8,
}

impl PmemAllocator {
    /// Every slab chunk with its class and occupancy, in offset order (O(chunks), no
    /// object walk).
    pub fn slabs(&self) -> Vec<SlabUsage> {
        let mut out = Vec::new();
        for (k, c) in self.chunks.iter().enumerate() {
            if let ChunkDram::Slab(s) = &*c.lock() {
                out.push(SlabUsage {
                    offset: self.layout.chunk_off(k as u32),
                    class: s.class,
                    object_size: self.classes.get(s.class).map_or(0, |g| g.size),
                    used: s.used,
                    capacity: s.capacity,
                });
            }
        }
        out
    }

    /// Starts evacuating the slab chunk at `chunk_off`: from now on no allocation lands in
    /// it, and it is released to the free chunks when its last object is freed. Fails if
    /// the chunk is not a slab or is already being evacuated.
    pub fn evacuate_slab(&self, chunk_off: u64) -> Result<SlabEvacuation<'_>> {
        self.start_evacuation(chunk_off, None)?.ok_or_else(|| {
            Error::invalid(format!("evacuate_slab: chunk at {chunk_off} is not a slab"))
        })
    }

    /// [`PmemAllocator::evacuate_slab`] of a slab of `class` picked from an earlier
    /// [`PmemAllocator::slabs`] snapshot: None when the chunk is no longer a slab of that
    /// class. Other threads free and allocate while the engine picks, so the slab's last
    /// object may have been freed meanwhile and its chunk given back or put to another use
    /// (mio's defragmentation once poisoned a store on that race: "chunk at 892928 is not a
    /// slab").
    pub fn evacuate_slab_of(
        &self,
        chunk_off: u64,
        class: u8,
    ) -> Result<Option<SlabEvacuation<'_>>> {
        self.start_evacuation(chunk_off, Some(class))
    }

    /// Marks the slab at `chunk_off` evacuating, under its chunk's lock; None when the
    /// chunk is not a slab (of `class`, if given).
    fn start_evacuation(
        &self,
        chunk_off: u64,
        class: Option<u8>,
    ) -> Result<Option<SlabEvacuation<'_>>> {
        let k = self.chunk_of(chunk_off)?;
        if self.layout.chunk_off(k) != chunk_off {
            return Err(Error::invalid(format!(
                "evacuate_slab: offset {chunk_off} is not the start of a chunk"
            )));
        }
        let mut guard = self.lock_chunk(k)?;
        let ChunkDram::Slab(slab) = &mut *guard else {
            return Ok(None);
        };
        if class.is_some_and(|c| c != slab.class) {
            return Ok(None);
        }
        if slab.evacuating {
            return Err(Error::invalid(format!(
                "evacuate_slab: the slab at {chunk_off} is already being evacuated"
            )));
        }
        slab.evacuating = true;
        let class = slab.class;
        if let Some(p) = self.partial.get(usize::from(class)) {
            p.lock().remove(&k);
        }
        Ok(Some(SlabEvacuation {
            alloc: self,
            chunk: k,
            class,
        }))
    }
}

impl SlabEvacuation<'_> {
    /// The evacuated chunk's offset.
    pub fn chunk_offset(&self) -> u64 {
        self.alloc.layout.chunk_off(self.chunk)
    }

    /// The size class being evacuated.
    pub fn class(&self) -> u8 {
        self.class
    }

    /// The objects still allocated in the slab, in offset order (none once it has been
    /// released).
    pub fn objects(&self) -> Result<Vec<u64>> {
        let guard = self.alloc.lock_chunk(self.chunk)?;
        let ChunkDram::Slab(slab) = &*guard else {
            return Ok(Vec::new());
        };
        if !slab.evacuating || slab.class != self.class {
            return Ok(Vec::new());
        }
        let g = self.alloc.geometry(self.class)?;
        let base = self.chunk_offset();
        let mut out = Vec::with_capacity(slab.used as usize);
        for (wi, w) in slab.words().iter().enumerate() {
            let mut bits = *w;
            while bits != 0 {
                let i = wi as u32 * 64 + bits.trailing_zeros();
                bits &= bits - 1;
                out.push(base + g.object_rel(i));
            }
        }
        Ok(out)
    }

    /// Whether the slab went back to the free chunks (its last object was freed).
    pub fn is_released(&self) -> bool {
        self.alloc
            .lock_chunk(self.chunk)
            .map(|g| !matches!(&*g, ChunkDram::Slab(s) if s.evacuating && s.class == self.class))
            .unwrap_or(true)
    }

    /// Allocates an object of the evacuated class in another slab that has a free slot
    /// already; never makes a new slab. [`Error::NoSpace`] when no such slot exists.
    /// Durable when it returns, as [`PmemAllocator::alloc`].
    pub fn alloc_elsewhere(&self) -> Result<u64> {
        let a = self.alloc;
        let candidates: Vec<u32> = match a.partial.get(usize::from(self.class)) {
            Some(p) => p.lock().keys().copied().collect(),
            None => Vec::new(),
        };
        for k in candidates {
            if k != self.chunk
                && let Some(off) = a.alloc_in(k, self.class)?
            {
                return Ok(off);
            }
        }
        Err(Error::no_space(
            Tier::Pmem,
            "slab evacuation: no other slab of the class has a free slot",
        ))
    }
}

impl Drop for SlabEvacuation<'_> {
    fn drop(&mut self) {
        let a = self.alloc;
        let Ok(mut guard) = a.lock_chunk(self.chunk) else {
            return;
        };
        let ChunkDram::Slab(slab) = &mut *guard else {
            return; // released (and perhaps reused since): nothing of ours is left
        };
        if !slab.evacuating || slab.class != self.class {
            return;
        }
        slab.evacuating = false;
        if slab.used == 0 {
            // A failed persist poisons the pool; every later operation reports it.
            let _ = a.release_slab(self.chunk, &mut guard);
        } else if !slab.is_full()
            && let Some(p) = a.partial.get(usize::from(self.class))
        {
            p.lock().insert(self.chunk, None);
        }
    }
}
