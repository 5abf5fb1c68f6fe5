//! Fuzz target: PRISM's Value Storage decoders (`value_storage/chunk_reader.rs`,
//! `value_storage/superblock.rs`) must return an error, never panic or read out of bounds,
//! on any bytes; and what they accept must be consistent.
//!
//! Random bytes almost never pass a CRC, so each input is decoded three ways: as a raw
//! chunk image / record / superblock pair (header checks), as the payload of a chunk with
//! a valid header and CRC (the record walk), and as the values of a chunk built by the
//! encoder (packed or block-aligned, with fillers), which must decode to exactly those
//! values.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tierkv_core::format::checksum::{crc32c, crc32c_append, mask};
use tierkv_prism::value_storage::chunk_format::{
    CH_CRC_OFF, CH_PAYLOAD_LEN_OFF, CHUNK_HEADER_LEN, Placement, RECORD_ALIGN, max_value_len,
};
use tierkv_prism::value_storage::chunk_reader::{decode_chunk, decode_chunk_header, decode_record};
use tierkv_prism::value_storage::chunk_writer::{ChunkEncoder, ChunkId};
use tierkv_prism::value_storage::superblock::newest_superblock;

const SIZE: usize = 16 * 1024;
const ID: ChunkId = ChunkId { storage: 1, chunk: 3, sequence: 42 };

/// `payload` behind a valid header (count taken from the walk is unknown: 0 records
/// claimed, so a clean walk must still fail the count check unless the payload is empty).
fn framed(payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; SIZE];
    let enc = ChunkEncoder::new(&mut buf, ID).expect("valid chunk size");
    enc.finish();
    let len = payload.len().min(SIZE - CHUNK_HEADER_LEN) / RECORD_ALIGN * RECORD_ALIGN;
    buf[CHUNK_HEADER_LEN..CHUNK_HEADER_LEN + len].copy_from_slice(&payload[..len]);
    buf[CH_PAYLOAD_LEN_OFF..CH_PAYLOAD_LEN_OFF + 4].copy_from_slice(&(len as u32).to_le_bytes());
    let crc = crc32c_append(crc32c(&buf[..CH_CRC_OFF]), &buf[CHUNK_HEADER_LEN..CHUNK_HEADER_LEN + len]);
    buf[CH_CRC_OFF..CH_CRC_OFF + 4].copy_from_slice(&mask(crc).to_le_bytes());
    buf
}

/// Splits `data` into values, encodes them into a chunk and checks they decode back.
fn round_trip(data: &[u8]) {
    let placement = match data.first() {
        Some(b) if b % 2 == 1 => Placement::BlockAligned,
        _ => Placement::Packed,
    };
    let mut buf = vec![0u8; SIZE];
    let mut enc = ChunkEncoder::with_placement(&mut buf, ID, placement).expect("valid chunk size");
    let mut values = Vec::new();
    let mut rest = data;
    while let Some((&n, tail)) = rest.split_first() {
        let take = (n as usize * 7).min(tail.len()).min(max_value_len(SIZE as u32));
        let (v, tail) = tail.split_at(take);
        if !enc.fits(v.len()) {
            break;
        }
        let loc = enc.push(values.len() as u64, v).expect("fits");
        values.push((v, loc));
        rest = tail;
    }
    let n = enc.finish();
    let (_, records) = decode_chunk(&buf[..n], ID.storage, ID.chunk, 0).expect("encoded chunk decodes");
    assert_eq!(records.len(), values.len());
    for (i, (r, (v, loc))) in records.iter().zip(&values).enumerate() {
        assert_eq!((r.backptr, r.value, r.offset), (i as u64, *v, loc.offset));
        let one = &buf[loc.offset as usize..][..loc.len as usize];
        assert_eq!(decode_record(one, ID.chunk, loc.offset, Some(loc.len), 0).expect("record decodes"), *r);
    }
}

fuzz_target!(|data: &[u8]| {
    let _ = decode_chunk_header(data, 0);
    let _ = decode_chunk(data, 1, 3, 0);
    let _ = newest_superblock(data);
    if let Some((at, rest)) = data.split_first_chunk::<8>() {
        let chunk = u32::from_le_bytes([at[0], at[1], at[2], at[3]]);
        let offset = u32::from_le_bytes([at[4], at[5], at[6], at[7]]);
        let _ = decode_record(rest, chunk, offset, None, 0);
        let _ = decode_record(rest, chunk, offset, Some(offset), 0);
    }
    if let Ok((h, records)) = decode_chunk(&framed(data), ID.storage, ID.chunk, 0) {
        // A payload of fillers alone is valid; one with a record is not.
        assert!(records.is_empty() && h.count == 0, "a header claiming 0 records accepts no record");
    }
    round_trip(data);
});
