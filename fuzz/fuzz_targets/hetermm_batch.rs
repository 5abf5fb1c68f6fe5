//! Fuzz target: the payload decoder of HeterMM's batch log entries (`format::batch`)
//! returns `None` or operations lying inside the input, never panics, on any bytes; a
//! payload encoded from operations cut out of the input decodes back to them.
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
});
