//! Fuzz target: MioDB's write-ahead-log decoder (`wal::decode_record`, `wal::replay`)
//! returns `None` or stops, never panics or reads out of bounds, on any bytes; a record
//! encoded from the input decodes back to it, and never under another log's id.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tierkv_mio::node::Kind;
use tierkv_mio::wal;

fuzz_target!(|data: &[u8]| {
    if let Some(r) = wal::decode_record(7, data) {
        assert!(r.len <= data.len().next_multiple_of(8));
    }
    let mut at = 0;
    for r in wal::replay(data, 7) {
        at += r.len;
    }
    assert!(at <= data.len().next_multiple_of(8));
    if data.len() < 2 {
        return;
    }
    let (key, value) = data.split_at(1 + usize::from(data[0]) % (data.len() - 1));
    let kind = if data[1] % 2 == 0 { Kind::Put } else { Kind::Delete };
    let value = if kind == Kind::Delete { &[][..] } else { value };
    let e = wal::encode_record(7, 42, kind, key, value);
    let d = wal::decode_record(7, &e).expect("an encoded record decodes");
    assert_eq!((d.seq, d.kind, d.key.as_slice(), d.value.as_slice()), (42, kind, key, value));
    assert!(wal::decode_record(8, &e).is_none(), "another log's record");
});
