//! Fuzz target: the log-record decoder of the stress harness's reference engines
//! (`tierkv_stress::reference::record::decode`) reads bytes back from pmem and flash after a
//! crash; it must return an error, never panic or read out of bounds, on any bytes. What it
//! accepts must lie within the input and re-encode to exactly the bytes it was decoded from.
//!
//! Random bytes almost never carry a valid checksum, so each input is also decoded with its
//! checksum field fixed up, to reach the checks that come after the checksum.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tierkv_core::format::checksum::masked_crc32c;
use tierkv_stress::reference::record::{
    CRC_OFF, HEADER_LEN, KEY_LEN_OFF, KIND_OFF, RESERVED2_OFF, VALUE_LEN_OFF, decode, encode,
};

fn check(data: &[u8]) {
    if let Ok((r, n)) = decode(data) {
        assert!(n <= data.len());
        let again = encode(r.seq, r.kind, r.key, r.value).expect("an accepted record re-encodes");
        assert_eq!(&again[..], &data[..n]);
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    if data.len() < HEADER_LEN {
        return;
    }
    let mut fixed = data.to_vec();
    let key_len = u16::from_le_bytes([fixed[KEY_LEN_OFF], fixed[KIND_OFF - 1]]) as usize;
    let value_len = u32::from_le_bytes(
        fixed[VALUE_LEN_OFF..RESERVED2_OFF]
            .try_into()
            .expect("4 bytes"),
    ) as usize;
    let end = HEADER_LEN
        .saturating_add(key_len)
        .saturating_add(value_len)
        .min(fixed.len());
    let crc = masked_crc32c(&fixed[KEY_LEN_OFF..end]);
    fixed[CRC_OFF..KEY_LEN_OFF].copy_from_slice(&crc.to_le_bytes());
    check(&fixed);
});
