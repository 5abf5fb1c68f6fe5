//! Fuzz target: MioDB's directory decoder (`dir::decode`) returns an error, never panics
//! or reads out of bounds, on any bytes; a directory built from the input round-trips.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tierkv_mio::dir::{self, Directory, LogMeta, MergeMeta, Run, TableMeta};

fuzz_target!(|data: &[u8]| {
    let _ = dir::decode(data, 4096);
    let _ = dir::stated_len(data);
    let word = |i: usize| -> u64 {
        let mut b = [0u8; 8];
        for (j, x) in b.iter_mut().enumerate() {
            *x = data.get(i * 8 + j).copied().unwrap_or(0);
        }
        u64::from_le_bytes(b)
    };
    let mut d = Directory::empty(1 + (word(0) % 8) as usize);
    d.generation = word(1);
    d.last_seq = word(2);
    for i in 0..(word(3) % 4) as usize {
        d.logs.push(LogMeta { id: word(4 + i), run: Run { off: word(5 + i), chunks: 1 }, nonce: word(6 + i) | 1 });
    }
    if word(9) % 2 == 1 {
        d.merges.push(MergeMeta { level: 0, old: word(10), new: word(11), mark: word(12) });
    }
    let levels = d.levels.len();
    for i in 0..(word(13) % 6) as usize {
        d.levels[i % levels].push(TableMeta {
            id: word(14 + i),
            head: word(15 + i),
            entries: word(16),
            max_seq: word(17),
            allocs: vec![Run { off: word(18 + i), chunks: word(19) % 100 }],
        });
    }
    // mio:flash's section: table numbers below flash_next.
    let flash_levels = (word(20) % 5) as usize;
    d.flash_next = 1 + word(21) % 1000;
    d.flash = (0..flash_levels)
        .map(|l| (0..(word(22 + l) % 4)).map(|i| word(27).wrapping_add(i) % d.flash_next).collect())
        .collect();
    let bytes = dir::encode(&d);
    assert_eq!(dir::decode(&bytes, 0).expect("an encoded directory decodes"), d);
});
