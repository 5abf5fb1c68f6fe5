//! Fuzz target: the manifest decoder must return an error, never panic or read out of
//! bounds, on any bytes; and whatever it accepts must re-encode to an equal manifest.
//!
//! Random bytes almost never pass the header CRC, so each input is decoded twice: as is
//! (header checks), and as the body of a frame with a valid header and CRCs (body parser).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tierkv_core::Manifest;
use tierkv_core::format::checksum::masked_crc32c;
use tierkv_core::format::manifest::{FORMAT_VERSION, MAGIC};

fn framed(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(24 + body.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&masked_crc32c(body).to_le_bytes());
    let header_crc = masked_crc32c(&out);
    out.extend_from_slice(&header_crc.to_le_bytes());
    out.extend_from_slice(body);
    out
}

fn check(bytes: &[u8]) {
    if let Ok(m) = Manifest::decode(bytes) {
        let again = m.encode().expect("an accepted manifest re-encodes");
        assert_eq!(Manifest::decode(&again).expect("re-encoded manifest decodes"), m);
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    check(&framed(data));
});
