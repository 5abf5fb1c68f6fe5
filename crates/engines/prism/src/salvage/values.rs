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

use tierkv_core::media::pmem::alloc::RegionLayout;

use super::source::Source;
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
}

impl Stores<'_> {
    /// The value of `key` through HSIT slot `slot`.
    pub fn value(&self, key: &[u8], slot: u64) -> Result<Outcome, String> {
        let (w0, w1) = self.entry(slot)?;
        if w1 != key_tag(key) {
            return Err(format!(
                "HSIT slot {slot}: its key tag {w1:#x} is not this key's (damaged entry, or a stale index entry)"
            ));
        }
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

    fn entry(&self, slot: u64) -> Result<(u64, u64), String> {
        let per = u64::from(self.sb.hsit_seg_entries);
        let seg = usize::try_from(slot / per).unwrap_or(usize::MAX);
        let seg_off = *self
            .dir
            .get(seg)
            .ok_or_else(|| format!("HSIT slot {slot}: segment {seg} beyond the directory"))?;
        let chunk = self.alloc.chunk_of(seg_off);
        if seg_off == 0 || chunk.is_none_or(|k| self.alloc.chunk_off(k) != seg_off) {
            return Err(format!(
                "HSIT slot {slot}: directory word {seg} ({seg_off}) names no allocator chunk"
            ));
        }
        let at = seg_off + (slot % per) * HSIT_ENTRY_LEN;
        match (self.pool.u64_at(at), self.pool.u64_at(at + 8)) {
            (Some(a), Some(b)) => Ok((a, b)),
            _ => Err(format!("HSIT slot {slot}: entry {at} outside the pool")),
        }
    }

    fn pwb(&self, slot: u64, off: u64) -> Result<Vec<u8>, String> {
        let sb = self.sb;
        let bad = |what: &str| format!("HSIT slot {slot}: PWB record at pool offset {off}: {what}");
        let rel = off
            .checked_sub(sb.pwb_ring_off)
            .filter(|r| *r < u64::from(sb.pwb_count) * sb.pwb_size && off % 16 == 0)
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
