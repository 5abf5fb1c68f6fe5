//! `check` for a Value Storage (what `tierkv check` runs for PRISM's flash side): every
//! chunk that holds valid values is read back and decoded — header, checksums, records —
//! and every validity bit must mark the start of a record in it. Findings are returned as
//! lines; a problem is a line starting with `error:`.
//!
//! Thread safety: reads only; meant for a quiescent store (offline check), but safe to run
//! beside writers (a chunk written meanwhile is simply not looked at).

use tierkv_core::Result;

use super::ValueStorage;
use super::chunk_format::BITMAP_UNIT;
use super::chunk_reader::decode_chunk;
use super::chunk_table::ChunkState;
use super::reader::ReadSpec;

pub(super) fn check(vs: &ValueStorage) -> Result<Vec<String>> {
    let mut lines = Vec::new();
    let chunks: Vec<u32> = (0..vs.table.len())
        .filter(|&c| {
            vs.table
                .get(c)
                .is_some_and(|m| m.bitmap.live_values() > 0 || m.state() == ChunkState::Quarantined)
        })
        .collect();
    let specs: Vec<ReadSpec> = chunks
        .iter()
        .map(|&c| ReadSpec {
            offset: vs.chunk_offset(c),
            len: vs.chunk_size as usize,
        })
        .collect();
    let mut records_checked = 0u64;
    for ((&c, spec), image) in chunks
        .iter()
        .zip(&specs)
        .zip(vs.reader.read_batch(specs.clone()))
    {
        let Some(meta) = vs.table.get(c) else {
            continue;
        };
        if meta.state() == ChunkState::Quarantined {
            lines.push(format!(
                "error: value storage {} chunk {c} is quarantined (GC could not read it)",
                vs.id
            ));
            continue;
        }
        match image.and_then(|buf| {
            decode_chunk(&buf, vs.id, c, spec.offset)
                .map(|(_, r)| r.iter().map(|r| r.offset).collect::<Vec<_>>())
        }) {
            Ok(offsets) => {
                records_checked += offsets.len() as u64;
                let marked = offsets.iter().filter(|&&o| meta.bitmap.is_set(o)).count() as u32;
                if marked != meta.bitmap.live_values() {
                    lines.push(format!(
                        "error: value storage {} chunk {c}: {} values marked valid, {marked} of them at record starts",
                        vs.id,
                        meta.bitmap.live_values()
                    ));
                }
            }
            Err(e) => lines.push(format!(
                "error: value storage {} chunk {c} holds valid values but does not decode: {e}",
                vs.id
            )),
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
            chunks.len()
        ),
    );
    Ok(lines)
}
