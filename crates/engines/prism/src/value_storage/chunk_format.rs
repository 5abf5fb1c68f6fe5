//! The on-flash layout of a Value Storage file: constants shared by the writer
//! ([`super::chunk_writer`]), the reader ([`super::chunk_reader`]) and the superblock
//! ([`super::superblock`]). The specification, with byte diagrams and the torn-write
//! analysis, is `value_storage/FORMAT.md`; this file repeats the layout and is the only
//! place that defines its numbers. Every integer is little-endian.
//!
//! ```text
//! file:   [superblock slot A: 4 KiB][superblock slot B: 4 KiB][chunk 0][chunk 1]...
//! chunk:  [chunk header: 64 B][record][record]...[zero padding to the next 4 KiB]
//! record: [backward pointer u64][value size u32][record crc u32][value][padding to 16 B,
//!          and to at least MIN_RECORD_LEN bytes in all]
//! ```
//!
//! Offsets are chained: each field's offset is the previous offset plus its size.
//!
//! Thread safety: constants only.

/// The flash tier's I/O granularity (buffers, offsets and lengths of `O_DIRECT` I/O).
pub const BLOCK: usize = 4096;

// ---- file layout ------------------------------------------------------------------------

/// The name of the Value Storage file with id `id` inside its flash directory.
pub fn storage_file_name(id: u8) -> String {
    format!("prism-value-storage-{id:02}.vs")
}
/// Byte offset of superblock slot `i` (0 or 1): each slot is one block.
pub const SUPERBLOCK_SLOTS: usize = 2;
/// Where chunk 0 starts: after the two superblock slots.
pub const CHUNKS_START: u64 = (SUPERBLOCK_SLOTS * BLOCK) as u64;

// ---- superblock (one 64-byte record at the start of each slot) --------------------------

/// Superblock magic.
pub const SUPERBLOCK_MAGIC: [u8; 8] = *b"PRSMVSTO";
/// Superblock (and file) format version. Version changes: 1 — initial format.
pub const FORMAT_VERSION: u32 = 1;
/// magic: 8 bytes.
pub const SB_MAGIC_OFF: usize = 0;
/// version: u32.
pub const SB_VERSION_OFF: usize = SB_MAGIC_OFF + 8;
/// storage id: u32 (0..16).
pub const SB_STORAGE_OFF: usize = SB_VERSION_OFF + 4;
/// chunk size in bytes: u32.
pub const SB_CHUNK_SIZE_OFF: usize = SB_STORAGE_OFF + 4;
/// number of chunks: u32.
pub const SB_CHUNK_COUNT_OFF: usize = SB_CHUNK_SIZE_OFF + 4;
/// open generation: u64, incremented by every open (the high half of chunk sequences).
pub const SB_GENERATION_OFF: usize = SB_CHUNK_COUNT_OFF + 4;
/// reserved, zero.
pub const SB_RESERVED_OFF: usize = SB_GENERATION_OFF + 8;
/// masked CRC-32C of bytes `[0, SB_CRC_OFF)`.
pub const SB_CRC_OFF: usize = 60;
/// Length of the superblock record.
pub const SUPERBLOCK_LEN: usize = SB_CRC_OFF + 4;

// ---- chunk header ----------------------------------------------------------------------

/// Chunk header magic.
pub const CHUNK_MAGIC: [u8; 8] = *b"PRSMCHNK";
/// Chunk format version. Version changes: 1 — initial format; 2 — filler records (records
/// placed at a block boundary rather than across it). Version 1 chunks are still read.
pub const CHUNK_VERSION: u32 = 2;
/// The oldest chunk version still read.
pub const OLDEST_CHUNK_VERSION: u32 = 1;
/// magic: 8 bytes.
pub const CH_MAGIC_OFF: usize = 0;
/// version: u32.
pub const CH_VERSION_OFF: usize = CH_MAGIC_OFF + 8;
/// storage id: u32.
pub const CH_STORAGE_OFF: usize = CH_VERSION_OFF + 4;
/// chunk sequence number: u64 (`generation << 32 | counter`, unique per storage).
pub const CH_SEQUENCE_OFF: usize = CH_STORAGE_OFF + 4;
/// chunk index: u32 (where the chunk was meant to be written).
pub const CH_CHUNK_OFF: usize = CH_SEQUENCE_OFF + 8;
/// chunk size: u32.
pub const CH_CHUNK_SIZE_OFF: usize = CH_CHUNK_OFF + 4;
/// number of records: u32.
pub const CH_COUNT_OFF: usize = CH_CHUNK_SIZE_OFF + 4;
/// bytes of records after the header: u32 (a multiple of [`RECORD_ALIGN`]).
pub const CH_PAYLOAD_LEN_OFF: usize = CH_COUNT_OFF + 4;
/// reserved, zero.
pub const CH_RESERVED_OFF: usize = CH_PAYLOAD_LEN_OFF + 4;
/// masked CRC-32C of header bytes `[0, CH_CRC_OFF)` followed by the payload.
pub const CH_CRC_OFF: usize = 60;
/// Length of the chunk header; records start here.
pub const CHUNK_HEADER_LEN: usize = CH_CRC_OFF + 4;

// ---- record ----------------------------------------------------------------------------

/// backward pointer (the HSIT slot of the value's key): u64.
pub const REC_BACKPTR_OFF: usize = 0;
/// value size in bytes: u32.
pub const REC_SIZE_OFF: usize = REC_BACKPTR_OFF + 8;
/// masked CRC-32C of the record's location (chunk u32, offset u32), then record bytes
/// `[0, REC_CRC_OFF)`, then the value.
pub const REC_CRC_OFF: usize = REC_SIZE_OFF + 4;
/// Length of the record header; the value starts here.
pub const RECORD_HEADER_LEN: usize = REC_CRC_OFF + 4;
/// Records start at multiples of this, and their footprints are multiples of it.
pub const RECORD_ALIGN: usize = 16;
/// The smallest footprint of a record (small values are padded up to it), so that two
/// records never start in the same validity-bitmap unit.
pub const MIN_RECORD_LEN: usize = BITMAP_UNIT;
/// One validity-bitmap bit covers this many bytes of a chunk (PRISM §5.1: one bit per
/// value; a record starts in its own unit because footprints are at least this long).
pub const BITMAP_UNIT: usize = 64;

/// The backward pointer of a *filler*: a record header (with its CRC) followed by `size`
/// zero bytes and no value, written before a record that would otherwise straddle a block
/// boundary ([`Placement::BlockAligned`]); it ends at that boundary. Never an HSIT slot.
pub const FILLER_BACKPTR: u64 = u64::MAX;

/// How a chunk's records are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// One after the other.
    Packed,
    /// A record that fits in a block but would cross a block boundary starts at the
    /// boundary, after a filler: read on its own it then costs one block, not two. For
    /// values that are read one by one (PWB reclamation puts keys in write order); values
    /// written in key order (scan chains) and GC's moves stay packed.
    BlockAligned,
}

/// Where a record of `footprint` bytes goes when the chunk's bytes so far end at `pos`:
/// (filler bytes before it, its offset).
pub fn place(pos: usize, footprint: usize, placement: Placement) -> (usize, usize) {
    let boundary = pos.next_multiple_of(BLOCK);
    if placement == Placement::BlockAligned
        && footprint <= BLOCK
        && boundary > pos
        && pos + footprint > boundary
    {
        (boundary - pos, boundary)
    } else {
        (0, pos)
    }
}

/// How many of `value_lens`, taken in order, fit together in one chunk of `chunk_size`
/// bytes laid out by `placement`.
pub fn values_fitting(
    chunk_size: u32,
    value_lens: impl IntoIterator<Item = usize>,
    placement: Placement,
) -> usize {
    let end = chunk_size as usize;
    let mut pos = CHUNK_HEADER_LEN;
    let mut n = 0;
    for len in value_lens {
        let Some(footprint) = record_footprint(len) else {
            break;
        };
        let (_, at) = place(pos, footprint, placement);
        match at.checked_add(footprint) {
            Some(next) if next <= end => {
                pos = next;
                n += 1;
            }
            _ => break,
        }
    }
    n
}

/// Smallest chunk size accepted (two blocks).
pub const MIN_CHUNK_SIZE: u32 = 2 * BLOCK as u32;

/// The footprint of a record holding a value of `value_len` bytes, or `None` when it
/// cannot be represented.
pub fn record_footprint(value_len: usize) -> Option<usize> {
    let raw = value_len.checked_add(RECORD_HEADER_LEN + RECORD_ALIGN - 1)?;
    Some((raw / RECORD_ALIGN * RECORD_ALIGN).max(MIN_RECORD_LEN))
}

/// Bytes of a chunk available to records.
pub fn payload_capacity(chunk_size: u32) -> usize {
    (chunk_size as usize).saturating_sub(CHUNK_HEADER_LEN)
}

/// The longest value a chunk of `chunk_size` bytes can hold (one record filling it).
pub fn max_value_len(chunk_size: u32) -> usize {
    let cap = payload_capacity(chunk_size) / RECORD_ALIGN * RECORD_ALIGN;
    cap.saturating_sub(RECORD_HEADER_LEN)
}

/// Rounds `n` up to a multiple of [`BLOCK`].
pub fn round_up_block(n: u64) -> u64 {
    n.div_ceil(BLOCK as u64) * BLOCK as u64
}

// The layout is consistent by construction; these fail the build if an edit breaks it.
const _: () = assert!(SB_RESERVED_OFF <= SB_CRC_OFF && SUPERBLOCK_LEN <= BLOCK);
const _: () = assert!(CH_RESERVED_OFF <= CH_CRC_OFF);
const _: () =
    assert!(CHUNK_HEADER_LEN.is_multiple_of(RECORD_ALIGN) && RECORD_HEADER_LEN == RECORD_ALIGN);
const _: () =
    assert!(MIN_RECORD_LEN.is_multiple_of(RECORD_ALIGN) && MIN_RECORD_LEN >= RECORD_HEADER_LEN);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn footprints_are_aligned_and_at_least_one_bitmap_unit() {
        assert_eq!(record_footprint(0), Some(64));
        assert_eq!(record_footprint(48), Some(64));
        assert_eq!(record_footprint(49), Some(80));
        assert_eq!(record_footprint(1024), Some(1040));
        assert_eq!(record_footprint(usize::MAX), None);
        let c = 512 * 1024;
        let max = max_value_len(c);
        assert_eq!(max, 524_208, "the figure FORMAT.md gives");
        assert_eq!(record_footprint(max), Some(payload_capacity(c)));
    }
}
