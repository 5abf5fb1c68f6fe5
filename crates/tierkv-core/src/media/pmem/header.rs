//! The pool header: the first [`DATA_START`] bytes of every pool file (spec: `FORMAT.md`
//! § Pool header; all integers little-endian).
//!
//! ```text
//! off  len  field
//! 0    8    magic            b"TIERKVPM"
//! 8    4    format_version   u32 (FORMAT_VERSION)
//! 12   4    header_len       u32 (= DATA_START: the engine region starts here)
//! 16   8    pool_size        u64 (= the file's length)
//! 24   8    pool_id          u64 (random, non-zero)
//! 32   4    root_count       u32 (= ROOT_COUNT)
//! 36   4    flags            u32 (0; no flag is defined in version 1)
//! 40   4    header_crc       masked CRC-32C of bytes 0..40
//! 44   20   reserved         zero
//! 64   256  root words       ROOT_COUNT x u64, NOT covered by the checksum
//! 320  ..   reserved         zero up to DATA_START
//! ```
//!
//! The fields up to `header_crc` (the *static* part) are written once, at creation, and
//! never change; the checksum covers them. The root words change at run time: each is an
//! aligned 8-byte word updated with one atomic store and persisted, so it is never torn
//! (FORMAT.md § Assumptions about the media) and needs no checksum.
//!
//! Decoding is pure and total: [`decode_pool_header`] returns an error for any input
//! (short, garbage, torn, a newer version) and never panics, so a fuzz target can call it.
//! Thread safety: plain functions over byte slices.

use super::codec::{Seal, le_u32, le_u64, put};
use crate::api::error::{Error, Result, Tier};

/// Magic bytes at offset 0 of every pool file.
pub const POOL_MAGIC: [u8; 8] = *b"TIERKVPM";
/// The pool format version this build writes and the newest it reads.
pub const FORMAT_VERSION: u32 = 1;
/// Size of the header area; the engine region `[DATA_START, len)` starts here.
pub const DATA_START: u64 = 4096;
/// Number of persistent root words engines can use to find their structures.
pub const ROOT_COUNT: usize = 32;
/// Pool sizes are multiples of this (the page size msync works with).
pub const POOL_SIZE_ALIGN: u64 = 4096;
/// The smallest pool: the header area plus one page.
pub const MIN_POOL_SIZE: u64 = DATA_START + POOL_SIZE_ALIGN;

const MAGIC_OFF: usize = 0;
const VERSION_OFF: usize = MAGIC_OFF + POOL_MAGIC.len();
const HEADER_LEN_OFF: usize = VERSION_OFF + 4;
const POOL_SIZE_OFF: usize = HEADER_LEN_OFF + 4;
const POOL_ID_OFF: usize = POOL_SIZE_OFF + 8;
const ROOT_COUNT_OFF: usize = POOL_ID_OFF + 8;
const FLAGS_OFF: usize = ROOT_COUNT_OFF + 4;
const HEADER_CRC_OFF: usize = FLAGS_OFF + 4;
/// Length of the static (checksummed) part of the header, including its checksum.
pub const STATIC_LEN: usize = HEADER_CRC_OFF + 4;
/// Magic, version and checksum of the static part.
const SEAL: Seal = Seal {
    what: "tierkv pmem pool",
    magic: &POOL_MAGIC,
    version_off: VERSION_OFF,
    crc_off: HEADER_CRC_OFF,
    supported: FORMAT_VERSION,
};
/// Offset of root word 0 (one cache line after the start, away from the static part).
pub const ROOTS_OFF: u64 = 64;

/// The static fields of a pool header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolHeader {
    /// Format version ([`FORMAT_VERSION`] for pools this build creates).
    pub version: u32,
    /// Size of the pool (and of its file) in bytes.
    pub pool_size: u64,
    /// Random identifier chosen at creation (never 0), recorded in the manifest too.
    pub pool_id: u64,
}

impl PoolHeader {
    /// A version-1 header for a new pool.
    pub fn new(pool_size: u64, pool_id: u64) -> Self {
        PoolHeader {
            version: FORMAT_VERSION,
            pool_size,
            pool_id,
        }
    }

    /// Checks that a pool of `file_len` bytes is the one this header describes.
    pub fn check_file_len(&self, file_len: u64) -> Result<()> {
        if file_len == self.pool_size {
            return Ok(());
        }
        Err(Error::corruption(
            Tier::Pmem,
            POOL_SIZE_OFF as u64,
            format!(
                "the pool header says the pool has {} bytes but the file has {file_len} \
                 (truncated, extended or not this pool's file)",
                self.pool_size
            ),
        ))
    }
}

/// Checks a pool size for creation or decoding; `None` if it is acceptable.
pub fn pool_size_problem(size: u64) -> Option<String> {
    if size < MIN_POOL_SIZE {
        return Some(format!(
            "pool size {size} is below the minimum of {MIN_POOL_SIZE} bytes"
        ));
    }
    if !size.is_multiple_of(POOL_SIZE_ALIGN) {
        return Some(format!(
            "pool size {size} is not a multiple of {POOL_SIZE_ALIGN} bytes"
        ));
    }
    if usize::try_from(size).is_err() {
        return Some(format!(
            "pool size {size} does not fit this machine's address space"
        ));
    }
    None
}

/// Encodes the static part of `h` (`STATIC_LEN` bytes, checksum included).
pub fn encode_pool_header(h: &PoolHeader) -> [u8; STATIC_LEN] {
    let mut out = [0u8; STATIC_LEN];
    put(&mut out, MAGIC_OFF, &POOL_MAGIC);
    put(&mut out, VERSION_OFF, &h.version.to_le_bytes());
    put(&mut out, HEADER_LEN_OFF, &(DATA_START as u32).to_le_bytes());
    put(&mut out, POOL_SIZE_OFF, &h.pool_size.to_le_bytes());
    put(&mut out, POOL_ID_OFF, &h.pool_id.to_le_bytes());
    put(&mut out, ROOT_COUNT_OFF, &(ROOT_COUNT as u32).to_le_bytes());
    put(&mut out, FLAGS_OFF, &0u32.to_le_bytes());
    SEAL.seal(&mut out);
    out
}

/// Decodes and validates the static part of a pool header from the first bytes of a
/// pool (at least [`STATIC_LEN`]; more is ignored). Checks, in order: length, magic,
/// checksum, version, then every field.
pub fn decode_pool_header(bytes: &[u8]) -> Result<PoolHeader> {
    let corrupt = |off: usize, what: String| Error::corruption(Tier::Pmem, off as u64, what);
    let head = bytes.get(..STATIC_LEN).ok_or_else(|| {
        corrupt(
            0,
            format!(
                "pool header is truncated: {} bytes, it needs {STATIC_LEN}",
                bytes.len()
            ),
        )
    })?;
    let version = SEAL.check(head, 0)?;
    check_field(head, HEADER_LEN_OFF, "header length", DATA_START as u32)?;
    check_field(head, ROOT_COUNT_OFF, "root count", ROOT_COUNT as u32)?;
    check_field(head, FLAGS_OFF, "flags", 0)?;
    let pool_size = le_u64(head, POOL_SIZE_OFF);
    if let Some(problem) = pool_size_problem(pool_size) {
        return Err(corrupt(POOL_SIZE_OFF, format!("pool header: {problem}")));
    }
    let pool_id = le_u64(head, POOL_ID_OFF);
    if pool_id == 0 {
        return Err(corrupt(POOL_ID_OFF, "pool header: pool id is 0".into()));
    }
    Ok(PoolHeader {
        version,
        pool_size,
        pool_id,
    })
}

/// The pool offset of root word `i` (callers check `i < ROOT_COUNT`).
pub fn root_offset(i: usize) -> u64 {
    ROOTS_OFF + 8 * i as u64
}

fn check_field(head: &[u8], off: usize, name: &str, want: u32) -> Result<()> {
    let found = le_u32(head, off);
    if found == want {
        return Ok(());
    }
    Err(Error::corruption(
        Tier::Pmem,
        off as u64,
        format!("pool header: {name} is {found}, version 1 requires {want}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> PoolHeader {
        PoolHeader::new(1 << 20, 0x1234_5678_9abc_def0)
    }

    /// Re-seals a modified static part with a valid checksum.
    fn reseal(mut b: [u8; STATIC_LEN]) -> [u8; STATIC_LEN] {
        SEAL.seal(&mut b);
        b
    }

    #[test]
    fn static_part_fits_before_the_root_words() {
        assert!(STATIC_LEN as u64 <= ROOTS_OFF);
        assert!(root_offset(ROOT_COUNT) <= DATA_START);
    }

    #[test]
    fn every_truncation_is_corruption() {
        let b = encode_pool_header(&sample());
        for n in 0..STATIC_LEN {
            let e = decode_pool_header(&b[..n]).unwrap_err();
            assert!(e.is_corruption(), "truncated to {n}: {e}");
        }
    }

    #[test]
    fn all_zero_header_is_not_a_pool() {
        let e = decode_pool_header(&[0u8; 4096]).unwrap_err();
        assert!(e.to_string().contains("bad magic"), "{e}");
    }

    #[test]
    fn garbage_header_is_not_a_pool() {
        let garbage: Vec<u8> = (0..4096u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        assert!(decode_pool_header(&garbage).unwrap_err().is_corruption());
    }

    #[test]
    fn every_single_bit_flip_is_detected() {
        let b = encode_pool_header(&sample());
        for i in 0..STATIC_LEN {
            for bit in 0..8 {
                let mut c = b;
                c[i] ^= 1 << bit;
                assert!(
                    decode_pool_header(&c).is_err(),
                    "flip of bit {bit} at byte {i} undetected"
                );
            }
        }
    }

    #[test]
    fn newer_version_is_unsupported_not_corrupt() {
        let mut b = encode_pool_header(&sample());
        b[VERSION_OFF..VERSION_OFF + 4].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
        let e = decode_pool_header(&reseal(b)).unwrap_err();
        assert!(
            matches!(e, Error::UnsupportedFormat { found, .. } if found == FORMAT_VERSION + 1),
            "{e}"
        );
    }

    #[test]
    fn sealed_but_wrong_fields_are_corruption() {
        let cases: [(usize, &[u8]); 5] = [
            (HEADER_LEN_OFF, &8192u32.to_le_bytes()),
            (ROOT_COUNT_OFF, &31u32.to_le_bytes()),
            (FLAGS_OFF, &1u32.to_le_bytes()),
            (POOL_SIZE_OFF, &(MIN_POOL_SIZE + 1).to_le_bytes()),
            (POOL_ID_OFF, &0u64.to_le_bytes()),
        ];
        for (off, bytes) in cases {
            let mut b = encode_pool_header(&sample());
            b[off..off + bytes.len()].copy_from_slice(bytes);
            let e = decode_pool_header(&reseal(b)).unwrap_err();
            assert!(
                matches!(e, Error::Corruption { offset, .. } if offset == off as u64),
                "field at {off}: {e}"
            );
        }
    }

    #[test]
    fn wrong_file_length_is_corruption() {
        let h = sample();
        assert!(h.check_file_len(h.pool_size).is_ok());
        let e = h.check_file_len(h.pool_size - 4096).unwrap_err();
        assert!(e.to_string().contains("truncated"), "{e}");
        assert!(h.check_file_len(h.pool_size + 4096).is_err());
    }

    #[test]
    fn pool_size_rules() {
        assert!(pool_size_problem(MIN_POOL_SIZE).is_none());
        assert!(pool_size_problem(MIN_POOL_SIZE - POOL_SIZE_ALIGN).is_some());
        assert!(pool_size_problem(MIN_POOL_SIZE + 1).is_some());
        assert!(pool_size_problem(1 << 40).is_none());
    }

    proptest! {
        #[test]
        fn header_codec_round_trips(pages in 2u64..(1 << 30), id in 1u64..) {
            let h = PoolHeader::new(pages * POOL_SIZE_ALIGN, id);
            let mut area = vec![0u8; 512];
            area[..STATIC_LEN].copy_from_slice(&encode_pool_header(&h));
            prop_assert_eq!(decode_pool_header(&area).unwrap(), h);
        }

        #[test]
        fn decoder_accepts_only_canonical_headers(
            bytes in proptest::collection::vec(any::<u8>(), 0..128)
        ) {
            // Never panics; and whatever it accepts re-encodes to the very same bytes.
            if let Ok(h) = decode_pool_header(&bytes) {
                prop_assert_eq!(&encode_pool_header(&h)[..], &bytes[..STATIC_LEN]);
            }
        }
    }
}
