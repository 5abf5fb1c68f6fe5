//! Compact (reorganised) blocks (spec: `FORMAT.md` § Compact blocks; HeterMM §5.2,
//! Fig. 7b): the valid records of a sparse block, found by their offset in the logical block
//! through a coalesced hash table (Vitter, CACM 1982) with exactly one slot per record, so
//! the table is 100% full.
//!
//! ```text
//! 0    8  magic      "HMMCOMPT"
//! 8    4  version    u32 (VERSION)
//! 12   1  reserved   0
//! 13   1  block_bits m
//! 14   2  reserved   0
//! 16   8  block_no   the logical block it replaces
//! 24   4  slots      n >= 1 (one per record)
//! 28   4  reserved   0
//! 32   8  total_len  bytes of the whole compact block
//! 40   20 reserved   0
//! 60   4  crc        masked CRC-32C of bytes 0..60
//! 64   ..  bitmap    ceil(n / 64) words: bit i set = the record of slot i is invalid
//! table_off          n slots of 16 bytes: rel_off u32 | next u32 | pos u32 | len u32
//!                    (next = u32::MAX ends a chain; pos is from the block start)
//! data_off           the records, verbatim (data_off = table_off + 16 n)
//! ```
//! A lookup hashes `rel_off` to a slot and follows `next` links; every field read from
//! pmem is range-checked (a chain longer than n, a link or a record outside the block is
//! corruption).
//!
//! Thread safety: pure functions.

use super::record;
use super::{HEADER_LEN, check_seal, corrupt, put_at, seal, u32_at, u64_at};
use tierkv_core::Result;

/// Magic bytes of a compact block.
pub const MAGIC: [u8; 8] = *b"HMMCOMPT";
/// The version this build writes and the newest it reads.
pub const VERSION: u32 = 1;
/// Bytes of one hash slot.
pub const SLOT_LEN: u64 = 16;
/// The end of a chain.
pub const NIL: u32 = u32::MAX;

const VERSION_OFF: usize = 8;
const BLOCK_BITS_OFF: usize = VERSION_OFF + 5;
const BLOCK_NO_OFF: usize = BLOCK_BITS_OFF + 3;
const SLOTS_OFF: usize = BLOCK_NO_OFF + 8;
const TOTAL_LEN_OFF: usize = SLOTS_OFF + 8;

/// The geometry of a compact block with `n` slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompactHeader {
    /// m.
    pub block_bits: u8,
    /// The logical block number.
    pub block_no: u64,
    /// Slots (= records).
    pub slots: u32,
    /// Bytes of the whole compact block.
    pub total_len: u64,
}

impl CompactHeader {
    /// Offset of the bitmap word holding slot `i`'s bit, and the bit.
    pub fn mark_position(i: u32) -> (u64, u64) {
        (HEADER_LEN as u64 + u64::from(i / 64) * 8, 1 << (i % 64))
    }

    /// Offset of the slot table.
    pub fn table_off(&self) -> u64 {
        HEADER_LEN as u64 + u64::from(self.slots).div_ceil(64) * 8
    }

    /// Offset of slot `i`.
    pub fn slot_off(&self, i: u32) -> u64 {
        self.table_off() + u64::from(i) * SLOT_LEN
    }

    /// Offset of the first record.
    pub fn data_off(&self) -> u64 {
        self.table_off() + u64::from(self.slots) * SLOT_LEN
    }

    /// Encodes the header.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        put_at(&mut h, 0, &MAGIC);
        put_at(&mut h, VERSION_OFF, &VERSION.to_le_bytes());
        h[BLOCK_BITS_OFF] = self.block_bits;
        put_at(&mut h, BLOCK_NO_OFF, &self.block_no.to_le_bytes());
        put_at(&mut h, SLOTS_OFF, &self.slots.to_le_bytes());
        put_at(&mut h, TOTAL_LEN_OFF, &self.total_len.to_le_bytes());
        seal(&mut h);
        h
    }

    /// Decodes the header of the compact block at `at`, which the directory says is block
    /// `block_no` and which lies in `room` bytes of allocated space.
    pub fn decode(
        bytes: &[u8],
        at: u64,
        block_no: u64,
        block_bits: u32,
        room: u64,
    ) -> Result<Self> {
        check_seal(
            bytes,
            at,
            "hetermm compact block",
            &MAGIC,
            VERSION_OFF,
            VERSION,
        )?;
        let h = CompactHeader {
            block_bits: bytes.get(BLOCK_BITS_OFF).copied().unwrap_or_default(),
            block_no: u64_at(bytes, BLOCK_NO_OFF).unwrap_or_default(),
            slots: u32_at(bytes, SLOTS_OFF).unwrap_or_default(),
            total_len: u64_at(bytes, TOTAL_LEN_OFF).unwrap_or_default(),
        };
        if h.block_no != block_no || u32::from(h.block_bits) != block_bits {
            return Err(corrupt(
                at,
                format!("compact block header names block {}", h.block_no),
            ));
        }
        if h.slots == 0 || h.data_off() > h.total_len || h.total_len > room {
            return Err(corrupt(
                at,
                format!(
                    "compact block of {} slots and {} bytes in {room}",
                    h.slots, h.total_len
                ),
            ));
        }
        Ok(h)
    }
}

/// One hash slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// The record's offset in its logical block.
    pub rel_off: u32,
    /// The next slot of the chain, or [`NIL`].
    pub next: u32,
    /// The record's offset from the compact block's start.
    pub pos: u32,
    /// The record's length.
    pub len: u32,
}

impl Slot {
    /// Decodes a slot and checks it against the header.
    pub fn decode(bytes: &[u8], h: &CompactHeader, at: u64) -> Result<Slot> {
        let f = |o| u32_at(bytes, o).ok_or_else(|| corrupt(at, "truncated hash slot"));
        let s = Slot {
            rel_off: f(0)?,
            next: f(4)?,
            pos: f(8)?,
            len: f(12)?,
        };
        let end = u64::from(s.pos) + u64::from(s.len);
        if (s.next != NIL && s.next >= h.slots)
            || u64::from(s.pos) < h.data_off()
            || end > h.total_len
            || u64::from(s.len) < record::MIN_RECORD_LEN
            || u64::from(s.rel_off) >= 1 << h.block_bits
        {
            return Err(corrupt(at, format!("hash slot out of range: {s:?}")));
        }
        Ok(s)
    }

    fn encode(&self) -> [u8; SLOT_LEN as usize] {
        let mut b = [0u8; SLOT_LEN as usize];
        put_at(&mut b, 0, &self.rel_off.to_le_bytes());
        put_at(&mut b, 4, &self.next.to_le_bytes());
        put_at(&mut b, 8, &self.pos.to_le_bytes());
        put_at(&mut b, 12, &self.len.to_le_bytes());
        b
    }
}

/// The home slot of `rel_off` in a table of `n` slots.
pub fn home(rel_off: u32, n: u32) -> u32 {
    let h = u64::from(rel_off).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
    (h % u64::from(n.max(1))) as u32
}

/// Builds a compact block for `block_no` from its valid records (offset in the logical
/// block, record bytes), with a zeroed bitmap.
pub fn build(block_no: u64, block_bits: u32, records: &[(u32, &[u8])]) -> Vec<u8> {
    let n = records.len() as u32;
    let mut h = CompactHeader {
        block_bits: block_bits as u8,
        block_no,
        slots: n,
        total_len: 0,
    };
    let data_len: u64 = records.iter().map(|(_, r)| r.len() as u64).sum();
    h.total_len = h.data_off() + data_len;
    let mut out = vec![0u8; h.total_len as usize];
    put_at(&mut out, 0, &h.encode());
    let mut slots: Vec<Option<Slot>> = vec![None; n as usize];
    let mut free_top = n as usize;
    let mut pos = h.data_off();
    for &(rel_off, bytes) in records {
        let slot = Slot {
            rel_off,
            next: NIL,
            pos: pos as u32,
            len: bytes.len() as u32,
        };
        put_at(&mut out, pos as usize, bytes);
        pos += bytes.len() as u64;
        insert(&mut slots, &mut free_top, slot);
    }
    for (i, s) in slots.iter().enumerate() {
        if let Some(s) = s {
            put_at(&mut out, h.slot_off(i as u32) as usize, &s.encode());
        }
    }
    out
}

/// Sets the invalid bits of the records at `rels` in a compact block image made by
/// [`build`] (records that were marked after the reorganisation chose what to keep: they
/// are copied, and stay marked).
pub fn mark_in_image(image: &mut [u8], block_no: u64, block_bits: u32, rels: &[u32]) -> Result<()> {
    let h = CompactHeader::decode(image, 0, block_no, block_bits, image.len() as u64)?;
    for &rel in rels {
        let found = find(&h, rel, |i| {
            let at = h.slot_off(i) as usize;
            let bytes = image.get(at..at + SLOT_LEN as usize).unwrap_or_default();
            Slot::decode(bytes, &h, at as u64)
        })?;
        let Some((i, _)) = found else {
            return Err(corrupt(0, format!("no record at offset {rel} to mark")));
        };
        let (word, bit) = CompactHeader::mark_position(i);
        let w = u64_at(image, word as usize).unwrap_or_default() | bit;
        put_at(image, word as usize, &w.to_le_bytes());
    }
    Ok(())
}

/// Coalesced-hashing insert: the home slot if empty, else the highest empty slot, linked
/// from the end of the home slot's chain.
fn insert(slots: &mut [Option<Slot>], free_top: &mut usize, slot: Slot) {
    let n = slots.len() as u32;
    let mut i = home(slot.rel_off, n) as usize;
    if slots.get(i).is_some_and(Option::is_none) {
        slots[i] = Some(slot);
        return;
    }
    while let Some(Some(s)) = slots.get(i) {
        if s.next == NIL {
            break;
        }
        i = s.next as usize;
    }
    while *free_top > 0 {
        *free_top -= 1;
        if slots[*free_top].is_none() {
            slots[*free_top] = Some(slot);
            if let Some(Some(tail)) = slots.get_mut(i) {
                tail.next = *free_top as u32;
            }
            return;
        }
    }
}

/// Finds the slot of `rel_off`, reading slots with `read_slot`; `None` if the block holds
/// no record at that offset. At most n slots are visited.
pub fn find(
    h: &CompactHeader,
    rel_off: u32,
    mut read_slot: impl FnMut(u32) -> Result<Slot>,
) -> Result<Option<(u32, Slot)>> {
    let mut i = home(rel_off, h.slots);
    for _ in 0..h.slots {
        let s = read_slot(i)?;
        if s.rel_off == rel_off {
            return Ok(Some((i, s)));
        }
        if s.next == NIL {
            return Ok(None);
        }
        i = s.next;
    }
    Err(corrupt(
        0,
        format!(
            "hash chain of block {} is longer than its {} slots",
            h.block_no, h.slots
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot_reader<'a>(b: &'a [u8], h: &'a CompactHeader) -> impl FnMut(u32) -> Result<Slot> + 'a {
        move |i| {
            let off = h.slot_off(i) as usize;
            Slot::decode(&b[off..off + 16], h, off as u64)
        }
    }

    #[test]
    fn every_record_is_found_and_absent_offsets_are_not() {
        let recs: Vec<(u32, Vec<u8>)> = (0..200u32)
            .map(|i| {
                (
                    i * 40 + 192,
                    record::encode(u64::from(i) + 1, b"k", &i.to_le_bytes(), 4),
                )
            })
            .collect();
        let refs: Vec<(u32, &[u8])> = recs.iter().map(|(o, r)| (*o, &r[..])).collect();
        let b = build(9, 15, &refs);
        let h = CompactHeader::decode(&b, 0, 9, 15, b.len() as u64).unwrap();
        assert_eq!(h.slots, 200);
        for (off, r) in &recs {
            let (_, s) = find(&h, *off, slot_reader(&b, &h)).unwrap().unwrap();
            assert_eq!(&b[s.pos as usize..(s.pos + s.len) as usize], &r[..]);
        }
        for absent in [0, 191, 193, 9000] {
            assert!(find(&h, absent, slot_reader(&b, &h)).unwrap().is_none());
        }
    }

    #[test]
    fn a_cyclic_chain_is_corruption_not_a_hang() {
        let r = record::encode(1, b"k", b"v", 1);
        let refs = [(192u32, &r[..]), (256u32, &r[..])];
        let mut b = build(1, 15, &refs);
        let h = CompactHeader::decode(&b, 0, 1, 15, b.len() as u64).unwrap();
        for i in 0..2u32 {
            let at = h.slot_off(i) as usize;
            b[at..at + 4].copy_from_slice(&7u32.to_le_bytes());
            b[at + 4..at + 8].copy_from_slice(&(1 - i).to_le_bytes());
        }
        assert!(find(&h, 100, slot_reader(&b, &h)).is_err());
    }

    #[test]
    fn header_and_slots_out_of_range_are_refused() {
        let r = record::encode(1, b"k", b"v", 1);
        let b = build(1, 15, &[(192, &r[..])]);
        assert!(
            CompactHeader::decode(&b, 0, 1, 15, 10).is_err(),
            "bigger than its room"
        );
        assert!(
            CompactHeader::decode(&b, 0, 2, 15, 1 << 20).is_err(),
            "wrong block"
        );
        let h = CompactHeader::decode(&b, 0, 1, 15, 1 << 20).unwrap();
        let bad = Slot {
            rel_off: 1,
            next: 5,
            pos: 0,
            len: 32,
        }
        .encode();
        assert!(Slot::decode(&bad, &h, 0).is_err());
    }
}
