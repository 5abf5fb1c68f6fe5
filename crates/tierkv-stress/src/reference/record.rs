//! The log record of the reference engines (both the pmem and the flash log).
//!
//! Layout (all integers little-endian; records are padded with zeros to a multiple of 8
//! bytes so that every record header is 8-byte aligned):
//!
//! ```text
//! 0   4  crc        masked CRC-32C of bytes 4..HEADER_LEN + key_len + value_len
//! 4   2  key_len    u16, >= 1
//! 6   1  kind       1 = put, 2 = delete (a delete has value_len 0)
//! 7   1  reserved   0
//! 8   4  value_len  u32
//! 12  4  reserved   0
//! 16  8  seq        u64, consecutive within one log (the first is the log's first_seq)
//! 24  .. key, then value, then zero padding to a multiple of 8
//! ```
//!
//! A reader never trusts a length before checking it against the bytes it has, and checks
//! the padding and the checksum before returning anything: a torn or garbage record is an
//! error, never a panic or an out-of-bounds read (fuzz target `stress_record_decode`).
//! Whatever it accepts re-encodes to the same bytes.
//!
//! Thread safety: pure functions.

use tierkv_core::format::checksum::masked_crc32c;

/// Offset of the checksum.
pub const CRC_OFF: usize = 0;
/// Offset of the key length.
pub const KEY_LEN_OFF: usize = CRC_OFF + 4;
/// Offset of the kind.
pub const KIND_OFF: usize = KEY_LEN_OFF + 2;
/// Offset of the first reserved byte.
pub const RESERVED1_OFF: usize = KIND_OFF + 1;
/// Offset of the value length.
pub const VALUE_LEN_OFF: usize = RESERVED1_OFF + 1;
/// Offset of the second reserved field.
pub const RESERVED2_OFF: usize = VALUE_LEN_OFF + 4;
/// Offset of the sequence number.
pub const SEQ_OFF: usize = RESERVED2_OFF + 4;
/// Length of the header.
pub const HEADER_LEN: usize = SEQ_OFF + 8;
/// Records are padded to a multiple of this.
pub const RECORD_ALIGN: usize = 8;

/// What a record does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Sets the key to the value.
    Put,
    /// Removes the key.
    Delete,
}

impl Kind {
    fn byte(self) -> u8 {
        match self {
            Kind::Put => 1,
            Kind::Delete => 2,
        }
    }
    fn from_byte(b: u8) -> Option<Kind> {
        match b {
            1 => Some(Kind::Put),
            2 => Some(Kind::Delete),
            _ => None,
        }
    }
}

/// A decoded record, borrowing its key and value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// Its sequence number.
    pub seq: u64,
    /// Put or delete.
    pub kind: Kind,
    /// The key.
    pub key: &'a [u8],
    /// The value (empty for a delete).
    pub value: &'a [u8],
}

/// Why bytes are not a record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordError {
    /// Fewer bytes than the header or than the lengths it claims.
    Truncated {
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// A field holds a value no writer produces.
    Malformed(&'static str),
    /// The checksum does not match (a torn write or garbage).
    Checksum {
        /// Stored.
        stored: u32,
        /// Computed.
        computed: u32,
    },
}

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordError::Truncated { need, have } => {
                write!(f, "truncated record: needs {need} bytes, {have} available")
            }
            RecordError::Malformed(what) => write!(f, "malformed record: {what}"),
            RecordError::Checksum { stored, computed } => write!(
                f,
                "record checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
            ),
        }
    }
}

/// The padded length of a record with these key and value lengths.
pub fn encoded_len(key_len: usize, value_len: usize) -> usize {
    (HEADER_LEN + key_len + value_len).next_multiple_of(RECORD_ALIGN)
}

/// Encodes a record; `None` if the key is empty or too long, or the value too long.
pub fn encode(seq: u64, kind: Kind, key: &[u8], value: &[u8]) -> Option<Vec<u8>> {
    let key_len = u16::try_from(key.len()).ok().filter(|l| *l > 0)?;
    let value_len = u32::try_from(value.len()).ok()?;
    if kind == Kind::Delete && value_len != 0 {
        return None;
    }
    let mut out = vec![0u8; encoded_len(key.len(), value.len())];
    out[KEY_LEN_OFF..KIND_OFF].copy_from_slice(&key_len.to_le_bytes());
    out[KIND_OFF] = kind.byte();
    out[VALUE_LEN_OFF..RESERVED2_OFF].copy_from_slice(&value_len.to_le_bytes());
    out[SEQ_OFF..HEADER_LEN].copy_from_slice(&seq.to_le_bytes());
    let key_end = HEADER_LEN + key.len();
    out[HEADER_LEN..key_end].copy_from_slice(key);
    out[key_end..key_end + value.len()].copy_from_slice(value);
    let crc = masked_crc32c(&out[KEY_LEN_OFF..key_end + value.len()]);
    out[CRC_OFF..KEY_LEN_OFF].copy_from_slice(&crc.to_le_bytes());
    Some(out)
}

fn field<const N: usize>(bytes: &[u8], off: usize) -> Option<[u8; N]> {
    bytes.get(off..off + N)?.try_into().ok()
}

/// Decodes the record at the start of `bytes`; returns it and its padded length.
pub fn decode(bytes: &[u8]) -> Result<(Record<'_>, usize), RecordError> {
    let have = bytes.len();
    let truncated = |need| RecordError::Truncated { need, have };
    let header = bytes.get(..HEADER_LEN).ok_or(truncated(HEADER_LEN))?;
    let (Some(crc), Some(key_len), Some(value_len), Some(seq)) = (
        field::<4>(header, CRC_OFF),
        field::<2>(header, KEY_LEN_OFF),
        field::<4>(header, VALUE_LEN_OFF),
        field::<8>(header, SEQ_OFF),
    ) else {
        return Err(truncated(HEADER_LEN));
    };
    let key_len = usize::from(u16::from_le_bytes(key_len));
    let value_len = u32::from_le_bytes(value_len) as usize;
    let kind = header
        .get(KIND_OFF)
        .and_then(|b| Kind::from_byte(*b))
        .ok_or(RecordError::Malformed("unknown kind"))?;
    if header.get(RESERVED1_OFF) != Some(&0) || header.get(RESERVED2_OFF..SEQ_OFF) != Some(&[0; 4])
    {
        return Err(RecordError::Malformed("reserved bytes are not zero"));
    }
    if key_len == 0 {
        return Err(RecordError::Malformed("empty key"));
    }
    if kind == Kind::Delete && value_len != 0 {
        return Err(RecordError::Malformed("a delete with a value"));
    }
    let body_end = HEADER_LEN + key_len + value_len;
    let padded = body_end.next_multiple_of(RECORD_ALIGN);
    if have < padded {
        return Err(truncated(padded));
    }
    let covered = bytes
        .get(KEY_LEN_OFF..body_end)
        .ok_or(truncated(body_end))?;
    let stored = u32::from_le_bytes(crc);
    let computed = masked_crc32c(covered);
    if stored != computed {
        return Err(RecordError::Checksum { stored, computed });
    }
    if bytes
        .get(body_end..padded)
        .is_none_or(|pad| pad.iter().any(|b| *b != 0))
    {
        return Err(RecordError::Malformed("padding is not zero"));
    }
    let key = bytes
        .get(HEADER_LEN..HEADER_LEN + key_len)
        .ok_or(truncated(body_end))?;
    let value = bytes
        .get(HEADER_LEN + key_len..body_end)
        .ok_or(truncated(body_end))?;
    let record = Record {
        seq: u64::from_le_bytes(seq),
        kind,
        key,
        value,
    };
    Ok((record, padded))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn put_and_delete_round_trip_with_padding() {
        let rec = encode(9, Kind::Put, b"key", b"value").unwrap();
        assert_eq!(rec.len(), 32);
        let (r, len) = decode(&rec).unwrap();
        assert_eq!(len, 32);
        assert_eq!(
            (r.seq, r.kind, r.key, r.value),
            (9, Kind::Put, &b"key"[..], &b"value"[..])
        );
        let del = encode(10, Kind::Delete, b"key", b"").unwrap();
        assert_eq!(decode(&del).unwrap().0.kind, Kind::Delete);
    }

    #[test]
    fn encode_refuses_what_decode_would_refuse() {
        assert!(encode(1, Kind::Put, b"", b"v").is_none());
        assert!(encode(1, Kind::Delete, b"k", b"v").is_none());
        assert!(encode(1, Kind::Put, &vec![0; 70_000], b"v").is_none());
    }

    #[test]
    fn zeroes_torn_and_truncated_records_are_errors() {
        assert!(matches!(
            decode(&[0u8; 64]),
            Err(RecordError::Malformed("unknown kind"))
        ));
        let rec = encode(1, Kind::Put, b"k", &[7; 100]).unwrap();
        assert!(matches!(
            decode(&rec[..rec.len() - 8]),
            Err(RecordError::Truncated { .. })
        ));
        let mut torn = rec.clone();
        torn[60] ^= 0xff;
        assert!(matches!(decode(&torn), Err(RecordError::Checksum { .. })));
        let mut huge = rec.clone();
        huge[VALUE_LEN_OFF..RESERVED2_OFF].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(decode(&huge), Err(RecordError::Truncated { .. })));
    }

    proptest! {
        #[test]
        fn records_round_trip(
            seq in any::<u64>(),
            key in proptest::collection::vec(any::<u8>(), 1..100),
            value in proptest::collection::vec(any::<u8>(), 0..300),
            delete in any::<bool>(),
            trailing in proptest::collection::vec(any::<u8>(), 0..16),
        ) {
            let (kind, value) = if delete { (Kind::Delete, vec![]) } else { (Kind::Put, value) };
            let mut bytes = encode(seq, kind, &key, &value).unwrap();
            let len = bytes.len();
            prop_assert_eq!(len % RECORD_ALIGN, 0);
            bytes.extend_from_slice(&trailing);
            let (r, n) = decode(&bytes).unwrap();
            prop_assert_eq!(n, len);
            prop_assert_eq!(r, Record { seq, kind, key: &key, value: &value });
        }

        #[test]
        fn nonzero_padding_is_refused(pad in 1u8..) {
            let mut rec = encode(1, Kind::Put, b"k", b"v").unwrap();
            let last = rec.len() - 1;
            rec[last] = pad;
            prop_assert_eq!(decode(&rec), Err(RecordError::Malformed("padding is not zero")));
        }

        #[test]
        fn decode_of_garbage_is_an_error_or_a_record_within_bounds(
            bytes in proptest::collection::vec(any::<u8>(), 0..128),
        ) {
            if let Ok((r, n)) = decode(&bytes) {
                prop_assert!(n <= bytes.len());
                prop_assert!(HEADER_LEN + r.key.len() + r.value.len() <= n);
            }
        }
    }
}
