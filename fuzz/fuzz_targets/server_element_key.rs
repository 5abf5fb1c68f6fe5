//! Fuzz target: the element-key parser of `tierkv serve` (`tierkv_server::keyspace`),
//! which reads the keys the reclaiming sweep finds in the store's element space. Any bytes
//! must parse or be refused, never panic; a parsed key must start with the prefix its
//! parts name (so the sweep jumps over exactly one collection's generation).

#![no_main]

use libfuzzer_sys::fuzz_target;
use tierkv_server::keyspace::{
    INTERNAL, element_prefix, elements_start, lock_key, parse_element, user_key_of,
};

fuzz_target!(|data: &[u8]| {
    // Half the inputs start in the element space, so the fuzzer explores the layout.
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut key = if mode % 2 == 0 {
        elements_start()
    } else {
        Vec::new()
    };
    key.extend_from_slice(rest);
    if let Some(e) = parse_element(&key) {
        let prefix = element_prefix(e.db, e.key, e.generation);
        assert_eq!(prefix.len(), e.prefix_len);
        assert!(key.starts_with(&prefix));
    }
    let _ = lock_key(&key);
    for db in [0, 1, 15] {
        if let Some(k) = user_key_of(db, &key) {
            assert!(db != 0 || !k.starts_with(&INTERNAL));
        }
    }
});
