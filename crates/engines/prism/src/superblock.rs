//! PRISM's superblock: where each of its persistent structures lives in the pmem pool
//! (spec: `FORMAT.md` § Pool layout and § Superblock; all integers little-endian).
//!
//! ```text
//! off  len  field
//! 0    8    magic             b"TKVPRISM"
//! 8    4    version           u32 (FORMAT_VERSION)
//! 12   4    flags             u32 (0; none defined in version 1)
//! 16   4    pwb_count         u32   number of Persistent Write Buffers
//! 20   4    hsit_dir_cap      u32   capacity of the HSIT segment directory (segments)
//! 24   8    pwb_size          u64   bytes per PWB ring (multiple of 4 KiB)
//! 32   8    pwb_desc_off      u64   PWB descriptors: pwb_count x 64 B (one line each)
//! 40   8    pwb_ring_off      u64   PWB rings: pwb_count x pwb_size
//! 48   8    hsit_dir_off      u64   HSIT segment directory: hsit_dir_cap x u64
//! 56   8    alloc_off         u64   the pmem allocator's region (HSIT segments, key index)
//! 64   8    alloc_len         u64
//! 72   4    hsit_seg_entries  u32   HSIT entries per segment (one allocator chunk)
//! 76   4    chunk_size        u32   Value Storage chunk size (bytes)
//! 80   4    flash_count       u32   number of Value Storages (flash devices)
//! 84   4    crc               masked CRC-32C of bytes 0..84
//! ```
//! The superblock is written once, when the store is created, persisted, and only then
//! published through pool root word [`ROOT_SUPERBLOCK`]; it never changes afterwards, so the
//! checksum covers all of it. [`decode`] is total: any input yields a value or an error,
//! never a panic. [`plan`] is the pure layout planner used at creation.
//!
//! Thread safety: plain functions and `Copy` values.

use tierkv_core::format::checksum::{masked_crc32c, unmask};
use tierkv_core::{Error, Result, Tier};

/// Pool root word holding the superblock's offset (0 = no PRISM store in this pool).
pub const ROOT_SUPERBLOCK: usize = 0;
/// Pool root word handed to the Persistent Key Index.
pub const ROOT_KEY_INDEX: usize = 1;

/// Magic bytes at the start of the superblock.
pub const MAGIC: [u8; 8] = *b"TKVPRISM";
/// The PRISM pmem format version this build writes and the newest it reads. Version 2
/// adds write batches (root word 2, `"BTCH"` chunks; `FORMAT.md` § Version changes), so a
/// build that would ignore a committed batch refuses a store created with them.
pub const FORMAT_VERSION: u32 = 2;
/// Alignment of every region the superblock points to.
pub const REGION_ALIGN: u64 = 4096;
/// Bytes per PWB descriptor (one cache line, so that heads never share a line).
pub const PWB_DESC_LEN: u64 = 64;
/// Bytes per HSIT entry.
pub const HSIT_ENTRY_LEN: u64 = 16;

const MAGIC_OFF: usize = 0;
const VERSION_OFF: usize = MAGIC_OFF + MAGIC.len();
const FLAGS_OFF: usize = VERSION_OFF + 4;
const PWB_COUNT_OFF: usize = FLAGS_OFF + 4;
const HSIT_DIR_CAP_OFF: usize = PWB_COUNT_OFF + 4;
const PWB_SIZE_OFF: usize = HSIT_DIR_CAP_OFF + 4;
const PWB_DESC_OFF: usize = PWB_SIZE_OFF + 8;
const PWB_RING_OFF: usize = PWB_DESC_OFF + 8;
const HSIT_DIR_OFF: usize = PWB_RING_OFF + 8;
const ALLOC_OFF: usize = HSIT_DIR_OFF + 8;
const ALLOC_LEN_OFF: usize = ALLOC_OFF + 8;
const SEG_ENTRIES_OFF: usize = ALLOC_LEN_OFF + 8;
const CHUNK_SIZE_OFF: usize = SEG_ENTRIES_OFF + 4;
const FLASH_COUNT_OFF: usize = CHUNK_SIZE_OFF + 4;
const CRC_OFF: usize = FLASH_COUNT_OFF + 4;
/// Encoded length of the superblock.
pub const LEN: usize = CRC_OFF + 4;

/// The decoded superblock: the layout of PRISM's structures in the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// Number of PWBs.
    pub pwb_count: u32,
    /// Bytes per PWB ring.
    pub pwb_size: u64,
    /// Offset of the PWB descriptors.
    pub pwb_desc_off: u64,
    /// Offset of the first PWB ring.
    pub pwb_ring_off: u64,
    /// Offset of the HSIT segment directory.
    pub hsit_dir_off: u64,
    /// Capacity of the HSIT segment directory.
    pub hsit_dir_cap: u32,
    /// HSIT entries per segment.
    pub hsit_seg_entries: u32,
    /// Start of the allocator region.
    pub alloc_off: u64,
    /// Length of the allocator region.
    pub alloc_len: u64,
    /// Value Storage chunk size.
    pub chunk_size: u32,
    /// Number of Value Storages.
    pub flash_count: u32,
}

impl Superblock {
    /// Offset of PWB `i`'s descriptor line.
    pub fn pwb_desc(&self, i: u32) -> u64 {
        self.pwb_desc_off + u64::from(i) * PWB_DESC_LEN
    }

    /// Offset of PWB `i`'s ring.
    pub fn pwb_ring(&self, i: u32) -> u64 {
        self.pwb_ring_off + u64::from(i) * self.pwb_size
    }

    /// Encodes the superblock, checksum included.
    pub fn encode(&self) -> [u8; LEN] {
        let mut b = [0u8; LEN];
        put(&mut b, MAGIC_OFF, &MAGIC);
        put(&mut b, VERSION_OFF, &FORMAT_VERSION.to_le_bytes());
        put(&mut b, FLAGS_OFF, &0u32.to_le_bytes());
        put(&mut b, PWB_COUNT_OFF, &self.pwb_count.to_le_bytes());
        put(&mut b, HSIT_DIR_CAP_OFF, &self.hsit_dir_cap.to_le_bytes());
        put(&mut b, PWB_SIZE_OFF, &self.pwb_size.to_le_bytes());
        put(&mut b, PWB_DESC_OFF, &self.pwb_desc_off.to_le_bytes());
        put(&mut b, PWB_RING_OFF, &self.pwb_ring_off.to_le_bytes());
        put(&mut b, HSIT_DIR_OFF, &self.hsit_dir_off.to_le_bytes());
        put(&mut b, ALLOC_OFF, &self.alloc_off.to_le_bytes());
        put(&mut b, ALLOC_LEN_OFF, &self.alloc_len.to_le_bytes());
        put(
            &mut b,
            SEG_ENTRIES_OFF,
            &self.hsit_seg_entries.to_le_bytes(),
        );
        put(&mut b, CHUNK_SIZE_OFF, &self.chunk_size.to_le_bytes());
        put(&mut b, FLASH_COUNT_OFF, &self.flash_count.to_le_bytes());
        let crc = masked_crc32c(b.get(..CRC_OFF).unwrap_or_default());
        put(&mut b, CRC_OFF, &crc.to_le_bytes());
        b
    }

    /// Checks that every region lies inside a pool of `pool_len` bytes starting at
    /// `data_start`, is aligned, and overlaps no other.
    pub fn validate(&self, data_start: u64, pool_len: u64, at: u64) -> Result<()> {
        let bad = |what: String| Err(Error::corruption(Tier::Pmem, at, what));
        if self.pwb_count == 0 || self.hsit_seg_entries == 0 || self.hsit_dir_cap == 0 {
            return bad("superblock: a zero count".into());
        }
        if self.pwb_size == 0 || !self.pwb_size.is_multiple_of(REGION_ALIGN) {
            return bad(format!(
                "superblock: PWB size {} is not a multiple of 4 KiB",
                self.pwb_size
            ));
        }
        let regions = [
            ("PWB descriptors", self.pwb_desc_off, self.desc_len()),
            ("HSIT directory", self.hsit_dir_off, self.dir_len()),
            ("PWB rings", self.pwb_ring_off, self.rings_len()),
            ("allocator region", self.alloc_off, Some(self.alloc_len)),
        ];
        let mut end_prev = data_start;
        for (name, off, len) in regions {
            let Some(len) = len else {
                return bad(format!("superblock: {name} overflow"));
            };
            let end = off.checked_add(len);
            if !off.is_multiple_of(REGION_ALIGN)
                || off < end_prev
                || end.is_none_or(|e| e > pool_len)
            {
                return bad(format!(
                    "superblock: {name} at {off} (+{len}) is misplaced in a pool of {pool_len} bytes"
                ));
            }
            end_prev = end.unwrap_or(pool_len);
        }
        Ok(())
    }

    fn desc_len(&self) -> Option<u64> {
        u64::from(self.pwb_count)
            .checked_mul(PWB_DESC_LEN)
            .and_then(|l| l.checked_next_multiple_of(REGION_ALIGN))
    }

    fn rings_len(&self) -> Option<u64> {
        u64::from(self.pwb_count).checked_mul(self.pwb_size)
    }

    fn dir_len(&self) -> Option<u64> {
        (u64::from(self.hsit_dir_cap) * 8).checked_next_multiple_of(REGION_ALIGN)
    }
}

/// Decodes and verifies a superblock read from pool offset `at`.
pub fn decode(bytes: &[u8], at: u64) -> Result<Superblock> {
    let bad = |what: &str| Error::corruption(Tier::Pmem, at, format!("superblock: {what}"));
    let b: &[u8; LEN] = bytes
        .get(..LEN)
        .and_then(|s| s.try_into().ok())
        .ok_or_else(|| bad("truncated"))?;
    if b.get(..MAGIC.len()) != Some(&MAGIC[..]) {
        return Err(bad("bad magic (not a PRISM store)"));
    }
    let version = u32_at(b, VERSION_OFF);
    let stored = u32_at(b, CRC_OFF);
    let computed = masked_crc32c(b.get(..CRC_OFF).unwrap_or_default());
    if stored != computed {
        return Err(Error::ChecksumMismatch {
            tier: Tier::Pmem,
            offset: at,
            expected: unmask(stored),
            got: unmask(computed),
        });
    }
    if version == 0 || version > FORMAT_VERSION {
        return Err(Error::UnsupportedFormat {
            what: "PRISM superblock",
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    if u32_at(b, FLAGS_OFF) != 0 {
        return Err(bad("unknown flags"));
    }
    Ok(Superblock {
        pwb_count: u32_at(b, PWB_COUNT_OFF),
        hsit_dir_cap: u32_at(b, HSIT_DIR_CAP_OFF),
        pwb_size: u64_at(b, PWB_SIZE_OFF),
        pwb_desc_off: u64_at(b, PWB_DESC_OFF),
        pwb_ring_off: u64_at(b, PWB_RING_OFF),
        hsit_dir_off: u64_at(b, HSIT_DIR_OFF),
        alloc_off: u64_at(b, ALLOC_OFF),
        alloc_len: u64_at(b, ALLOC_LEN_OFF),
        hsit_seg_entries: u32_at(b, SEG_ENTRIES_OFF),
        chunk_size: u32_at(b, CHUNK_SIZE_OFF),
        flash_count: u32_at(b, FLASH_COUNT_OFF),
    })
}

/// What the layout planner needs to know.
#[derive(Clone, Copy, Debug)]
pub struct PlanInput {
    /// First byte of the engine region (4 KiB aligned).
    pub data_start: u64,
    /// Pool length.
    pub pool_len: u64,
    /// Number of PWBs.
    pub pwb_count: u32,
    /// Bytes per PWB (multiple of 4 KiB).
    pub pwb_size: u64,
    /// The allocator's chunk size, which is also the size of one HSIT segment.
    pub alloc_chunk: u64,
    /// The smallest allocator region that is useful (HSIT + key index).
    pub min_alloc_len: u64,
    /// Value Storage chunk size.
    pub chunk_size: u32,
    /// Number of flash devices.
    pub flash_count: u32,
}

/// Lays PRISM's regions out in the pool:
/// `[superblock page][PWB descriptors][HSIT directory][PWB rings][allocator region]`.
pub fn plan(p: &PlanInput) -> Result<(u64, Superblock)> {
    let too_small = |need: u64| {
        Error::no_space(
            Tier::Pmem,
            format!(
                "a pmem pool of {} bytes is too small for {} PWBs of {} bytes plus HSIT and the \
                 key index (need at least {need} bytes)",
                p.pool_len, p.pwb_count, p.pwb_size
            ),
        )
    };
    if !p.data_start.is_multiple_of(REGION_ALIGN)
        || !p.pwb_size.is_multiple_of(REGION_ALIGN)
        || p.alloc_chunk == 0
    {
        return Err(Error::invalid("PRISM layout: misaligned input"));
    }
    let sb_off = p.data_start;
    let desc_off = sb_off + REGION_ALIGN;
    let desc_len = (u64::from(p.pwb_count) * PWB_DESC_LEN).next_multiple_of(REGION_ALIGN);
    let dir_off = desc_off + desc_len;
    // One directory word per allocator chunk bounds the HSIT: it can never need more.
    let dir_cap = (p.pool_len / p.alloc_chunk).clamp(1, u64::from(u32::MAX));
    let dir_len = (dir_cap * 8).next_multiple_of(REGION_ALIGN);
    let ring_off = dir_off + dir_len;
    let rings_len = u64::from(p.pwb_count)
        .checked_mul(p.pwb_size)
        .ok_or_else(|| too_small(u64::MAX))?;
    let alloc_off = ring_off
        .checked_add(rings_len)
        .ok_or_else(|| too_small(u64::MAX))?;
    let need = alloc_off.saturating_add(p.min_alloc_len);
    if need > p.pool_len {
        return Err(too_small(need));
    }
    let sb = Superblock {
        pwb_count: p.pwb_count,
        pwb_size: p.pwb_size,
        pwb_desc_off: desc_off,
        pwb_ring_off: ring_off,
        hsit_dir_off: dir_off,
        hsit_dir_cap: u32::try_from(dir_cap).unwrap_or(u32::MAX),
        hsit_seg_entries: u32::try_from(p.alloc_chunk / HSIT_ENTRY_LEN)
            .map_err(|_| Error::invalid("PRISM layout: allocator chunk too large"))?,
        alloc_off,
        alloc_len: p.pool_len - alloc_off,
        chunk_size: p.chunk_size,
        flash_count: p.flash_count,
    };
    sb.validate(p.data_start, p.pool_len, sb_off)?;
    Ok((sb_off, sb))
}

fn put(b: &mut [u8; LEN], off: usize, v: &[u8]) {
    if let Some(dst) = b.get_mut(off..off + v.len()) {
        dst.copy_from_slice(v);
    }
}

fn u32_at(b: &[u8; LEN], off: usize) -> u32 {
    let mut w = [0u8; 4];
    if let Some(s) = b.get(off..off + 4) {
        w.copy_from_slice(s);
    }
    u32::from_le_bytes(w)
}

fn u64_at(b: &[u8; LEN], off: usize) -> u64 {
    let mut w = [0u8; 8];
    if let Some(s) = b.get(off..off + 8) {
        w.copy_from_slice(s);
    }
    u64::from_le_bytes(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input() -> PlanInput {
        PlanInput {
            data_start: 4096,
            pool_len: 64 << 20,
            pwb_count: 4,
            pwb_size: 1 << 20,
            alloc_chunk: 256 << 10,
            min_alloc_len: 4 << 20,
            chunk_size: 512 << 10,
            flash_count: 2,
        }
    }

    #[test]
    fn planned_layout_round_trips_and_validates() {
        let (off, sb) = plan(&input()).unwrap();
        assert_eq!(off, 4096);
        let back = decode(&sb.encode(), off).unwrap();
        assert_eq!(back, sb);
        back.validate(4096, 64 << 20, off).unwrap();
        assert_eq!(sb.hsit_seg_entries, 16384);
        assert!(sb.pwb_ring(3) + sb.pwb_size <= sb.alloc_off);
        assert_eq!(sb.alloc_off + sb.alloc_len, 64 << 20);
    }

    #[test]
    fn pool_too_small_for_the_pwbs_is_no_space() {
        let mut p = input();
        p.pwb_count = 64;
        assert!(matches!(plan(&p), Err(Error::NoSpace { .. })));
    }

    #[test]
    fn every_flipped_byte_is_detected() {
        let (off, sb) = plan(&input()).unwrap();
        let good = sb.encode();
        for i in 0..LEN {
            let mut b = good;
            b[i] ^= 0x40;
            assert!(decode(&b, off).is_err(), "flip at byte {i} went unnoticed");
        }
    }

    #[test]
    fn truncated_and_garbage_superblocks_are_errors() {
        let (off, sb) = plan(&input()).unwrap();
        let good = sb.encode();
        assert!(decode(&good[..LEN - 1], off).is_err());
        assert!(decode(&[0u8; LEN], off).is_err());
        assert!(decode(&[0xffu8; 200], off).is_err());
    }

    #[test]
    fn newer_version_is_unsupported_format() {
        let (off, sb) = plan(&input()).unwrap();
        let mut b = sb.encode();
        b[VERSION_OFF..VERSION_OFF + 4].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
        let crc = masked_crc32c(&b[..CRC_OFF]);
        b[CRC_OFF..].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            decode(&b, off),
            Err(Error::UnsupportedFormat { found, .. }) if found == FORMAT_VERSION + 1
        ));
    }

    #[test]
    fn overlapping_regions_fail_validation() {
        let (off, mut sb) = plan(&input()).unwrap();
        sb.pwb_ring_off = sb.hsit_dir_off;
        assert!(sb.validate(4096, 64 << 20, off).is_err());
    }
}
