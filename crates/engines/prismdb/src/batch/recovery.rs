//! Recovery of write batches (FORMAT.md §3 "Write batches", "Recovery" step 3; issue 24):
//! before any slab is scanned, the slots every *pending* batch record lists are zeroed, so
//! rule (R) never sees an uncommitted batch's objects and every key keeps its previous
//! version; then every record, pending or not, is voided whole and its run goes back to
//! the allocator. Idempotent: a crash during it repeats it at the next open (nothing is
//! written before recovery ends).
//!
//! Thread safety: runs at open, before the store is shared.

use std::collections::HashMap;

use tierkv_core::{Error, Result, Tier};

use super::record::{RECORD_TAG, decode_record};
use crate::format::CHUNK_HEADER_LEN;
use crate::shared::Shared;

/// Zeroes every slot a pending record lists, then frees every record run. `slabs` maps
/// each slab chunk to its slot size. Returns the batches rolled back.
pub fn roll_back(sh: &Shared, slabs: &HashMap<u64, u32>) -> Result<u64> {
    let runs: Vec<_> = sh.alloc.iter_chunks(RECORD_TAG).collect();
    let base = sh.alloc.layout().chunks_off;
    let cs = sh.alloc.chunk_size();
    let mut rolled = 0;
    for run in runs {
        let bytes = sh
            .pool
            .read(run.offset, usize::try_from(run.size).unwrap_or(usize::MAX))?;
        if let Some(slots) = decode_record(bytes) {
            for &off in &slots {
                let chunk = base + (off.saturating_sub(base) / cs) * cs;
                let first = chunk.saturating_add(CHUNK_HEADER_LEN);
                let rel = off.saturating_sub(first);
                let ok = off >= first
                    && slabs.get(&chunk).is_some_and(|&size| {
                        size > 0
                            && rel % u64::from(size) == 0
                            && rel.saturating_add(u64::from(size))
                                <= cs.saturating_sub(CHUNK_HEADER_LEN)
                    });
                if !ok {
                    return Err(Error::corruption(
                        Tier::Pmem,
                        run.offset,
                        format!(
                            "prismdb: a pending write batch lists offset {off}, not a slab slot"
                        ),
                    ));
                }
            }
            for &off in &slots {
                // IMPORTANT: before the slabs are scanned, so the versions the batch would
                // have replaced win.
                sh.pool.store_u64(off, 0)?;
                sh.pool.persist(off, 8)?;
            }
            rolled += 1;
        }
        // IMPORTANT: every record is void whole (magic, count and checksum) before its
        // chunk is free, pending or not: a committed one, or one whose magic never landed
        // but whose count, checksum and slots did. A chunk taken for a later record run is
        // not cleared, so a crash between that allocation and the new record's persist, or
        // after only the new magic word landed, would find this one pending again and zero
        // whatever the slots it lists hold by then (or refuse to open: stress flash-faults
        // seed 9885, "a pending write batch lists offset …, not a slab slot"; kill seed
        // 2407, a committed batch lost).
        super::void_record(sh, run.offset)?;
        sh.alloc.free_chunk(run.offset)?;
    }
    Ok(rolled)
}
