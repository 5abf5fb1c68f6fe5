//! Fuzz target: MioDB's write-ahead-log decoder (`wal::decode_record`, `wal::replay`)
//! returns `None` or stops, never panics or reads out of bounds, on any bytes (single
//! records and batch records alike, logs with a nonce and without); a record and a batch
//! record encoded from the input decode back to it, and never under another log's id or
//! nonce.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tierkv_core::{BatchOp, WriteBatch};
use tierkv_mio::node::Kind;
use tierkv_mio::wal;

fuzz_target!(|data: &[u8]| {
    let nonce = if data.first().is_some_and(|b| b % 2 == 1) { 0 } else { 0x6e6f_6e63_6521 };
    let log = wal::LogKey { id: 7, nonce };
    let other_id = wal::LogKey { id: 8, nonce };
    let other_nonce = wal::LogKey { id: 7, nonce: nonce ^ 0x100 };
    if let Some((ops, len)) = wal::decode_record(log, data) {
        assert!(len <= data.len().next_multiple_of(8));
        assert!(!ops.is_empty());
        assert!(ops.windows(2).all(|w| w[0].seq < w[1].seq && w[0].key < w[1].key));
    }
    let (ops, at) = wal::replay(data, log);
    assert!(ops.windows(2).all(|w| w[0].seq < w[1].seq));
    assert!(at <= data.len().next_multiple_of(8));
    if data.len() < 2 {
        return;
    }
    let (key, value) = data.split_at(1 + usize::from(data[0]) % (data.len() - 1));
    let kind = if data[1] % 2 == 0 { Kind::Put } else { Kind::Delete };
    let value = if kind == Kind::Delete { &[][..] } else { value };
    let e = wal::encode_record(log, 42, kind, key, value);
    let (d, _) = wal::decode_record(log, &e).expect("an encoded record decodes");
    let d = &d[0];
    assert_eq!((d.seq, d.kind, d.key.as_slice(), d.value.as_slice()), (42, kind, key, value));
    assert!(wal::decode_record(other_id, &e).is_none(), "another log's record");
    assert!(wal::decode_record(other_nonce, &e).is_none(), "another nonce's record");
    // A batch of the input's bytes: 3-byte keys, values of the next byte's length.
    let mut batch = WriteBatch::new();
    let mut rest = data;
    while rest.len() >= 4 {
        let (k, r) = rest.split_at(3);
        let n = usize::from(r[0] % 8).min(r.len() - 1);
        if r[0] % 5 == 0 {
            batch.delete(k);
        } else {
            batch.put(k, &r[1..1 + n]);
        }
        rest = &r[1 + n..];
    }
    if batch.is_empty() {
        return;
    }
    let e = wal::encode_batch(log, 100, &batch);
    assert_eq!(e.len(), wal::batch_record_len(&batch));
    let (ops, len) = wal::decode_record(log, &e).expect("an encoded batch decodes");
    assert_eq!(len, e.len());
    assert_eq!(ops.len(), batch.len());
    for ((r, (k, op)), seq) in ops.iter().zip(batch.iter()).zip(100..) {
        let v = match op {
            BatchOp::Put(v) => v.as_slice(),
            BatchOp::Delete => &[][..],
        };
        assert_eq!((r.seq, r.key.as_slice(), r.value.as_slice()), (seq, k, v));
    }
    assert!(wal::decode_record(other_id, &e).is_none(), "another log's batch");
    assert!(wal::decode_record(other_nonce, &e).is_none(), "another nonce's batch");
});
