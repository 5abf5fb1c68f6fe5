//! Fuzz target: FOCUS's record, chunk and superblock decoders (`format::record`,
//! `format::chunk`, `format::superblock`) return an error or `None`, never a panic, on any
//! bytes; a record encoded from the input decodes back, and a flipped byte of its checked
//! part is detected.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tierkv_focus::format::chunk::ChunkHeader;
use tierkv_focus::format::record::{self, HEADER_LEN, RecordHeader, RecordKind};
use tierkv_focus::format::superblock::Superblock;

fuzz_target!(|data: &[u8]| {
    let _ = ChunkHeader::decode(data, 0);
    let _ = Superblock::decode(data, 0);
    if let Ok(Some(h)) = RecordHeader::decode(data, 0) {
        let _ = record::verify(data, &h, 0);
    }
    if data.len() < 4 {
        return;
    }
    let rest = &data[2..];
    let (key, body) = rest.split_at(usize::from(data[0]) % rest.len());
    let h = RecordHeader {
        kind: RecordKind::Delta,
        key_len: key.len() as u16,
        body_len: body.len() as u32,
        seq: u64::from(data[1]),
        schema: 3,
        epoch: 9,
        prev: 64,
        batch: if data[1] % 2 == 0 { 0 } else { u64::from(data[1]) },
    };
    let bytes = h.encode(key, body);
    let back = RecordHeader::decode(&bytes, 0).expect("decodes").expect("a record");
    assert_eq!(back, h);
    record::verify(&bytes, &back, 0).expect("verifies");
    let checked = HEADER_LEN + key.len() + body.len();
    let at = usize::from(data[1]) % checked;
    if h.batch == 0 && (40..48).contains(&at) {
        return; // the reserved word is not covered (the batch word of a member is)
    }
    let mut flipped = bytes.clone();
    flipped[at] ^= 0x5a;
    let ok = RecordHeader::decode(&flipped, 0)
        .ok()
        .flatten()
        .is_some_and(|h2| h2.total_len() as usize <= flipped.len() && record::verify(&flipped, &h2, 0).is_ok());
    assert!(!ok, "flip at {at} undetected");
});
