//! The superblock (FORMAT.md § Superblock): one cache line at the pool's `data_start`,
//! found through root word [`ROOT_SUPERBLOCK`], written last at creation.
//!
//! ```text
//!  0  8  magic        "FOCUSSB1"
//!  8  4  version      u32
//! 12  4  crc          masked CRC-32C of bytes 0..12 and 16..32
//! 16  8  chunk_size   u64 (the allocator's chunk = one CLog/DLog chunk)
//! 24  8  alloc_off    u64 (the allocator region's start)
//! 32  8  next_epoch   u64 (mutable: every chunk epoch ever used is below it)
//! ```

use tierkv_core::format::checksum::masked_crc32c;
use tierkv_core::{Error, Result, Tier};

use super::{FORMAT_VERSION, MIN_FORMAT_VERSION, le_u32, le_u64};

/// The root word holding the superblock's offset.
pub const ROOT_SUPERBLOCK: usize = 0;
/// Magic bytes.
pub const MAGIC: [u8; 8] = *b"FOCUSSB1";
/// Bytes reserved for the superblock (one line, the rest of the area unused).
pub const LEN: u64 = 64;
const VERSION_OFF: usize = MAGIC.len();
const CRC_OFF: usize = VERSION_OFF + 4;
const CHUNK_SIZE_OFF: usize = CRC_OFF + 4;
const ALLOC_OFF_OFF: usize = CHUNK_SIZE_OFF + 8;
/// Offset of the mutable `next_epoch` word.
pub const NEXT_EPOCH_OFF: u64 = (ALLOC_OFF_OFF + 8) as u64;
const STATIC_LEN: usize = NEXT_EPOCH_OFF as usize;

/// The immutable part of the superblock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// Bytes per chunk.
    pub chunk_size: u64,
    /// Where the allocator region starts.
    pub alloc_off: u64,
}

fn crc(b: &[u8]) -> u32 {
    let mut covered = Vec::with_capacity(STATIC_LEN - 4);
    covered.extend_from_slice(b.get(..CRC_OFF).unwrap_or_default());
    covered.extend_from_slice(b.get(CHUNK_SIZE_OFF..STATIC_LEN).unwrap_or_default());
    masked_crc32c(&covered)
}

impl Superblock {
    /// The static bytes (without `next_epoch`).
    pub fn encode(&self) -> [u8; STATIC_LEN] {
        let mut b = [0u8; STATIC_LEN];
        b[..VERSION_OFF].copy_from_slice(&MAGIC);
        b[VERSION_OFF..CRC_OFF].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[CHUNK_SIZE_OFF..ALLOC_OFF_OFF].copy_from_slice(&self.chunk_size.to_le_bytes());
        b[ALLOC_OFF_OFF..STATIC_LEN].copy_from_slice(&self.alloc_off.to_le_bytes());
        let c = crc(&b);
        b[CRC_OFF..CHUNK_SIZE_OFF].copy_from_slice(&c.to_le_bytes());
        b
    }

    /// Decodes and checks the static bytes read at `at`.
    pub fn decode(b: &[u8], at: u64) -> Result<Superblock> {
        if b.len() < STATIC_LEN || b.get(..VERSION_OFF) != Some(&MAGIC[..]) {
            return Err(Error::corruption(Tier::Pmem, at, "no FOCUS superblock"));
        }
        let version = le_u32(b, VERSION_OFF);
        if !(MIN_FORMAT_VERSION..=FORMAT_VERSION).contains(&version) {
            return Err(Error::UnsupportedFormat {
                what: "focus superblock",
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        super::check_crc(crc(b), le_u32(b, CRC_OFF), at)?;
        Ok(Superblock {
            chunk_size: le_u64(b, CHUNK_SIZE_OFF),
            alloc_off: le_u64(b, ALLOC_OFF_OFF),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn superblock_round_trips_and_rejects_flips() {
        let sb = Superblock {
            chunk_size: 1 << 20,
            alloc_off: 8192,
        };
        let b = sb.encode();
        assert_eq!(Superblock::decode(&b, 0).ok(), Some(sb));
        for i in 0..b.len() {
            let mut bad = b;
            bad[i] ^= 1;
            assert!(Superblock::decode(&bad, 0).is_err(), "flip at {i}");
        }
    }

    /// A version-1 superblock (a store made before batch records) still opens; a newer
    /// version than this code knows is refused.
    #[test]
    fn version_1_is_read_and_a_newer_version_refused() {
        let sb = Superblock {
            chunk_size: 1 << 16,
            alloc_off: 8192,
        };
        let with_version = |v: u32| {
            let mut b = sb.encode();
            b[VERSION_OFF..CRC_OFF].copy_from_slice(&v.to_le_bytes());
            let c = crc(&b);
            b[CRC_OFF..CRC_OFF + 4].copy_from_slice(&c.to_le_bytes());
            b
        };
        assert_eq!(Superblock::decode(&with_version(1), 0).ok(), Some(sb));
        assert!(matches!(
            Superblock::decode(&with_version(FORMAT_VERSION + 1), 0),
            Err(tierkv_core::Error::UnsupportedFormat { .. })
        ));
    }
}
