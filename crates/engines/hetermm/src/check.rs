//! `tierkv check` for HeterMM: verifies the engine's invariants on a live store and says
//! what it checked, one line each (an inconsistency is an [`Error::Corruption`]):
//!
//! 1. the regions are ordered (`off_DRAM <= off_ReadOnly <= next page`) and block aligned,
//!    and so is the durable flush frontier (never past the next page);
//! 2. every address in the index translates (Eq. 1) to a record of its key whose checksum
//!    holds, and none points at a record marked invalid;
//! 3. every published block is consistent: its directory word names it (kind, number,
//!    generation), its header decodes, the `blocks` array holds its base, and its live
//!    bytes equal what its invalid bitmap leaves valid;
//! 4. the pmem allocator's own check passes;
//! 5. every log block's header decodes.
//!
//! Thread safety: runs beside the workload, inside one guard (so nothing it looks at is
//! recycled meanwhile) and under each block's lock while it recounts that block.

use std::sync::atomic::Ordering;

use tierkv_core::{Error, Result, Tier};

use crate::format::block::is_marked;
use crate::format::compact::CompactHeader;
use crate::format::dir::DirEntry;
use crate::format::log::LogHeader;
use crate::format::u64_at;
use crate::mem::HeterMem;
use crate::nvm::blocks::{BlockInfo, Layout};
use crate::nvm::read::{compact_header, locate};
use crate::nvm::walk::records;
use crate::plugin::PluggedIndex;

fn bad(what: String) -> Error {
    Error::corruption(Tier::Pmem, 0, format!("hetermm check: {what}"))
}

/// Runs every check; one line per check.
pub fn check(mem: &HeterMem, index: &dyn PluggedIndex<HeterMem>) -> Result<Vec<String>> {
    let g = mem.pin()?;
    let mut lines = vec![check_regions(mem)?];
    lines.push(check_index(mem, index, &g)?);
    drop(g);
    lines.push(check_blocks(mem)?);
    mem.nvm.alloc.check()?;
    let a = mem.nvm.alloc.stats();
    lines.push(format!(
        "hetermm: pmem allocator consistent ({} of {} chunks free)",
        a.free_chunks, a.chunks
    ));
    lines.push(check_logs(mem)?);
    Ok(lines)
}

fn check_regions(mem: &HeterMem) -> Result<String> {
    let r = &mem.regions;
    // Read first: it only grows, and never past the next page.
    let frontier = mem.nvm.flush_frontier()?;
    let dram = r.off_dram.load(Ordering::SeqCst);
    let ro = r.off_read_only.load(Ordering::SeqCst);
    let tail = mem.geo.page_start(r.next_page.load(Ordering::SeqCst));
    let aligned = mem.geo.block_offset(dram) == 0 && mem.geo.block_offset(ro) == 0;
    if frontier > tail {
        return Err(bad(format!(
            "the flush frontier {frontier:#x} is past the next page at {tail:#x}"
        )));
    }
    if !(dram <= ro && ro <= tail && aligned) {
        return Err(bad(format!(
            "regions out of order: off_DRAM {dram:#x}, off_ReadOnly {ro:#x}, next page at {tail:#x}"
        )));
    }
    Ok(format!(
        "hetermm: regions ordered (off_DRAM {dram:#x} <= off_ReadOnly {ro:#x} <= tail {tail:#x}; durable flush frontier {frontier:#x}; k = {}, m = {})",
        mem.geo.page_bits, mem.geo.block_bits
    ))
}

fn check_index(
    mem: &HeterMem,
    index: &dyn PluggedIndex<HeterMem>,
    g: &crate::mem::Guard<'_>,
) -> Result<String> {
    let mut entries = Vec::new();
    index.for_each(&mut |k, a| entries.push((k.to_vec(), a.0)));
    let (mut in_dram, mut in_pmem) = (0u64, 0u64);
    let off_dram = mem.off_dram();
    for (key, addr) in &entries {
        mem.read_value(g, *addr, key).map_err(|e| {
            bad(format!(
                "key {:?} at {addr:#x} does not translate: {e}",
                String::from_utf8_lossy(key)
            ))
        })?;
        if *addr >= off_dram {
            in_dram += 1;
            continue;
        }
        in_pmem += 1;
        if marked(mem, *addr)? {
            return Err(bad(format!(
                "key {:?} points at {addr:#x}, which is marked invalid",
                String::from_utf8_lossy(key)
            )));
        }
    }
    Ok(format!(
        "hetermm: {} indexed addresses translate ({in_dram} in DRAM, {in_pmem} in pmem)",
        entries.len()
    ))
}

/// True when the record at `addr` (persisted region) has its invalid bit set.
fn marked(mem: &HeterMem, addr: u64) -> Result<bool> {
    let b = mem.geo.block_of(addr);
    let Some(cell) = mem.blocks.info(b) else {
        return Err(bad(format!("address {addr:#x} is in no published block")));
    };
    let info = *cell.lock();
    let pool = mem.pool();
    Ok(
        match (info.layout, locate(pool, &mem.blocks, &mem.geo, addr)?.slot) {
            (Layout::Compact { .. }, Some(i)) => {
                let (word, bit) = CompactHeader::mark_position(i);
                u64_at(pool.read(info.off + word, 8)?, 0).unwrap_or_default() & bit != 0
            }
            _ => is_marked(
                pool.read(info.off, mem.geo.block_size() as usize)?,
                mem.geo.block_offset(addr),
            ),
        },
    )
}

fn check_blocks(mem: &HeterMem) -> Result<String> {
    let mut n = 0;
    let mut live_total = 0;
    for (b, _) in mem.blocks.snapshot() {
        let Some(cell) = mem.blocks.info(b) else {
            continue;
        };
        let info = cell.lock();
        // The reclaimer may have freed the block while this waited for its lock.
        if !mem
            .blocks
            .info(b)
            .is_some_and(|c| std::sync::Arc::ptr_eq(&c, &cell))
        {
            continue;
        }
        check_block(mem, b, &info)?;
        live_total += info.live;
        n += 1;
    }
    Ok(format!(
        "hetermm: {n} pmem blocks consistent (directory, headers, base addresses, {live_total} live bytes match their bitmaps)"
    ))
}

fn check_block(mem: &HeterMem, b: u64, info: &BlockInfo) -> Result<()> {
    let compact = matches!(info.layout, Layout::Compact { .. });
    match mem.nvm.dir_entry(info.off)? {
        DirEntry::Data {
            block_no,
            compact: c,
            generation,
        } if block_no == b && c == compact && generation == info.generation => {}
        other => {
            return Err(bad(format!(
                "block {b} at {} has directory entry {other:?}",
                info.off
            )));
        }
    }
    if mem.blocks.base(b) != Some((info.off, compact)) {
        return Err(bad(format!(
            "block {b}: the blocks array does not hold its base {}",
            info.off
        )));
    }
    if let Layout::Compact { slots } = info.layout {
        let h = compact_header(mem.pool(), info.off, b, &mem.geo, info.run_len)?;
        if h.slots != slots {
            return Err(bad(format!(
                "block {b}: {} slots, its info says {slots}",
                h.slots
            )));
        }
    }
    let live: u64 = records(mem.pool(), &mem.geo, b, info)?
        .iter()
        .filter(|r| !r.marked)
        .map(|r| r.record.header.size())
        .sum();
    if live != info.live {
        return Err(bad(format!(
            "block {b}: {live} live bytes in its bitmap, {} in its info",
            info.live
        )));
    }
    Ok(())
}

fn check_logs(mem: &HeterMem) -> Result<String> {
    let mut n = 0;
    for (off, e) in mem.nvm.published()? {
        if let DirEntry::Log { seq } = e {
            let head = mem.pool().read(off, crate::format::HEADER_LEN)?;
            if let Err(err) = LogHeader::decode(head, off, seq, mem.geo.block_bits) {
                // Retired (and its run reused) since the directory was read: not an error.
                if mem.nvm.dir_entry(off)? != e {
                    continue;
                }
                return Err(err);
            }
            n += 1;
        }
    }
    Ok(format!(
        "hetermm: {n} operation-log blocks with valid headers (oplog {})",
        if mem.oplog.is_some() { "on" } else { "off" }
    ))
}
