//! Formatting a region and opening it: decoding the region header, walking the chunk
//! table to rebuild the DRAM state, and repairing the one thing a crash can leave that is
//! not a valid steady state — orphan continuations (`run.rs`).
//!
//! Open accepts every crash image the protocol in `mod.rs` can produce; anything else
//! (an invalid state word, a run whose continuations are missing, a slab bit past its
//! capacity, a region header that does not match the pool) is [`Error::Corruption`].
//!
//! Thread safety: runs before the allocator is shared.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize};

use parking_lot::Mutex;

use super::class::SizeClasses;
use super::dram::{ChunkDram, SlabDram, first_bit_beyond_capacity};
use super::layout::{ChunkState, REGION_HEADER_LEN, RegionLayout};
use super::{ClassSlabs, NO_HINT, PmemAllocator, shard_count};
use crate::api::error::{Error, Result, Tier};
use crate::media::pmem::pool::PmemPool;

/// Formats an empty region (see [`PmemAllocator::format`]).
pub(super) fn format(
    pool: Arc<PmemPool>,
    region_start: u64,
    region_len: u64,
    chunk_size: u64,
) -> Result<PmemAllocator> {
    let layout = RegionLayout::plan(region_start, region_len, chunk_size)?;
    check_inside_pool(&pool, &layout)
        .map_err(|what| Error::invalid(format!("allocator region: {what}")))?;
    let table_len = usize::try_from(8 * layout.chunk_count)
        .map_err(|_| Error::invalid("allocator chunk table exceeds the address space"))?;
    // IMPORTANT: an old header is invalidated first, and every chunk is durably Free
    // before the new header makes the region valid.
    pool.fill(region_start, REGION_HEADER_LEN as usize, 0)?;
    pool.persist(region_start, REGION_HEADER_LEN as usize)?;
    pool.fill(layout.table_off, table_len, 0)?;
    pool.persist(layout.table_off, table_len)?;
    pool.write_persist(region_start, &layout.encode())?;
    open(pool, region_start)
}

/// Opens the region at `region_start` (see [`PmemAllocator::open`]).
pub(super) fn open(pool: Arc<PmemPool>, region_start: u64) -> Result<PmemAllocator> {
    if region_start < pool.data_start() {
        return Err(Error::invalid(format!(
            "allocator region start {region_start} is inside the pool header (the engine region starts at {})",
            pool.data_start()
        )));
    }
    let header = pool.read(region_start, REGION_HEADER_LEN as usize)?;
    let layout = RegionLayout::decode(header, region_start)?;
    check_inside_pool(&pool, &layout).map_err(|what| {
        Error::corruption(
            Tier::Pmem,
            region_start,
            format!("allocator region: {what}"),
        )
    })?;
    let classes = SizeClasses::new(layout.chunk_size);
    let mut walk = Walk::new(&pool, &layout, &classes);
    walk.run()?;
    let shards = shard_count();
    Ok(PmemAllocator {
        hints: (0..shards * classes.count())
            .map(|_| AtomicU32::new(NO_HINT))
            .collect(),
        chunks: walk.chunks.into_iter().map(Mutex::new).collect(),
        partial: walk.partial.into_iter().map(Mutex::new).collect(),
        free_chunks: Mutex::new(walk.free),
        in_transit: AtomicUsize::new(0),
        repaired_at_open: walk.repaired,
        shards,
        classes,
        layout,
        pool,
    })
}

/// Whether the region lies in the engine region of the pool.
fn check_inside_pool(pool: &PmemPool, l: &RegionLayout) -> std::result::Result<(), String> {
    let end = l.region_start.checked_add(l.region_len);
    if l.region_start >= pool.data_start() && end.is_some_and(|e| e <= pool.len()) {
        return Ok(());
    }
    Err(format!(
        "[{}, +{}) is not inside the pool's engine region [{}, {})",
        l.region_start,
        l.region_len,
        pool.data_start(),
        pool.len()
    ))
}

/// The state rebuilt by walking the chunk table.
struct Walk<'a> {
    pool: &'a PmemPool,
    layout: &'a RegionLayout,
    classes: &'a SizeClasses,
    chunks: Vec<ChunkDram>,
    partial: Vec<ClassSlabs>,
    free: BTreeSet<u32>,
    repaired: u64,
}

impl<'a> Walk<'a> {
    fn new(pool: &'a PmemPool, layout: &'a RegionLayout, classes: &'a SizeClasses) -> Self {
        Walk {
            pool,
            layout,
            classes,
            chunks: Vec::with_capacity(layout.chunk_count as usize),
            partial: vec![BTreeMap::new(); classes.count()],
            free: BTreeSet::new(),
            repaired: 0,
        }
    }

    fn run(&mut self) -> Result<()> {
        let count = self.layout.chunk_count as u32;
        let mut k = 0;
        while k < count {
            k += match self.state(k)? {
                ChunkState::Free => self.free_chunk(k),
                ChunkState::Slab { class } => self.slab(k, class)?,
                ChunkState::Run { tag, len } => self.run_of(k, tag, len)?,
                ChunkState::Cont { .. } => self.orphan(k)?,
            };
        }
        Ok(())
    }

    fn state(&self, k: u32) -> Result<ChunkState> {
        let off = self.layout.state_off(k);
        let w = self.pool.load_u64(off)?;
        ChunkState::decode(w).ok_or_else(|| {
            Error::corruption(
                Tier::Pmem,
                off,
                format!("allocator chunk {k}: invalid state word {w:#018x}"),
            )
        })
    }

    fn free_chunk(&mut self, k: u32) -> u32 {
        self.chunks.push(ChunkDram::Free);
        self.free.insert(k);
        1
    }

    fn slab(&mut self, k: u32, class: u8) -> Result<u32> {
        let off = self.layout.chunk_off(k);
        let g = self.classes.get(class).ok_or_else(|| {
            Error::corruption(
                Tier::Pmem,
                self.layout.state_off(k),
                format!("allocator chunk {k}: size class {class} does not exist"),
            )
        })?;
        let words = read_words(self.pool, off, g.bitmap_words())?;
        let slab = SlabDram::from_bits(class, g, &words).ok_or_else(|| {
            let bit = first_bit_beyond_capacity(&words, g.capacity).unwrap_or(0);
            Error::corruption(
                Tier::Pmem,
                off + bit / 8,
                format!("allocator slab chunk {k}: bit {bit} is set past the slab's capacity of {} objects", g.capacity),
            )
        })?;
        if !slab.is_full()
            && let Some(p) = self.partial.get_mut(usize::from(class))
        {
            p.insert(k, None);
        }
        self.chunks.push(ChunkDram::Slab(slab));
        Ok(1)
    }

    fn run_of(&mut self, k: u32, tag: u32, len: u32) -> Result<u32> {
        let fits = u64::from(k) + u64::from(len) <= self.layout.chunk_count;
        if !fits {
            return Err(Error::corruption(
                Tier::Pmem,
                self.layout.state_off(k),
                format!("allocator chunk {k}: a run of {len} chunks passes the end of the region"),
            ));
        }
        for j in 1..len {
            let s = self.state(k + j)?;
            if s != (ChunkState::Cont { back: j }) {
                return Err(Error::corruption(
                    Tier::Pmem,
                    self.layout.state_off(k + j),
                    format!(
                        "allocator chunk {}: {s:?} inside the run of {len} chunks at {k}",
                        k + j
                    ),
                ));
            }
        }
        self.chunks.push(ChunkDram::Run { tag, len });
        self.chunks.extend((1..len).map(|_| ChunkDram::Cont));
        Ok(len)
    }

    /// A continuation not covered by a run head: left by a crash inside a run's
    /// allocation or free. Resets it to Free, durably.
    fn orphan(&mut self, k: u32) -> Result<u32> {
        let off = self.layout.state_off(k);
        self.pool.store_u64(off, ChunkState::Free.encode())?;
        self.pool.persist(off, 8)?;
        self.repaired += 1;
        Ok(self.free_chunk(k))
    }
}

/// Reads `n` little-endian words at `off`.
pub(super) fn read_words(pool: &PmemPool, off: u64, n: usize) -> Result<Vec<u64>> {
    let bytes = pool.read(off, n * 8)?;
    Ok(bytes
        .chunks_exact(8)
        .map(|c| {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            u64::from_le_bytes(b)
        })
        .collect())
}
