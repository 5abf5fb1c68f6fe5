//! Fuzz target: PRISM's batch log decoder (`batch/log_format.rs`), which reads a committed
//! log back from pmem at recovery, must return an error, never panic or read out of bounds,
//! on any bytes; and what it accepts must be consistent.
//!
//! Random bytes almost never pass the CRC, so each input is decoded three ways: raw; as the
//! body of a log with a valid header and checksum (the operation walk), which must decode
//! to exactly the claimed count of distinct keys; and as the operations of a batch built
//! from the input, which must encode and decode back to the same batch.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tierkv_core::WriteBatch;
use tierkv_prism::batch::log_format::{
    BODY_LEN_OFF, COUNT_OFF, CRC_OFF, HEADER_LEN, ID_OFF, MAGIC, VERSION, VERSION_OFF, checksum,
    decode, decode_header, encode,
};

/// `body` behind a valid header claiming `count` operations.
fn framed(count: u32, body: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; HEADER_LEN];
    out[..VERSION_OFF].copy_from_slice(&MAGIC);
    out[VERSION_OFF..COUNT_OFF].copy_from_slice(&VERSION.to_le_bytes());
    out[COUNT_OFF..BODY_LEN_OFF].copy_from_slice(&count.to_le_bytes());
    out[BODY_LEN_OFF..ID_OFF].copy_from_slice(&(body.len() as u64).to_le_bytes());
    let crc = checksum(&out[..CRC_OFF], body);
    out[CRC_OFF..CRC_OFF + 4].copy_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// Splits `data` into operations, encodes the batch and checks it decodes back.
fn round_trip(data: &[u8]) {
    let mut batch = WriteBatch::new();
    let mut rest = data;
    while let Some((&n, tail)) = rest.split_first() {
        let klen = usize::from(n % 16).clamp(1, tail.len().max(1)).min(tail.len());
        let (k, tail) = tail.split_at(klen);
        let vlen = usize::from(n / 16).min(tail.len());
        let (v, tail) = tail.split_at(vlen);
        if n % 3 == 0 {
            batch.delete(k);
        } else {
            batch.put(k, v);
        }
        rest = tail;
    }
    let bytes = encode(&batch, 7).expect("a small batch encodes");
    let (h, back) = decode(&bytes, 0).expect("an encoded batch decodes");
    assert_eq!(h.id, 7);
    assert_eq!(back, batch);
}

fuzz_target!(|data: &[u8]| {
    let _ = decode_header(data, 0);
    let _ = decode(data, 0);
    if let Some((&count, body)) = data.split_first() {
        if let Ok((h, batch)) = decode(&framed(u32::from(count), body), 0) {
            assert_eq!(h.count, u32::from(count));
            assert_eq!(batch.len(), usize::from(count), "keys are distinct");
        }
    }
    round_trip(data);
});
