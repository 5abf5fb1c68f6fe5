//! Fuzz target: PRISM's key-index node decoder (`tierkv_prism::key_index::decode_node`)
//! must return an error, never panic or read out of bounds, on any bytes; and whatever it
//! accepts must re-encode to a node that decodes to the same thing.
//!
//! Random bytes almost never pass the node magic or the entry checksums, so each input is
//! decoded three times: as is; behind a valid header line (header checks passed, entries
//! still random); and with every entry that is structurally valid re-encoded with its
//! checksum (the anchor and entry decoders past their checksums).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tierkv_prism::key_index::decode_node;
use tierkv_prism::key_index::format::{
    ENTRY_LEN, Entry, LINE, MAX_FANOUT, MIN_FANOUT, NODE_ANCHOR, NODE_HEADER_LEN, NodeHeader,
    entry_offset, full_bitmap, live_slots, node_size,
};

/// `data` laid out as a node whose header line is valid: fanout from the first byte,
/// bitmap and next from the data (masked to be in range), fingerprints from the data.
fn with_valid_header(data: &[u8]) -> Vec<u8> {
    let fanout = MIN_FANOUT + usize::from(data.first().copied().unwrap_or(0)) % (MAX_FANOUT - MIN_FANOUT + 1);
    let mut bytes = data.to_vec();
    bytes.resize(node_size(fanout), 0);
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    let mut header = NodeHeader::new(fanout, word(8) & !(LINE as u64 - 1));
    header.bitmap = word(0) & full_bitmap(fanout);
    header.fps.copy_from_slice(&bytes[LINE..LINE + MAX_FANOUT]);
    bytes[..NODE_HEADER_LEN].copy_from_slice(&header.encode());
    bytes
}

/// `bytes` (with a valid header) with the anchor and every live entry that decodes
/// structurally re-encoded, so its checksum is right.
fn with_valid_checksums(mut bytes: Vec<u8>) -> Vec<u8> {
    let Ok(header) = NodeHeader::decode(&bytes, 0) else { return bytes };
    let offsets = std::iter::once(NODE_ANCHOR).chain(live_slots(header.bitmap).map(entry_offset));
    for at in offsets.collect::<Vec<_>>() {
        if let Ok(entry) = Entry::decode_unchecked(&bytes[at..at + ENTRY_LEN], 0) {
            bytes[at..at + ENTRY_LEN].copy_from_slice(&entry.encode());
        }
    }
    bytes
}

fn check(bytes: &[u8]) {
    let Ok(node) = decode_node(bytes, 0) else { return };
    let mut again = vec![0u8; node_size(node.header.fanout)];
    again[..NODE_HEADER_LEN].copy_from_slice(&node.header.encode());
    again[NODE_ANCHOR..NODE_ANCHOR + ENTRY_LEN].copy_from_slice(&node.anchor.encode());
    for (slot, entry) in &node.entries {
        let at = entry_offset(*slot);
        again[at..at + ENTRY_LEN].copy_from_slice(&entry.encode());
    }
    assert_eq!(decode_node(&again, 0).expect("a re-encoded node decodes"), node);
}

fuzz_target!(|data: &[u8]| {
    check(data);
    let framed = with_valid_header(data);
    check(&framed);
    check(&with_valid_checksums(framed));
});
