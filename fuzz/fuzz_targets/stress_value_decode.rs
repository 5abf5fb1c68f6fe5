//! Fuzz target: the stress harness's value decoder (`tierkv_stress::value_codec::decode`)
//! reads whatever an engine returned; it must return an error, never panic or read out of
//! bounds, on any bytes. What it accepts must describe the input (its length) and,
//! re-encoded under a key with the same hash, give the same header.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tierkv_stress::value_codec::{DecodeError, HEADER_LEN, decode};

fuzz_target!(|data: &[u8]| {
    match decode(data) {
        Ok(h) => assert_eq!(h.len, data.len()),
        Err(DecodeError::TooShort { len }) => assert!(len < HEADER_LEN && len == data.len()),
        Err(DecodeError::TooLong { len }) => assert!(len > u32::MAX as usize),
        Err(DecodeError::Checksum { header, .. }) => assert_eq!(header.len, data.len()),
    }
});
