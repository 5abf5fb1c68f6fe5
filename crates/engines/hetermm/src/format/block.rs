//! Full pmem blocks (spec: `FORMAT.md` § Full blocks): the verbatim copy of the 2^m / 2^k
//! DRAM pages of one logical block, preceded by a header and the block's persistent
//! *invalid bitmap* (HeterMM §5.2's invalid-address list, made durable).
//!
//! ```text
//! 0    8  magic      "HMMBLOCK"        (the layout of `format::NumberedHead`)
//! 8    4  version    u32 (VERSION)
//! 12   1  page_bits  k of the pages copied into this block (records never cross a page)
//! 13   1  block_bits m
//! 14   2  reserved   0
//! 16   8  block_no   the logical block this is (addresses block_no << m ..)
//! 24   36 reserved   0
//! 60   4  crc        masked CRC-32C of bytes 0..60
//! 64   ..  bitmap    2^m / 32 bits: bit g set = the record starting in grain g (32 bytes)
//!                    is invalid (superseded or deleted durably)
//! prefix_len(m) ..   records, page by page: in each page from its start (page 0: from
//!                    prefix_len) until the page ends or a zero meta word (unused space)
//! ```
//! The logical addresses of the header and bitmap are never handed out, so a record's
//! offset in the block equals its logical address modulo 2^m, and a flush is a plain copy.
//!
//! Thread safety: pure functions.

use super::record::{self, MARK_GRAIN, RecordView};
use super::{HEADER_LEN, NumberedHead, corrupt, u64_at};
use tierkv_core::Result;

/// Magic bytes of a full block.
pub const MAGIC: [u8; 8] = *b"HMMBLOCK";
/// The version this build writes and the newest it reads.
pub const VERSION: u32 = 1;

/// Bytes of the invalid bitmap of a block of 2^m bytes.
pub const fn bitmap_len(block_bits: u32) -> u64 {
    (1u64 << block_bits) / MARK_GRAIN / 8
}

/// Bytes before the first record of a block (header and bitmap, rounded up to a line).
pub const fn prefix_len(block_bits: u32) -> u64 {
    (HEADER_LEN as u64 + bitmap_len(block_bits)).div_ceil(64) * 64
}

/// Where the invalid bit of the record at block offset `off` is: the offset of its
/// bitmap word from the block start, and the bit in it.
pub const fn mark_position(off: u64) -> (u64, u64) {
    let grain = off / MARK_GRAIN;
    (HEADER_LEN as u64 + (grain / 64) * 8, 1 << (grain % 64))
}

/// True when the bitmap in `block` (a whole block's bytes) marks the record at `off`.
pub fn is_marked(block: &[u8], off: u64) -> bool {
    let (word_off, bit) = mark_position(off);
    u64_at(block, word_off as usize).is_some_and(|w| w & bit != 0)
}

/// The header of a full block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockHeader {
    /// k of the pages in the block.
    pub page_bits: u8,
    /// m.
    pub block_bits: u8,
    /// The logical block number.
    pub block_no: u64,
}

impl BlockHeader {
    /// Encodes the header.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        NumberedHead {
            page_bits: self.page_bits,
            block_bits: self.block_bits,
            number: self.block_no,
        }
        .encode(&MAGIC, VERSION)
    }

    /// Decodes the header of the block at `at`, which the directory says is block
    /// `block_no` of a store with `block_bits`.
    pub fn decode(bytes: &[u8], at: u64, block_no: u64, block_bits: u32) -> Result<BlockHeader> {
        let h = NumberedHead::decode(
            bytes,
            at,
            "hetermm block header",
            &MAGIC,
            VERSION,
            block_no,
            block_bits,
        )?;
        if prefix_len(block_bits) > (1 << h.page_bits) / 2 {
            return Err(corrupt(
                at,
                format!("block header has page_bits {}", h.page_bits),
            ));
        }
        Ok(BlockHeader {
            page_bits: h.page_bits,
            block_bits: h.block_bits,
            block_no,
        })
    }
}

/// One record found by [`walk`]: its offset in the block, its bytes, and the record
/// decoded from them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found<'a> {
    /// Offset from the block start (= logical address mod 2^m).
    pub off: u64,
    /// The record's bytes.
    pub bytes: &'a [u8],
    /// The decoded (checksum-verified) record.
    pub record: RecordView<'a>,
}

/// Walks every record of a full block (`block` = its whole bytes, at pool offset `at`),
/// verifying each record's checksum, and calls `f` for each. A record that does not
/// decode inside a published block is corruption.
pub fn walk<'a>(
    block: &'a [u8],
    at: u64,
    header: &BlockHeader,
    mut f: impl FnMut(Found<'a>),
) -> Result<()> {
    let page = 1u64 << header.page_bits;
    let size = 1u64 << header.block_bits;
    if (block.len() as u64) < size {
        return Err(corrupt(at, "block is shorter than 2^block_bits"));
    }
    let mut page_start = 0;
    while page_start < size {
        let page_end = page_start + page;
        let mut off = page_start.max(prefix_len(u32::from(header.block_bits)));
        while off + record::HEADER_LEN <= page_end {
            if u64_at(block, off as usize).unwrap_or_default() == 0 {
                break;
            }
            let rest = block
                .get(off as usize..page_end as usize)
                .unwrap_or_default();
            let record = record::decode(rest, at + off)?;
            let size = record.header.size();
            f(Found {
                off,
                bytes: rest.get(..size as usize).unwrap_or_default(),
                record,
            });
            off += size;
        }
        page_start = page_end;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_with(records: &[(u64, Vec<u8>)]) -> Vec<u8> {
        let h = BlockHeader {
            page_bits: 12,
            block_bits: 15,
            block_no: 3,
        };
        let mut b = vec![0u8; 1 << 15];
        b[..64].copy_from_slice(&h.encode());
        for (off, r) in records {
            b[*off as usize..*off as usize + r.len()].copy_from_slice(r);
        }
        b
    }

    #[test]
    fn prefix_holds_header_and_bitmap() {
        assert_eq!(bitmap_len(15), 128);
        assert_eq!(prefix_len(15), 192);
        assert_eq!(prefix_len(21), 64 + 8192);
        assert_eq!(mark_position(0), (64, 1));
        assert_eq!(mark_position(32 * 65), (72, 2));
    }

    #[test]
    fn walk_finds_records_page_by_page_and_stops_at_unused_space() {
        let r1 = record::encode(1, b"a", b"one", 3);
        let r2 = record::encode(2, b"b", b"two", 3);
        let r3 = record::encode(3, b"c", b"three", 8);
        let p = prefix_len(15);
        let b = block_with(&[(p, r1.clone()), (p + r1.len() as u64, r2), (4096, r3)]);
        let h = BlockHeader::decode(&b, 0, 3, 15).unwrap();
        let mut offs = Vec::new();
        walk(&b, 0, &h, |f| offs.push(f.off)).unwrap();
        assert_eq!(offs, vec![p, p + r1.len() as u64, 4096]);
    }

    #[test]
    fn walk_reports_a_damaged_record() {
        let mut r = record::encode(1, b"a", b"one", 3);
        r[26] ^= 1;
        let b = block_with(&[(prefix_len(15), r)]);
        let h = BlockHeader::decode(&b, 0, 3, 15).unwrap();
        assert!(walk(&b, 0, &h, |_| ()).unwrap_err().is_corruption());
    }

    #[test]
    fn header_must_match_the_directory() {
        let b = block_with(&[]);
        assert!(BlockHeader::decode(&b, 0, 4, 15).is_err());
        assert!(BlockHeader::decode(&b, 0, 3, 16).is_err());
        assert!(is_marked(&b, 0).eq(&false));
    }
}
