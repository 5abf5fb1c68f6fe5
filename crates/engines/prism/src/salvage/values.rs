//! The value side of the salvage walk (FORMAT.md, "Salvage", step 4): from a key and its
//! HSIT slot to the value, trusting nothing that is not tied to the key.
//!
//! - The slot's HSIT entry is found through the segment directory (each word must name an
//!   allocator chunk); its word 1 must be the key's tag (CRC-32C and length of the key):
//!   the entry belongs to this key, not to a key that reused the slot.
//! - Word 0 (the forward pointer, dirty bit ignored) must name a known medium. `none`
//!   means the key was being deleted (D1 done): it is not yielded.
//! - A PWB record must lie inside one ring, carry the slot as its backward pointer and
//!   pass its checksum (over the backward pointer, length and value).
//! - A Value Storage record must lie inside its file and chunk, carry the slot as its
//!   backward pointer and pass its checksum, which also covers its location (chunk and
//!   offset), so a record read from the wrong place fails.
//!
//! Thread safety: pure functions over [`Source`]s.

use std::cell::RefCell;
use std::collections::HashMap;

use tierkv_core::media::pmem::alloc::{ChunkState, RegionLayout};

use super::source::Source;
use crate::hsit::HSIT_CHUNK_TAG;
use crate::hsit::entry::{ForwardPointer, Location, key_tag};
use crate::pwb::record::{self, HEADER_LEN};
use crate::superblock::{HSIT_ENTRY_LEN, Superblock};
use crate::value_storage::chunk_format::CHUNKS_START;
use crate::value_storage::chunk_reader::decode_record;
use crate::value_storage::location::ValueLocation;

/// Where a value was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found {
    /// In a persistent write buffer on pmem.
    Pwb,
    /// In a Value Storage chunk on flash.
    Flash,
}

/// What a slot leads to.
#[derive(Debug)]
pub enum Outcome {
    /// A validated value.
    Value(Vec<u8>, Found),
    /// The pointer is `none`: the key's delete was in flight.
    Deleted,
}

/// The pool, its layout and the Value Storage files (by storage id; `None` when missing).
pub struct Stores<'a> {
    /// The pool.
    pub pool: &'a dyn Source,
    /// Its superblock.
    pub sb: &'a Superblock,
    /// Its allocator region.
    pub alloc: &'a RegionLayout,
    /// The HSIT segment directory, read once.
    pub dir: Vec<u64>,
    /// Value Storage files.
    pub flash: Vec<Option<&'a dyn Source>>,
    /// HSIT chunks no valid directory word names (tried for a damaged directory word).
    pub spare: Vec<u64>,
    /// Segment -> spare chunk confirmed by a key tag.
    pub found: RefCell<HashMap<usize, u64>>,
}

impl Stores<'_> {
    /// The value of `key` through HSIT slot `slot`.
    pub fn value(&self, key: &[u8], slot: u64) -> Result<Outcome, String> {
        let w0 = self.entry(slot, key_tag(key))?;
        match ForwardPointer::from_raw(w0).location() {
            None => Err(format!(
                "HSIT slot {slot}: forward pointer {w0:#x} names no medium"
            )),
            Some(Location::None) => Ok(Outcome::Deleted),
            Some(Location::Pwb(off)) => self.pwb(slot, off).map(|v| Outcome::Value(v, Found::Pwb)),
            Some(Location::Flash(p)) => self
                .flash(slot, ValueLocation::unpack(p))
                .map(|v| Outcome::Value(v, Found::Flash)),
        }
    }

    /// Word 0 of the entry of `slot`, whose word 1 must be `tag`. The segment is the one
    /// the directory names; when that word is damaged (it names no chunk, or a chunk whose
    /// entry does not carry the tag), every spare HSIT chunk (tagged HSIT in the
    /// allocator, named by no directory word) is tried, and the first whose entry carries
    /// the key's tag is remembered for the segment. A tag is 48 bits (CRC-32C and length
    /// of the key), so a spare chunk is not taken for the wrong segment by chance.
    fn entry(&self, slot: u64, tag: u64) -> Result<u64, String> {
        let per = u64::from(self.sb.hsit_seg_entries);
        let seg = usize::try_from(slot / per).unwrap_or(usize::MAX);
        let named = *self
            .dir
            .get(seg)
            .ok_or_else(|| format!("HSIT slot {slot}: segment {seg} beyond the directory"))?;
        let rel = (slot % per) * HSIT_ENTRY_LEN;
        let read = |seg_off: u64| {
            Some((
                self.pool.u64_at(seg_off + rel)?,
                self.pool.u64_at(seg_off + rel + 8)?,
            ))
        };
        let mut why = format!("directory word {seg} ({named}) names no allocator chunk");
        if self.is_chunk(named) {
            match read(named) {
                Some((w0, w1)) if w1 == tag => return Ok(w0),
                Some((_, w1)) => {
                    why = format!(
                        "its key tag {w1:#x} is not this key's (a damaged entry or directory word, or a stale index entry)"
                    );
                }
                None => why = "entry outside the pool".to_owned(),
            }
        }
        let cached = self.found.borrow().get(&seg).copied();
        let tries: Vec<u64> = cached.map_or_else(|| self.spare.clone(), |c| vec![c]);
        for off in tries {
            if let Some((w0, w1)) = read(off)
                && w1 == tag
            {
                self.found.borrow_mut().insert(seg, off);
                return Ok(w0);
            }
        }
        Err(format!(
            "HSIT slot {slot}: {why}, and no spare HSIT chunk holds this key's tag there"
        ))
    }

    fn is_chunk(&self, off: u64) -> bool {
        off != 0
            && self
                .alloc
                .chunk_of(off)
                .is_some_and(|k| self.alloc.chunk_off(k) == off)
    }

    fn pwb(&self, slot: u64, off: u64) -> Result<Vec<u8>, String> {
        let sb = self.sb;
        let bad = |what: &str| format!("HSIT slot {slot}: PWB record at pool offset {off}: {what}");
        let rel = off
            .checked_sub(sb.pwb_ring_off)
            .filter(|r| *r < u64::from(sb.pwb_count) * sb.pwb_size && off.is_multiple_of(16))
            .ok_or_else(|| bad("outside the PWB rings"))?;
        let ring_end = sb.pwb_ring_off + (rel / sb.pwb_size + 1) * sb.pwb_size;
        let head = self
            .pool
            .bytes(off, HEADER_LEN as u64)
            .and_then(|b| record::decode_header(&b))
            .ok_or_else(|| bad("unreadable header"))?;
        if head.is_pad() || head.backptr != slot {
            return Err(bad(&format!(
                "backward pointer {} is not the slot",
                head.backptr
            )));
        }
        let start = off + HEADER_LEN as u64;
        if start + u64::from(head.len) > ring_end {
            return Err(bad("length runs past its ring"));
        }
        let value = self
            .pool
            .bytes(start, u64::from(head.len))
            .ok_or_else(|| bad("value unreadable"))?;
        if !head.verifies(&value) {
            return Err(bad("checksum mismatch"));
        }
        Ok(value)
    }

    fn flash(&self, slot: u64, loc: ValueLocation) -> Result<Vec<u8>, String> {
        let file = self
            .flash
            .get(usize::from(loc.storage))
            .copied()
            .flatten()
            .ok_or_else(|| {
                format!(
                    "HSIT slot {slot}: value storage {} is missing or unreadable",
                    loc.storage
                )
            })?;
        let chunk_size = self.sb.chunk_size;
        let chunks = file.len().saturating_sub(CHUNKS_START) / u64::from(chunk_size.max(1));
        loc.check(u32::try_from(chunks).unwrap_or(u32::MAX), chunk_size)
            .map_err(|e| format!("HSIT slot {slot}: {e}"))?;
        let at =
            CHUNKS_START + u64::from(loc.chunk) * u64::from(chunk_size) + u64::from(loc.offset);
        let bytes = file
            .bytes(at, u64::from(loc.len))
            .ok_or_else(|| format!("HSIT slot {slot}: flash record at {at} unreadable"))?;
        let rec = decode_record(&bytes, loc.chunk, loc.offset, Some(loc.len), at)
            .map_err(|e| format!("HSIT slot {slot}: value storage {}: {e}", loc.storage))?;
        if rec.backptr != slot {
            return Err(format!(
                "HSIT slot {slot}: flash record at {at} belongs to slot {}",
                rec.backptr
            ));
        }
        Ok(rec.value.to_vec())
    }
}

/// Reads the HSIT segment directory (bounded by the superblock's capacity).
pub fn read_dir(pool: &dyn Source, sb: &Superblock) -> Vec<u64> {
    (0..u64::from(sb.hsit_dir_cap))
        .map_while(|i| pool.u64_at(sb.hsit_dir_off + 8 * i))
        .collect()
}

/// The allocator chunks tagged as HSIT segments that no word of `dir` names.
pub fn spare_segments(pool: &dyn Source, alloc: &RegionLayout, dir: &[u64]) -> Vec<u64> {
    let count = u32::try_from(alloc.chunk_count).unwrap_or(u32::MAX);
    (0..count)
        .filter(|&k| {
            pool.u64_at(alloc.state_off(k)).and_then(ChunkState::decode)
                == Some(ChunkState::Run {
                    tag: HSIT_CHUNK_TAG,
                    len: 1,
                })
        })
        .map(|k| alloc.chunk_off(k))
        .filter(|off| !dir.contains(off))
        .collect()
}
