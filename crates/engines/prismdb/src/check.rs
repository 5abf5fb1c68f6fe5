//! `tierkv check` for PrismDB: verifies the engine's invariants on a live store (DESIGN
//! §7): every indexed object decodes with its key and timestamp, no two keys share a slot,
//! the slab census matches the index, the tables of each partition are sorted,
//! non-overlapping, inside the partition and match their manifest, the allocator's own
//! metadata checks.
//!
//! Thread safety: takes each partition's state lock in turn (read).

use std::collections::HashSet;

use tierkv_core::{Error, Result, Tier};

use crate::format::decode_object;
use crate::shared::Shared;

/// Runs every check; one line per thing checked, or the first violation.
pub fn check(sh: &Shared) -> Result<Vec<String>> {
    let mut lines = Vec::new();
    sh.alloc.check()?;
    lines.push(format!(
        "pmem allocator: {} chunks, metadata consistent",
        sh.alloc.layout().chunk_count
    ));
    lines.push(format!(
        "write batch records in flight: {}",
        sh.alloc
            .iter_chunks(crate::batch::record::RECORD_TAG)
            .count()
    ));
    let mut slots = HashSet::new();
    for p in &sh.parts {
        let st = p.state.read();
        let mut tombs = 0u64;
        for (k, loc) in &st.index {
            let bytes = sh
                .pool
                .read(loc.off, st.slabs.slot_size(loc.class) as usize)?;
            let o = decode_object(bytes).ok_or_else(|| {
                Error::corruption(Tier::Pmem, loc.off, "indexed object does not decode")
            })?;
            if o.key != k.as_slice() || o.ts != loc.ts || o.value.is_none() != loc.tomb {
                return Err(Error::corruption(
                    Tier::Pmem,
                    loc.off,
                    "indexed object differs from its index entry",
                ));
            }
            if sh.map.partition_of(k) != p.id {
                return Err(Error::corruption(
                    Tier::Pmem,
                    loc.off,
                    "key indexed in the wrong partition",
                ));
            }
            if !slots.insert(loc.off) {
                return Err(Error::corruption(
                    Tier::Pmem,
                    loc.off,
                    "two keys share a slot",
                ));
            }
            tombs += u64::from(loc.tomb);
        }
        let census: u64 = st.slabs.census().iter().map(|c| c.1).sum();
        if census != st.index.len() as u64 {
            return Err(Error::corruption(
                Tier::Pmem,
                0,
                format!(
                    "partition {}: {} occupied slots for {} indexed objects",
                    p.id,
                    census,
                    st.index.len()
                ),
            ));
        }
        let t = &st.tables.tables;
        for w in t.windows(2) {
            if let [a, b] = w
                && a.max_key() >= b.min_key()
            {
                return Err(Error::corruption(
                    Tier::Flash,
                    0,
                    format!(
                        "partition {}: tables {} and {} overlap",
                        p.id, a.number, b.number
                    ),
                ));
            }
        }
        for tb in t {
            let inside = tb.min_key() >= p.lo.as_slice()
                && p.hi.as_ref().is_none_or(|h| tb.max_key() < h.as_slice());
            if !inside {
                return Err(Error::corruption(
                    Tier::Flash,
                    0,
                    format!(
                        "partition {}: table {} outside the partition",
                        p.id, tb.number
                    ),
                ));
            }
        }
        lines.push(format!(
            "partition {}: {} objects on pmem ({} tombstones), {} tables with {} entries on flash",
            p.id,
            st.index.len(),
            tombs,
            t.len(),
            st.tables.entries()
        ));
    }
    Ok(lines)
}
