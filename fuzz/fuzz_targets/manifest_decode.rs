//! Fuzz target: the manifest decoder must return an error, never panic or read out of
//! bounds, on any bytes; and whatever it accepts must re-encode to an equal manifest.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tierkv_core::Manifest;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = Manifest::decode(data) {
        let again = m.encode().expect("an accepted manifest re-encodes");
        assert_eq!(Manifest::decode(&again).expect("re-encoded manifest decodes"), m);
    }
});
