//! Fuzz target: the database-map decoder of `tierkv serve` (`tierkv_server::dbmap`), which
//! reads the SWAPDB map back from the store when the server starts. Any bytes must decode
//! or be refused, never panic; a decoded map must be a permutation of the 16 databases and
//! encode back to the same bytes.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tierkv_server::dbmap::{decode, encode, swapped};

fuzz_target!(|data: &[u8]| {
    if let Ok(map) = decode(data) {
        assert_eq!(encode(&map), data);
        let mut seen = [false; 16];
        for &p in &map {
            assert!(!std::mem::replace(&mut seen[usize::from(p)], true));
        }
        assert_eq!(decode(&encode(&swapped(&map, 0, 15))).ok(), Some(swapped(&map, 0, 15)));
    }
});
