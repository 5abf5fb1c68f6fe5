//! Finding PRISM's regions in a pool the salvage walk cannot trust (FORMAT.md, "Salvage",
//! step 1): the superblock named by root word 0, else the one at its planned place, else
//! (when both are damaged) the layout re-planned from the store's options, accepted only
//! if the allocator region header it predicts is there and agrees.
//!
//! Thread safety: pure functions over a [`Source`].

use tierkv_core::media::pmem::alloc::RegionLayout;
use tierkv_core::media::pmem::{DATA_START, ROOTS_OFF};
use tierkv_core::{Error, Result, Tier};

use super::source::Source;
use crate::engine::open::{MIN_ALLOC_CHUNKS, alloc_chunk};
use crate::superblock::{self, HSIT_ENTRY_LEN, PlanInput, REGION_ALIGN, Superblock};

/// What the layout planner needs when the superblock is lost: the options' sizes.
#[derive(Clone, Copy, Debug)]
pub struct PlanHint {
    /// PWBs per store.
    pub pwb_count: u32,
    /// Bytes per PWB for this pool.
    pub pwb_size: u64,
    /// Value Storage chunk size.
    pub chunk_size: u32,
    /// Flash directories.
    pub flash_count: u32,
}

/// The regions of the pool.
#[derive(Clone, Debug)]
pub struct Layout {
    /// The superblock (read or re-planned).
    pub sb: Superblock,
    /// The allocator region (HSIT segments and key-index chunks live in its chunks).
    pub alloc: RegionLayout,
    /// How the superblock was found.
    pub how: String,
}

/// Pool root word `i`.
pub fn root(pool: &dyn Source, i: usize) -> Option<u64> {
    pool.u64_at(ROOTS_OFF + 8 * i as u64)
}

fn read_sb(pool: &dyn Source, at: u64) -> Result<Superblock> {
    let bytes = pool
        .bytes(at, superblock::LEN as u64)
        .ok_or_else(|| Error::corruption(Tier::Pmem, at, "superblock outside the pool"))?;
    let sb = superblock::decode(&bytes, at)?;
    sb.validate(DATA_START, pool.len(), at)?;
    Ok(sb)
}

/// Finds the layout; an error only when no superblock can be read or re-planned.
pub fn find(pool: &dyn Source, hint: Option<PlanHint>) -> Result<Layout> {
    let planned_at = DATA_START.next_multiple_of(REGION_ALIGN);
    let named = root(pool, crate::superblock::ROOT_SUPERBLOCK).unwrap_or(0);
    let mut errors = Vec::new();
    for at in [named, planned_at] {
        if at == 0 || errors.iter().any(|(a, _)| *a == at) {
            continue;
        }
        match read_sb(pool, at).and_then(|sb| with_alloc(sb, format!("superblock at {at}"))) {
            Ok(l) => return Ok(l),
            Err(e) => errors.push((at, e.to_string())),
        }
    }
    let why = errors
        .iter()
        .map(|(a, e)| format!("at {a}: {e}"))
        .collect::<Vec<_>>()
        .join("; ");
    let Some(h) = hint else {
        return Err(Error::corruption(
            Tier::Pmem,
            planned_at,
            format!("no readable PRISM superblock ({why})"),
        ));
    };
    let (_, sb) = superblock::plan(&PlanInput {
        data_start: planned_at,
        pool_len: pool.len(),
        pwb_count: h.pwb_count,
        pwb_size: h.pwb_size,
        alloc_chunk: alloc_chunk(pool.len()),
        min_alloc_len: MIN_ALLOC_CHUNKS * alloc_chunk(pool.len()),
        chunk_size: h.chunk_size,
        flash_count: h.flash_count,
    })?;
    // IMPORTANT: a re-planned layout is used only if the allocator region header it
    // predicts is there (checksummed) and agrees with it; else the options differ from
    // the ones the store was created with, and nothing is guessed.
    let header = pool
        .bytes(
            sb.alloc_off,
            tierkv_core::media::pmem::alloc::REGION_HEADER_LEN,
        )
        .ok_or_else(|| Error::corruption(Tier::Pmem, sb.alloc_off, "allocator region"))?;
    let found = RegionLayout::decode(&header, sb.alloc_off).map_err(|e| {
        Error::corruption(
            Tier::Pmem,
            planned_at,
            format!("no readable PRISM superblock ({why}), and the re-planned layout is not confirmed by an allocator header: {e}"),
        )
    })?;
    if found.chunk_size != u64::from(sb.hsit_seg_entries) * HSIT_ENTRY_LEN
        || found.chunk_count
            != RegionLayout::plan(sb.alloc_off, sb.alloc_len, found.chunk_size)?.chunk_count
    {
        return Err(Error::corruption(
            Tier::Pmem,
            sb.alloc_off,
            format!(
                "no readable PRISM superblock ({why}), and the allocator header disagrees with the re-planned layout"
            ),
        ));
    }
    with_alloc(
        sb,
        format!(
            "superblock damaged ({why}); layout re-planned from the options and confirmed by the allocator region header"
        ),
    )
}

fn with_alloc(sb: Superblock, how: String) -> Result<Layout> {
    let alloc = RegionLayout::plan(
        sb.alloc_off,
        sb.alloc_len,
        u64::from(sb.hsit_seg_entries) * HSIT_ENTRY_LEN,
    )?;
    Ok(Layout { sb, alloc, how })
}
