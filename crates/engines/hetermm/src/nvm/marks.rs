//! The invalid bitmaps (HeterMM §5.2, marking stage, made durable): setting the bit of a
//! record in its block's bitmap, and accounting the bytes it frees.
//!
//! A bit is set with an atomic fetch-or (so setting it twice is harmless and counted once)
//! and the touched words are persisted before the call returns. Marks land on whichever copy
//! the block's [`BlockInfo`] names: the caller holds that info's lock, so a reorganisation
//! cannot replace the copy meanwhile. A target whose record is not in its block any more
//! (it was invalid when the block was reorganised) needs no mark; nor does a block the
//! reclaimer dropped while the caller waited for its lock (the caller checks that the
//! `blocks` array still names `info.off`: `flush.rs` `apply_marks`).
//!
//! Thread safety: the caller holds the block's lock.

use std::collections::BTreeSet;

use tierkv_core::media::pmem::PmemPool;
use tierkv_core::{Error, Result, Tier};

use super::blocks::{BlockInfo, Layout};
use super::read::{compact_header, compact_slot};
use crate::format::block::mark_position;
use crate::format::compact::{CompactHeader, find};
use crate::format::record::{self, RecordHeader};
use crate::geometry::Geometry;

/// Marks the records at block offsets `rels` of block `b` invalid; returns the bytes that
/// were newly marked (already subtracted from `info.live`).
pub fn mark(
    pool: &PmemPool,
    geo: &Geometry,
    b: u64,
    info: &mut BlockInfo,
    rels: &[u64],
) -> Result<u64> {
    let mut touched = BTreeSet::new();
    let mut freed = 0;
    match info.layout {
        Layout::Full => {
            for &rel in rels {
                let (word, bit) = mark_position(rel);
                if pool.fetch_or_u64(info.off + word, bit)? & bit == 0 {
                    freed += full_record_len(pool, info.off + rel)?;
                }
                touched.insert(info.off + word);
            }
        }
        Layout::Compact { .. } => {
            let h = compact_header(pool, info.off, b, geo, info.run_len)?;
            for &rel in rels {
                let Some((i, slot)) =
                    find(&h, rel as u32, |i| compact_slot(pool, info.off, &h, i))?
                else {
                    continue;
                };
                let (word, bit) = CompactHeader::mark_position(i);
                if pool.fetch_or_u64(info.off + word, bit)? & bit == 0 {
                    freed += u64::from(slot.len);
                }
                touched.insert(info.off + word);
            }
        }
    }
    for w in touched {
        pool.persist(w, 8)?;
    }
    info.live = info.live.saturating_sub(freed);
    Ok(freed)
}

fn full_record_len(pool: &PmemPool, off: u64) -> Result<u64> {
    RecordHeader::decode(pool.read(off, record::HEADER_LEN as usize)?)
        .map(|h| h.size())
        .ok_or_else(|| Error::corruption(Tier::Pmem, off, "a mark names no record"))
}
