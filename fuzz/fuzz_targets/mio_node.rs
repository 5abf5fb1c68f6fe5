//! Fuzz target: MioDB's skiplist-node decoders (`node::decode_node`, `node::decode_header`)
//! and the flush's link rebase (`table::rebase`) return an error, never panic or read out
//! of bounds, on any bytes read back from pmem.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tierkv_mio::node;
use tierkv_mio::table;

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = node::decode_node(data) {
        assert!(h.size() <= data.len());
        assert!((1..=node::MAX_HEIGHT).contains(&h.height));
    }
    let w = |i: usize| -> u64 {
        let mut b = [0u8; 8];
        for (j, x) in b.iter_mut().enumerate() {
            *x = data.get(i * 8 + j).copied().unwrap_or(0);
        }
        u64::from_le_bytes(b)
    };
    let _ = node::decode_header(w(0), w(1), 0);
    let mut image = data.to_vec();
    let len = image.len();
    if let Ok(n) = table::rebase(&mut image, 1 << 20, |k| assert!(k.len() <= len)) {
        assert!(n as usize <= len);
    }
});
