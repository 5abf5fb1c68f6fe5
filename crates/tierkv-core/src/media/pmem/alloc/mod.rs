//! [`PmemAllocator`]: a crash-consistent allocator over a region of a [`PmemPool`], shared
//! by the engines (DESIGN §4; layout in `../FORMAT.md` § Allocator region).
//!
//! The region is cut into chunks (default [`DEFAULT_CHUNK_SIZE`], a power of two). A
//! persistent *chunk table* holds one 8-byte state word per chunk: free, a slab of one
//! size class, the head of a run of whole chunks (with a caller's tag), or a continuation
//! of a run. Small requests (16 bytes to `chunk_size / 8`) come from slabs, whose
//! persistent bitmap (at the start of the slab chunk) has one bit per object; larger ones
//! take a run of whole chunks. DRAM mirrors (per-chunk state and bitmaps, the free-chunk
//! set, per-class sets of slabs with free slots) are rebuilt from the table at open.
//!
//! # Crash consistency
//! Every metadata change is one aligned 8-byte atomic store / OR / AND, followed by a
//! `persist` of that word before anything depends on it. The orders that make every crash
//! image (line-level or word-torn) acceptable to [`PmemAllocator::open`] and
//! [`PmemAllocator::check`]:
//!
//! | operation            | steps, each persisted before the next                      |
//! |----------------------|------------------------------------------------------------|
//! | new slab             | zero the bitmap area; state := Slab(c)                     |
//! | alloc from a slab    | OR the object's bit (then the offset is returned)          |
//! | free into a slab     | AND out the object's bit (then `free` returns)             |
//! | release empty slab   | state := Free (all its bits are already 0)                 |
//! | alloc run of n       | continuations 1..n := Cont(j); head := Run(tag, n)         |
//! | free run             | head := Free; continuations := Free                        |
//!
//! Evacuating a slab (`evacuate.rs`, for engines that defragment by moving objects) is a
//! DRAM-only mark: it changes no persistent word, so a crash leaves an ordinary slab.
//!
//! A crash between two steps leaves either an unchanged chunk, a zeroed bitmap under a
//! Free state, an empty slab, or *orphan continuations* (Cont words not preceded by the run
//! head that covers them: an allocation whose head never became durable, or a free whose
//! head did). `open` resets orphans to Free (and reports them in
//! [`AllocStats::repaired_at_open`]); nothing else needs repair. Hence: an allocation is
//! durable when `alloc` returns, a free when `free` returns, and an operation in flight at
//! the crash is either wholly done or not done.
//!
//! # Leak collection at recovery (the engines' contract)
//! An allocation that was durable but never *linked* into an engine's structures before a
//! crash (the engine crashed between `alloc` and publishing the offset, or `alloc` was
//! still in flight) stays allocated after reopen. An engine must therefore, at recovery,
//! walk [`PmemAllocator::iter_allocated`] (objects from `alloc`) and
//! [`PmemAllocator::iter_chunks`] (its tagged chunks) and `free` / `free_chunk` every
//! offset its recovered structures do not reference. Tags let engines sharing one
//! allocator tell their chunks apart. Conversely an engine must not free an offset until
//! its structures no longer reference it durably (unlink, persist, then free).
//!
//! # Concurrency
//! Each thread has a *shard* (assigned round-robin) that remembers a current slab chunk per
//! size class, so threads allocate from different chunks and rarely take the same lock.
//! Locks, always taken in this order: the chunks' DRAM states (ascending index), a class's
//! set of slabs with free slots, the free-chunk set. `check` takes all of them, so it sees
//! one consistent state. After a failed persist the pool is poisoned and every later
//! operation fails; reopen the pool and the allocator.
//!
//! Thread safety: `PmemAllocator` is `Send + Sync`; all methods take `&self`.

mod check;
mod class;
mod dram;
mod evacuate;
mod layout;
mod recovery;
mod run;
mod slab;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

use super::pool::PmemPool;
use crate::api::error::{Error, Result, Tier};
pub use class::{MIN_CLASS_SIZE, SizeClasses, SlabGeometry};
use dram::ChunkDram;
pub use evacuate::{SlabEvacuation, SlabUsage};
pub use layout::{ChunkState, MAX_CHUNK_SIZE, MIN_CHUNK_SIZE, REGION_HEADER_LEN, RegionLayout};

/// The default chunk size (256 KiB).
pub const DEFAULT_CHUNK_SIZE: u64 = 256 << 10;
/// The tag of runs made by [`PmemAllocator::alloc`] for large objects; refused as a
/// caller's tag.
pub const OBJECT_TAG: u32 = u32::MAX;

/// One allocation: where it starts and how many bytes it may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Allocation {
    /// Absolute pool offset.
    pub offset: u64,
    /// Usable bytes (the size class, or the whole chunks of a run).
    pub size: u64,
}

/// A snapshot of the allocator's usage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocStats {
    /// Bytes per chunk.
    pub chunk_size: u64,
    /// Chunks in the region.
    pub chunks: u64,
    /// Chunks not allocated.
    pub free_chunks: u64,
    /// Chunks holding slabs.
    pub slab_chunks: u64,
    /// Chunks in runs (whole-chunk allocations).
    pub run_chunks: u64,
    /// Bytes available: free chunks plus free slab slots.
    pub free_bytes: u64,
    /// Bytes allocated: allocated slab objects plus run chunks.
    pub used_bytes: u64,
    /// Orphan continuation chunks reset to free by the last `open`.
    pub repaired_at_open: u64,
}

/// The crash-consistent allocator (see the module doc).
pub struct PmemAllocator {
    pool: Arc<PmemPool>,
    layout: RegionLayout,
    classes: SizeClasses,
    /// DRAM mirror of each chunk's state (and of slab bitmaps).
    chunks: Box<[Mutex<ChunkDram>]>,
    /// Per class: slab chunks with a free slot, each with the shard that claimed it as its
    /// current chunk (if any).
    partial: Box<[Mutex<ClassSlabs>]>,
    /// Chunks whose state is Free and that no operation has taken.
    free_chunks: Mutex<BTreeSet<u32>>,
    /// Chunks taken from `free_chunks` whose DRAM state is not yet set (changes only under
    /// the free-set lock (up) and a chunk lock (down), so `check` sees it exact).
    in_transit: AtomicUsize,
    /// `shards x classes` current-chunk hints (`NO_HINT` when unset).
    hints: Box<[AtomicU32]>,
    shards: usize,
    repaired_at_open: u64,
}

const NO_HINT: u32 = u32::MAX;

/// A class's slab chunks with free slots, each with the shard that claimed it as its
/// current slab, if any.
type ClassSlabs = BTreeMap<u32, Option<u16>>;

impl PmemAllocator {
    /// Formats `[region_start, region_start + region_len)` of `pool` as an empty allocator
    /// region with chunks of `chunk_size` bytes (as many as fit). The region must lie in
    /// the engine region of the pool and start 64-byte aligned. Durable when it returns.
    pub fn format(
        pool: Arc<PmemPool>,
        region_start: u64,
        region_len: u64,
        chunk_size: u64,
    ) -> Result<PmemAllocator> {
        recovery::format(pool, region_start, region_len, chunk_size)
    }

    /// Opens the allocator region at `region_start`, rebuilding the DRAM state from the
    /// persistent chunk table and repairing what a crash can leave (orphan continuations).
    pub fn open(pool: Arc<PmemPool>, region_start: u64) -> Result<PmemAllocator> {
        recovery::open(pool, region_start)
    }

    /// Allocates `size` bytes (1 ..= the region) and returns the offset; 8-byte aligned
    /// (runs: chunk aligned). Durable when it returns. [`Error::NoSpace`] when full.
    pub fn alloc(&self, size: u64) -> Result<u64> {
        if size == 0 {
            return Err(Error::invalid("pmem allocation of 0 bytes"));
        }
        match self.classes.class_for(size) {
            Some(class) => self.alloc_small(class),
            None => {
                let n = size.div_ceil(self.layout.chunk_size);
                self.alloc_run(OBJECT_TAG, n)
            }
        }
    }

    /// Frees an allocation made by [`PmemAllocator::alloc`]. Durable when it returns.
    /// An offset that is not the start of a live allocation is [`Error::Corruption`].
    pub fn free(&self, off: u64) -> Result<()> {
        let k = self.chunk_of(off)?;
        let guard = self.lock_chunk(k)?;
        match &*guard {
            ChunkDram::Slab(_) => self.free_small(k, guard, off),
            ChunkDram::Run { tag, .. } if off == self.layout.chunk_off(k) => {
                if *tag == OBJECT_TAG {
                    self.free_run(k, guard)
                } else {
                    Err(self.corrupt(off, format!("offset {off} is a chunk allocated with tag {tag}: free it with free_chunk")))
                }
            }
            _ => Err(self.corrupt(
                off,
                format!("free of offset {off}, which is not an allocated object"),
            )),
        }
    }

    /// Allocates one whole chunk with the caller's `tag` (any u32 but [`OBJECT_TAG`]).
    pub fn alloc_chunk(&self, tag: u32) -> Result<u64> {
        self.alloc_chunks(tag, 1)
    }

    /// Allocates `count` contiguous whole chunks with the caller's `tag`; returns the
    /// offset of the first. Free them with one [`PmemAllocator::free_chunk`].
    pub fn alloc_chunks(&self, tag: u32, count: u64) -> Result<u64> {
        if tag == OBJECT_TAG {
            return Err(Error::invalid(format!(
                "chunk tag {OBJECT_TAG:#x} is reserved for alloc"
            )));
        }
        self.alloc_run(tag, count)
    }

    /// Frees chunks allocated by [`PmemAllocator::alloc_chunk`]/`alloc_chunks` (`off` is
    /// the first chunk's offset). Durable when it returns.
    pub fn free_chunk(&self, off: u64) -> Result<()> {
        let k = self.chunk_of(off)?;
        let guard = self.lock_chunk(k)?;
        match &*guard {
            ChunkDram::Run { tag, .. } if *tag != OBJECT_TAG && off == self.layout.chunk_off(k) => {
                self.free_run(k, guard)
            }
            _ => Err(self.corrupt(off, format!("free_chunk of offset {off}, which is not the start of a tagged chunk allocation"))),
        }
    }

    /// Bytes per chunk.
    pub fn chunk_size(&self) -> u64 {
        self.layout.chunk_size
    }

    /// The largest request served from a slab; larger ones take whole chunks.
    pub fn max_small_size(&self) -> u64 {
        self.classes.max_small()
    }

    /// Where the region's parts are.
    pub fn layout(&self) -> RegionLayout {
        self.layout
    }

    /// The pool this allocator lives in.
    pub fn pool(&self) -> &Arc<PmemPool> {
        &self.pool
    }

    fn chunk_of(&self, off: u64) -> Result<u32> {
        self.layout.chunk_of(off).ok_or_else(|| {
            self.corrupt(
                off,
                format!(
                    "offset {off} is outside the allocator's chunks [{}, {})",
                    self.layout.chunks_off,
                    self.layout.chunk_off(self.layout.chunk_count as u32)
                ),
            )
        })
    }

    fn lock_chunk(&self, k: u32) -> Result<parking_lot::MutexGuard<'_, ChunkDram>> {
        self.chunks.get(k as usize).map(Mutex::lock).ok_or_else(|| {
            self.corrupt(
                self.layout.state_off(k),
                format!("chunk {k} does not exist"),
            )
        })
    }

    fn corrupt(&self, off: u64, what: String) -> Error {
        Error::corruption(Tier::Pmem, off, what)
    }

    /// Stores a chunk-state word and persists it.
    fn set_state(&self, k: u32, s: ChunkState) -> Result<()> {
        let off = self.layout.state_off(k);
        self.pool.store_u64(off, s.encode())?;
        self.pool.persist(off, 8)
    }

    fn hint(&self, shard: usize, class: u8) -> Option<&AtomicU32> {
        self.hints
            .get(shard * self.classes.count() + usize::from(class))
    }
}

impl std::fmt::Debug for PmemAllocator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PmemAllocator")
            .field("layout", &self.layout)
            .field("size_classes", &self.classes.count())
            .field("shards", &self.shards)
            .finish_non_exhaustive()
    }
}

/// This thread's shard (assigned round-robin at the thread's first allocation).
fn thread_shard(shards: usize) -> usize {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    thread_local! {
        static SHARD: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    SHARD.with(|s| (*s % shards as u64) as usize)
}

/// How many shards: twice the cores, between 4 and 64.
fn shard_count() -> usize {
    std::thread::available_parallelism()
        .map_or(4, |n| n.get() * 2)
        .clamp(4, 64)
}

#[cfg(test)]
mod tests;
