//! Fuzz target: the value decoder of `tierkv serve` (`tierkv_server::encoding`), which
//! reads whatever bytes a store holds under a key. Any bytes must decode to a string, a
//! format-1 hash or a collection's metadata record (format 2), or be refused, never panic; and whatever decodes must encode back to the same
//! bytes (so a read-modify-write never changes a value it did not mean to).

#![no_main]

use libfuzzer_sys::fuzz_target;
use tierkv_server::encoding::{
    HashEdit, META_VERSION, Stored, TAG, TYPE_HASH, TYPE_META, TYPE_STRING, VERSION, decode,
    encode_string,
};

fuzz_target!(|data: &[u8]| {
    // The first byte may put a valid header in front, so that the fuzzer explores the
    // bodies instead of spending its time finding the tag.
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut value = Vec::with_capacity(data.len() + 5);
    match mode % 4 {
        0 => {}
        1 => value.extend_from_slice(&[TAG[0], TAG[1], TAG[2], TYPE_HASH, VERSION]),
        2 => value.extend_from_slice(&[TAG[0], TAG[1], TAG[2], TYPE_STRING, VERSION]),
        _ => value.extend_from_slice(&[TAG[0], TAG[1], TAG[2], TYPE_META, META_VERSION]),
    }
    value.extend_from_slice(rest);
    match decode(&value) {
        Ok(Stored::Str(s)) => assert_eq!(&*encode_string(s), value.as_slice()),
        Ok(Stored::Hash(h)) => {
            assert!(h.iter().count() == h.len() && !h.is_empty());
            assert_eq!(HashEdit::new(Some(h)).encode(), value);
        }
        Ok(Stored::Meta(m)) => {
            assert!(m.count >= 1);
            assert_eq!(m.encode(), value);
        }
        Err(_) => {}
    }
});
