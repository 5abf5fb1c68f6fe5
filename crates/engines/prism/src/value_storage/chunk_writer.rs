//! Encodes one chunk image in memory (PRISM §5.1, Figure 4 ❹; layout in
//! [`super::chunk_format`] and `value_storage/FORMAT.md`).
//!
//! A [`ChunkEncoder`] fills a buffer of exactly one chunk: records are appended from
//! [`CHUNK_HEADER_LEN`], back to back or, with [`Placement::BlockAligned`], after a filler
//! where a record would cross a block boundary, each with its backward pointer, size and a
//! CRC bound to its location; [`ChunkEncoder::finish`] writes the header (with the CRC over header and
//! payload) and zeroes the tail of the last block, returning how many bytes to write.
//!
//! Invariants: the encoder never writes outside its buffer; `pos` stays a multiple of
//! [`RECORD_ALIGN`] and never exceeds the chunk size; every location it returns passes
//! [`ValueLocation::check`].
//!
//! Thread safety: an encoder borrows its buffer mutably; one thread at a time.

use tierkv_core::format::checksum::{crc32c, crc32c_append, mask};
use tierkv_core::{Error, Result};

use super::chunk_format::*;
use super::location::{MAX_CHUNK_SIZE, ValueLocation};

/// The identity of a chunk being written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkId {
    /// The Value Storage id.
    pub storage: u8,
    /// The chunk index.
    pub chunk: u32,
    /// The chunk's sequence number.
    pub sequence: u64,
}

/// Builds one chunk image in a caller-provided buffer of exactly one chunk.
pub struct ChunkEncoder<'a> {
    buf: &'a mut [u8],
    id: ChunkId,
    pos: usize,
    count: u32,
    placement: Placement,
}

/// The CRC of a record: its location, then its header bytes before the CRC, then the value.
pub fn record_crc(chunk: u32, offset: u32, header: &[u8], value: &[u8]) -> u32 {
    let mut seed = [0u8; 8];
    seed[..4].copy_from_slice(&chunk.to_le_bytes());
    seed[4..].copy_from_slice(&offset.to_le_bytes());
    let c = crc32c_append(crc32c(&seed), header);
    mask(crc32c_append(c, value))
}

impl<'a> ChunkEncoder<'a> {
    /// An empty chunk over `buf`, whose length is the chunk size, with packed records.
    pub fn new(buf: &'a mut [u8], id: ChunkId) -> Result<Self> {
        Self::with_placement(buf, id, Placement::Packed)
    }

    /// An empty chunk over `buf` whose records are laid out by `placement`.
    pub fn with_placement(buf: &'a mut [u8], id: ChunkId, placement: Placement) -> Result<Self> {
        let size = buf.len();
        if size < MIN_CHUNK_SIZE as usize
            || size > MAX_CHUNK_SIZE as usize
            || !size.is_multiple_of(BLOCK)
        {
            return Err(Error::invalid(format!(
                "chunk size {size}: must be a multiple of {BLOCK} between {MIN_CHUNK_SIZE} and {MAX_CHUNK_SIZE}"
            )));
        }
        Ok(ChunkEncoder {
            buf,
            id,
            pos: CHUNK_HEADER_LEN,
            count: 0,
            placement,
        })
    }

    /// True when a value of `value_len` bytes still fits.
    pub fn fits(&self, value_len: usize) -> bool {
        record_footprint(value_len).is_some_and(|f| {
            let (_, at) = place(self.pos, f, self.placement);
            at + f <= self.buf.len()
        })
    }

    /// The number of records so far.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Appends a record; `InvalidArgument` when it does not fit.
    pub fn push(&mut self, backptr: u64, value: &[u8]) -> Result<ValueLocation> {
        if backptr == FILLER_BACKPTR {
            return Err(Error::invalid(
                "backward pointer u64::MAX is reserved for fillers",
            ));
        }
        let footprint = record_footprint(value.len());
        let placed = footprint.map(|f| (f, place(self.pos, f, self.placement)));
        let (footprint, (gap, offset)) = placed
            .filter(|(f, (_, at))| at + f <= self.buf.len())
            .ok_or_else(|| {
                Error::invalid(format!(
                    "a value of {} bytes does not fit in the {} bytes left in the chunk",
                    value.len(),
                    self.buf.len() - self.pos
                ))
            })?;
        let size =
            u32::try_from(value.len()).map_err(|_| Error::invalid("value longer than 4 GiB"))?;
        if gap > 0 {
            self.put_filler(gap)?;
        }
        let rec = self
            .buf
            .get_mut(offset..offset + footprint)
            .ok_or_else(|| Error::invalid("record outside the chunk"))?;
        let offset = offset as u32;
        rec[REC_BACKPTR_OFF..REC_SIZE_OFF].copy_from_slice(&backptr.to_le_bytes());
        rec[REC_SIZE_OFF..REC_CRC_OFF].copy_from_slice(&size.to_le_bytes());
        let crc = record_crc(self.id.chunk, offset, &rec[..REC_CRC_OFF], value);
        rec[REC_CRC_OFF..RECORD_HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
        let value_end = RECORD_HEADER_LEN + value.len();
        rec[RECORD_HEADER_LEN..value_end].copy_from_slice(value);
        rec[value_end..].fill(0);
        self.pos = offset as usize + footprint;
        self.count += 1;
        Ok(ValueLocation {
            storage: self.id.storage,
            chunk: self.id.chunk,
            offset,
            len: footprint as u32,
        })
    }

    /// Writes a filler of `gap` bytes (header and zeros) at `pos` and moves past it.
    fn put_filler(&mut self, gap: usize) -> Result<()> {
        let offset = self.pos as u32;
        let zeros = u32::try_from(gap - RECORD_HEADER_LEN)
            .map_err(|_| Error::invalid("filler longer than 4 GiB"))?;
        let rec = self
            .buf
            .get_mut(self.pos..self.pos + gap)
            .ok_or_else(|| Error::invalid("filler outside the chunk"))?;
        rec[REC_BACKPTR_OFF..REC_SIZE_OFF].copy_from_slice(&FILLER_BACKPTR.to_le_bytes());
        rec[REC_SIZE_OFF..REC_CRC_OFF].copy_from_slice(&zeros.to_le_bytes());
        let crc = record_crc(self.id.chunk, offset, &rec[..REC_CRC_OFF], &[]);
        rec[REC_CRC_OFF..RECORD_HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
        rec[RECORD_HEADER_LEN..].fill(0);
        self.pos += gap;
        Ok(())
    }

    /// Writes the header, zeroes the rest of the last block and returns the number of bytes
    /// of the image to write (a multiple of [`BLOCK`], at most the chunk size).
    pub fn finish(self) -> usize {
        let payload_len = self.pos - CHUNK_HEADER_LEN;
        let write_len = round_up_block(self.pos as u64) as usize;
        let size = self.buf.len();
        self.buf[self.pos..write_len].fill(0);
        let h = &mut self.buf[..CHUNK_HEADER_LEN];
        h[CH_MAGIC_OFF..CH_VERSION_OFF].copy_from_slice(&CHUNK_MAGIC);
        h[CH_VERSION_OFF..CH_STORAGE_OFF].copy_from_slice(&CHUNK_VERSION.to_le_bytes());
        h[CH_STORAGE_OFF..CH_SEQUENCE_OFF]
            .copy_from_slice(&u32::from(self.id.storage).to_le_bytes());
        h[CH_SEQUENCE_OFF..CH_CHUNK_OFF].copy_from_slice(&self.id.sequence.to_le_bytes());
        h[CH_CHUNK_OFF..CH_CHUNK_SIZE_OFF].copy_from_slice(&self.id.chunk.to_le_bytes());
        h[CH_CHUNK_SIZE_OFF..CH_COUNT_OFF].copy_from_slice(&(size as u32).to_le_bytes());
        h[CH_COUNT_OFF..CH_PAYLOAD_LEN_OFF].copy_from_slice(&self.count.to_le_bytes());
        h[CH_PAYLOAD_LEN_OFF..CH_RESERVED_OFF].copy_from_slice(&(payload_len as u32).to_le_bytes());
        h[CH_RESERVED_OFF..CH_CRC_OFF].fill(0);
        let crc = crc32c_append(
            crc32c(&self.buf[..CH_CRC_OFF]),
            &self.buf[CHUNK_HEADER_LEN..self.pos],
        );
        self.buf[CH_CRC_OFF..CHUNK_HEADER_LEN].copy_from_slice(&mask(crc).to_le_bytes());
        write_len
    }
}
