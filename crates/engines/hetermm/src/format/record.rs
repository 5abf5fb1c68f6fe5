//! The tuple (record) format (spec: `FORMAT.md` § Records). A record is written once in a
//! DRAM page, updated there in place while it is in the mutable region, and copied verbatim
//! into a pmem block by the flusher, so the same bytes are decoded from both tiers.
//!
//! ```text
//! 0   8  meta       ts << 3 | superseded << 2 | logged << 1 | locked
//!                   (ts >= 1; a zero word = no record)
//! 8   2  key_len    1 ..= 65535
//! 10  2  flags      0, or 1 = padding (space reserved and never used; belongs to no key)
//! 12  4  value_len  bytes of the current value
//! 16  4  value_cap  bytes reserved for the value (>= value_len; in-place updates fit in it)
//! 20  4  crc        masked CRC-32C of: ts (u64 LE), bytes 8..20, key, value[..value_len]
//! 24  ..            key, then value_cap bytes of value, then zero padding to 8 bytes
//! ```
//! `locked` is the seqlock bit of an in-place update in DRAM (never set in a flushed copy:
//! the flusher copies a page only after every writer that could touch it has left);
//! `logged` says the operation-log entry of this version is durable, and `superseded` that
//! an out-of-place update or a delete has replaced it, so no in-place update may touch it
//! again (both DRAM only; ignored on pmem). A record is at least 32 bytes (24 + a key of >= 1 byte, rounded up to 8), which
//! is why invalid-bitmap bits cover 32 bytes each ([`MARK_GRAIN`]).
//!
//! Thread safety: pure functions.

use super::{align8, corrupt, u16_at, u32_at, u64_at};
use tierkv_core::Result;
use tierkv_core::format::checksum::{crc32c, crc32c_append, mask};

/// Bytes of the record header.
pub const HEADER_LEN: u64 = 24;
/// The smallest record (a 1-byte key, no value).
pub const MIN_RECORD_LEN: u64 = 32;
/// Bytes covered by one invalid-bitmap bit: no two records start in one grain.
pub const MARK_GRAIN: u64 = MIN_RECORD_LEN;
/// The seqlock bit of `meta`.
pub const META_LOCKED: u64 = 1;
/// The "log entry durable" bit of `meta`.
pub const META_LOGGED: u64 = 2;
/// The "replaced, no more in-place updates" bit of `meta`.
pub const META_SUPERSEDED: u64 = 4;
/// `meta >> TS_SHIFT` is the timestamp.
pub const TS_SHIFT: u32 = 3;
/// The flag of a padding record.
pub const FLAG_PADDING: u16 = 1;
/// The largest timestamp a record can carry.
pub const MAX_TS: u64 = u64::MAX >> TS_SHIFT;

const KEY_LEN_OFF: usize = 8;
const FLAGS_OFF: usize = KEY_LEN_OFF + 2;
const VALUE_LEN_OFF: usize = FLAGS_OFF + 2;
const VALUE_CAP_OFF: usize = VALUE_LEN_OFF + 4;
const CRC_OFF: usize = VALUE_CAP_OFF + 4;

/// The bytes a record with this key and value capacity occupies.
pub const fn record_len(key_len: u64, value_cap: u64) -> u64 {
    align8(HEADER_LEN + key_len + value_cap)
}

/// The fixed fields of a record header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    /// The meta word (timestamp and DRAM bits).
    pub meta: u64,
    /// Key length.
    pub key_len: u16,
    /// Current value length.
    pub value_len: u32,
    /// Value capacity.
    pub value_cap: u32,
    /// Flags (0 or [`FLAG_PADDING`]).
    pub flags: u16,
    /// The stored masked CRC.
    pub crc: u32,
}

impl RecordHeader {
    /// The header of a record with these fields (checksum computed).
    pub fn new(ts: u64, flags: u16, key: &[u8], value: &[u8], value_cap: u32) -> RecordHeader {
        RecordHeader {
            meta: ts << TS_SHIFT,
            key_len: key.len() as u16,
            value_len: value.len() as u32,
            value_cap,
            flags,
            crc: record_crc(ts, flags, key, value, value_cap),
        }
    }

    /// The timestamp.
    pub fn ts(&self) -> u64 {
        self.meta >> TS_SHIFT
    }

    /// Bytes the record occupies.
    pub fn size(&self) -> u64 {
        record_len(u64::from(self.key_len), u64::from(self.value_cap))
    }

    /// Word 1 of the header (key_len, flags, value_len).
    pub fn word1(&self) -> u64 {
        u64::from(self.key_len) | u64::from(self.flags) << 16 | u64::from(self.value_len) << 32
    }

    /// True for a padding record.
    pub fn is_padding(&self) -> bool {
        self.flags == FLAG_PADDING
    }

    /// Word 2 of the header (value_cap, crc).
    pub fn word2(&self) -> u64 {
        u64::from(self.value_cap) | u64::from(self.crc) << 32
    }

    /// Rebuilds a header from its three words; `None` if a field is out of range.
    pub fn from_words(meta: u64, w1: u64, w2: u64) -> Option<RecordHeader> {
        let h = RecordHeader {
            meta,
            key_len: (w1 & 0xffff) as u16,
            value_len: (w1 >> 32) as u32,
            value_cap: (w2 & 0xffff_ffff) as u32,
            flags: ((w1 >> 16) & 0xffff) as u16,
            crc: (w2 >> 32) as u32,
        };
        let flags_ok = h.flags == 0 || h.flags == FLAG_PADDING;
        (flags_ok && h.key_len > 0 && h.value_len <= h.value_cap && h.ts() > 0).then_some(h)
    }

    /// Decodes the header at the start of `bytes`.
    pub fn decode(bytes: &[u8]) -> Option<RecordHeader> {
        let meta = u64_at(bytes, 0)?;
        let key_len = u16_at(bytes, KEY_LEN_OFF)?;
        let flags = u16_at(bytes, FLAGS_OFF)?;
        let value_len = u32_at(bytes, VALUE_LEN_OFF)?;
        let value_cap = u32_at(bytes, VALUE_CAP_OFF)?;
        let crc = u32_at(bytes, CRC_OFF)?;
        let w1 = u64::from(key_len) | u64::from(flags) << 16 | u64::from(value_len) << 32;
        let h = RecordHeader::from_words(meta, w1, u64::from(value_cap) | u64::from(crc) << 32)?;
        Some(h)
    }
}

/// The masked CRC a record with these fields stores.
pub fn record_crc(ts: u64, flags: u16, key: &[u8], value: &[u8], value_cap: u32) -> u32 {
    let mut head = [0u8; 8 + 12];
    head[..8].copy_from_slice(&ts.to_le_bytes());
    head[8..10].copy_from_slice(&(key.len() as u16).to_le_bytes());
    head[10..12].copy_from_slice(&flags.to_le_bytes());
    head[12..16].copy_from_slice(&(value.len() as u32).to_le_bytes());
    head[16..20].copy_from_slice(&value_cap.to_le_bytes());
    mask(crc32c_append(crc32c_append(crc32c(&head), key), value))
}

/// A record decoded from bytes (a slice of a pmem block or a copy of a DRAM record).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordView<'a> {
    /// The header.
    pub header: RecordHeader,
    /// The key.
    pub key: &'a [u8],
    /// The value.
    pub value: &'a [u8],
}

/// Decodes and verifies the record at the start of `bytes` (which lie at pool offset
/// `at`, for errors): header in range, lengths inside `bytes`, not locked, CRC.
pub fn decode(bytes: &[u8], at: u64) -> Result<RecordView<'_>> {
    let header =
        RecordHeader::decode(bytes).ok_or_else(|| corrupt(at, "record header is not valid"))?;
    if header.meta & META_LOCKED != 0 {
        return Err(corrupt(at, "record was copied while being updated"));
    }
    let key_end = HEADER_LEN as usize + usize::from(header.key_len);
    let value_end = key_end + header.value_len as usize;
    if header.size() > bytes.len() as u64 {
        return Err(corrupt(
            at,
            format!(
                "record of {} bytes overruns its space of {}",
                header.size(),
                bytes.len()
            ),
        ));
    }
    let key = bytes.get(HEADER_LEN as usize..key_end).unwrap_or_default();
    let value = bytes.get(key_end..value_end).unwrap_or_default();
    let crc = record_crc(header.ts(), header.flags, key, value, header.value_cap);
    if crc != header.crc {
        return Err(corrupt(at, "record checksum mismatch"));
    }
    Ok(RecordView { header, key, value })
}

/// Encodes a complete record (zero-padded to its length) for a copy that is written in
/// one go (reorganisation, tests).
pub fn encode(ts: u64, key: &[u8], value: &[u8], value_cap: u32) -> Vec<u8> {
    let header = RecordHeader::new(ts, 0, key, value, value_cap);
    let mut out = vec![0u8; header.size() as usize];
    out[..8].copy_from_slice(&header.meta.to_le_bytes());
    out[8..16].copy_from_slice(&header.word1().to_le_bytes());
    out[16..24].copy_from_slice(&header.word2().to_le_bytes());
    out[24..24 + key.len()].copy_from_slice(key);
    out[24 + key.len()..24 + key.len() + value.len()].copy_from_slice(value);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trips_with_spare_capacity() {
        let bytes = encode(77, b"key", b"value", 9);
        assert_eq!(bytes.len() as u64, record_len(3, 9));
        let r = decode(&bytes, 0).unwrap();
        assert_eq!(
            (r.key, r.value, r.header.ts()),
            (&b"key"[..], &b"value"[..], 77)
        );
        assert_eq!(r.header.value_cap, 9);
        assert_eq!(r.header.size(), 40);
    }

    #[test]
    fn smallest_record_is_one_mark_grain() {
        assert_eq!(record_len(1, 0), MIN_RECORD_LEN);
        assert_eq!(encode(1, b"k", b"", 0).len() as u64, MARK_GRAIN);
    }

    #[test]
    fn damaged_records_are_corruption_not_panics() {
        let good = encode(5, b"key", b"value", 5);
        let mut flipped = good.clone();
        flipped[30] ^= 0x40;
        let mut locked = good.clone();
        locked[0] |= META_LOCKED as u8;
        let mut zero_key = good.clone();
        zero_key[8] = 0;
        let mut long_value = good.clone();
        long_value[12] = 200;
        for (what, bytes) in [
            ("bit flip", &flipped[..]),
            ("locked", &locked[..]),
            ("zero key", &zero_key[..]),
            ("value longer than its capacity", &long_value[..]),
            ("truncated", &good[..30]),
            ("empty", &[][..]),
            ("zeroed", &[0u8; 64][..]),
        ] {
            assert!(decode(bytes, 100).unwrap_err().is_corruption(), "{what}");
        }
    }

    #[test]
    fn header_words_round_trip() {
        let h = RecordHeader {
            meta: 9 << TS_SHIFT | META_LOGGED,
            key_len: 300,
            value_len: 70_000,
            value_cap: 80_000,
            flags: FLAG_PADDING,
            crc: 0xdead_beef,
        };
        assert_eq!(
            RecordHeader::from_words(h.meta, h.word1(), h.word2()),
            Some(h)
        );
        assert_eq!(
            RecordHeader::from_words(0, h.word1(), h.word2()),
            None,
            "ts 0"
        );
    }
}
