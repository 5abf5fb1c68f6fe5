//! Fuzz target: PrismDB's batch intent record decoder (`engines/prismdb/src/batch/record.rs`,
//! read back from pmem at recovery): any bytes return `None` or the slots, never panic or
//! read out of bounds; a decoded record fits the bytes; encoded records decode back to
//! their slots, and a zeroed magic word (a committed batch) never decodes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tierkv_prismdb::batch::record::{decode_record, encode_record, record_len};

fuzz_target!(|data: &[u8]| {
    if let Some(slots) = decode_record(data) {
        assert!(!slots.is_empty() && record_len(slots.len()) <= data.len());
    }
    // Round trip: the bytes as slot offsets.
    let slots: Vec<u64> = data
        .chunks_exact(8)
        .take(10_000)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    if !slots.is_empty() {
        let mut enc = encode_record(&slots);
        assert_eq!(decode_record(&enc).as_deref(), Some(&slots[..]));
        enc[..8].fill(0);
        assert_eq!(decode_record(&enc), None);
    }
});
