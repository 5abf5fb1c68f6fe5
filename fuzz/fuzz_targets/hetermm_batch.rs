//! Fuzz target: the payload decoders of HeterMM's batch log entries (`format::batch`: a
//! batch entry, a batch part, a batch commit) return `None` or operations lying inside the
//! input, never panic, on any bytes; a payload (and a part) encoded from operations cut out
//! of the input decodes back to them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tierkv_hetermm::format::batch::{self, BatchOp};
use tierkv_hetermm::format::log::EntryKind;

fuzz_target!(|data: &[u8]| {
    if let Some(ops) = batch::decode(data, u64::MAX) {
        let len: u64 = ops
            .iter()
            .map(|o| batch::op_len(o.key.len() as u64, o.value.len() as u64))
            .sum();
        assert_eq!(len + batch::PAYLOAD_HEADER_LEN, data.len() as u64);
        assert!(ops.iter().all(|o| o.ts != 0 && !o.key.is_empty()));
    }
    if let Some((_, ops)) = batch::decode_part(data, u64::MAX) {
        let len: u64 = ops
            .iter()
            .map(|o| batch::op_len(o.key.len() as u64, o.value.len() as u64))
            .sum();
        assert_eq!(len + batch::PAYLOAD_HEADER_LEN, data.len() as u64);
    }
    if let Some((parts, ops)) = batch::decode_commit(data) {
        assert!(parts >= 1 && ops >= parts && data.len() as u64 == batch::COMMIT_LEN);
        assert_eq!(batch::encode_commit(parts, ops)[..], data[..]);
    }
    let mut ops = Vec::new();
    let mut rest = data;
    while rest.len() >= 3 && ops.len() < 64 {
        let klen = 1 + usize::from(rest[0]) % (rest.len() - 2);
        let vlen = usize::from(rest[1]) % (rest.len() - 1 - klen).max(1);
        let kind = if rest[2] % 3 == 0 { EntryKind::Delete } else { EntryKind::Put };
        let key = &rest[2..2 + klen];
        let value = if kind == EntryKind::Put { &rest[2 + klen..2 + klen + vlen] } else { &[][..] };
        ops.push(BatchOp { ts: 1 + ops.len() as u64, record: 64, kind, key, value });
        rest = &rest[2 + klen + vlen..];
    }
    if ops.is_empty() {
        return;
    }
    let p = batch::encode(&ops);
    assert_eq!(batch::decode(&p, 64), Some(ops.clone()));
    assert!(batch::decode(&p, 63).is_none(), "a record above the covered address");
    let part = 1 + data.len() as u32;
    let p = batch::encode_part(&ops, part);
    assert_eq!(batch::decode_part(&p, 64), Some((part, ops.clone())));
    assert!(batch::decode(&p, 64).is_none(), "a part is not a batch entry");
});
