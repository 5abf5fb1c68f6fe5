//! `check` for a Value Storage (what `tierkv check` runs for PRISM's flash side): every
//! chunk that holds valid values is read back and decoded — header, checksums, records —
//! and every validity bit must mark the start of a record in it; no chunk may be a GC
//! victim outside a GC step (GC never looks at a victim again, so it would be stuck: its
//! space leaks until reopen); no chunk that is not sealed may hold valid values. Findings
//! are returned as lines; a problem is a line starting with `error:`.
//!
//! Thread safety: reads only, holding the storage's GC lock (no step runs meanwhile);
//! meant for a quiescent store (offline check), but safe to run beside writers (a chunk
//! written meanwhile is simply not looked at).

use tierkv_core::Result;

use super::ValueStorage;
use super::chunk_format::BITMAP_UNIT;
use super::chunk_reader::decode_chunk;
use super::chunk_table::ChunkState;
use super::reader::ReadSpec;

/// Chunks read back at once (bounds the memory `check` holds: 16 chunk images).
const CHECK_BATCH: usize = 16;

pub(super) fn check(vs: &ValueStorage) -> Result<Vec<String>> {
    let _no_gc_step = vs.gc_lock.lock();
    let mut lines = Vec::new();
    let mut to_read = Vec::new();
    for c in 0..vs.table.len() {
        let Some(meta) = vs.table.get(c) else {
            continue;
        };
        let live = meta.bitmap.live_values();
        match meta.state() {
            ChunkState::Quarantined => lines.push(format!(
                "error: value storage {} chunk {c} is quarantined (GC could not read it)",
                vs.id
            )),
            ChunkState::Victim => lines.push(format!(
                "error: value storage {} chunk {c} is a GC victim outside a GC step, with {live} live values (GC never collects it)",
                vs.id
            )),
            ChunkState::Sealed | ChunkState::Writing | ChunkState::Recovering => {}
            state @ (ChunkState::Free | ChunkState::Retired) if live > 0 => {
                lines.push(format!(
                    "error: value storage {} chunk {c} is {state:?} but holds {live} live values",
                    vs.id
                ));
            }
            ChunkState::Free | ChunkState::Retired => {}
        }
        if live > 0 {
            to_read.push(c);
        }
    }
    let mut records_checked = 0u64;
    for group in to_read.chunks(CHECK_BATCH) {
        let specs: Vec<ReadSpec> = group
            .iter()
            .map(|&c| ReadSpec {
                offset: vs.chunk_offset(c),
                len: vs.chunk_size as usize,
            })
            .collect();
        for ((&c, spec), image) in group
            .iter()
            .zip(&specs)
            .zip(vs.reader.read_batch(specs.clone()))
        {
            let offsets = image.and_then(|buf| {
                decode_chunk(&buf, vs.id, c, spec.offset)
                    .map(|(_, r)| r.iter().map(|r| r.offset).collect::<Vec<_>>())
                    .map_err(|e| super::in_file(e, vs.file.path()))
            });
            match offsets {
                Ok(offsets) => {
                    records_checked += offsets.len() as u64;
                    lines.extend(check_bits(vs, c, &offsets));
                }
                Err(e) => lines.push(format!(
                    "error: value storage {} chunk {c} holds valid values but does not decode: {e}",
                    vs.id
                )),
            }
        }
    }
    let (live, bytes) = vs.table.live();
    lines.insert(
        0,
        format!(
            "value storage {}: {} chunks of {} bytes, {} free; {live} valid values ({bytes} bytes) in {} chunks, {records_checked} records verified (bitmap unit {BITMAP_UNIT} B)",
            vs.id,
            vs.table.len(),
            vs.chunk_size,
            vs.table.free_count(),
            to_read.len()
        ),
    );
    Ok(lines)
}

/// Every set bit of chunk `c` must be the start of one of its records (`offsets`).
fn check_bits(vs: &ValueStorage, c: u32, offsets: &[u32]) -> Option<String> {
    let meta = vs.table.get(c)?;
    let marked = offsets.iter().filter(|&&o| meta.bitmap.is_set(o)).count() as u32;
    (marked != meta.bitmap.live_values()).then(|| {
        format!(
            "error: value storage {} chunk {c}: {} values marked valid, {marked} of them at record starts",
            vs.id,
            meta.bitmap.live_values()
        )
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tierkv_core::FlashOptions;
    use tierkv_core::media::flash::FlashDevice;

    use super::*;
    use crate::combining::CombiningMode;

    #[test]
    fn check_reports_a_stuck_victim() {
        let dir = tempfile::tempdir().unwrap();
        let opts = FlashOptions {
            size: tierkv_core::ByteSize::mib(4),
            ..FlashOptions::default()
        };
        let dev: Arc<FlashDevice> = FlashDevice::open(dir.path(), &opts).unwrap();
        let vs = ValueStorage::create(0, dev, 8192 + 8 * 16384, 16384, CombiningMode::Single, 8)
            .unwrap();
        let locs = vs.write_chunk(&[(7, b"seven".as_slice())]).unwrap();
        let errors = |vs: &ValueStorage| {
            vs.check()
                .unwrap()
                .into_iter()
                .filter(|l| l.starts_with("error:"))
                .collect::<Vec<_>>()
        };
        assert_eq!(errors(&vs), Vec::<String>::new());
        let chunk = locs[0].chunk;
        assert!(
            vs.table
                .transition(chunk, ChunkState::Sealed, ChunkState::Victim)
        );
        let found = errors(&vs);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].contains("GC victim outside a GC step"),
            "{found:?}"
        );
        assert_eq!(vs.victim_chunks(), vec![chunk]);
    }
}
