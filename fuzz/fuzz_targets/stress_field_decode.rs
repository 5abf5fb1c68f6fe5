//! Fuzz target: the stress harness's field-value decoder
//! (`tierkv_stress::fields::decode_field`) reads whatever an engine's `get_fields` or
//! `scan_fields` returned; it must return an error, never panic or read out of bounds, on
//! any bytes. What it accepts must re-encode to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tierkv_stress::fields::{FIELD_LEN, decode_field, field_value};

fuzz_target!(|data: &[u8]| {
    if let Ok((row, field, version)) = decode_field(data) {
        assert_eq!(data.len(), FIELD_LEN);
        assert_eq!(field_value(row, field, version).as_slice(), data);
    }
});
