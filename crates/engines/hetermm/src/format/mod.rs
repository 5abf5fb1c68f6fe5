//! HeterMM's on-pmem formats, one codec per structure (spec: `../../FORMAT.md`; every
//! integer little-endian):
//!
//! | structure | module | written by |
//! |---|---|---|
//! | superblock (where everything is) | `superblock` | format, once |
//! | block directory words | `dir` | flusher, reclaimer, log |
//! | tuple (record) | `record` | workers in DRAM; copied verbatim by the flusher |
//! | full block header + invalid bitmap | `block` | flusher |
//! | compact (reorganised) block | `compact` | reclaimer |
//! | operation-log block header and entries | `log` | workers (entries), log (headers) |
//! | payload of a write batch's log entry | `batch` | `write_batch` callers |
//!
//! Every decoder here is total: it takes bytes read back from a tier, checks lengths,
//! magic, checksums and ranges, and returns [`Error::Corruption`] (never panics, never
//! indexes out of range). Each has a fuzz target in `fuzz/fuzz_targets/`.
//!
//! Thread safety: pure functions.
//!
//! [`Error::Corruption`]: tierkv_core::Error::Corruption

pub mod batch;
pub mod block;
pub mod compact;
pub mod dir;
pub mod log;
pub mod record;
pub mod superblock;

use tierkv_core::format::checksum::{masked_crc32c, unmask};
use tierkv_core::{Error, Result, Tier};

/// Bytes of every sealed header (one cache line).
pub const HEADER_LEN: usize = 64;
/// Offset of the masked CRC-32C in a sealed header (it covers bytes `0..SEAL_CRC_OFF`).
pub const SEAL_CRC_OFF: usize = HEADER_LEN - 4;

/// The little-endian u16 at `off`, if `b` is long enough.
pub fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(off..off + 2)?.try_into().ok()?))
}

/// The little-endian u32 at `off`, if `b` is long enough.
pub fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(off..off + 4)?.try_into().ok()?))
}

/// The little-endian u64 at `off`, if `b` is long enough.
pub fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(off..off + 8)?.try_into().ok()?))
}

/// Copies `bytes` into `out` at `off` (dropped if out of range: encoders size their buffers).
pub fn put_at(out: &mut [u8], off: usize, bytes: &[u8]) {
    if let Some(dst) = out.get_mut(off..off + bytes.len()) {
        dst.copy_from_slice(bytes);
    }
}

/// Rounds `v` up to a multiple of 8.
pub const fn align8(v: u64) -> u64 {
    (v + 7) & !7
}

/// Writes the masked CRC of `head[..SEAL_CRC_OFF]` into the last word of a sealed header.
pub fn seal(head: &mut [u8; HEADER_LEN]) {
    let crc = masked_crc32c(&head[..SEAL_CRC_OFF]);
    head[SEAL_CRC_OFF..].copy_from_slice(&crc.to_le_bytes());
}

/// Checks the magic, checksum and version of a sealed header read at pool offset `at`;
/// returns the version. `what` names the structure in errors.
pub fn check_seal(
    bytes: &[u8],
    at: u64,
    what: &'static str,
    magic: &[u8; 8],
    version_off: usize,
    supported: u32,
) -> Result<u32> {
    let head = bytes
        .get(..HEADER_LEN)
        .ok_or_else(|| corrupt(at, format!("{what} is truncated ({} bytes)", bytes.len())))?;
    if head.get(..8) != Some(&magic[..]) {
        return Err(corrupt(at, format!("no {what} here (bad magic)")));
    }
    let stored = u32_at(head, SEAL_CRC_OFF).map(unmask).unwrap_or_default();
    let got = unmask(masked_crc32c(head.get(..SEAL_CRC_OFF).unwrap_or_default()));
    if stored != got {
        return Err(Error::ChecksumMismatch {
            tier: Tier::Pmem,
            offset: at + SEAL_CRC_OFF as u64,
            expected: stored,
            got,
        });
    }
    let version = u32_at(head, version_off).unwrap_or_default();
    if version == 0 || version > supported {
        return Err(Error::UnsupportedFormat {
            what,
            found: version,
            supported,
        });
    }
    Ok(version)
}

/// The head shared by full-block and log-block headers: magic, version, k, m and a number.
///
/// ```text
/// 0   8  magic
/// 8   4  version
/// 12  1  page_bits
/// 13  1  block_bits
/// 14  2  reserved   0
/// 16  8  number     (block number, log sequence number)
/// 24  36 reserved   0
/// 60  4  crc        masked CRC-32C of bytes 0..60
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NumberedHead {
    /// k.
    pub page_bits: u8,
    /// m.
    pub block_bits: u8,
    /// The number.
    pub number: u64,
}

const NH_VERSION_OFF: usize = 8;
const NH_PAGE_BITS_OFF: usize = NH_VERSION_OFF + 4;
const NH_BLOCK_BITS_OFF: usize = NH_PAGE_BITS_OFF + 1;
const NH_NUMBER_OFF: usize = NH_BLOCK_BITS_OFF + 3;

impl NumberedHead {
    /// Encodes the head with `magic` and `version`, sealed.
    pub fn encode(&self, magic: &[u8; 8], version: u32) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        put_at(&mut h, 0, magic);
        put_at(&mut h, NH_VERSION_OFF, &version.to_le_bytes());
        h[NH_PAGE_BITS_OFF] = self.page_bits;
        h[NH_BLOCK_BITS_OFF] = self.block_bits;
        put_at(&mut h, NH_NUMBER_OFF, &self.number.to_le_bytes());
        seal(&mut h);
        h
    }

    /// Decodes a head read at `at` that must carry `number`, `block_bits` and a page size
    /// between 2^MIN_PAGE_BITS and the block size.
    pub fn decode(
        bytes: &[u8],
        at: u64,
        what: &'static str,
        magic: &[u8; 8],
        supported: u32,
        number: u64,
        block_bits: u32,
    ) -> Result<NumberedHead> {
        check_seal(bytes, at, what, magic, NH_VERSION_OFF, supported)?;
        let h = NumberedHead {
            page_bits: bytes.get(NH_PAGE_BITS_OFF).copied().unwrap_or_default(),
            block_bits: bytes.get(NH_BLOCK_BITS_OFF).copied().unwrap_or_default(),
            number: u64_at(bytes, NH_NUMBER_OFF).unwrap_or_default(),
        };
        let k = u32::from(h.page_bits);
        if h.number != number
            || u32::from(h.block_bits) != block_bits
            || !(crate::options::MIN_PAGE_BITS..=block_bits).contains(&k)
        {
            return Err(corrupt(
                at,
                format!(
                    "{what} {h:?} does not match its directory word (number {number}, block_bits {block_bits})"
                ),
            ));
        }
        Ok(h)
    }
}

/// A corruption error on the pmem tier at `at`.
pub fn corrupt(at: u64, what: impl Into<String>) -> Error {
    Error::corruption(Tier::Pmem, at, what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_readers_refuse_short_buffers() {
        let b = [1u8, 0, 0, 0, 0, 0, 0, 0, 9];
        assert_eq!(u64_at(&b, 0), Some(1));
        assert_eq!(u64_at(&b, 2), None);
        assert_eq!(u32_at(&b, 6), None);
        assert_eq!(u16_at(&b, 7), Some(9 << 8));
        assert_eq!(u16_at(&b, 8), None);
        let mut out = [0u8; 4];
        put_at(&mut out, 2, &[7, 7, 7]);
        assert_eq!(out, [0; 4]);
        assert_eq!(align8(0), 0);
        assert_eq!(align8(9), 16);
    }

    #[test]
    fn sealed_header_detects_each_kind_of_damage() {
        let mut h = [0u8; HEADER_LEN];
        h[..8].copy_from_slice(b"TESTMAGC");
        h[8..12].copy_from_slice(&1u32.to_le_bytes());
        seal(&mut h);
        assert_eq!(check_seal(&h, 0, "test", b"TESTMAGC", 8, 1).unwrap(), 1);
        assert!(check_seal(&h[..10], 0, "test", b"TESTMAGC", 8, 1).is_err());
        assert!(check_seal(&h, 0, "test", b"OTHERMAG", 8, 1).is_err());
        let mut torn = h;
        torn[20] ^= 1;
        assert!(matches!(
            check_seal(&torn, 0, "test", b"TESTMAGC", 8, 1),
            Err(Error::ChecksumMismatch { .. })
        ));
        let mut newer = h;
        newer[8..12].copy_from_slice(&2u32.to_le_bytes());
        seal(&mut newer);
        assert!(matches!(
            check_seal(&newer, 0, "test", b"TESTMAGC", 8, 1),
            Err(Error::UnsupportedFormat { found: 2, .. })
        ));
    }
}
