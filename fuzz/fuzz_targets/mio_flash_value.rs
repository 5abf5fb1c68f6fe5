//! Fuzz target: `mio:flash`'s version decoder (`flash::decode_value`, the value of every
//! entry of a flash table) returns `None`, never panics, on any bytes; a version encoded
//! from the input decodes back to itself; a file name parses back to its number.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tierkv_mio::flash::{decode_value, encode_value, parse_table_name, table_name};

fuzz_target!(|data: &[u8]| {
    let _ = decode_value(data);
    let _ = parse_table_name(&String::from_utf8_lossy(data));
    let seq = data
        .iter()
        .take(8)
        .fold(0u64, |a, b| (a << 8) | u64::from(*b));
    let value = (data.first().copied().unwrap_or(0) % 3 != 0).then(|| data.get(1..).unwrap_or_default());
    assert_eq!(decode_value(&encode_value(seq, value)), Some((seq, value)));
    assert_eq!(parse_table_name(&table_name(seq)), Some(seq));
});
