//! Fuzz target: the decoder of the expected-state file that kill mode's parent writes for its
//! child (`tierkv_stress::expected_state::ExpectedState::decode`) must refuse any bytes it
//! did not write — never panic, never read out of bounds — and what it accepts must
//! re-encode to the same bytes. Each input is also tried behind a valid header, so that the
//! per-key words are decoded too, and behind a key and a field-section header (the rows of
//! the field workload, `tierkv_stress::fields::FieldState::decode`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tierkv_stress::expected_state::{ExpectedState, STATE_MAGIC};
use tierkv_stress::fields::FIELDS_MAGIC;

fn check(data: &[u8]) -> bool {
    match ExpectedState::decode(data) {
        Some(st) => {
            assert_eq!(st.encode(), data);
            true
        }
        None => false,
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    let keys = data.len() / 12;
    if keys > 0 {
        let mut framed = STATE_MAGIC.to_vec();
        framed.extend_from_slice(&(keys as u32).to_le_bytes());
        framed.extend_from_slice(&data[..keys * 12]);
        assert!(check(&framed), "a well-framed state was refused");
    }
    if let [f, r, rest @ ..] = data {
        let (fields, rows) = (u16::from(f % 64) + 1, u32::from(r % 8) + 2);
        let mut framed = STATE_MAGIC.to_vec();
        framed.extend_from_slice(&1u32.to_le_bytes());
        framed.extend_from_slice(&[0; 12]);
        framed.extend_from_slice(FIELDS_MAGIC);
        framed.extend_from_slice(&fields.to_le_bytes());
        framed.extend_from_slice(&rows.to_le_bytes());
        framed.extend_from_slice(rest);
        check(&framed);
    }
});
