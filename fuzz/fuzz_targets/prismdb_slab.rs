//! Fuzz target: PrismDB's pmem decoders (`engines/prismdb/src/format.rs`): objects in slots,
//! slab chunk headers and the superblock must return `None`/an error on any bytes, never
//! panic or read out of bounds; an object whose checksum is made valid must decode within
//! its slot; encoded objects must decode back to what was encoded.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tierkv_prismdb::format::{
    Superblock, decode_chunk_header, decode_object, encode_object, object_crc, stored_len,
};

fuzz_target!(|data: &[u8]| {
    // Raw bytes as a slot, a chunk header and a superblock.
    let _ = decode_object(data);
    let _ = decode_chunk_header(data);
    let _ = Superblock::decode(data, 0);
    // The same bytes with a valid checksum: the length checks must hold on their own.
    if let Some(total) = stored_len(data).filter(|&t| t <= data.len()) {
        let mut slot = data.to_vec();
        let crc = object_crc(&slot[..total]);
        slot[8..12].copy_from_slice(&crc.to_le_bytes());
        if let Some(o) = decode_object(&slot) {
            assert!(24 + o.key.len() + o.value.map_or(0, <[u8]>::len) <= slot.len());
            assert!(o.ts != 0 && !o.key.is_empty());
        }
    }
    // Round trip: the first byte splits the rest into key and value.
    if let Some((&split, rest)) = data.split_first() {
        let k = (usize::from(split) % rest.len().max(1)).max(1).min(rest.len());
        let (key, value) = rest.split_at(k);
        if !key.is_empty() && key.len() <= 1024 {
            let tomb = split % 5 == 0;
            let enc = encode_object(7, key, if tomb { None } else { Some(value) });
            let o = decode_object(&enc).expect("an encoded object decodes");
            assert_eq!(o.key, key);
            assert_eq!(o.value, if tomb { None } else { Some(value) });
        }
    }
});
