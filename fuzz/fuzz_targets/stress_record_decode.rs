//! Fuzz target: the log-record decoder of the stress harness's reference engines
//! (`tierkv_stress::reference::record::decode`) reads bytes back from pmem and flash after a
//! crash; it must return an error, never panic or read out of bounds, on any bytes. What it
//! accepts must lie within the input and re-encode to exactly the bytes it was decoded from.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tierkv_stress::reference::record::{decode, encode};

fuzz_target!(|data: &[u8]| {
    if let Ok((r, n)) = decode(data) {
        assert!(n <= data.len());
        let again = encode(r.seq, r.kind, r.key, r.value).expect("an accepted record re-encodes");
        assert_eq!(&again[..], &data[..n]);
    }
});
