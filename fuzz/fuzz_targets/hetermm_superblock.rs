//! Fuzz target: HeterMM's superblock and block-directory decoders (`format::superblock`,
//! `format::dir`) return an error (or `None`), never a panic, on any bytes; what they
//! accept re-encodes to the same value. Each input is decoded raw, and its fields are also
//! sealed into a proper superblock so the range checks behind the checksum are reached.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tierkv_hetermm::format::dir::DirEntry;
use tierkv_hetermm::format::superblock::Superblock;

fn word(data: &[u8], i: usize) -> u64 {
    let mut b = [0u8; 8];
    for (j, x) in b.iter_mut().enumerate() {
        *x = data.get(i * 8 + j).copied().unwrap_or(0);
    }
    u64::from_le_bytes(b)
}

fuzz_target!(|data: &[u8]| {
    let pool_len = word(data, 7) | 1 << 20;
    if let Ok(sb) = Superblock::decode(data, 4096, pool_len) {
        assert_eq!(Superblock::decode(&sb.encode(), 4096, pool_len).expect("re-encoded"), sb);
    }
    let fields = Superblock {
        block_bits: data.first().copied().unwrap_or(0),
        page_bits: data.get(1).copied().unwrap_or(0),
        chunk_size: word(data, 1),
        dir_off: word(data, 2),
        dir_words: word(data, 3),
        alloc_off: word(data, 4),
    };
    if let Ok(sb) = Superblock::decode(&fields.encode(), 4096, pool_len) {
        assert_eq!(sb, fields);
    }
    for i in 0..data.len() / 8 {
        if let Some(e) = DirEntry::decode(word(data, i)) {
            assert_eq!(DirEntry::decode(e.encode()), Some(e));
        }
    }
});
