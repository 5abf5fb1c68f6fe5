//! FOCUS's persistent formats (`FORMAT.md` beside `Cargo.toml` is the specification; every
//! layout here repeats it and points there): the superblock, chunk headers, record headers,
//! and the bodies of full rows and deltas.
//!
//! Every decoder takes bytes read back from pmem, checks every length and returns
//! [`tierkv_core::Error::Corruption`] instead of panicking; each has a fuzz target
//! (`fuzz/fuzz_targets/focus_*.rs`).

pub mod chunk;
pub mod delta;
pub mod record;
pub mod row;
pub mod superblock;

/// Version of every FOCUS structure on pmem (FORMAT.md § Version changes).
pub const FORMAT_VERSION: u32 = 2;
/// The oldest format version read (1: no batch records; FORMAT.md § Version changes).
pub const MIN_FORMAT_VERSION: u32 = 1;

/// Records and chunk contents are 8-byte aligned.
pub const ALIGN: u64 = 8;

/// `v` rounded up to [`ALIGN`].
pub fn align8(v: u64) -> u64 {
    v.div_ceil(ALIGN) * ALIGN
}

/// Little-endian readers of fixed-size fields; the caller has checked the length.
pub(crate) fn le_u16(b: &[u8], at: usize) -> u16 {
    let mut w = [0u8; 2];
    if let Some(s) = b.get(at..at + 2) {
        w.copy_from_slice(s);
    }
    u16::from_le_bytes(w)
}

pub(crate) fn le_u32(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    if let Some(s) = b.get(at..at + 4) {
        w.copy_from_slice(s);
    }
    u32::from_le_bytes(w)
}

pub(crate) fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    if let Some(s) = b.get(at..at + 8) {
        w.copy_from_slice(s);
    }
    u64::from_le_bytes(w)
}

/// `ChecksumMismatch` at pool offset `at` unless `got == want`.
pub(crate) fn check_crc(got: u32, want: u32, at: u64) -> tierkv_core::Result<()> {
    if got == want {
        return Ok(());
    }
    Err(tierkv_core::Error::ChecksumMismatch {
        tier: tierkv_core::Tier::Pmem,
        offset: at,
        expected: want,
        got,
    })
}
