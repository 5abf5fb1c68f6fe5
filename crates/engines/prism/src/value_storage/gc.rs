//! The garbage-collection *mechanism* of a Value Storage (PRISM §5.2): one synchronous
//! step that carries out what [`super::gc_policy::choose_victims`] chose.
//!
//! A step:
//! 1. takes a usage snapshot of the sealed chunks and asks the policy for a choice;
//! 2. retires the chosen chunks that hold no live value (no copying);
//! 3. reads the images of the chunks with live values (one batch), verifies them
//!    (`decode_chunk`), and collects the records whose validity bit is set;
//! 4. writes those values into one new chunk (GC may use the reserved free chunks) and
//!    calls `relocate(backptr, old, new)` for each: if the core's CAS on HSIT won, the old
//!    location is invalidated, otherwise the new one is (the value was superseded or
//!    deleted meanwhile, and whoever did that invalidates the old one);
//! 5. retires each victim with no live value left, and returns every other victim to the
//!    sealed state, so that a later step considers it again. A victim keeps live values
//!    when an update raced with the relocation and has not invalidated the old location
//!    yet (a later step finds it empty), or when its values were not yet reachable: PWB
//!    reclamation seals a chunk before it moves the HSIT pointers into it, so a step in
//!    between loses every CAS on it (a later step moves them). No chunk is a victim
//!    between steps (`tierkv check` reports one that is).
//!
//! Readers are never blocked: a reader holding an old location reads the old chunk, which
//! is freed only after it has no live value *and* an epoch grace period has passed (see
//! `chunk_table`). A victim that cannot be read back intact is quarantined (never reused,
//! reported), since the values still referenced in it can no longer be moved.
//!
//! Thread safety: one step at a time per storage (`gc_lock`); concurrent with writers,
//! readers and invalidations.

use std::time::Instant;

use tierkv_core::Result;

use super::ValueStorage;
use super::chunk_format::Placement;
use super::chunk_reader::decode_chunk;
use super::chunk_table::ChunkState;
use super::gc_policy::{GcChoice, choose_victims};
use super::location::ValueLocation;
use super::reader::ReadSpec;
use super::{MAX_GC_VICTIMS, payload_capacity};
use crate::hsit::entry::Relocation;

/// What one GC step did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Chunks with live values chosen as victims.
    pub victims: usize,
    /// Chunks retired (they become free after the grace period).
    pub chunks_retired: usize,
    /// Values moved (their HSIT entries now point to the new chunk).
    pub values_moved: u64,
    /// Footprint bytes moved.
    pub bytes_moved: u64,
    /// Values copied but not moved (the HSIT entry had changed).
    pub values_dropped: u64,
    /// Victims that could not be read back intact, with the reason; quarantined.
    pub corrupt_chunks: Vec<(u32, String)>,
    /// Time the step took, µs.
    pub micros: u64,
}

/// A live value copied out of a victim.
struct Moving {
    backptr: u64,
    value: Vec<u8>,
    old: ValueLocation,
}

pub(super) fn step(
    vs: &ValueStorage,
    relocate: &dyn Fn(u64, ValueLocation, ValueLocation) -> Result<Relocation>,
) -> Result<GcReport> {
    let _one_at_a_time = vs.gc_lock.lock();
    let start = Instant::now();
    let mut report = GcReport::default();
    let choice = choose_victims(
        &vs.table.usage(ChunkState::Sealed),
        payload_capacity(vs.chunk_size) as u64,
        MAX_GC_VICTIMS,
    );
    if let GcChoice::Collect { empty, victims, .. } = choice {
        for c in empty {
            if vs.table.retire(c, ChunkState::Sealed) {
                report.chunks_retired += 1;
            }
        }
        let victims: Vec<u32> = victims
            .into_iter()
            .filter(|&c| {
                vs.table
                    .transition(c, ChunkState::Sealed, ChunkState::Victim)
            })
            .collect();
        report.victims = victims.len();
        let moving = collect_live(vs, &victims, &mut report);
        let outcome = move_values(vs, moving, relocate, &mut report);
        for &c in &victims {
            if vs.table.retire(c, ChunkState::Victim) {
                report.chunks_retired += 1;
            } else {
                // IMPORTANT: GC only considers sealed chunks; a victim left behind would
                // never be collected (step 5).
                vs.table
                    .transition(c, ChunkState::Victim, ChunkState::Sealed);
            }
        }
        outcome?;
    }
    report.micros = start.elapsed().as_micros() as u64;
    let k = &vs.counters;
    if report.chunks_retired > 0 || report.victims > 0 {
        k.gc_runs.incr();
    }
    k.gc_chunks_reclaimed.add(report.chunks_retired as u64);
    k.gc_values_moved.add(report.values_moved);
    k.gc_bytes_moved.add(report.bytes_moved);
    k.gc_values_dropped.add(report.values_dropped);
    k.gc_micros.add(report.micros);
    k.gc_corrupt_chunks.add(report.corrupt_chunks.len() as u64);
    Ok(report)
}

/// Reads the victims and copies out their valid records; quarantines unreadable victims.
fn collect_live(vs: &ValueStorage, victims: &[u32], report: &mut GcReport) -> Vec<Moving> {
    let specs: Vec<ReadSpec> = victims
        .iter()
        .map(|&c| {
            let known = vs.table.get(c).map_or(0, |m| m.image_len());
            let len = if known == 0 { vs.chunk_size } else { known };
            ReadSpec {
                offset: vs.chunk_offset(c),
                len: len as usize,
            }
        })
        .collect();
    let mut moving = Vec::new();
    for ((&c, spec), image) in victims
        .iter()
        .zip(&specs)
        .zip(vs.reader.read_batch(specs.clone()))
    {
        let Some(meta) = vs.table.get(c) else {
            continue;
        };
        let decoded = image.and_then(|buf| {
            let (_, records) = decode_chunk(&buf, vs.id, c, spec.offset)
                .map_err(|e| super::in_file(e, vs.file.path()))?;
            Ok(records
                .iter()
                .filter(|r| meta.bitmap.is_set(r.offset))
                .map(|r| Moving {
                    backptr: r.backptr,
                    value: r.value.to_vec(),
                    old: ValueLocation {
                        storage: vs.id,
                        chunk: c,
                        offset: r.offset,
                        len: r.footprint,
                    },
                })
                .collect::<Vec<_>>())
        });
        match decoded {
            Ok(live) => moving.extend(live),
            Err(e) => {
                vs.table
                    .transition(c, ChunkState::Victim, ChunkState::Quarantined);
                report.corrupt_chunks.push((c, e.to_string()));
            }
        }
    }
    moving
}

/// Writes the copied values into one new chunk and relocates them (step 4).
fn move_values(
    vs: &ValueStorage,
    moving: Vec<Moving>,
    relocate: &dyn Fn(u64, ValueLocation, ValueLocation) -> Result<Relocation>,
    report: &mut GcReport,
) -> Result<()> {
    if moving.is_empty() {
        return Ok(());
    }
    let values: Vec<(u64, &[u8])> = moving
        .iter()
        .map(|m| (m.backptr, m.value.as_slice()))
        .collect();
    // Packed: what GC moves is cold, and must fit the one chunk the victims were chosen for.
    let new_locs = vs.write_values(&values, 0, Placement::Packed)?;
    let mut pairs = moving.iter().zip(new_locs);
    while let Some((m, new)) = pairs.next() {
        let failed = match relocate(m.backptr, m.old, new) {
            Ok(Relocation::Moved) => {
                vs.invalidate(m.old)?;
                report.values_moved += 1;
                report.bytes_moved += u64::from(new.len);
                continue;
            }
            Ok(Relocation::Lost) => {
                vs.invalidate(new)?;
                report.values_dropped += 1;
                continue;
            }
            // IMPORTANT: HSIT points at `new`, durably or not: both copies stay valid.
            Ok(Relocation::Unpersisted(e)) => e,
            Err(e) => {
                vs.invalidate(new)?;
                e
            }
        };
        // The entries not relocated keep their old locations; their copies are garbage.
        for (_, rest) in pairs {
            vs.invalidate(rest)?;
        }
        return Err(failed);
    }
    Ok(())
}
