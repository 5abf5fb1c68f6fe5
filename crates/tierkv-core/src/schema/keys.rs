//! How the adapters lay rows out in a plain key space (module doc of [`crate::schema`]).
//!
//! ```text
//! catalog              0xFF 'C'
//! consolidated row     0xFF 'R' schema_id:u32le  user_key
//! scattered field      0xFF 'F' schema_id:u32le  escape(user_key) 0x00 0x01  field_id:u16le
//!   escape: every 0x00 byte of the key becomes 0x00 0xFF (order-preserving, prefix-free)
//! ```
//! Keys a user stores through [`crate::KvStore`] beside the adapter must not start with
//! 0xFF. Thread safety: pure functions.

use crate::api::schema::{FieldId, SchemaId};

/// The reserved first byte of every key the adapters write.
pub const RESERVED: u8 = 0xFF;
/// The catalog's key.
pub const CATALOG_KEY: &[u8] = &[RESERVED, b'C'];
/// Bytes before the user key in a row key.
pub const PREFIX_LEN: usize = 6;

/// The prefix of the rows of `schema` (`tag` is `b'R'` or `b'F'`).
pub fn prefix(tag: u8, schema: SchemaId) -> [u8; PREFIX_LEN] {
    let id = schema.to_le_bytes();
    [RESERVED, tag, id[0], id[1], id[2], id[3]]
}

/// The consolidated key of a row.
pub fn row_key(schema: SchemaId, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(PREFIX_LEN + key.len());
    k.extend_from_slice(&prefix(b'R', schema));
    k.extend_from_slice(key);
    k
}

/// `prefix(b'F', schema) escape(key) 0x00 0x01` (the start of a row's field keys).
pub fn scattered_row(schema: SchemaId, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(PREFIX_LEN + key.len() + 4);
    k.extend_from_slice(&prefix(b'F', schema));
    for b in key {
        k.push(*b);
        if *b == 0 {
            k.push(0xFF);
        }
    }
    k.extend_from_slice(&[0, 1]);
    k
}

/// The scattered key of one field.
pub fn field_key(row: &[u8], field: FieldId) -> Vec<u8> {
    let mut k = row.to_vec();
    k.extend_from_slice(&field.to_le_bytes());
    k
}

/// Splits the part of a scattered key after the prefix into the user key and the field
/// id; `None` for a key the adapter did not write.
pub fn split_field_key(rest: &[u8]) -> Option<(Vec<u8>, FieldId)> {
    let mut key = Vec::with_capacity(rest.len());
    let mut i = 0;
    while i < rest.len() {
        let b = *rest.get(i)?;
        if b != 0 {
            key.push(b);
            i += 1;
            continue;
        }
        match *rest.get(i + 1)? {
            0xFF => {
                key.push(0);
                i += 2;
            }
            1 => {
                let id = rest.get(i + 2..)?;
                let id: [u8; 2] = id.try_into().ok()?;
                return Some((key, FieldId::from_le_bytes(id)));
            }
            _ => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scattered_keys_order_like_user_keys_and_split_back() {
        let keys: [&[u8]; 5] = [b"", b"\x00", b"\x00\x01", b"a", b"a\x00b"];
        let enc: Vec<_> = keys
            .iter()
            .map(|k| field_key(&scattered_row(3, k), 258))
            .collect();
        assert!(enc.windows(2).all(|w| w[0] < w[1]));
        for (k, e) in keys.iter().zip(&enc) {
            assert_eq!(split_field_key(&e[PREFIX_LEN..]), Some((k.to_vec(), 258)));
        }
        assert_eq!(split_field_key(b"a\x00\x07xx"), None);
        assert_eq!(split_field_key(b"a"), None);
    }
}
