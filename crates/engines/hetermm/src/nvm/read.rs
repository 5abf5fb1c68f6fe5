//! Eq. 1, lower half: finding a record of the persisted region in pmem. A full block holds
//! the record at `base + (addr mod 2^m)`; a compact block is searched through its hash
//! table (§5.2: "when accessing a compressed block, the data is retrieved by querying the
//! hash table"). Bytes are read through the pool (bounds-checked slices) and every record is
//! checksum-verified before its value is returned.
//!
//! Thread safety: callers are pinned (the block cannot be freed under them).

use tierkv_core::media::pmem::PmemPool;
use tierkv_core::{Error, Result, Tier};

use super::blocks::BlockTable;
use crate::format::HEADER_LEN;
use crate::format::compact::{CompactHeader, SLOT_LEN, Slot, find};
use crate::format::record::{self, RecordHeader, RecordView};
use crate::geometry::Geometry;

/// Where a record of the persisted region is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Located {
    /// Absolute pool offset of the record.
    pub off: u64,
    /// Its length.
    pub len: u64,
    /// Its hash slot, in a compact block.
    pub slot: Option<u32>,
}

/// Reads and checks the header of the compact block at `base` (block `b`).
pub fn compact_header(
    pool: &PmemPool,
    base: u64,
    b: u64,
    geo: &Geometry,
    room: u64,
) -> Result<CompactHeader> {
    CompactHeader::decode(pool.read(base, HEADER_LEN)?, base, b, geo.block_bits, room)
}

/// Slot `i` of a compact block.
pub fn compact_slot(pool: &PmemPool, base: u64, h: &CompactHeader, i: u32) -> Result<Slot> {
    let at = base + h.slot_off(i);
    Slot::decode(pool.read(at, SLOT_LEN as usize)?, h, at)
}

/// Finds the record at logical address `addr` (in a published block).
pub fn locate(pool: &PmemPool, table: &BlockTable, geo: &Geometry, addr: u64) -> Result<Located> {
    let b = geo.block_of(addr);
    let rel = geo.block_offset(addr);
    let (base, compact) = table.base(b).ok_or_else(|| {
        Error::corruption(
            Tier::Pmem,
            addr,
            format!("address {addr:#x} is in no published block"),
        )
    })?;
    if !compact {
        let off = base + rel;
        let header = RecordHeader::decode(pool.read(off, record::HEADER_LEN as usize)?)
            .ok_or_else(|| Error::corruption(Tier::Pmem, off, "no record at this address"))?;
        return Ok(Located {
            off,
            len: header.size(),
            slot: None,
        });
    }
    let h = compact_header(pool, base, b, geo, u64::MAX)?;
    let found = find(&h, rel as u32, |i| compact_slot(pool, base, &h, i))?;
    let (i, s) = found.ok_or_else(|| {
        Error::corruption(
            Tier::Pmem,
            base,
            format!("compact block {b} holds no record at offset {rel}"),
        )
    })?;
    Ok(Located {
        off: base + u64::from(s.pos),
        len: u64::from(s.len),
        slot: Some(i),
    })
}

/// Reads and verifies the record at `loc`.
pub fn read_record<'a>(pool: &'a PmemPool, loc: &Located) -> Result<RecordView<'a>> {
    record::decode(pool.read(loc.off, loc.len as usize)?, loc.off)
}
