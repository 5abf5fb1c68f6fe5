//! Every record of a published block — full (walked page by page) or compact (slot by
//! slot) — with its invalid bit: what recovery offers to the index, what reorganisation
//! keeps, and what `check` recounts.
//!
//! Thread safety: the caller keeps the block from being freed (holds its lock, or runs
//! before the store is shared).

use tierkv_core::Result;
use tierkv_core::media::pmem::PmemPool;

use super::blocks::{BlockInfo, Layout};
use super::read::{compact_header, compact_slot};
use crate::format::block::{BlockHeader, is_marked, walk};
use crate::format::compact::CompactHeader;
use crate::format::record::{self, RecordView};
use crate::format::{HEADER_LEN, u64_at};
use crate::geometry::Geometry;

/// A record of a published block.
#[derive(Clone, Copy, Debug)]
pub struct BlockRecord<'a> {
    /// Its offset in the logical block (= logical address mod 2^m).
    pub rel: u64,
    /// Its bytes (a slice of the pool).
    pub bytes: &'a [u8],
    /// The decoded, checksum-verified record.
    pub record: RecordView<'a>,
    /// True when its invalid bit is set.
    pub marked: bool,
}

/// Every record of block `b` (whose copy `info` describes), in block order.
pub fn records<'a>(
    pool: &'a PmemPool,
    geo: &Geometry,
    b: u64,
    info: &BlockInfo,
) -> Result<Vec<BlockRecord<'a>>> {
    let mut out = Vec::new();
    match info.layout {
        Layout::Full => {
            let bytes = pool.read(info.off, geo.block_size() as usize)?;
            let header = BlockHeader::decode(bytes, info.off, b, geo.block_bits)?;
            walk(bytes, info.off, &header, |f| {
                out.push(BlockRecord {
                    rel: f.off,
                    bytes: f.bytes,
                    record: f.record,
                    marked: is_marked(bytes, f.off),
                });
            })?;
        }
        Layout::Compact { .. } => {
            let h = compact_header(pool, info.off, b, geo, info.run_len)?;
            let bitmap = pool.read(
                info.off + HEADER_LEN as u64,
                (u64::from(h.slots).div_ceil(64) * 8) as usize,
            )?;
            for i in 0..h.slots {
                let s = compact_slot(pool, info.off, &h, i)?;
                let at = info.off + u64::from(s.pos);
                let bytes = pool.read(at, s.len as usize)?;
                let (word, bit) = CompactHeader::mark_position(i);
                out.push(BlockRecord {
                    rel: u64::from(s.rel_off),
                    bytes,
                    record: record::decode(bytes, at)?,
                    marked: u64_at(bitmap, (word - HEADER_LEN as u64) as usize).unwrap_or_default()
                        & bit
                        != 0,
                });
            }
        }
    }
    Ok(out)
}
