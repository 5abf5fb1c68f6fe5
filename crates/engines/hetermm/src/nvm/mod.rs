//! The pmem side of the logical space (HeterMM §4.1.1): the superblock, the block
//! directory and the allocator that pmem blocks, compact blocks and log blocks come from.
//!
//! ```text
//! pool:  [pool header 4 KiB][superblock 4 KiB][block directory: one word per chunk]
//!        [allocator region: chunks of 2^m / 64 bytes (>= 4 KiB)]
//! ```
//! The paper keeps one file per block and creates files ahead of need; we allocate blocks
//! as runs of chunks from the pool's crash-consistent allocator instead (DESIGN §4: one
//! pool per store), and prepare runs ahead while the flusher is idle (`flush.rs`). A block
//! is *published* by its directory word (`format::dir`); an allocated run that no word
//! names — prepared but unused, or being written at a crash — is freed at recovery.
//!
//! Submodules: `blocks` (the DRAM `blocks` array of Eq. 1 and per-block metadata),
//! `read` (records out of full and compact blocks), `marks` (the invalid bitmaps), `walk`
//! (every record of a block), `reserve` (the runs held back so that a full pool is no dead
//! end).
//!
//! Thread safety: `Nvm` is `Send + Sync`; directory words are single atomic stores.

pub mod blocks;
pub mod marks;
pub mod read;
pub mod reserve;
pub mod walk;

use std::sync::Arc;

use tierkv_core::media::pmem::{PmemAllocator, PmemPool};
use tierkv_core::{Error, Result, Tier};

use crate::format::HEADER_LEN;
use crate::format::dir::DirEntry;
use crate::format::superblock::{ROOT_SUPERBLOCK, Superblock};
use reserve::Reserve;

/// Allocator tag of full data blocks.
pub const DATA_TAG: u32 = 0x484d_0001;
/// Allocator tag of compact blocks.
pub const COMPACT_TAG: u32 = 0x484d_0002;
/// Allocator tag of log blocks.
pub const LOG_TAG: u32 = 0x484d_0003;
/// Chunks per full block in a new store (fewer when a block is under 256 KiB: chunks are
/// >= 4 KiB; a store keeps the chunk size it was created with, in its superblock).
///
/// The chunk is the smallest pmem footprint of a logical block, and logical blocks never
/// merge (the index holds their records' addresses): a block reorganised down to a few
/// small records still takes one chunk. With a sixteenth of a block per chunk, a 16 MiB
/// pool (256 KiB blocks) under fill/delete cycles ended with 669 compact blocks of one or
/// two 16 KiB chunks holding 2.7 MiB of records in 12 MiB, and no run of 16 free chunks
/// for a new block: new keys were refused for good after deletes (`tests/space_after_deletes.rs`).
/// A sixty-fourth keeps a quarter of that; the cost is a directory word and an allocator
/// state word per chunk (a 16 MiB pool: 32 KiB each), and longer runs for full blocks
/// (their continuation words are persisted in one range).
const CHUNKS_PER_BLOCK: u64 = 64;
/// Chunks a new store's pool is cut into at most, where a sixty-fourth of a block would
/// make more (pools of 64 GiB and more with 2 MiB blocks): the allocator keeps a DRAM
/// state per chunk. Never coarser than the sixteenth chunks had before.
const MAX_CHUNKS: u64 = 1 << 21;
/// Chunks per full block at the coarsest.
const MIN_CHUNKS_PER_BLOCK: u64 = 16;
/// Full blocks a pool must hold at least.
pub const MIN_BLOCKS: u64 = 8;
const AREA_ALIGN: u64 = 4096;
/// Where the flush frontier word lives: the second line of the superblock's 4 KiB.
const FRONTIER_OFF: u64 = 64;

/// The superblock, directory and allocator of a store's pool.
pub struct Nvm {
    /// The pool.
    pub pool: Arc<PmemPool>,
    /// The allocator.
    pub alloc: PmemAllocator,
    /// The superblock.
    pub sb: Superblock,
    /// Block runs held back for flushing, the log and one reorganisation (`reserve.rs`).
    pub reserve: Reserve,
}

impl Nvm {
    /// Formats a new store in `pool` with blocks of 2^`block_bits` bytes. The root word is
    /// written last: a crash before it leaves a pool that `open` refuses.
    pub fn format(pool: Arc<PmemPool>, block_bits: u32, page_bits: u32) -> Result<Nvm> {
        let chunk_size = chunk_size_for(pool.len(), block_bits);
        let sb_off = pool.data_start();
        let dir_off = sb_off + AREA_ALIGN;
        let left = pool.len().saturating_sub(dir_off);
        let dir_words = (left / chunk_size).max(1);
        let alloc_off = (dir_off + 8 * dir_words).div_ceil(AREA_ALIGN) * AREA_ALIGN;
        let region = pool
            .len()
            .checked_sub(alloc_off)
            .ok_or_else(|| too_small(&pool, block_bits))?;
        let alloc = PmemAllocator::format(pool.clone(), alloc_off, region, chunk_size)
            .map_err(|_| too_small(&pool, block_bits))?;
        if alloc.layout().chunk_count * chunk_size < MIN_BLOCKS << block_bits {
            return Err(too_small(&pool, block_bits));
        }
        pool.fill(dir_off, (8 * dir_words) as usize, 0)?;
        pool.persist(dir_off, (8 * dir_words) as usize)?;
        let sb = Superblock {
            block_bits: block_bits as u8,
            page_bits: page_bits as u8,
            chunk_size,
            dir_off,
            dir_words,
            alloc_off,
        };
        pool.write_persist(sb_off, &sb.encode())?;
        pool.store_u64(sb_off + FRONTIER_OFF, 0)?;
        pool.persist(sb_off + FRONTIER_OFF, 8)?;
        pool.set_root(ROOT_SUPERBLOCK, sb_off)?;
        Ok(Nvm {
            pool,
            alloc,
            sb,
            reserve: Reserve::default(),
        })
    }

    /// Roughly the bytes a formatted pool's allocator region will hold (for choosing m).
    pub fn capacity(pool: &PmemPool) -> u64 {
        pool.len()
            .saturating_sub(pool.data_start() + 2 * AREA_ALIGN)
    }

    /// Opens the store in `pool`.
    pub fn open(pool: Arc<PmemPool>) -> Result<Nvm> {
        let sb_off = pool.root(ROOT_SUPERBLOCK)?;
        if sb_off == 0 {
            return Err(Error::corruption(
                Tier::Pmem,
                0,
                "the pool holds no hetermm store (its creation never completed)",
            ));
        }
        let sb = Superblock::decode(pool.read(sb_off, HEADER_LEN)?, sb_off, pool.len())?;
        let alloc = PmemAllocator::open(pool.clone(), sb.alloc_off)?;
        let layout = alloc.layout();
        if layout.chunk_size != sb.chunk_size || layout.chunk_count > sb.dir_words {
            return Err(Error::corruption(
                Tier::Pmem,
                sb_off,
                "the allocator region does not match the superblock",
            ));
        }
        Ok(Nvm {
            pool,
            alloc,
            sb,
            reserve: Reserve::default(),
        })
    }

    fn sb_off(&self) -> Result<u64> {
        self.pool.root(ROOT_SUPERBLOCK)
    }

    /// The durable flush frontier: every logical address below it was flushed, with the
    /// marks keyed at its blocks (`FORMAT.md` § Flush frontier). 0 in a new store.
    pub fn flush_frontier(&self) -> Result<u64> {
        let at = self.sb_off()? + FRONTIER_OFF;
        let v = self.pool.load_u64(at)?;
        if !v.is_multiple_of(self.block_size()) {
            return Err(Error::corruption(
                Tier::Pmem,
                at,
                format!("flush frontier {v:#x} is not at a block boundary"),
            ));
        }
        Ok(v)
    }

    /// Moves the durable flush frontier up to `addr` (a block start), persisted.
    pub fn set_flush_frontier(&self, addr: u64) -> Result<()> {
        let at = self.sb_off()? + FRONTIER_OFF;
        if self.pool.load_u64(at)? >= addr {
            return Ok(());
        }
        self.pool.store_u64(at, addr)?;
        self.pool.persist(at, 8)
    }

    /// m.
    pub fn block_bits(&self) -> u32 {
        u32::from(self.sb.block_bits)
    }

    /// Bytes of a full block.
    pub fn block_size(&self) -> u64 {
        1 << self.sb.block_bits
    }

    /// The chunk whose run starts at `off`.
    fn chunk_of(&self, off: u64) -> Result<u64> {
        self.alloc
            .layout()
            .chunk_of(off)
            .map(u64::from)
            .ok_or_else(|| {
                Error::corruption(Tier::Pmem, off, "offset is outside the allocator's chunks")
            })
    }

    fn dir_word_off(&self, chunk: u64) -> u64 {
        self.sb.dir_off + 8 * chunk
    }

    /// The directory entry of the run starting at `off`.
    pub fn dir_entry(&self, off: u64) -> Result<DirEntry> {
        let at = self.dir_word_off(self.chunk_of(off)?);
        let w = self.pool.load_u64(at)?;
        DirEntry::decode(w).ok_or_else(|| {
            Error::corruption(
                Tier::Pmem,
                at,
                format!("invalid block directory word {w:#x}"),
            )
        })
    }

    /// Sets the directory entry of the run starting at `off` and persists it.
    pub fn set_dir_entry(&self, off: u64, e: DirEntry) -> Result<()> {
        let at = self.dir_word_off(self.chunk_of(off)?);
        self.pool.store_u64(at, e.encode())?;
        self.pool.persist(at, 8)
    }

    /// Every non-empty directory entry with the offset of its run.
    pub fn published(&self) -> Result<Vec<(u64, DirEntry)>> {
        let layout = self.alloc.layout();
        let words = self
            .pool
            .read(self.sb.dir_off, 8 * layout.chunk_count as usize)?;
        let mut out = Vec::new();
        for (k, w) in words.chunks_exact(8).enumerate() {
            let w = u64::from_le_bytes(w.try_into().unwrap_or_default());
            match DirEntry::decode(w) {
                Some(DirEntry::None) => {}
                Some(e) => out.push((layout.chunk_off(k as u32), e)),
                None => {
                    return Err(Error::corruption(
                        Tier::Pmem,
                        self.dir_word_off(k as u64),
                        format!("invalid block directory word {w:#x}"),
                    ));
                }
            }
        }
        Ok(out)
    }

    /// Chunks a run of `bytes` takes.
    pub fn chunks_for(&self, bytes: u64) -> u64 {
        bytes.div_ceil(self.sb.chunk_size).max(1)
    }

    /// Allocates a run for a full data block.
    pub fn alloc_block(&self) -> Result<u64> {
        self.alloc
            .alloc_chunks(DATA_TAG, self.chunks_for(self.block_size()))
    }

    /// Allocates a run for a full data block that must be written (a flush): from the
    /// allocator, else from the reserve (which refuses new writes from then on).
    pub fn alloc_block_or_reserve(&self) -> Result<u64> {
        match self.alloc_block() {
            Err(Error::NoSpace { .. }) => self.reserve.take("a flush"),
            other => other,
        }
    }

    /// Allocates a run for a log block; with `or_reserve`, from the reserve when the
    /// allocator has none (a log block a write or a delete needs; not one prepared ahead).
    /// A run from the reserve carries the data tag, which recovery collects the same way.
    pub fn alloc_log_block(&self, or_reserve: bool) -> Result<u64> {
        match self
            .alloc
            .alloc_chunks(LOG_TAG, self.chunks_for(self.block_size()))
        {
            Err(Error::NoSpace { .. }) if or_reserve => self.reserve.take("a log block"),
            other => other,
        }
    }

    /// Allocates a run of at least `bytes` for a compact block; with `or_reserve`, gives
    /// reserve runs back to the allocator to make room when it has none.
    pub fn alloc_compact(&self, bytes: u64, or_reserve: bool) -> Result<u64> {
        let chunks = self.chunks_for(bytes);
        match self.alloc.alloc_chunks(COMPACT_TAG, chunks) {
            Err(Error::NoSpace { .. }) if or_reserve => {
                let runs = chunks.div_ceil(self.chunks_for(self.block_size())) as usize;
                self.reserve.release(runs, |off| {
                    self.free_run(off).map_err(|e| match e {
                        Error::Corruption { tier, offset, what } => Error::corruption(
                            tier,
                            offset,
                            format!("returning a reserve run for a compact copy: {what}"),
                        ),
                        e => e,
                    })
                })?;
                self.alloc.alloc_chunks(COMPACT_TAG, chunks)
            }
            other => other,
        }
    }

    /// Refills the reserve from the allocator; returns whether it is full (writes are
    /// admitted).
    pub fn top_up_reserve(&self) -> Result<bool> {
        self.reserve.top_up(|| self.alloc_block())
    }

    /// Frees a run (of any of our tags).
    pub fn free_run(&self, off: u64) -> Result<()> {
        self.alloc.free_chunk(off)
    }

    /// Frees the run at `off`, which error `e` left unused; returns the error to report:
    /// `e`, or — when the free fails too, which leaks the run until the next recovery —
    /// both, as corruption (the caller's failure then poisons the store rather than
    /// letting it run on with space it cannot account for).
    pub fn free_after(&self, off: u64, e: Error) -> Error {
        match self.free_run(off) {
            Ok(()) => e,
            Err(free) => Error::corruption(
                Tier::Pmem,
                off,
                format!("{e}; and its run could not be freed: {free}"),
            ),
        }
    }

    /// Bytes of the run starting at `off` (as the allocator knows it).
    pub fn run_len(&self, off: u64, tag: u32) -> Option<u64> {
        self.alloc
            .iter_chunks(tag)
            .find(|a| a.offset == off)
            .map(|a| a.size)
    }
}

/// The chunk size of a new store (see [`CHUNKS_PER_BLOCK`]).
fn chunk_size_for(pool_len: u64, block_bits: u32) -> u64 {
    let block = 1u64 << block_bits;
    let fine = (block / CHUNKS_PER_BLOCK).max(AREA_ALIGN);
    let bounded = (pool_len / MAX_CHUNKS).next_power_of_two();
    fine.max(bounded.min(block / MIN_CHUNKS_PER_BLOCK))
}

fn too_small(pool: &PmemPool, block_bits: u32) -> Error {
    Error::invalid(format!(
        "the pmem pool of {} bytes is too small for hetermm blocks of 2^{block_bits} bytes: \
         it needs room for at least 8 blocks (lower block_bits or enlarge the pool)",
        pool.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_a_sixty_fourth_of_a_block_unless_the_pool_would_need_too_many() {
        assert_eq!(chunk_size_for(16 << 20, 18), 4 << 10, "256 KiB blocks");
        assert_eq!(chunk_size_for(16 << 20, 15), 4 << 10, "never below 4 KiB");
        assert_eq!(
            chunk_size_for(2 << 30, 21),
            32 << 10,
            "the default 2 MiB blocks"
        );
        assert_eq!(chunk_size_for(64 << 30, 21), 32 << 10, "2^21 chunks");
        assert_eq!(
            chunk_size_for(256 << 30, 21),
            128 << 10,
            "capped chunk count"
        );
        assert_eq!(
            chunk_size_for(1 << 40, 21),
            128 << 10,
            "never above a sixteenth"
        );
    }
}
