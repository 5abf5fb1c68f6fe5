//! The superblock of a Value Storage file (`value_storage/FORMAT.md`, "Superblock"): what
//! the file is (storage id, chunk size, chunk count) and the *open generation*, which makes
//! chunk sequence numbers unique across opens without reading any chunk.
//!
//! Two slots, one block each, at file offsets 0 and 4096. The slot with the larger
//! generation among those that decode wins; an open writes generation + 1 into the other
//! slot (the one `generation % 2` names) and syncs, so a torn superblock write leaves the
//! previous slot intact.
//!
//! Thread safety: pure functions; the file I/O is done by the caller, at create/open.

use tierkv_core::format::checksum::{masked_crc32c, unmask};
use tierkv_core::{Error, Result, Tier};

use super::chunk_format::*;
use super::location::{MAX_CHUNK_SIZE, MAX_CHUNKS, MAX_STORAGES};

/// The decoded superblock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// The Value Storage id.
    pub storage: u8,
    /// The chunk size in bytes.
    pub chunk_size: u32,
    /// The number of chunks.
    pub chunk_count: u32,
    /// The open generation.
    pub generation: u64,
}

impl Superblock {
    /// The file offset of the slot this superblock is written to.
    pub fn slot_offset(&self) -> u64 {
        (self.generation % SUPERBLOCK_SLOTS as u64) * BLOCK as u64
    }

    /// The file length this superblock describes.
    pub fn file_len(&self) -> u64 {
        CHUNKS_START + u64::from(self.chunk_count) * u64::from(self.chunk_size)
    }
}

/// Checks a chunk size and count against the format's limits.
pub fn check_geometry(storage: u8, chunk_size: u32, chunk_count: u32) -> Result<()> {
    if u32::from(storage) >= MAX_STORAGES {
        return Err(Error::invalid(format!(
            "value storage id {storage}: at most {MAX_STORAGES} storages"
        )));
    }
    if !(MIN_CHUNK_SIZE..=MAX_CHUNK_SIZE).contains(&chunk_size)
        || !chunk_size.is_multiple_of(BLOCK as u32)
    {
        return Err(Error::invalid(format!(
            "chunk size {chunk_size}: must be a multiple of {BLOCK} between {MIN_CHUNK_SIZE} and {MAX_CHUNK_SIZE}"
        )));
    }
    if chunk_count > MAX_CHUNKS {
        return Err(Error::invalid(format!(
            "{chunk_count} chunks: a value storage holds at most {MAX_CHUNKS}"
        )));
    }
    Ok(())
}

/// Encodes `sb` into the first [`SUPERBLOCK_LEN`] bytes of `out` (at least that long).
pub fn encode_superblock(sb: &Superblock, out: &mut [u8]) -> Result<()> {
    let h = out
        .get_mut(..SUPERBLOCK_LEN)
        .ok_or_else(|| Error::invalid("superblock buffer too short"))?;
    h.fill(0);
    h[SB_MAGIC_OFF..SB_VERSION_OFF].copy_from_slice(&SUPERBLOCK_MAGIC);
    h[SB_VERSION_OFF..SB_STORAGE_OFF].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[SB_STORAGE_OFF..SB_CHUNK_SIZE_OFF].copy_from_slice(&u32::from(sb.storage).to_le_bytes());
    h[SB_CHUNK_SIZE_OFF..SB_CHUNK_COUNT_OFF].copy_from_slice(&sb.chunk_size.to_le_bytes());
    h[SB_CHUNK_COUNT_OFF..SB_GENERATION_OFF].copy_from_slice(&sb.chunk_count.to_le_bytes());
    h[SB_GENERATION_OFF..SB_RESERVED_OFF].copy_from_slice(&sb.generation.to_le_bytes());
    let crc = masked_crc32c(&h[..SB_CRC_OFF]);
    h[SB_CRC_OFF..SUPERBLOCK_LEN].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    b.get(off..off + 4)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u32::from_le_bytes)
}

/// Decodes one slot (which starts at `file_offset`).
pub fn decode_superblock(bytes: &[u8], file_offset: u64) -> Result<Superblock> {
    let h = bytes
        .get(..SUPERBLOCK_LEN)
        .ok_or_else(|| Error::corruption(Tier::Flash, file_offset, "superblock slot is short"))?;
    if h[SB_MAGIC_OFF..SB_VERSION_OFF] != SUPERBLOCK_MAGIC {
        return Err(Error::corruption(
            Tier::Flash,
            file_offset,
            "superblock magic is wrong (not a value storage file, or never written)",
        ));
    }
    let stored = u32_at(h, SB_CRC_OFF);
    let actual = masked_crc32c(&h[..SB_CRC_OFF]);
    if stored != actual {
        return Err(Error::ChecksumMismatch {
            tier: Tier::Flash,
            offset: file_offset,
            expected: unmask(stored),
            got: unmask(actual),
        });
    }
    let version = u32_at(h, SB_VERSION_OFF);
    if version == 0 || version > FORMAT_VERSION {
        return Err(Error::UnsupportedFormat {
            what: "prism value storage",
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    let storage = u32_at(h, SB_STORAGE_OFF);
    let sb = Superblock {
        storage: u8::try_from(storage).unwrap_or(u8::MAX),
        chunk_size: u32_at(h, SB_CHUNK_SIZE_OFF),
        chunk_count: u32_at(h, SB_CHUNK_COUNT_OFF),
        generation: h
            .get(SB_GENERATION_OFF..SB_RESERVED_OFF)
            .and_then(|s| s.try_into().ok())
            .map_or(0, u64::from_le_bytes),
    };
    check_geometry(sb.storage, sb.chunk_size, sb.chunk_count).map_err(|e| {
        Error::corruption(Tier::Flash, file_offset, format!("superblock {sb:?}: {e}"))
    })?;
    Ok(sb)
}

/// Picks the newest valid superblock of the two slots in `bytes` (the file's first
/// `SUPERBLOCK_SLOTS` blocks). Fails with the first slot's error if neither decodes.
pub fn newest_superblock(bytes: &[u8]) -> Result<Superblock> {
    let slots: Vec<Result<Superblock>> = (0..SUPERBLOCK_SLOTS)
        .map(|i| {
            decode_superblock(
                bytes.get(i * BLOCK..).unwrap_or_default(),
                (i * BLOCK) as u64,
            )
        })
        .collect();
    let best = slots
        .iter()
        .filter_map(|s| s.as_ref().ok())
        .max_by_key(|s| s.generation)
        .copied();
    match best {
        Some(sb) => Ok(sb),
        None => slots
            .into_iter()
            .find_map(Result::err)
            .map_or_else(|| Err(Error::invalid("no superblock slots")), Err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sb(generation: u64) -> Superblock {
        Superblock {
            storage: 2,
            chunk_size: 512 * 1024,
            chunk_count: 100,
            generation,
        }
    }

    fn image(slots: &[Option<Superblock>]) -> Vec<u8> {
        let mut b = vec![0u8; SUPERBLOCK_SLOTS * BLOCK];
        for (i, s) in slots.iter().enumerate() {
            if let Some(s) = s {
                encode_superblock(s, &mut b[i * BLOCK..]).unwrap();
            }
        }
        b
    }

    #[test]
    fn newest_valid_slot_wins() {
        assert_eq!(
            newest_superblock(&image(&[Some(sb(4)), Some(sb(5))])).unwrap(),
            sb(5)
        );
        assert_eq!(
            newest_superblock(&image(&[Some(sb(6)), Some(sb(5))])).unwrap(),
            sb(6)
        );
        assert_eq!(
            newest_superblock(&image(&[Some(sb(0)), None])).unwrap(),
            sb(0)
        );
    }

    #[test]
    fn torn_newer_slot_falls_back_to_the_older_one() {
        let mut b = image(&[Some(sb(4)), Some(sb(5))]);
        b[BLOCK + SB_GENERATION_OFF] ^= 0x40;
        assert_eq!(newest_superblock(&b).unwrap(), sb(4));
    }

    #[test]
    fn no_valid_slot_is_corruption() {
        assert!(
            newest_superblock(&image(&[None, None]))
                .unwrap_err()
                .is_corruption()
        );
        let mut b = image(&[Some(sb(1)), None]);
        b[SB_VERSION_OFF..SB_VERSION_OFF + 4].copy_from_slice(&9u32.to_le_bytes());
        let crc = masked_crc32c(&b[..SB_CRC_OFF]);
        b[SB_CRC_OFF..SB_CRC_OFF + 4].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            newest_superblock(&b),
            Err(Error::UnsupportedFormat { found: 9, .. })
        ));
    }

    #[test]
    fn geometry_limits_are_enforced() {
        assert!(check_geometry(16, 512 * 1024, 10).is_err());
        assert!(check_geometry(0, 4096, 10).is_err());
        assert!(check_geometry(0, 2 * 1024 * 1024, 10).is_err());
        assert!(check_geometry(0, 512 * 1024 + 4096, 10).is_ok());
        assert!(check_geometry(0, 512 * 1024, MAX_CHUNKS + 1).is_err());
    }
}
