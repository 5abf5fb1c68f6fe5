//! Little-endian field access for the fixed-layout headers of this tier (the pool header,
//! the allocator's region header). Reads of a field past the end of the buffer yield 0 and
//! writes past it are dropped: the decoders check lengths before reading fields, so this
//! only keeps indexing panic-free.
//!
//! Both headers are *sealed* the same way: magic first, a u32 version, and a masked
//! CRC-32C of every byte before the checksum field. [`check_sealed`] verifies them in the
//! project's order (length by the caller, then magic, checksum, version).
//!
//! Thread safety: pure functions.

use crate::api::error::{Error, Result, Tier};
use crate::format::checksum::{masked_crc32c, unmask};

/// Where a sealed header keeps its magic, version and checksum.
pub(super) struct Seal {
    /// What the header is, for messages ("pmem pool header").
    pub(super) what: &'static str,
    /// The magic bytes at offset 0.
    pub(super) magic: &'static [u8],
    /// Offset of the u32 version.
    pub(super) version_off: usize,
    /// Offset of the u32 masked CRC of bytes `0..crc_off`.
    pub(super) crc_off: usize,
    /// Newest version this build reads.
    pub(super) supported: u32,
}

impl Seal {
    /// Writes the checksum of `out[..crc_off]` at `crc_off`.
    pub(super) fn seal(&self, out: &mut [u8]) {
        let crc = masked_crc32c(out.get(..self.crc_off).unwrap_or_default());
        put(out, self.crc_off, &crc.to_le_bytes());
    }

    /// Checks magic, checksum and version of `head` (which lies at pool offset `base`);
    /// returns the version.
    pub(super) fn check(&self, head: &[u8], base: u64) -> Result<u32> {
        if head.get(..self.magic.len()) != Some(self.magic) {
            return Err(Error::corruption(
                Tier::Pmem,
                base,
                format!("no {} here (bad magic)", self.what),
            ));
        }
        let stored = unmask(le_u32(head, self.crc_off));
        let got = unmask(masked_crc32c(head.get(..self.crc_off).unwrap_or_default()));
        if stored != got {
            return Err(Error::ChecksumMismatch {
                tier: Tier::Pmem,
                offset: base + self.crc_off as u64,
                expected: stored,
                got,
            });
        }
        let version = le_u32(head, self.version_off);
        if version == 0 || version > self.supported {
            return Err(Error::UnsupportedFormat {
                what: self.what,
                found: version,
                supported: self.supported,
            });
        }
        Ok(version)
    }
}

/// Copies `bytes` into `out` at `off`.
pub(super) fn put(out: &mut [u8], off: usize, bytes: &[u8]) {
    if let Some(dst) = out.get_mut(off..off + bytes.len()) {
        dst.copy_from_slice(bytes);
    }
}

/// The little-endian u32 at `off`.
pub(super) fn le_u32(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    if let Some(src) = b.get(off..off + 4) {
        a.copy_from_slice(src);
    }
    u32::from_le_bytes(a)
}

/// The little-endian u64 at `off`.
pub(super) fn le_u64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    if let Some(src) = b.get(off..off + 8) {
        a.copy_from_slice(src);
    }
    u64::from_le_bytes(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_and_out_of_range_is_harmless() {
        let mut b = [0u8; 12];
        put(&mut b, 0, &0x0102_0304u32.to_le_bytes());
        put(&mut b, 4, &7u64.to_le_bytes());
        put(&mut b, 10, &[9; 4]);
        assert_eq!(le_u32(&b, 0), 0x0102_0304);
        assert_eq!(le_u64(&b, 4), 7);
        assert_eq!(le_u64(&b, 8), 0);
        assert_eq!(b[0], 4);
    }
}
