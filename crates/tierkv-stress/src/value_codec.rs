//! The stress values: every value names its key, its version and carries a checksum, so the
//! verifier recognises a value that belongs to another key, an older version than the one
//! acknowledged, and a torn or corrupted value (issue 5, item 1).
//!
//! Layout (all integers little-endian):
//!
//! ```text
//! 0   4  key_hash   CRC-32C of the key (unmasked)
//! 4   4  version    the per-key write number (>= 1) this value was written with
//! 8   4  crc        masked CRC-32C of bytes 0..8, then the value length as u32, then
//!                   bytes 12..len (the filler)
//! 12  .. filler     pseudo-random bytes, a pure function of (key_hash, version)
//! ```
//!
//! A value is a pure function of (key, version, sizes): the length comes from
//! [`ValueSizes::len_for`] and the filler from a SplitMix64 stream seeded by the key hash and
//! the version. The verifier therefore compares the bytes it reads with the exact bytes
//! that were written, and uses [`decode`] only to describe what it found instead.
//!
//! Lengths are skewed (half the values are at most 64 bytes, a tenth are 4 KiB or more), so
//! an engine's slots, chunks and slabs of several sizes are all exercised.
//!
//! [`decode`] reads bytes an engine returned, so it has a fuzz target
//! (`stress_value_decode`): an error, never a panic or an out-of-bounds read.
//!
//! Thread safety: pure functions.

use tierkv_core::format::checksum::{crc32c, crc32c_append, mask};

/// Offset of the key hash.
pub const KEY_HASH_OFF: usize = 0;
/// Offset of the version.
pub const VERSION_OFF: usize = KEY_HASH_OFF + 4;
/// Offset of the checksum.
pub const CRC_OFF: usize = VERSION_OFF + 4;
/// Length of the header; the filler starts here.
pub const HEADER_LEN: usize = CRC_OFF + 4;
/// The shortest value the codec writes (a header with no filler).
pub const MIN_VALUE_LEN: usize = HEADER_LEN;

/// What a value says about itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ValueHeader {
    /// The hash of the key it was written under.
    pub key_hash: u32,
    /// The version it was written with.
    pub version: u32,
    /// Its length in bytes.
    pub len: usize,
}

/// Why bytes are not a well-formed stress value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Shorter than a header.
    TooShort {
        /// The length found.
        len: usize,
    },
    /// Longer than any value the codec writes (its length does not fit the checksum).
    TooLong {
        /// The length found.
        len: usize,
    },
    /// The checksum does not match: a torn or corrupted value.
    Checksum {
        /// The checksum stored in the value.
        stored: u32,
        /// The checksum of the bytes as read.
        computed: u32,
        /// The header as read (may itself be damaged).
        header: ValueHeader,
    },
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::TooShort { len } => {
                write!(
                    f,
                    "{len} bytes, shorter than a {HEADER_LEN}-byte value header"
                )
            }
            DecodeError::TooLong { len } => write!(f, "{len} bytes, longer than any value"),
            DecodeError::Checksum {
                stored,
                computed,
                header,
            } => write!(
                f,
                "torn or corrupt: {} bytes claiming v#{} of key hash {:#010x}, checksum \
                 {computed:#010x} but {stored:#010x} stored",
                header.len, header.version, header.key_hash
            ),
        }
    }
}

/// The hash a value carries of its key.
pub fn key_hash(key: &[u8]) -> u32 {
    crc32c(key)
}

fn read_u32(bytes: &[u8], off: usize) -> Option<u32> {
    let b: [u8; 4] = bytes.get(off..off + 4)?.try_into().ok()?;
    Some(u32::from_le_bytes(b))
}

/// SplitMix64: a tiny, good-enough mixing function for deterministic filler and sizes.
pub(crate) fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn stream_seed(key_hash: u32, version: u32) -> u64 {
    (u64::from(key_hash) << 32) | u64::from(version)
}

fn fill(filler: &mut [u8], key_hash: u32, version: u32) {
    let mut state = stream_seed(key_hash, version) ^ 0x5354_5245_5353_5631;
    for chunk in filler.chunks_mut(8) {
        state = splitmix64(state);
        let bytes = state.to_le_bytes();
        chunk.copy_from_slice(bytes.get(..chunk.len()).unwrap_or(&bytes));
    }
}

/// The checksum of a value, over everything but the checksum field, with the length
/// folded in (so a truncated value does not verify). `None` when too short or too long.
fn checksum(value: &[u8]) -> Option<u32> {
    let len = u32::try_from(value.len()).ok()?;
    let head = value.get(..CRC_OFF)?;
    let filler = value.get(HEADER_LEN..)?;
    let crc = crc32c_append(crc32c(head), &len.to_le_bytes());
    Some(mask(crc32c_append(crc, filler)))
}

/// The value written as `version` of `key`, `len` bytes long (at least [`MIN_VALUE_LEN`]).
pub fn encode(key: &[u8], version: u32, len: usize) -> Vec<u8> {
    let len = len.clamp(MIN_VALUE_LEN, u32::MAX as usize);
    let hash = key_hash(key);
    let mut v = vec![0u8; len];
    let (head, filler) = v.split_at_mut(HEADER_LEN);
    head[KEY_HASH_OFF..VERSION_OFF].copy_from_slice(&hash.to_le_bytes());
    head[VERSION_OFF..CRC_OFF].copy_from_slice(&version.to_le_bytes());
    fill(filler, hash, version);
    let crc = checksum(&v).unwrap_or(0);
    v[CRC_OFF..HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
    v
}

/// Reads the header of a value and checks its checksum. Never panics, whatever the bytes.
pub fn decode(bytes: &[u8]) -> Result<ValueHeader, DecodeError> {
    let len = bytes.len();
    let (Some(key_hash), Some(version), Some(stored)) = (
        read_u32(bytes, KEY_HASH_OFF),
        read_u32(bytes, VERSION_OFF),
        read_u32(bytes, CRC_OFF),
    ) else {
        return Err(DecodeError::TooShort { len });
    };
    let header = ValueHeader {
        key_hash,
        version,
        len,
    };
    let computed = checksum(bytes).ok_or(DecodeError::TooLong { len })?;
    if computed != stored {
        return Err(DecodeError::Checksum {
            stored,
            computed,
            header,
        });
    }
    Ok(header)
}

/// The distribution of value lengths: skewed towards small values, up to `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ValueSizes {
    /// The longest value written (at least [`MIN_VALUE_LEN`]).
    pub max: usize,
}

impl Default for ValueSizes {
    fn default() -> Self {
        ValueSizes { max: 16 << 10 }
    }
}

impl ValueSizes {
    /// Sizes up to `max` bytes (raised to [`MIN_VALUE_LEN`] if smaller).
    pub fn up_to(max: usize) -> Self {
        ValueSizes {
            max: max.max(MIN_VALUE_LEN),
        }
    }

    /// The length of `version` of the key with hash `key_hash`: 50% in [12, 64], 25% in
    /// (64, 512], 15% in (512, 4096], 10% in (4096, max], each range cut at `max`.
    pub fn len_for(&self, key_hash: u32, version: u32) -> usize {
        let h = splitmix64(stream_seed(key_hash, version) ^ 0x4c45_4e47_5448_5f5f);
        let (lo, hi) = match h % 100 {
            0..50 => (MIN_VALUE_LEN, 64),
            50..75 => (65, 512),
            75..90 => (513, 4096),
            _ => (4097, self.max),
        };
        let hi = hi.min(self.max);
        let lo = lo.min(hi);
        let span = (hi - lo + 1) as u64;
        lo + ((h >> 32) % span) as usize
    }

    /// The mean length of the distribution (for sizing a key space to a capacity).
    pub fn mean_len(&self) -> f64 {
        [
            (0.50, MIN_VALUE_LEN, 64),
            (0.25, 65, 512),
            (0.15, 513, 4096),
            (0.10, 4097, self.max),
        ]
        .into_iter()
        .map(|(p, lo, hi)| {
            let hi = hi.min(self.max);
            p * (lo.min(hi) + hi) as f64 / 2.0
        })
        .sum()
    }

    /// The exact value written as `version` of `key`.
    pub fn value(&self, key: &[u8], version: u32) -> Vec<u8> {
        encode(key, version, self.len_for(key_hash(key), version))
    }

    /// True when `bytes` is version `version` of `key`: [`ValueSizes::value`], or that value
    /// capped shorter ([`ValueSizes::value_capped`], a batch's write). The checksum covers
    /// the length, so a truncated or torn value never matches.
    pub fn matches(&self, key: &[u8], version: u32, bytes: &[u8]) -> bool {
        let full = self.len_for(key_hash(key), version);
        match bytes.len() {
            n if n == full => bytes == self.value(key, version).as_slice(),
            n if (MIN_VALUE_LEN..full).contains(&n) => bytes == encode(key, version, n).as_slice(),
            _ => false,
        }
    }

    /// [`ValueSizes::value`] at most `cap` bytes long (never below the shortest value the
    /// codec writes): the values of a write batch, whose total the engines bound.
    pub fn value_capped(&self, key: &[u8], version: u32, cap: usize) -> Vec<u8> {
        let len = self
            .len_for(key_hash(key), version)
            .min(cap.max(MIN_VALUE_LEN));
        encode(key, version, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn decode_names_key_hash_version_and_length() {
        let v = encode(b"k00000042", 7, 100);
        let h = decode(&v).unwrap();
        assert_eq!(h.key_hash, key_hash(b"k00000042"));
        assert_eq!(h.version, 7);
        assert_eq!(h.len, 100);
    }

    #[test]
    fn every_single_bit_flip_is_detected() {
        let v = encode(b"key", 3, 40);
        for bit in 0..v.len() * 8 {
            let mut bad = v.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(
                matches!(decode(&bad), Err(DecodeError::Checksum { .. })),
                "flip of bit {bit} not detected"
            );
        }
    }

    #[test]
    fn truncated_and_extended_values_are_detected() {
        let v = encode(b"key", 3, 300);
        for cut in [HEADER_LEN, 13, 64, 299] {
            assert!(decode(&v[..cut]).is_err(), "cut at {cut} accepted");
        }
        let mut longer = v.clone();
        longer.push(0);
        assert!(decode(&longer).is_err());
        assert_eq!(
            decode(&v[..HEADER_LEN - 1]),
            Err(DecodeError::TooShort {
                len: HEADER_LEN - 1
            })
        );
    }

    #[test]
    fn a_value_torn_between_two_versions_is_detected() {
        let sizes = ValueSizes::default();
        let (a, b) = (encode(b"k", 1, 4096), encode(b"k", 2, 4096));
        let mut torn = b.clone();
        torn[2048..].copy_from_slice(&a[2048..]);
        assert!(matches!(decode(&torn), Err(DecodeError::Checksum { .. })));
        assert_ne!(sizes.value(b"k", 1), sizes.value(b"k", 2));
    }

    #[test]
    fn capped_values_decode_and_stay_under_the_cap() {
        let sizes = ValueSizes::default();
        for v in 1..2_000 {
            let value = sizes.value_capped(b"k00000007", v, 300);
            assert!(value.len() <= 300, "{}", value.len());
            assert_eq!(decode(&value).map(|d| d.version).ok(), Some(v));
        }
        assert_eq!(sizes.value_capped(b"k1", 3, 0).len(), MIN_VALUE_LEN);
        for v in 1..200 {
            let full = sizes.value(b"k9", v);
            let capped = sizes.value_capped(b"k9", v, 100);
            assert!(sizes.matches(b"k9", v, &full) && sizes.matches(b"k9", v, &capped));
            assert!(!sizes.matches(b"k9", v + 1, &capped), "another version");
            if full.len() > MIN_VALUE_LEN + 1 {
                let cut = &full[..full.len() - 1];
                assert!(!sizes.matches(b"k9", v, cut), "a truncated value");
            }
        }
    }

    #[test]
    fn sizes_are_skewed_and_bounded() {
        let sizes = ValueSizes::default();
        let lens: Vec<usize> = (1..20_000).map(|v| sizes.len_for(99, v)).collect();
        assert!(lens.iter().all(|l| (MIN_VALUE_LEN..=16 << 10).contains(l)));
        let small = lens.iter().filter(|l| **l <= 64).count();
        let large = lens.iter().filter(|l| **l > 4096).count();
        assert!((8_000..12_000).contains(&small), "{small} small values");
        assert!((1_000..3_000).contains(&large), "{large} large values");
        assert_eq!(lens.iter().min(), Some(&MIN_VALUE_LEN));
        let tiny = ValueSizes::up_to(1);
        assert!((1..100).all(|v| tiny.len_for(1, v) == MIN_VALUE_LEN));
    }

    proptest! {
        #[test]
        fn encode_decode_round_trips(
            key in proptest::collection::vec(any::<u8>(), 1..64),
            version in 1u32..,
            len in MIN_VALUE_LEN..20_000usize,
        ) {
            let v = encode(&key, version, len);
            prop_assert_eq!(v.len(), len);
            let h = decode(&v).unwrap();
            prop_assert_eq!(h, ValueHeader { key_hash: key_hash(&key), version, len });
            prop_assert_eq!(encode(&key, version, len), v);
        }

        #[test]
        fn decode_classifies_garbage_without_panicking(
            bytes in proptest::collection::vec(any::<u8>(), 0..256),
        ) {
            match decode(&bytes) {
                Ok(h) => prop_assert_eq!(h.len, bytes.len()),
                Err(DecodeError::TooShort { len }) => {
                    prop_assert!(len < HEADER_LEN);
                    prop_assert_eq!(len, bytes.len());
                }
                Err(DecodeError::TooLong { .. }) => prop_assert!(false, "short input called too long"),
                Err(DecodeError::Checksum { header, .. }) => {
                    prop_assert!(bytes.len() >= HEADER_LEN);
                    prop_assert_eq!(header.len, bytes.len());
                }
            }
        }
    }
}
