//! The superblock: where HeterMM's structures are in the pool (spec: `FORMAT.md`
//! § Superblock). Written once when the store is created, then found through pool root
//! word [`ROOT_SUPERBLOCK`]; never changed afterwards.
//!
//! ```text
//! 0   8  magic        "HETERMM1"
//! 8   4  version      u32 (VERSION)
//! 12  1  block_bits   m: pmem blocks are 2^m bytes; fixed for the life of the store
//! 13  1  page_bits    k at creation (informational: every block records its own)
//! 14  2  reserved     0
//! 16  8  chunk_size   allocator chunk size (a power of two)
//! 24  8  dir_off      absolute offset of the block directory
//! 32  8  dir_words    words in the directory (>= the allocator's chunk count)
//! 40  8  alloc_off    absolute offset of the allocator region
//! 48  12 reserved     0
//! 60  4  crc          masked CRC-32C of bytes 0..60
//! ```
//!
//! Thread safety: pure functions.

use super::{HEADER_LEN, check_seal, corrupt, put_at, seal, u64_at};
use tierkv_core::Result;

/// Magic bytes of the superblock.
pub const MAGIC: [u8; 8] = *b"HETERMM1";
/// The superblock version this build writes and the newest it reads.
pub const VERSION: u32 = 1;
/// The pool root word that holds the superblock's offset (0 until creation completes).
pub const ROOT_SUPERBLOCK: usize = 0;

const VERSION_OFF: usize = 8;
const BLOCK_BITS_OFF: usize = VERSION_OFF + 4;
const PAGE_BITS_OFF: usize = BLOCK_BITS_OFF + 1;
const CHUNK_SIZE_OFF: usize = PAGE_BITS_OFF + 3;
const DIR_OFF_OFF: usize = CHUNK_SIZE_OFF + 8;
const DIR_WORDS_OFF: usize = DIR_OFF_OFF + 8;
const ALLOC_OFF_OFF: usize = DIR_WORDS_OFF + 8;

/// The decoded superblock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// m: log2 of the pmem block size.
    pub block_bits: u8,
    /// k at creation.
    pub page_bits: u8,
    /// Allocator chunk size.
    pub chunk_size: u64,
    /// Absolute offset of the block directory.
    pub dir_off: u64,
    /// Words in the directory.
    pub dir_words: u64,
    /// Absolute offset of the allocator region.
    pub alloc_off: u64,
}

impl Superblock {
    /// Encodes the superblock (one sealed line).
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        put_at(&mut h, 0, &MAGIC);
        put_at(&mut h, VERSION_OFF, &VERSION.to_le_bytes());
        h[BLOCK_BITS_OFF] = self.block_bits;
        h[PAGE_BITS_OFF] = self.page_bits;
        put_at(&mut h, CHUNK_SIZE_OFF, &self.chunk_size.to_le_bytes());
        put_at(&mut h, DIR_OFF_OFF, &self.dir_off.to_le_bytes());
        put_at(&mut h, DIR_WORDS_OFF, &self.dir_words.to_le_bytes());
        put_at(&mut h, ALLOC_OFF_OFF, &self.alloc_off.to_le_bytes());
        seal(&mut h);
        h
    }

    /// Decodes and validates the superblock read at pool offset `at` of a pool of
    /// `pool_len` bytes: seal, then every offset inside the pool and in order.
    pub fn decode(bytes: &[u8], at: u64, pool_len: u64) -> Result<Superblock> {
        check_seal(
            bytes,
            at,
            "hetermm superblock",
            &MAGIC,
            VERSION_OFF,
            VERSION,
        )?;
        let field = |off: usize| u64_at(bytes, off).unwrap_or_default();
        let sb = Superblock {
            block_bits: bytes.get(BLOCK_BITS_OFF).copied().unwrap_or_default(),
            page_bits: bytes.get(PAGE_BITS_OFF).copied().unwrap_or_default(),
            chunk_size: field(CHUNK_SIZE_OFF),
            dir_off: field(DIR_OFF_OFF),
            dir_words: field(DIR_WORDS_OFF),
            alloc_off: field(ALLOC_OFF_OFF),
        };
        sb.validate(at, pool_len)?;
        Ok(sb)
    }

    fn validate(&self, at: u64, pool_len: u64) -> Result<()> {
        let bad = |what: &str| Err(corrupt(at, format!("hetermm superblock: {what}")));
        if !(crate::options::MIN_BLOCK_BITS..=crate::options::MAX_BLOCK_BITS)
            .contains(&u32::from(self.block_bits))
        {
            return bad(&format!("block_bits {} out of range", self.block_bits));
        }
        if !self.chunk_size.is_power_of_two() || self.chunk_size > (1u64 << self.block_bits) {
            return bad(&format!("chunk size {} is not valid", self.chunk_size));
        }
        let dir_end = self
            .dir_words
            .checked_mul(8)
            .and_then(|n| n.checked_add(self.dir_off));
        match dir_end {
            Some(end) if self.dir_off >= at + HEADER_LEN as u64 && end <= self.alloc_off => {}
            _ => {
                return bad(
                    "the block directory does not lie between the superblock and the allocator",
                );
            }
        }
        if self.alloc_off >= pool_len || self.dir_words == 0 {
            return bad("the allocator region lies outside the pool");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Superblock {
        Superblock {
            block_bits: 21,
            page_bits: 15,
            chunk_size: 128 << 10,
            dir_off: 4096 + 4096,
            dir_words: 1000,
            alloc_off: 4096 * 4,
        }
    }

    #[test]
    fn superblock_round_trips() {
        let sb = sample();
        let bytes = sb.encode();
        assert_eq!(Superblock::decode(&bytes, 4096, 1 << 30).unwrap(), sb);
    }

    #[test]
    fn superblock_with_offsets_out_of_order_is_corruption() {
        for broken in [
            Superblock {
                alloc_off: 4096,
                ..sample()
            },
            Superblock {
                dir_words: u64::MAX,
                ..sample()
            },
            Superblock {
                block_bits: 60,
                ..sample()
            },
            Superblock {
                chunk_size: 3000,
                ..sample()
            },
        ] {
            let e = Superblock::decode(&broken.encode(), 4096, 1 << 30).unwrap_err();
            assert!(e.is_corruption(), "{e}");
        }
        let e = Superblock::decode(&sample().encode(), 4096, 8192).unwrap_err();
        assert!(e.is_corruption(), "{e}");
    }
}
