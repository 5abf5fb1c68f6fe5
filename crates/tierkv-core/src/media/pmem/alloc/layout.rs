//! The allocator's persistent layout (spec: `../FORMAT.md` § Allocator region; all
//! integers little-endian): the region header and the chunk-state words.
//!
//! ```text
//! region_start + 0     region header (one 64-byte line)
//!   0   8  magic          b"TKVALLOC"
//!   8   4  version        u32 (REGION_VERSION)
//!   12  4  chunk_size     u32 (power of two, MIN_CHUNK_SIZE..=MAX_CHUNK_SIZE)
//!   16  8  region_len     u64
//!   24  8  chunk_count    u64 (>= 1)
//!   32  8  table_off      u64 (absolute; = region_start + 64)
//!   40  8  chunks_off     u64 (absolute; table end rounded up to 4096)
//!   48  12 reserved       0
//!   60  4  header_crc     masked CRC-32C of bytes 0..60
//! table_off            chunk table: chunk_count state words (u64)
//! chunks_off           chunk i at chunks_off + i * chunk_size
//! ```
//!
//! A chunk-state word (one per chunk; kind in the top byte):
//!
//! ```text
//! 0                                   Free
//! 0x01 << 56 | class                  Slab of size class `class` (bits 8..56 zero)
//! 0x02 << 56 | len << 32 | tag        Run head: `len` chunks (1..2^24) with a u32 `tag`
//! 0x03 << 56 | back                   Continuation, `back` (1..2^32) chunks after its head
//! ```
//! Any other value is invalid (corruption). Every state word is updated with one aligned
//! 8-byte store, so a crash leaves it old or new, never torn.
//!
//! Thread safety: pure functions.

use super::super::codec::{Seal, le_u32, le_u64, put};
use crate::api::error::{Error, Result, Tier};

/// Magic bytes of an allocator region.
pub const REGION_MAGIC: [u8; 8] = *b"TKVALLOC";
/// The region format version this build writes and the newest it reads.
pub const REGION_VERSION: u32 = 1;
/// Smallest chunk size.
pub const MIN_CHUNK_SIZE: u64 = 4096;
/// Largest chunk size.
pub const MAX_CHUNK_SIZE: u64 = 1 << 30;
/// The chunk area starts at a multiple of this.
pub const CHUNK_AREA_ALIGN: u64 = 4096;
/// Longest run of chunks one allocation can take (24-bit length field).
pub const MAX_RUN_CHUNKS: u64 = (1 << 24) - 1;

const MAGIC_OFF: usize = 0;
const VERSION_OFF: usize = MAGIC_OFF + REGION_MAGIC.len();
const CHUNK_SIZE_OFF: usize = VERSION_OFF + 4;
const REGION_LEN_OFF: usize = CHUNK_SIZE_OFF + 4;
const CHUNK_COUNT_OFF: usize = REGION_LEN_OFF + 8;
const TABLE_OFF_OFF: usize = CHUNK_COUNT_OFF + 8;
const CHUNKS_OFF_OFF: usize = TABLE_OFF_OFF + 8;
const RESERVED_OFF: usize = CHUNKS_OFF_OFF + 8;
const RESERVED_LEN: usize = 12;
const CRC_OFF: usize = RESERVED_OFF + RESERVED_LEN;
/// Bytes of the region header (one cache line).
pub const REGION_HEADER_LEN: u64 = 64;

/// Magic, version and checksum of the region header.
const SEAL: Seal = Seal {
    what: "pmem allocator region",
    magic: &REGION_MAGIC,
    version_off: VERSION_OFF,
    crc_off: CRC_OFF,
    supported: REGION_VERSION,
};

const KIND_SHIFT: u32 = 56;
const KIND_SLAB: u64 = 1;
const KIND_RUN: u64 = 2;
const KIND_CONT: u64 = 3;

/// Where an allocator region's parts are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionLayout {
    /// Absolute offset of the region (and of its header).
    pub region_start: u64,
    /// Bytes of the region.
    pub region_len: u64,
    /// Bytes per chunk.
    pub chunk_size: u64,
    /// Number of chunks.
    pub chunk_count: u64,
    /// Absolute offset of the chunk table.
    pub table_off: u64,
    /// Absolute offset of chunk 0.
    pub chunks_off: u64,
}

impl RegionLayout {
    /// The layout with as many chunks as fit in `[region_start, region_start +
    /// region_len)`; an error if the parameters are unusable.
    pub fn plan(region_start: u64, region_len: u64, chunk_size: u64) -> Result<RegionLayout> {
        if !chunk_size.is_power_of_two() || !(MIN_CHUNK_SIZE..=MAX_CHUNK_SIZE).contains(&chunk_size)
        {
            return Err(Error::invalid(format!(
                "allocator chunk size {chunk_size} must be a power of two between \
                 {MIN_CHUNK_SIZE} and {MAX_CHUNK_SIZE}"
            )));
        }
        if !region_start.is_multiple_of(64) {
            return Err(Error::invalid(format!(
                "allocator region start {region_start} is not 64-byte aligned"
            )));
        }
        let region_end = region_start
            .checked_add(region_len)
            .ok_or_else(|| Error::invalid("allocator region end overflows"))?;
        let table_off = region_start.saturating_add(REGION_HEADER_LEN);
        // Each chunk costs chunk_size bytes plus an 8-byte state word; start from the
        // upper bound and shrink until the aligned chunk area fits.
        let mut count = (region_len.saturating_sub(REGION_HEADER_LEN) / (chunk_size + 8))
            .min(u64::from(u32::MAX - 1));
        loop {
            let Some(layout) = Self::with_count(region_start, region_end, chunk_size, count) else {
                if count == 0 {
                    return Err(Error::invalid(format!(
                        "allocator region of {region_len} bytes at {region_start} holds no \
                         chunk of {chunk_size} bytes (it needs at least {})",
                        align_up(table_off.saturating_add(8), CHUNK_AREA_ALIGN)
                            .unwrap_or(u64::MAX)
                            .saturating_add(chunk_size)
                            .saturating_sub(region_start)
                    )));
                }
                count -= 1;
                continue;
            };
            return Ok(layout);
        }
    }

    fn with_count(
        region_start: u64,
        region_end: u64,
        chunk_size: u64,
        count: u64,
    ) -> Option<RegionLayout> {
        if count == 0 {
            return None;
        }
        let table_off = region_start.checked_add(REGION_HEADER_LEN)?;
        let chunks_off = align_up(
            table_off.checked_add(count.checked_mul(8)?)?,
            CHUNK_AREA_ALIGN,
        )?;
        let end = chunks_off.checked_add(count.checked_mul(chunk_size)?)?;
        (end <= region_end).then_some(RegionLayout {
            region_start,
            region_len: region_end - region_start,
            chunk_size,
            chunk_count: count,
            table_off,
            chunks_off,
        })
    }

    /// Absolute offset of chunk `k`.
    pub fn chunk_off(&self, k: u32) -> u64 {
        self.chunks_off + u64::from(k) * self.chunk_size
    }

    /// Absolute offset of chunk `k`'s state word.
    pub fn state_off(&self, k: u32) -> u64 {
        self.table_off + 8 * u64::from(k)
    }

    /// The chunk holding absolute offset `off`, if it is in the chunk area.
    pub fn chunk_of(&self, off: u64) -> Option<u32> {
        let rel = off.checked_sub(self.chunks_off)?;
        let k = rel / self.chunk_size;
        (k < self.chunk_count)
            .then(|| u32::try_from(k).ok())
            .flatten()
    }

    /// Encodes the region header.
    pub fn encode(&self) -> [u8; REGION_HEADER_LEN as usize] {
        let mut out = [0u8; REGION_HEADER_LEN as usize];
        put(&mut out, MAGIC_OFF, &REGION_MAGIC);
        put(&mut out, VERSION_OFF, &REGION_VERSION.to_le_bytes());
        put(
            &mut out,
            CHUNK_SIZE_OFF,
            &(self.chunk_size as u32).to_le_bytes(),
        );
        put(&mut out, REGION_LEN_OFF, &self.region_len.to_le_bytes());
        put(&mut out, CHUNK_COUNT_OFF, &self.chunk_count.to_le_bytes());
        put(&mut out, TABLE_OFF_OFF, &self.table_off.to_le_bytes());
        put(&mut out, CHUNKS_OFF_OFF, &self.chunks_off.to_le_bytes());
        SEAL.seal(&mut out);
        out
    }

    /// Decodes and validates the header of the region at `region_start` (every field is
    /// re-derived from the chunk size, count and region length and must match).
    pub fn decode(bytes: &[u8], region_start: u64) -> Result<RegionLayout> {
        let corrupt = |off: usize, what: String| {
            Error::corruption(
                Tier::Pmem,
                region_start + off as u64,
                format!("allocator region: {what}"),
            )
        };
        let head = bytes
            .get(..REGION_HEADER_LEN as usize)
            .ok_or_else(|| corrupt(0, "header is truncated".into()))?;
        SEAL.check(head, region_start)?;
        let chunk_size = u64::from(le_u32(head, CHUNK_SIZE_OFF));
        let region_len = le_u64(head, REGION_LEN_OFF);
        let count = le_u64(head, CHUNK_COUNT_OFF);
        let expected = region_start
            .checked_add(region_len)
            .filter(|_| {
                chunk_size.is_power_of_two()
                    && (MIN_CHUNK_SIZE..=MAX_CHUNK_SIZE).contains(&chunk_size)
            })
            .filter(|_| count <= u64::from(u32::MAX))
            .and_then(|end| Self::with_count(region_start, end, chunk_size, count));
        let Some(layout) = expected else {
            return Err(corrupt(
                CHUNK_SIZE_OFF,
                format!(
                    "inconsistent geometry: chunk size {chunk_size}, {count} chunks in {region_len} bytes"
                ),
            ));
        };
        if le_u64(head, TABLE_OFF_OFF) != layout.table_off
            || le_u64(head, CHUNKS_OFF_OFF) != layout.chunks_off
            || head
                .get(RESERVED_OFF..CRC_OFF)
                .is_none_or(|r| r.iter().any(|b| *b != 0))
        {
            return Err(corrupt(
                TABLE_OFF_OFF,
                "table or chunk offsets do not match the geometry".into(),
            ));
        }
        Ok(layout)
    }
}

/// The persistent state of one chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkState {
    /// Not allocated.
    Free,
    /// A slab of small objects of size class `class`; its bitmap is at the chunk's start.
    Slab {
        /// Size-class index.
        class: u8,
    },
    /// The first chunk of an allocation of `len` whole chunks.
    Run {
        /// The caller's tag ([`super::OBJECT_TAG`] for `alloc` of large objects).
        tag: u32,
        /// Chunks in the run (>= 1).
        len: u32,
    },
    /// A chunk of a run after its first, `back` chunks after the head.
    Cont {
        /// Distance to the head (>= 1).
        back: u32,
    },
}

impl ChunkState {
    /// The state word.
    pub fn encode(self) -> u64 {
        match self {
            ChunkState::Free => 0,
            ChunkState::Slab { class } => KIND_SLAB << KIND_SHIFT | u64::from(class),
            ChunkState::Run { tag, len } => {
                KIND_RUN << KIND_SHIFT | u64::from(len) << 32 | u64::from(tag)
            }
            ChunkState::Cont { back } => KIND_CONT << KIND_SHIFT | u64::from(back),
        }
    }

    /// The state a word holds, or `None` if the word is not a valid state.
    pub fn decode(w: u64) -> Option<ChunkState> {
        let body = w & ((1 << KIND_SHIFT) - 1);
        match w >> KIND_SHIFT {
            0 if w == 0 => Some(ChunkState::Free),
            KIND_SLAB if body <= 0xff => Some(ChunkState::Slab { class: body as u8 }),
            KIND_RUN => {
                let len = (body >> 32) as u32;
                (len >= 1).then_some(ChunkState::Run {
                    tag: body as u32,
                    len,
                })
            }
            KIND_CONT if (1..=u64::from(u32::MAX)).contains(&body) => {
                Some(ChunkState::Cont { back: body as u32 })
            }
            _ => None,
        }
    }
}

/// `v` rounded up to a multiple of `align` (a power of two); `None` on overflow.
pub fn align_up(v: u64, align: u64) -> Option<u64> {
    v.checked_add(align - 1).map(|x| x & !(align - 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn plan_fits_the_region() {
        let l = RegionLayout::plan(4096, 1 << 20, 16 << 10).unwrap();
        assert_eq!(l.table_off, 4096 + 64);
        assert_eq!(l.chunks_off % CHUNK_AREA_ALIGN, 0);
        assert!(l.chunks_off >= l.table_off + 8 * l.chunk_count);
        assert!(l.chunks_off + l.chunk_count * l.chunk_size <= 4096 + (1 << 20));
        // One more chunk would not fit.
        assert!(
            RegionLayout::with_count(4096, 4096 + (1 << 20), 16 << 10, l.chunk_count + 1).is_none()
        );
    }

    #[test]
    fn plan_refuses_bad_parameters() {
        assert!(RegionLayout::plan(4096, 1 << 20, 5000).is_err());
        assert!(RegionLayout::plan(4096, 1 << 20, 1024).is_err());
        assert!(RegionLayout::plan(4100, 1 << 20, 4096).is_err());
        assert!(RegionLayout::plan(4096, 8000, 4096).is_err());
        assert!(
            RegionLayout::plan(4096, 8192, 4096).is_ok(),
            "exactly one chunk"
        );
        assert!(RegionLayout::plan(u64::MAX - 64, 1 << 20, 4096).is_err());
    }

    #[test]
    fn chunk_of_maps_offsets_to_chunks() {
        let l = RegionLayout::plan(4096, 1 << 20, 16 << 10).unwrap();
        assert_eq!(l.chunk_of(l.chunks_off), Some(0));
        assert_eq!(l.chunk_of(l.chunk_off(3) + 100), Some(3));
        assert_eq!(l.chunk_of(l.chunks_off - 1), None);
        assert_eq!(l.chunk_of(l.chunk_off(l.chunk_count as u32)), None);
    }

    #[test]
    fn region_header_round_trips_and_detects_flips() {
        let l = RegionLayout::plan(8192, 3 << 20, 64 << 10).unwrap();
        let bytes = l.encode();
        assert_eq!(RegionLayout::decode(&bytes, 8192).unwrap(), l);
        assert!(RegionLayout::decode(&bytes, 4096).is_err(), "region moved");
        for i in 0..bytes.len() {
            let mut b = bytes;
            b[i] ^= 0x10;
            assert!(RegionLayout::decode(&b, 8192).is_err(), "flip at {i}");
        }
        assert!(RegionLayout::decode(&bytes[..63], 8192).is_err());
        assert!(RegionLayout::decode(&[0u8; 64], 8192).is_err());
    }

    #[test]
    fn invalid_state_words_are_rejected() {
        for w in [
            4 << KIND_SHIFT,
            0xff << KIND_SHIFT,
            KIND_SLAB << KIND_SHIFT | 0x100,
            KIND_RUN << KIND_SHIFT | 7,
            KIND_CONT << KIND_SHIFT,
            KIND_CONT << KIND_SHIFT | 1 << 40,
            1,
        ] {
            assert_eq!(ChunkState::decode(w), None, "{w:#x}");
        }
    }

    proptest! {
        #[test]
        fn state_words_round_trip(kind in 0u8..4, a in any::<u32>(), len in 1u32..(1 << 24)) {
            let s = match kind {
                0 => ChunkState::Free,
                1 => ChunkState::Slab { class: a as u8 },
                2 => ChunkState::Run { tag: a, len },
                _ => ChunkState::Cont { back: a.max(1) },
            };
            prop_assert_eq!(ChunkState::decode(s.encode()), Some(s));
        }

        #[test]
        fn decode_is_canonical(w in any::<u64>()) {
            if let Some(s) = ChunkState::decode(w) {
                prop_assert_eq!(s.encode(), w);
            }
        }
    }
}
