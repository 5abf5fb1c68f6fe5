//! Fuzz target: HeterMM's operation-log decoders (`format::log`: block header, entries, the
//! page walk; every entry kind, batch parts and commits included) return an error or end the page, never panic or read out of bounds, on any
//! bytes; an entry encoded from the input and committed decodes back to it, and the same
//! bytes with another block's sequence number are refused.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tierkv_hetermm::format::log::{self, EntryKind, LogHeader, Place};

fuzz_target!(|data: &[u8]| {
    let _ = LogHeader::decode(data, 0, 9, 14);
    if let Some(e) = log::decode_entry(data, 9) {
        assert!(e.len as usize <= data.len() && e.ts != 0);
    }
    let header = LogHeader { page_bits: 12, block_bits: 14, seq: 9 };
    let mut block = vec![0u8; 1 << 14];
    block[..64].copy_from_slice(&header.encode());
    let n = data.len().min(block.len() - 64);
    block[64..64 + n].copy_from_slice(&data[..n]);
    log::walk(&block, &header, |e| assert!(e.ts != 0));
    if data.len() < 2 {
        return;
    }
    let (key, value) = data.split_at(1 + usize::from(data[0]) % (data.len() - 1));
    let kind = match data[1] % 5 {
        0 | 1 => EntryKind::Put,
        2 => EntryKind::Delete,
        3 => EntryKind::BatchPart,
        _ => EntryKind::BatchCommit,
    };
    let value = if kind == EntryKind::Delete { &[][..] } else { value };
    if kind.is_batch() {
        // Batch parts and commits: no key, a value, no record.
        if value.is_empty() {
            return;
        }
        let at = Place { address: 8192, record: 0 };
        let mut e = log::encode_entry(9, at, kind, &[], value);
        e[..8].copy_from_slice(&77u64.to_le_bytes());
        let d = log::decode_entry(&e, 9).expect("a committed batch entry is read");
        assert_eq!((d.kind, d.key, d.value), (kind, &[][..], value));
        return;
    }
    let at = Place { address: 8192, record: 4096 };
    let mut e = log::encode_entry(9, at, kind, key, value);
    assert!(log::decode_entry(&e, 9).is_none(), "an uncommitted entry is not read");
    e[..8].copy_from_slice(&77u64.to_le_bytes());
    let d = log::decode_entry(&e, 9).expect("a committed entry is read");
    assert_eq!((d.ts, d.key, d.value, d.kind), (77, key, value, kind));
    assert_eq!((d.address, d.record), (at.address, at.record));
    assert!(log::decode_entry(&e, 10).is_none(), "another block's entry");
});
