//! Chunk headers (FORMAT.md § Chunks): every CLog, DLog and catalog chunk is one allocator
//! chunk (tagged with its kind) that starts with this header; records follow from
//! [`RECORDS_OFF`].
//!
//! ```text
//!  0  8  magic   "FOCUSCHK"
//!  8  4  kind    u32 (1 CLog, 2 DLog, 3 catalog)
//! 12  4  epoch   u32, unique per chunk life (superblock next_epoch)
//! 16  4  crc     masked CRC-32C of bytes 0..16
//! 20 44  zero
//! ```

use tierkv_core::format::checksum::masked_crc32c;
use tierkv_core::{Error, Result, Tier};

use super::{le_u32, le_u64};

/// Magic bytes.
pub const MAGIC: [u8; 8] = *b"FOCUSCHK";
/// Bytes of the header.
pub const HEADER_LEN: usize = 64;
/// Where the first record of a chunk starts.
pub const RECORDS_OFF: u64 = HEADER_LEN as u64;
const KIND_OFF: usize = MAGIC.len();
const EPOCH_OFF: usize = KIND_OFF + 4;
const CRC_OFF: usize = EPOCH_OFF + 4;

/// What a chunk holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ChunkKind {
    /// Complete records and tombstones (§V-A CLog).
    CLog = 1,
    /// Field deltas (§V-A DLog).
    DLog = 2,
    /// Schema records.
    Catalog = 3,
}

impl ChunkKind {
    /// Every kind.
    pub const ALL: [ChunkKind; 3] = [ChunkKind::CLog, ChunkKind::DLog, ChunkKind::Catalog];

    /// The allocator tag of chunks of this kind (`"FC"` then the kind).
    pub fn tag(self) -> u32 {
        0x4643_0000 | self as u32
    }

    fn from_u32(v: u32) -> Option<ChunkKind> {
        ChunkKind::ALL.into_iter().find(|k| *k as u32 == v)
    }
}

/// A decoded chunk header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkHeader {
    /// What the chunk holds.
    pub kind: ChunkKind,
    /// Its epoch: records inside carry it.
    pub epoch: u32,
}

impl ChunkHeader {
    /// The header's bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[..KIND_OFF].copy_from_slice(&MAGIC);
        b[KIND_OFF..EPOCH_OFF].copy_from_slice(&(self.kind as u32).to_le_bytes());
        b[EPOCH_OFF..CRC_OFF].copy_from_slice(&self.epoch.to_le_bytes());
        let c = masked_crc32c(&b[..CRC_OFF]);
        b[CRC_OFF..CRC_OFF + 4].copy_from_slice(&c.to_le_bytes());
        b
    }

    /// Decodes the header read at `at`; `None` when the chunk was never initialised (a
    /// crash between its allocation and its header's persist).
    pub fn decode(b: &[u8], at: u64) -> Result<Option<ChunkHeader>> {
        if b.len() < HEADER_LEN {
            return Err(Error::corruption(Tier::Pmem, at, "short chunk header"));
        }
        if le_u64(b, 0) != u64::from_le_bytes(MAGIC)
            || masked_crc32c(b.get(..CRC_OFF).unwrap_or_default()) != le_u32(b, CRC_OFF)
        {
            return Ok(None);
        }
        let kind = ChunkKind::from_u32(le_u32(b, KIND_OFF))
            .ok_or_else(|| Error::corruption(Tier::Pmem, at, "chunk header of an unknown kind"))?;
        Ok(Some(ChunkHeader {
            kind,
            epoch: le_u32(b, EPOCH_OFF),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_header_round_trips_and_garbage_is_uninitialised() {
        let h = ChunkHeader {
            kind: ChunkKind::DLog,
            epoch: 77,
        };
        let b = h.encode();
        assert_eq!(ChunkHeader::decode(&b, 0).ok().flatten(), Some(h));
        let mut bad = b;
        bad[13] ^= 4;
        assert_eq!(ChunkHeader::decode(&bad, 0).ok().flatten(), None);
        assert!(ChunkHeader::decode(&b[..10], 0).is_err());
    }
}
