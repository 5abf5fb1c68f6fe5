//! Fuzz target: HeterMM's operation-log decoders (`format::log`: block header, entries, the
//! page walk; every entry kind, batch parts and commits included; the rules of log versions
//! 4 and 5) return an error or end the page, never panic or read out of bounds, on any
//! bytes; an entry encoded from the input decodes back to it, the same bytes with another
//! block's sequence number or another timestamp are refused, and with ts 0 it is not read.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tierkv_hetermm::format::log::{self, EntryKind, LogHeader, Place, VERSION};

fuzz_target!(|data: &[u8]| {
    let _ = LogHeader::decode(data, 0, 9, 14);
    for version in [4, VERSION] {
        if let Some(e) = log::decode_entry(data, 9, version) {
            assert!(e.len as usize <= data.len() && e.ts != 0);
        }
    }
    for version in [4, VERSION] {
        let header = LogHeader { page_bits: 12, block_bits: 14, seq: 9, version };
        let mut block = vec![0u8; 1 << 14];
        block[..64].copy_from_slice(&header.encode());
        let n = data.len().min(block.len() - 64);
        block[64..64 + n].copy_from_slice(&data[..n]);
        log::walk(&block, &header, |e| assert!(e.ts != 0));
    }
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
    let mut e = Vec::new();
    if kind.is_batch() {
        // Batch parts and commits: no key, a value, no record.
        if value.is_empty() {
            return;
        }
        let at = Place { address: 8192, record: 0 };
        log::encode_entry(&mut e, 9, 77, at, kind, &[], value);
        let d = log::decode_entry(&e, 9, VERSION).expect("a committed batch entry is read");
        assert_eq!((d.kind, d.key, d.value), (kind, &[][..], value));
        return;
    }
    let at = Place { address: 8192, record: 4096 };
    log::encode_entry(&mut e, 9, 77, at, kind, key, value);
    let d = log::decode_entry(&e, 9, VERSION).expect("a committed entry is read");
    assert_eq!((d.ts, d.key, d.value, d.kind), (77, key, value, kind));
    assert_eq!((d.address, d.record), (at.address, at.record));
    assert!(log::decode_entry(&e, 10, VERSION).is_none(), "another block's entry");
    e[..8].copy_from_slice(&78u64.to_le_bytes());
    assert!(log::decode_entry(&e, 9, VERSION).is_none(), "a ts it was not written with");
    e[..8].copy_from_slice(&0u64.to_le_bytes());
    assert!(log::decode_entry(&e, 9, VERSION).is_none(), "an uncommitted entry is not read");
});
