//! The PWB record codec (PRISM §4.3, Figure 4; spec: `FORMAT.md` § PWB record).
//!
//! ```text
//! off  len  field
//! 0    8    backward pointer   u64: the HSIT slot that owns the value; PAD_BACKPTR for a pad
//! 8    4    value length       u32 (for a pad: the bytes after the header up to the ring's end)
//! 12   4    crc                masked CRC-32C of bytes 0..12 and the value
//! 16   len  value, then zero or more bytes up to the next multiple of RECORD_ALIGN
//! ```
//! Records are `RECORD_ALIGN` (16)-aligned, so a header never straddles a cache line. A
//! record never wraps around the ring's end: when it does not fit before the end, a *pad*
//! record fills the rest of the ring and the record starts at the ring's beginning.
//!
//! The checksum is not what makes a record valid — well-coupling with HSIT is (§5.5) — but
//! it lets the reclaimer and `check` detect media damage in a record HSIT points to.
//!
//! Thread safety: pure functions over byte slices.

use tierkv_core::format::checksum::{crc32c, crc32c_append, mask};

/// Alignment and size granule of records.
pub const RECORD_ALIGN: u64 = 16;
/// Length of a record header.
pub const HEADER_LEN: usize = 16;
/// The backward pointer of a pad record.
pub const PAD_BACKPTR: u64 = u64::MAX;

const BACKPTR_OFF: usize = 0;
const LEN_OFF: usize = BACKPTR_OFF + 8;
const CRC_OFF: usize = LEN_OFF + 4;

/// A decoded record header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    /// The owning HSIT slot, or [`PAD_BACKPTR`].
    pub backptr: u64,
    /// Value length (or pad length).
    pub len: u32,
    /// The stored (masked) checksum.
    pub crc: u32,
}

impl RecordHeader {
    /// True for a pad record.
    pub fn is_pad(&self) -> bool {
        self.backptr == PAD_BACKPTR
    }

    /// Bytes the record occupies in the ring, header and alignment included.
    pub fn footprint(&self) -> u64 {
        footprint(self.len as usize)
    }

    /// True when `value` is the value this header was written for.
    pub fn verifies(&self, value: &[u8]) -> bool {
        value.len() == self.len as usize && self.crc == checksum(self.backptr, value)
    }
}

/// Bytes a record with a value of `len` bytes occupies in the ring.
pub fn footprint(len: usize) -> u64 {
    (HEADER_LEN as u64 + len as u64).next_multiple_of(RECORD_ALIGN)
}

fn checksum(backptr: u64, value: &[u8]) -> u32 {
    let mut head = [0u8; CRC_OFF];
    head[BACKPTR_OFF..LEN_OFF].copy_from_slice(&backptr.to_le_bytes());
    let len = u32::try_from(value.len()).unwrap_or(u32::MAX);
    head[LEN_OFF..CRC_OFF].copy_from_slice(&len.to_le_bytes());
    mask(crc32c_append(crc32c(&head), value))
}

/// The header of a record holding `value` for slot `backptr`. The caller guarantees that
/// `value` is shorter than 4 GiB (values are limited far below that).
pub fn encode_header(backptr: u64, value: &[u8]) -> [u8; HEADER_LEN] {
    let len = u32::try_from(value.len()).unwrap_or(u32::MAX);
    let mut h = [0u8; HEADER_LEN];
    h[BACKPTR_OFF..LEN_OFF].copy_from_slice(&backptr.to_le_bytes());
    h[LEN_OFF..CRC_OFF].copy_from_slice(&len.to_le_bytes());
    h[CRC_OFF..].copy_from_slice(&checksum(backptr, value).to_le_bytes());
    h
}

/// The header of a pad record spanning `span` bytes (header included) to the ring's end.
pub fn encode_pad(span: u64) -> [u8; HEADER_LEN] {
    let body = u32::try_from(span.saturating_sub(HEADER_LEN as u64)).unwrap_or(u32::MAX);
    let mut h = [0u8; HEADER_LEN];
    h[BACKPTR_OFF..LEN_OFF].copy_from_slice(&PAD_BACKPTR.to_le_bytes());
    h[LEN_OFF..CRC_OFF].copy_from_slice(&body.to_le_bytes());
    let crc = mask(crc32c(&h[..CRC_OFF]));
    h[CRC_OFF..].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Decodes a header; `None` when `bytes` is shorter than a header.
pub fn decode_header(bytes: &[u8]) -> Option<RecordHeader> {
    let h: &[u8; HEADER_LEN] = bytes.get(..HEADER_LEN)?.try_into().ok()?;
    let mut b8 = [0u8; 8];
    b8.copy_from_slice(&h[BACKPTR_OFF..LEN_OFF]);
    let mut l4 = [0u8; 4];
    l4.copy_from_slice(&h[LEN_OFF..CRC_OFF]);
    let mut c4 = [0u8; 4];
    c4.copy_from_slice(&h[CRC_OFF..]);
    Some(RecordHeader {
        backptr: u64::from_le_bytes(b8),
        len: u32::from_le_bytes(l4),
        crc: u32::from_le_bytes(c4),
    })
}

/// True when a pad header's checksum matches.
pub fn pad_verifies(h: &RecordHeader) -> bool {
    h.is_pad() && encode_pad(u64::from(h.len) + HEADER_LEN as u64)[CRC_OFF..] == h.crc.to_le_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_verifies_its_value() {
        let v = b"hello, prism";
        let h = decode_header(&encode_header(42, v)).unwrap();
        assert_eq!(h.backptr, 42);
        assert_eq!(h.len as usize, v.len());
        assert!(h.verifies(v));
        assert!(!h.verifies(b"hello, prisn"));
        assert!(!h.is_pad());
        assert_eq!(h.footprint(), 32);
    }

    #[test]
    fn checksum_covers_the_backward_pointer() {
        let h = decode_header(&encode_header(7, b"v")).unwrap();
        let moved = RecordHeader { backptr: 8, ..h };
        assert!(!moved.verifies(b"v"));
    }

    #[test]
    fn footprints_are_aligned_and_include_the_header() {
        assert_eq!(footprint(0), 16);
        assert_eq!(footprint(1), 32);
        assert_eq!(footprint(16), 32);
        assert_eq!(footprint(17), 48);
        assert_eq!(footprint(1024), 1040);
    }

    #[test]
    fn pads_round_trip_and_span_to_the_end() {
        let h = decode_header(&encode_pad(80)).unwrap();
        assert!(h.is_pad());
        assert!(pad_verifies(&h));
        assert_eq!(h.footprint(), 80);
        let torn = RecordHeader { len: 1, ..h };
        assert!(!pad_verifies(&torn));
    }

    #[test]
    fn short_input_is_not_a_header() {
        assert_eq!(decode_header(&[0u8; 15]), None);
    }
}
