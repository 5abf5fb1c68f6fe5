//! Values: either `--value-size` opaque bytes (default 1 KiB, as in PRISM and PrismDB), or a
//! YCSB record of `--fields N` fields of `--field-size S` bytes (YCSB's default record is
//! 10 × 100 B) encoded as one value, for the schema workloads FOCUS will run natively.
//!
//! # Record encoding (all integers little-endian)
//! ```text
//! record := field_count:u16  field * field_count
//! field  := name_len:u8  name:[u8; name_len]  value_len:u32  value:[u8; value_len]
//! ```
//! Field names are YCSB's: `field0`, `field1`, ... A record of `N` fields of `S` bytes is
//! `2 + Σ (1 + len("field<i>") + 4 + S)` bytes. Updates and read-modify-writes write the
//! whole record (YCSB's `writeallfields=true`), since a key-value store stores records
//! whole; [`decode_record`] reads one back.
//!
//! Bytes are printable ASCII (as YCSB's `RandomByteIterator` makes them), cut from a pool
//! generated once from the seed, at a random offset per value, so that building a value
//! costs a copy rather than a random number per byte.
//!
//! Thread safety: [`ValueSource`] is immutable after construction and shared by reference.

use std::fmt;
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// YCSB's field name prefix.
pub const FIELD_NAME_PREFIX: &str = "field";
/// Bytes of the field count at the start of a record.
pub const RECORD_HEADER_LEN: usize = 2;
/// Bytes of a field's length prefixes (name length, value length).
pub const FIELD_HEADER_LEN: usize = 1 + 4;
/// The smallest pool values are cut from.
const MIN_POOL_LEN: usize = 1 << 20;

/// What every value looks like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueShape {
    /// Opaque bytes of this length.
    Bytes(usize),
    /// A record of `count` fields of `size` bytes each.
    Fields {
        /// Number of fields.
        count: usize,
        /// Bytes per field.
        size: usize,
    },
}

impl ValueShape {
    /// A record shape, checked against the encoding's limits.
    pub fn fields(count: usize, size: usize) -> Result<Self, String> {
        if count == 0 || count > usize::from(u16::MAX) {
            return Err(format!(
                "--fields {count}: must be between 1 and {}",
                u16::MAX
            ));
        }
        if u32::try_from(size).is_err() {
            return Err(format!("--field-size {size}: must be below 4 GiB"));
        }
        Ok(ValueShape::Fields { count, size })
    }

    /// The encoded length of every value.
    pub fn encoded_len(&self) -> usize {
        match *self {
            ValueShape::Bytes(n) => n,
            ValueShape::Fields { count, size } => {
                RECORD_HEADER_LEN
                    + (0..count)
                        .map(|i| FIELD_HEADER_LEN + field_name(i).len() + size)
                        .sum::<usize>()
            }
        }
    }

    fn largest_piece(&self) -> usize {
        match *self {
            ValueShape::Bytes(n) => n,
            ValueShape::Fields { size, .. } => size,
        }
    }
}

impl fmt::Display for ValueShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ValueShape::Bytes(n) => write!(f, "{n} bytes"),
            ValueShape::Fields { count, size } => write!(
                f,
                "records of {count} fields x {size} bytes ({} bytes encoded)",
                self.encoded_len()
            ),
        }
    }
}

/// YCSB's name of field `i`.
pub fn field_name(i: usize) -> String {
    format!("{FIELD_NAME_PREFIX}{i}")
}

/// Builds values of one shape from a pool of random printable bytes.
#[derive(Clone, Debug)]
pub struct ValueSource {
    shape: ValueShape,
    pool: Arc<[u8]>,
    names: Arc<[String]>,
}

impl ValueSource {
    /// A source whose pool is generated from `seed`.
    pub fn new(shape: ValueShape, seed: u64) -> Self {
        let len = MIN_POOL_LEN.max(shape.largest_piece().saturating_mul(4));
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let pool: Arc<[u8]> = (0..len).map(|_| rng.random_range(b' '..=b'~')).collect();
        let names = match shape {
            ValueShape::Bytes(_) => Vec::new(),
            ValueShape::Fields { count, .. } => (0..count).map(field_name).collect(),
        };
        ValueSource {
            shape,
            pool,
            names: names.into(),
        }
    }

    /// The shape of the values.
    pub fn shape(&self) -> ValueShape {
        self.shape
    }

    /// Writes a fresh value into `out` (cleared first).
    pub fn fill<R: Rng + ?Sized>(&self, rng: &mut R, out: &mut Vec<u8>) {
        out.clear();
        match self.shape {
            ValueShape::Bytes(n) => out.extend_from_slice(self.piece(rng, n)),
            ValueShape::Fields { count, size } => {
                out.reserve(self.shape.encoded_len());
                // Lengths were checked in `ValueShape::fields`.
                out.extend_from_slice(&(count as u16).to_le_bytes());
                for name in self.names.iter() {
                    out.push(name.len() as u8);
                    out.extend_from_slice(name.as_bytes());
                    out.extend_from_slice(&(size as u32).to_le_bytes());
                    out.extend_from_slice(self.piece(rng, size));
                }
            }
        }
    }

    /// Writes `len` fresh bytes into `out` (cleared first): one field of a schema row.
    /// `len` is at most the shape's largest piece (the field size).
    pub fn fill_piece<R: Rng + ?Sized>(&self, rng: &mut R, len: usize, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(self.piece(rng, len.min(self.pool.len())));
    }

    fn piece<R: Rng + ?Sized>(&self, rng: &mut R, len: usize) -> &[u8] {
        let start = rng.random_range(0..=self.pool.len() - len);
        &self.pool[start..start + len]
    }
}

/// What is wrong with an encoded record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError(pub String);

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed record: {}", self.0)
    }
}

impl std::error::Error for RecordError {}

/// One decoded field: its name and its value.
pub type Field<'a> = (&'a [u8], &'a [u8]);

/// Decodes a record into its fields, checking every length.
pub fn decode_record(bytes: &[u8]) -> Result<Vec<Field<'_>>, RecordError> {
    let mut rest = bytes;
    let count = u16::from_le_bytes(take_array(&mut rest, "field count")?);
    let mut fields = Vec::with_capacity(usize::from(count));
    for i in 0..count {
        let [name_len] = take_array::<1>(&mut rest, "name length")?;
        let name = take(&mut rest, usize::from(name_len), "name")?;
        let value_len = u32::from_le_bytes(take_array(&mut rest, "value length")?);
        let len = usize::try_from(value_len)
            .map_err(|_| RecordError(format!("field {i}: length {value_len} too large")))?;
        let value = take(&mut rest, len, "value")?;
        fields.push((name, value));
    }
    if !rest.is_empty() {
        return Err(RecordError(format!(
            "{} bytes after the last field",
            rest.len()
        )));
    }
    Ok(fields)
}

fn take<'a>(rest: &mut &'a [u8], n: usize, what: &str) -> Result<&'a [u8], RecordError> {
    if rest.len() < n {
        return Err(RecordError(format!(
            "{what}: needs {n} bytes, {} left",
            rest.len()
        )));
    }
    let (head, tail) = rest.split_at(n);
    *rest = tail;
    Ok(head)
}

fn take_array<const N: usize>(rest: &mut &[u8], what: &str) -> Result<[u8; N], RecordError> {
    let mut a = [0u8; N];
    a.copy_from_slice(take(rest, N, what)?);
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_values_have_the_requested_length_and_are_printable() {
        let src = ValueSource::new(ValueShape::Bytes(1024), 1);
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let mut v = Vec::new();
        src.fill(&mut rng, &mut v);
        assert_eq!(v.len(), 1024);
        assert!(v.iter().all(|b| (b' '..=b'~').contains(b)));
    }

    #[test]
    fn records_round_trip_with_ycsb_field_names() {
        let shape = ValueShape::fields(10, 100).unwrap();
        let src = ValueSource::new(shape, 1);
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut v = Vec::new();
        src.fill(&mut rng, &mut v);
        assert_eq!(v.len(), shape.encoded_len());
        // 2 + 10 * (1 + 4 + 100) + len("field0".."field9") = 2 + 1050 + 60.
        assert_eq!(v.len(), 1112);
        let fields = decode_record(&v).unwrap();
        assert_eq!(fields.len(), 10);
        for (i, (name, value)) in fields.iter().enumerate() {
            assert_eq!(*name, field_name(i).as_bytes());
            assert_eq!(value.len(), 100);
        }
    }

    #[test]
    fn truncated_or_padded_records_are_refused() {
        let src = ValueSource::new(ValueShape::fields(3, 8).unwrap(), 1);
        let mut v = Vec::new();
        src.fill(&mut ChaCha8Rng::seed_from_u64(4), &mut v);
        for cut in [0, 1, 2, 5, v.len() - 1] {
            assert!(decode_record(&v[..cut]).is_err(), "cut at {cut}");
        }
        let mut long = v.clone();
        long.push(0);
        assert!(decode_record(&long).is_err());
    }

    #[test]
    fn field_shapes_outside_the_encoding_are_refused() {
        assert!(ValueShape::fields(0, 100).is_err());
        assert!(ValueShape::fields(70_000, 1).is_err());
    }
}
