//! Keys as YCSB builds them (`CoreWorkload.buildKeyName` with `insertorder=hashed`): ordinal
//! `n` becomes `"user"` followed by the decimal digits of [`fnvhash64`]`(n)`, so that the load
//! order is random in key order.
//!
//! Three shapes, chosen by `--key-size`:
//! - none (default): YCSB's default `zeropadding=1`, i.e. no padding: `"user"` + 1 to 19
//!   digits, 5 to 23 bytes (almost all 22 or 23).
//! - `N >= 23`: YCSB with `zeropadding = N - 4`: the digits left-padded with `'0'` to exactly
//!   `N` bytes, so every key has the same length and string order is numeric order.
//! - `8`: the 8-byte binary key of HeterMM-style runs: `fnvhash64(n)` as 8 bytes,
//!   **little-endian** (least significant byte first). Byte order only fixes which bytes the
//!   key holds; the keys are hashes either way, so their sort order is random as in YCSB.
//!
//! Any other size is refused: YCSB's string keys cannot be shorter than 23 bytes without
//! truncating hashes into collisions.
//!
//! Thread safety: plain `Copy` values.

use std::fmt;
use std::io::Write as _;

use crate::generator::fnvhash64;

/// The prefix of every YCSB key.
pub const KEY_PREFIX: &[u8] = b"user";
/// The most decimal digits a hash can have (`2^63` has 19).
pub const MAX_HASH_DIGITS: usize = 19;
/// The shortest fixed-length string key: the prefix and 19 digits.
pub const MIN_PADDED_KEY_SIZE: usize = KEY_PREFIX.len() + MAX_HASH_DIGITS;
/// The size of binary keys.
pub const BINARY_KEY_SIZE: usize = 8;

/// How ordinals become keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyFormat {
    /// `"user"` + the hash's digits, left-padded with zeros to `zero_padding` digits.
    Ycsb {
        /// YCSB's `zeropadding` (1 = no padding).
        zero_padding: usize,
    },
    /// `fnvhash64(n)` as 8 little-endian bytes.
    Binary8,
}

impl Default for KeyFormat {
    fn default() -> Self {
        KeyFormat::Ycsb { zero_padding: 1 }
    }
}

impl KeyFormat {
    /// The format `--key-size` asks for (`None`: YCSB's default).
    pub fn from_key_size(size: Option<usize>) -> Result<Self, String> {
        match size {
            None => Ok(KeyFormat::default()),
            Some(BINARY_KEY_SIZE) => Ok(KeyFormat::Binary8),
            Some(n) if n >= MIN_PADDED_KEY_SIZE => Ok(KeyFormat::Ycsb {
                zero_padding: n - KEY_PREFIX.len(),
            }),
            Some(n) => Err(format!(
                "--key-size {n}: use 8 (binary keys) or at least {MIN_PADDED_KEY_SIZE} \
                 (\"user\" + zero-padded digits), or leave it out for YCSB's keys"
            )),
        }
    }

    /// Writes the key of ordinal `keynum` into `out` (cleared first).
    pub fn build(&self, keynum: u64, out: &mut Vec<u8>) {
        out.clear();
        let hash = fnvhash64(keynum);
        match *self {
            KeyFormat::Binary8 => out.extend_from_slice(&hash.to_le_bytes()),
            KeyFormat::Ycsb { zero_padding } => {
                out.extend_from_slice(KEY_PREFIX);
                // Writing to a Vec cannot fail.
                let _ = write!(out, "{hash:0zero_padding$}");
            }
        }
    }

    /// The key of ordinal `keynum`.
    pub fn key(&self, keynum: u64) -> Vec<u8> {
        let mut k = Vec::with_capacity(MIN_PADDED_KEY_SIZE);
        self.build(keynum, &mut k);
        k
    }
}

impl fmt::Display for KeyFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyFormat::Binary8 => {
                f.write_str("8-byte binary (fnvhash64 of the ordinal, little-endian)")
            }
            KeyFormat::Ycsb { zero_padding: 1 } => {
                f.write_str("YCSB \"user\" + fnvhash64(ordinal) (5-23 bytes)")
            }
            KeyFormat::Ycsb { zero_padding } => write!(
                f,
                "YCSB \"user\" + fnvhash64(ordinal) zero-padded to {} bytes",
                zero_padding + KEY_PREFIX.len()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_keys_are_ycsbs_first_load_keys() {
        let f = KeyFormat::default();
        assert_eq!(f.key(0), b"user6284781860667377211");
        assert_eq!(f.key(1), b"user8517097267634966620");
    }

    #[test]
    fn padded_keys_have_exactly_the_requested_size() {
        let f = KeyFormat::from_key_size(Some(30)).unwrap();
        for n in [0, 2, 77, 1 << 40] {
            let k = f.key(n);
            assert_eq!(k.len(), 30);
            assert!(k.starts_with(b"user000"), "{}", String::from_utf8_lossy(&k));
        }
    }

    #[test]
    fn binary_keys_are_the_little_endian_hash() {
        let f = KeyFormat::from_key_size(Some(8)).unwrap();
        let k = f.key(0);
        assert_eq!(k, 6_284_781_860_667_377_211u64.to_le_bytes());
    }

    #[test]
    fn sizes_that_would_truncate_hashes_are_refused() {
        for n in [0, 1, 7, 9, 16, 22] {
            assert!(KeyFormat::from_key_size(Some(n)).is_err(), "size {n}");
        }
        assert!(KeyFormat::from_key_size(Some(23)).is_ok());
    }
}
