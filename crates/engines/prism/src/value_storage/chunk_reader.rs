//! Decodes chunks and records read back from flash (layout in [`super::chunk_format`],
//! specification in `value_storage/FORMAT.md`).
//!
//! Nothing here trusts its input: every length is checked before it is used, every
//! arithmetic step is checked, and every byte that reaches a caller as data is covered by
//! a CRC — a record by its own CRC (bound to its location), a whole chunk by the header
//! CRC over header and payload. Record padding must be zero. Anything else is
//! [`Error::Corruption`] or [`Error::ChecksumMismatch`], never a panic; this is what the
//! fuzz target `prism_chunk` exercises.
//!
//! Thread safety: pure functions over borrowed bytes.

use tierkv_core::format::checksum::{crc32c, crc32c_append, mask, unmask};
use tierkv_core::{Error, Result, Tier};

use super::chunk_format::*;
use super::chunk_writer::record_crc;
use super::location::{MAX_CHUNK_SIZE, MAX_STORAGES};

/// A decoded chunk header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkHeader {
    /// The Value Storage id the chunk was written for.
    pub storage: u8,
    /// The chunk's sequence number.
    pub sequence: u64,
    /// The chunk index the chunk was written to.
    pub chunk: u32,
    /// The chunk size.
    pub chunk_size: u32,
    /// The number of records.
    pub count: u32,
    /// Bytes of records after the header.
    pub payload_len: u32,
    /// The stored (masked) CRC of header and payload.
    pub crc: u32,
}

/// One record, borrowed from the bytes it was decoded from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordView<'a> {
    /// Offset of the record in its chunk.
    pub offset: u32,
    /// The record's footprint (header + value + padding).
    pub footprint: u32,
    /// The backward pointer (HSIT slot).
    pub backptr: u64,
    /// The value.
    pub value: &'a [u8],
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    b.get(off..off + 4)?.try_into().ok().map(u32::from_le_bytes)
}

fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    b.get(off..off + 8)?.try_into().ok().map(u64::from_le_bytes)
}

fn corrupt(offset: u64, what: impl Into<String>) -> Error {
    Error::corruption(Tier::Flash, offset, what)
}

/// Decodes and checks the header fields of a chunk image starting at `bytes[0]` (which is
/// at `file_offset` in the storage file). The payload CRC is checked by [`decode_chunk`].
pub fn decode_chunk_header(bytes: &[u8], file_offset: u64) -> Result<ChunkHeader> {
    let h = bytes.get(..CHUNK_HEADER_LEN).ok_or_else(|| {
        corrupt(
            file_offset,
            format!("chunk image of {} bytes has no header", bytes.len()),
        )
    })?;
    if h[CH_MAGIC_OFF..CH_VERSION_OFF] != CHUNK_MAGIC {
        return Err(corrupt(
            file_offset,
            "chunk header magic is wrong (never written, or torn)",
        ));
    }
    let field = |off| u32_at(h, off).ok_or_else(|| corrupt(file_offset, "short chunk header"));
    let version = field(CH_VERSION_OFF)?;
    if version == 0 || version > CHUNK_VERSION {
        return Err(Error::UnsupportedFormat {
            what: "prism value storage chunk",
            found: version,
            supported: CHUNK_VERSION,
        });
    }
    let storage = field(CH_STORAGE_OFF)?;
    let chunk_size = field(CH_CHUNK_SIZE_OFF)?;
    let payload_len = field(CH_PAYLOAD_LEN_OFF)?;
    let header = ChunkHeader {
        storage: u8::try_from(storage).unwrap_or(u8::MAX),
        sequence: u64_at(h, CH_SEQUENCE_OFF)
            .ok_or_else(|| corrupt(file_offset, "short chunk header"))?,
        chunk: field(CH_CHUNK_OFF)?,
        chunk_size,
        count: field(CH_COUNT_OFF)?,
        payload_len,
        crc: field(CH_CRC_OFF)?,
    };
    let sane = storage < MAX_STORAGES
        && (MIN_CHUNK_SIZE..=MAX_CHUNK_SIZE).contains(&chunk_size)
        && payload_len as usize <= payload_capacity(chunk_size)
        && (payload_len as usize).is_multiple_of(RECORD_ALIGN)
        && h[CH_RESERVED_OFF..CH_CRC_OFF].iter().all(|&b| b == 0);
    if !sane {
        return Err(corrupt(
            file_offset,
            format!("chunk header fields out of range: {header:?}"),
        ));
    }
    Ok(header)
}

/// Decodes the record at the start of `bytes`, which sits at `offset` in chunk `chunk`
/// (and at `file_offset` in the file). With `expected_len`, the record's footprint must be
/// exactly that (it comes from the value's location).
pub fn decode_record(
    bytes: &[u8],
    chunk: u32,
    offset: u32,
    expected_len: Option<u32>,
    file_offset: u64,
) -> Result<RecordView<'_>> {
    let header = bytes.get(..RECORD_HEADER_LEN).ok_or_else(|| {
        corrupt(
            file_offset,
            format!("record of {} bytes has no header", bytes.len()),
        )
    })?;
    let short = || corrupt(file_offset, "short record header");
    let backptr = u64_at(header, REC_BACKPTR_OFF).ok_or_else(short)?;
    let size = u32_at(header, REC_SIZE_OFF).ok_or_else(short)?;
    let stored = u32_at(header, REC_CRC_OFF).ok_or_else(short)?;
    let footprint = record_footprint(size as usize)
        .filter(|f| *f <= bytes.len() && expected_len.is_none_or(|e| e as usize == *f))
        .ok_or_else(|| {
            corrupt(
                file_offset,
                format!(
                    "record claims a value of {size} bytes, which does not fit its extent of {} bytes (expected footprint {expected_len:?})",
                    bytes.len()
                ),
            )
        })?;
    let value_end = RECORD_HEADER_LEN + size as usize;
    let value = bytes.get(RECORD_HEADER_LEN..value_end).ok_or_else(short)?;
    let actual = record_crc(chunk, offset, &header[..REC_CRC_OFF], value);
    check_crc(stored, actual, file_offset)?;
    let padding = bytes.get(value_end..footprint).ok_or_else(short)?;
    if padding.iter().any(|&b| b != 0) {
        return Err(corrupt(file_offset, "record padding is not zero"));
    }
    Ok(RecordView {
        offset,
        footprint: footprint as u32,
        backptr,
        value,
    })
}

/// `ChecksumMismatch` at `file_offset` unless the masked CRCs `stored` and `actual` agree.
fn check_crc(stored: u32, actual: u32, file_offset: u64) -> Result<()> {
    if actual == stored {
        Ok(())
    } else {
        Err(Error::ChecksumMismatch {
            tier: Tier::Flash,
            offset: file_offset,
            expected: unmask(stored),
            got: unmask(actual),
        })
    }
}

/// Checks the filler at chunk offset `pos` (`bytes` run from it to the end of the payload)
/// and returns its length: a record header whose CRC holds, then zeros up to the next
/// block boundary, which must come before the end of the payload.
fn decode_filler(bytes: &[u8], chunk: u32, pos: usize, file_offset: u64) -> Result<usize> {
    let header = bytes
        .get(..RECORD_HEADER_LEN)
        .ok_or_else(|| corrupt(file_offset, "filler has no header"))?;
    let zeros = u32_at(header, REC_SIZE_OFF).unwrap_or(u32::MAX) as usize;
    let stored = u32_at(header, REC_CRC_OFF).unwrap_or_default();
    let len = RECORD_HEADER_LEN.saturating_add(zeros);
    if !(pos + len).is_multiple_of(BLOCK) || len > BLOCK || len > bytes.len() {
        return Err(corrupt(
            file_offset,
            format!(
                "filler of {len} bytes at chunk offset {pos} does not end at a block boundary inside the payload"
            ),
        ));
    }
    let actual = record_crc(chunk, pos as u32, &header[..REC_CRC_OFF], &[]);
    check_crc(stored, actual, file_offset)?;
    let zeros = bytes.get(RECORD_HEADER_LEN..len).unwrap_or_default();
    if zeros.iter().any(|&b| b != 0) {
        return Err(corrupt(file_offset, "filler is not zero"));
    }
    Ok(len)
}

/// Decodes a whole chunk image (at least header + payload bytes, starting at the chunk's
/// first byte, which is at `file_offset`): header, header CRC over header and payload,
/// then every record. `storage` and `chunk` are where the image was read from; a header
/// naming another place is a misdirected write and reported as corruption.
pub fn decode_chunk(
    bytes: &[u8],
    storage: u8,
    chunk: u32,
    file_offset: u64,
) -> Result<(ChunkHeader, Vec<RecordView<'_>>)> {
    let header = decode_chunk_header(bytes, file_offset)?;
    if header.storage != storage || header.chunk != chunk {
        return Err(corrupt(
            file_offset,
            format!(
                "chunk header names storage {} chunk {}, but was read from storage {storage} chunk {chunk}",
                header.storage, header.chunk
            ),
        ));
    }
    let end = CHUNK_HEADER_LEN + header.payload_len as usize;
    let payload = bytes.get(CHUNK_HEADER_LEN..end).ok_or_else(|| {
        corrupt(
            file_offset,
            format!(
                "chunk image of {} bytes is shorter than its payload ({end})",
                bytes.len()
            ),
        )
    })?;
    let actual = mask(crc32c_append(crc32c(&bytes[..CH_CRC_OFF]), payload));
    check_crc(header.crc, actual, file_offset)?;
    let records = decode_records(bytes, &header, file_offset)?;
    Ok((header, records))
}

fn decode_records<'a>(
    bytes: &'a [u8],
    header: &ChunkHeader,
    file_offset: u64,
) -> Result<Vec<RecordView<'a>>> {
    let end = CHUNK_HEADER_LEN + header.payload_len as usize;
    let mut records = Vec::with_capacity(header.count.min(4096) as usize);
    let mut pos = CHUNK_HEADER_LEN;
    while pos < end {
        let rec_bytes = bytes
            .get(pos..end)
            .ok_or_else(|| corrupt(file_offset, "record outside payload"))?;
        if u64_at(rec_bytes, REC_BACKPTR_OFF) == Some(FILLER_BACKPTR) {
            pos += decode_filler(rec_bytes, header.chunk, pos, file_offset + pos as u64)?;
            continue;
        }
        let r = decode_record(
            rec_bytes,
            header.chunk,
            pos as u32,
            None,
            file_offset + pos as u64,
        )?;
        pos += r.footprint as usize;
        records.push(r);
    }
    if records.len() != header.count as usize {
        return Err(corrupt(
            file_offset,
            format!(
                "chunk header counts {} records, the payload holds {}",
                header.count,
                records.len()
            ),
        ));
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::super::chunk_writer::{ChunkEncoder, ChunkId};
    use super::*;
    use proptest::prelude::*;

    const ID: ChunkId = ChunkId {
        storage: 3,
        chunk: 7,
        sequence: 0x1_0000_0005,
    };

    fn encode(
        size: usize,
        values: &[(u64, Vec<u8>)],
    ) -> (Vec<u8>, usize, Vec<super::super::location::ValueLocation>) {
        encode_placed(size, values, Placement::Packed)
    }

    fn encode_placed(
        size: usize,
        values: &[(u64, Vec<u8>)],
        placement: Placement,
    ) -> (Vec<u8>, usize, Vec<super::super::location::ValueLocation>) {
        let mut buf = vec![0xAAu8; size];
        let mut enc = ChunkEncoder::with_placement(&mut buf, ID, placement).unwrap();
        let locs = values
            .iter()
            .map(|(b, v)| enc.push(*b, v).unwrap())
            .collect();
        let n = enc.finish();
        (buf, n, locs)
    }

    fn sample() -> Vec<(u64, Vec<u8>)> {
        vec![
            (1, b"hello".to_vec()),
            (2, vec![]),
            (u64::MAX - 1, vec![7u8; 100]),
            (42, vec![9u8; 48]),
        ]
    }

    /// Three values of 1,500 bytes: block-aligned, the third starts at 4096 after a filler.
    fn straddling() -> Vec<(u64, Vec<u8>)> {
        (1..=4).map(|i| (i, vec![i as u8; 1500])).collect()
    }

    #[test]
    fn block_aligned_records_never_cross_a_block_and_round_trip_past_fillers() {
        let values = straddling();
        let (buf, n, locs) = encode_placed(16384, &values, Placement::BlockAligned);
        assert_eq!(
            locs[2].offset, 4096,
            "the third record moved to the boundary"
        );
        for l in &locs {
            let (first, last) = (
                l.offset as usize / BLOCK,
                (l.offset + l.len - 1) as usize / BLOCK,
            );
            assert_eq!(first, last, "{l:?} crosses a block");
        }
        let (h, recs) = decode_chunk(&buf[..n], 3, 7, 0).unwrap();
        assert_eq!(h.count, 4);
        for ((r, (b, v)), l) in recs.iter().zip(&values).zip(&locs) {
            assert_eq!((r.backptr, r.value, r.offset), (*b, &v[..], l.offset));
        }
        let (_, _, packed) = encode(16384, &values);
        assert_eq!(
            packed[2].offset, 3104,
            "packed, the third record crosses 4096"
        );
    }

    #[test]
    fn every_bit_flip_in_a_chunk_with_fillers_is_detected() {
        let (buf, _, _) = encode_placed(8192, &straddling()[..3], Placement::BlockAligned);
        assert_every_bit_flip_is_detected(&buf);
    }

    #[test]
    fn the_filler_backward_pointer_is_not_a_record() {
        let mut buf = vec![0u8; 8192];
        let mut enc = ChunkEncoder::new(&mut buf, ID).unwrap();
        assert!(matches!(
            enc.push(FILLER_BACKPTR, b"x"),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn chunk_round_trips_header_and_records() {
        let values = sample();
        let (buf, n, locs) = encode(8192, &values);
        assert_eq!(n, 4096);
        let (h, recs) = decode_chunk(&buf[..n], 3, 7, 0).unwrap();
        assert_eq!((h.sequence, h.count, h.chunk_size), (ID.sequence, 4, 8192));
        for ((r, (b, v)), l) in recs.iter().zip(&values).zip(&locs) {
            assert_eq!((r.backptr, r.value), (*b, &v[..]));
            assert_eq!((r.offset, r.footprint), (l.offset, l.len));
            let one = decode_record(
                &buf[l.offset as usize..][..l.len as usize],
                7,
                l.offset,
                Some(l.len),
                0,
            )
            .unwrap();
            assert_eq!(one, *r);
        }
    }

    #[test]
    fn encoder_refuses_a_value_that_does_not_fit() {
        let mut buf = vec![0u8; 8192];
        let mut enc = ChunkEncoder::new(&mut buf, ID).unwrap();
        assert!(!enc.fits(8192));
        assert!(matches!(
            enc.push(1, &[0u8; 8192]),
            Err(Error::InvalidArgument(_))
        ));
        let max = max_value_len(8192);
        assert!(enc.fits(max));
        enc.push(1, &vec![1u8; max]).unwrap();
        assert!(!enc.fits(0));
        assert_eq!(enc.finish(), 8192);
    }

    #[test]
    fn every_truncation_of_a_chunk_is_detected() {
        let (buf, _, _) = encode(8192, &sample());
        let h = decode_chunk_header(&buf, 0).unwrap();
        let end = CHUNK_HEADER_LEN + h.payload_len as usize;
        for cut in 0..end {
            assert!(
                decode_chunk(&buf[..cut], 3, 7, 0).is_err(),
                "truncated at {cut}"
            );
        }
    }

    #[test]
    fn every_bit_flip_in_a_chunk_is_detected() {
        let (buf, _, _) = encode(8192, &sample());
        assert_every_bit_flip_is_detected(&buf);
    }

    /// Flips each bit of the chunk image's header and payload in turn: none decodes.
    fn assert_every_bit_flip_is_detected(buf: &[u8]) {
        let h = decode_chunk_header(buf, 0).unwrap();
        let end = CHUNK_HEADER_LEN + h.payload_len as usize;
        for bit in 0..end * 8 {
            let mut b = buf.to_vec();
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(
                decode_chunk(&b[..end], 3, 7, 0).is_err(),
                "bit {bit} flipped undetected"
            );
        }
    }

    #[test]
    fn every_truncation_and_bit_flip_of_a_record_is_detected() {
        let (buf, _, locs) = encode(8192, &sample());
        for l in &locs {
            let ext = &buf[l.offset as usize..][..l.len as usize];
            for cut in 0..ext.len() {
                assert!(decode_record(&ext[..cut], 7, l.offset, Some(l.len), 0).is_err());
            }
            for bit in 0..ext.len() * 8 {
                let mut e = ext.to_vec();
                e[bit / 8] ^= 1 << (bit % 8);
                assert!(
                    decode_record(&e, 7, l.offset, Some(l.len), 0).is_err(),
                    "bit {bit} at {l:?}"
                );
            }
        }
    }

    #[test]
    fn record_read_from_the_wrong_place_fails_its_checksum() {
        let (buf, _, locs) = encode(8192, &sample());
        let l = locs[0];
        let ext = &buf[l.offset as usize..][..l.len as usize];
        let e = decode_record(ext, 8, l.offset, Some(l.len), 0).unwrap_err();
        assert!(matches!(e, Error::ChecksumMismatch { .. }), "{e}");
        assert!(decode_chunk(&buf, 3, 8, 0).unwrap_err().is_corruption());
    }

    #[test]
    fn newer_chunk_version_is_unsupported_not_corrupt() {
        let (mut buf, _, _) = encode(8192, &sample());
        let newer = CHUNK_VERSION + 1;
        buf[CH_VERSION_OFF..CH_VERSION_OFF + 4].copy_from_slice(&newer.to_le_bytes());
        assert!(matches!(
            decode_chunk_header(&buf, 0),
            Err(Error::UnsupportedFormat { found, .. }) if found == newer
        ));
    }

    #[test]
    fn never_written_chunk_is_reported_as_such() {
        let e = decode_chunk(&[0u8; 4096], 0, 0, 8192).unwrap_err();
        assert!(e.to_string().contains("magic"), "{e}");
    }

    proptest! {
        #[test]
        fn random_chunks_round_trip(
            values in proptest::collection::vec((0..u64::MAX, proptest::collection::vec(any::<u8>(), 0..3000)), 0..40),
            aligned in any::<bool>(),
        ) {
            let placement = if aligned { Placement::BlockAligned } else { Placement::Packed };
            let mut buf = vec![0u8; 16384];
            let mut enc = ChunkEncoder::with_placement(&mut buf, ID, placement).unwrap();
            let mut kept = Vec::new();
            for (b, v) in &values {
                if !enc.fits(v.len()) { break; }
                kept.push((*b, v.clone(), enc.push(*b, v).unwrap()));
            }
            let n = enc.finish();
            prop_assert_eq!(n % BLOCK, 0);
            prop_assert_eq!(
                values_fitting(16384, values.iter().map(|(_, v)| v.len()), placement),
                kept.len()
            );
            let (h, recs) = decode_chunk(&buf[..n], 3, 7, 0).unwrap();
            prop_assert_eq!(h.count as usize, kept.len());
            for (r, (b, v, l)) in recs.iter().zip(&kept) {
                prop_assert_eq!(r.backptr, *b);
                prop_assert_eq!(r.value, &v[..]);
                prop_assert_eq!(r.offset, l.offset);
                if aligned && l.len as usize <= BLOCK {
                    prop_assert_eq!(l.offset as usize / BLOCK, (l.offset + l.len - 1) as usize / BLOCK);
                }
                prop_assert!(l.check(8, 16384).is_ok());
            }
        }

        #[test]
        fn decoders_never_panic_on_garbage(bytes in proptest::collection::vec(any::<u8>(), 0..512), off in 0u32..512) {
            let _ = decode_chunk(&bytes, 0, 0, 0);
            let _ = decode_record(&bytes, 0, off, None, 0);
            let _ = decode_chunk_header(&bytes, 0);
        }
    }
}
