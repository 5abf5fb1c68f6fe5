//! [`ValueLocation`]: where a value lives in the Value Storages, and its packing into the
//! low 56 bits of an HSIT forward pointer (PRISM §4.5, §5.1; `value_storage/FORMAT.md`,
//! "Value locations").
//!
//! A location names a *record*: the Value Storage (one per flash device), the chunk in it,
//! the record's byte offset in the chunk and the record's *footprint* (header + value +
//! padding). `offset..offset + len` is therefore the exact extent a reader must fetch, and
//! the value's exact length is in the record header.
//!
//! Packed layout (bit 0 = least significant; the top 8 bits stay zero for HSIT's tags):
//!
//! ```text
//!  63      56 55   52 51            32 31            16 15             0
//! +----------+-------+----------------+----------------+----------------+
//! | 0 (tags) |storage|     chunk      |  offset / 16   |    len / 16    |
//! +----------+-------+----------------+----------------+----------------+
//!               4 bits    20 bits          16 bits          16 bits
//! ```
//!
//! Limits that follow (checked where locations are made, by [`ValueLocation::check`]):
//! at most 16 Value Storages, 2^20 chunks per storage, chunks of at most 1 MiB, offsets and
//! footprints that are multiples of 16. A packed location is never 0 (a footprint is at
//! least [`super::chunk_format::MIN_RECORD_LEN`]), so the core may use 0 as "no location".
//!
//! Thread safety: plain `Copy` data.

use tierkv_core::{Error, Result, Tier};

use super::chunk_format::RECORD_ALIGN;

/// Bits of the storage id.
pub const STORAGE_BITS: u32 = 4;
/// Bits of the chunk index.
pub const CHUNK_BITS: u32 = 20;
/// Bits of the offset, counted in [`RECORD_ALIGN`] units.
pub const OFFSET_BITS: u32 = 16;
/// Bits of the footprint, counted in [`RECORD_ALIGN`] units.
pub const LEN_BITS: u32 = 16;

const LEN_SHIFT: u32 = 0;
const OFFSET_SHIFT: u32 = LEN_SHIFT + LEN_BITS;
const CHUNK_SHIFT: u32 = OFFSET_SHIFT + OFFSET_BITS;
const STORAGE_SHIFT: u32 = CHUNK_SHIFT + CHUNK_BITS;
/// Bits a packed location uses (the rest of the word belongs to HSIT's tags).
pub const PACKED_BITS: u32 = STORAGE_SHIFT + STORAGE_BITS;

/// The most Value Storages an engine may have.
pub const MAX_STORAGES: u32 = 1 << STORAGE_BITS;
/// The most chunks one Value Storage may have.
pub const MAX_CHUNKS: u32 = 1 << CHUNK_BITS;
/// The largest chunk size a location can address.
pub const MAX_CHUNK_SIZE: u32 = (1 << OFFSET_BITS) * RECORD_ALIGN as u32;

const fn mask(bits: u32) -> u64 {
    (1u64 << bits) - 1
}

/// Where one value's record lives.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct ValueLocation {
    /// The Value Storage (flash device) id.
    pub storage: u8,
    /// The chunk index inside that storage.
    pub chunk: u32,
    /// The record's byte offset inside the chunk (a multiple of 16).
    pub offset: u32,
    /// The record's footprint in bytes: header, value and padding (a multiple of 16).
    pub len: u32,
}

impl ValueLocation {
    /// Packs the location into the low [`PACKED_BITS`] bits of a word. Fields beyond the
    /// limits are truncated, so callers pack only locations that passed [`Self::check`]
    /// (every location the Value Storage hands out does).
    pub fn pack(self) -> u64 {
        let align = RECORD_ALIGN as u64;
        ((u64::from(self.storage) & mask(STORAGE_BITS)) << STORAGE_SHIFT)
            | ((u64::from(self.chunk) & mask(CHUNK_BITS)) << CHUNK_SHIFT)
            | (((u64::from(self.offset) / align) & mask(OFFSET_BITS)) << OFFSET_SHIFT)
            | (((u64::from(self.len) / align) & mask(LEN_BITS)) << LEN_SHIFT)
    }

    /// The location packed in the low bits of `v` (bits above [`PACKED_BITS`] are ignored).
    pub fn unpack(v: u64) -> Self {
        let align = RECORD_ALIGN as u64;
        let field = |shift: u32, bits: u32| (v >> shift) & mask(bits);
        ValueLocation {
            storage: field(STORAGE_SHIFT, STORAGE_BITS) as u8,
            chunk: field(CHUNK_SHIFT, CHUNK_BITS) as u32,
            offset: (field(OFFSET_SHIFT, OFFSET_BITS) * align) as u32,
            len: (field(LEN_SHIFT, LEN_BITS) * align) as u32,
        }
    }

    /// Checks that the location is representable and lies inside a chunk of `chunk_size`
    /// bytes of a storage with `chunks` chunks. A location read back from pmem that fails
    /// this is corruption, reported with the packed word as the "offset".
    pub fn check(self, chunks: u32, chunk_size: u32) -> Result<()> {
        use super::chunk_format::{CHUNK_HEADER_LEN, MIN_RECORD_LEN};
        let align = RECORD_ALIGN as u32;
        let end = u64::from(self.offset) + u64::from(self.len);
        let ok = u32::from(self.storage) < MAX_STORAGES
            && self.chunk < chunks.min(MAX_CHUNKS)
            && self.offset.is_multiple_of(align)
            && self.len.is_multiple_of(align)
            && self.offset >= CHUNK_HEADER_LEN as u32
            && self.len >= MIN_RECORD_LEN as u32
            && self.len < MAX_CHUNK_SIZE
            && end <= u64::from(chunk_size.min(MAX_CHUNK_SIZE));
        if ok {
            Ok(())
        } else {
            Err(Error::corruption(
                Tier::Flash,
                self.pack(),
                format!(
                    "value location {self:?} is outside the value storage ({chunks} chunks of {chunk_size} bytes)"
                ),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn packed_location_leaves_the_top_byte_for_tags() {
        assert_eq!(PACKED_BITS, 56);
        let l = ValueLocation {
            storage: 15,
            chunk: MAX_CHUNKS - 1,
            offset: MAX_CHUNK_SIZE - 16,
            len: MAX_CHUNK_SIZE - 16,
        };
        assert_eq!(l.pack() >> 56, 0);
        assert_eq!(ValueLocation::unpack(l.pack() | 0xff << 56), l);
    }

    #[test]
    fn check_refuses_out_of_range_and_misaligned_locations() {
        let ok = ValueLocation {
            storage: 1,
            chunk: 3,
            offset: 64,
            len: 64,
        };
        assert!(ok.check(4, 4096).is_ok());
        let bad = [
            ValueLocation { chunk: 4, ..ok },
            ValueLocation { offset: 72, ..ok },
            ValueLocation { len: 40, ..ok },
            ValueLocation { offset: 0, ..ok },
            ValueLocation {
                offset: 4096 - 48,
                ..ok
            },
            ValueLocation { storage: 16, ..ok },
        ];
        for b in bad {
            assert!(b.check(4, 4096).unwrap_err().is_corruption(), "{b:?}");
        }
    }

    #[test]
    fn packed_location_is_never_zero() {
        let l = ValueLocation {
            storage: 0,
            chunk: 0,
            offset: 64,
            len: 64,
        };
        assert!(l.check(1, 4096).is_ok());
        assert_ne!(l.pack(), 0);
    }

    proptest! {
        #[test]
        fn pack_unpack_round_trips(
            storage in 0u8..16,
            chunk in 0u32..MAX_CHUNKS,
            offset in 0u32..(1 << OFFSET_BITS),
            len in 0u32..(1 << LEN_BITS),
        ) {
            let l = ValueLocation { storage, chunk, offset: offset * 16, len: len * 16 };
            prop_assert_eq!(ValueLocation::unpack(l.pack()), l);
            prop_assert!(l.pack() < 1u64 << PACKED_BITS);
        }
    }
}
