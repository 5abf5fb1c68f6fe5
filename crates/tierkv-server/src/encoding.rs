//! How the server stores Redis values in a `KvStore`, which holds one byte string per key
//! (value encoding, format version 2; the spec is the "Value encoding" section of this
//! crate's `README.md`).
//!
//! ```text
//! plain string   <raw bytes>                       (any value not starting with TAG)
//! tagged value   TAG(3) = FF 54 4B ("\xFFTK") | type(1) | version(1) | body
//!   type 's'     escaped string: body = the raw bytes (used only when the raw bytes
//!                themselves start with TAG, so a string can never be misread)
//!   type 'h'     hash: body = count(u32 LE, >= 1)
//!                       then per field: flen(u32 LE) field vlen(u32 LE) value
//!   type 'x'     expiring value: body = deadline(u64 LE, Unix time in ms) | inner
//!                where inner is a complete stored value of any other type (an escaped
//!                or plain string, or a hash); never another 'x'
//!   type 'm'     (format 2, version byte 2) a collection's metadata record ([`Meta`]):
//!                kind(1: h l L s z) generation(u64 LE) count(u64 LE) head(i64 LE)
//!                tail(i64 LE); its elements are sub-keys ([`crate::keyspace`]); kind
//!                `l` is a list of layout 1 (one sub-key per element), `L` one of layout
//!                2 (elements in chunks of 32, [`crate::list_chunk`]), written for every
//!                list created since
//! ```
//! Format 2 adds the `m` type; every format-1 value reads unchanged (a format-1 hash is
//! rewritten per element by its first write on an ordered engine).
//! A key with a TTL is stored as an `x` envelope around its value, so the deadline is
//! written (and made durable) together with the value in one `put`, and survives restarts.
//! Fields are kept in insertion order (as Redis keeps small hashes) and are unique.
//!
//! Invariants: a value written by the server decodes to what was written, and re-encoding
//! a decoded value gives back its bytes; a value written by another `tierkv` user that does
//! not start with TAG reads as a plain string; a value that starts with TAG but is
//! malformed (unknown type, unknown version, lengths that do not add up, trailing bytes,
//! zero fields, an escape that was not needed) is reported as [`DecodeError`], never read
//! as something else and never a panic.
//!
//! Thread-safety: pure functions.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

/// The first bytes of every tagged value.
pub const TAG: [u8; 3] = [0xFF, b'T', b'K'];
/// Offset of the type byte.
const TYPE_OFFSET: usize = TAG.len();
/// Offset of the version byte.
const VERSION_OFFSET: usize = TYPE_OFFSET + 1;
/// Length of the header before the body.
pub const HEADER_LEN: usize = VERSION_OFFSET + 1;
/// Type byte of an escaped string.
pub const TYPE_STRING: u8 = b's';
/// Type byte of a hash.
pub const TYPE_HASH: u8 = b'h';
/// Type byte of a collection's metadata record (format 2).
pub const TYPE_META: u8 = b'm';
/// The version byte of a metadata record.
pub const META_VERSION: u8 = 2;
/// Type byte of the expiry envelope.
pub const TYPE_EXPIRING: u8 = b'x';
/// Size of the deadline in an expiry envelope.
const DEADLINE_SIZE: usize = 8;
/// The only format version this build writes and reads.
pub const VERSION: u8 = 1;
/// Size of the field count and of each length prefix.
const LEN_SIZE: usize = 4;

/// A stored value, decoded (borrowing the stored bytes).
#[derive(Debug, PartialEq, Eq)]
pub enum Stored<'a> {
    /// A string (its raw bytes, escape removed).
    Str(&'a [u8]),
    /// A hash in format 1: all its fields in this one value.
    Hash(HashRef<'a>),
    /// The metadata record of a collection whose elements are sub-keys (format 2).
    Meta(Meta),
}

/// A stored value that starts with [`TAG`] but is not a valid tagged value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(String);

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "stored value is not valid (value encoding v{VERSION}): {}",
            self.0
        )
    }
}

impl std::error::Error for DecodeError {}

fn bad(what: impl Into<String>) -> DecodeError {
    DecodeError(what.into())
}

/// A [`DecodeError`] for another decoder of stored bytes (list chunks).
pub(crate) fn decode_error(what: impl Into<String>) -> DecodeError {
    bad(what)
}

/// True when `v` is an expiry envelope (a cheap test of its header).
pub fn is_expiring(v: &[u8]) -> bool {
    v.starts_with(&TAG) && v.get(TYPE_OFFSET) == Some(&TYPE_EXPIRING)
}

/// Splits an expiry envelope into its deadline (Unix ms) and the inner stored value; a
/// value without an envelope has no deadline and is its own inner value.
pub fn split_expiry(v: &[u8]) -> Result<(Option<u64>, &[u8]), DecodeError> {
    if !is_expiring(v) {
        return Ok((None, v));
    }
    if v.get(VERSION_OFFSET) != Some(&VERSION) {
        return Err(bad("expiry envelope of an unknown version"));
    }
    let body = v.get(HEADER_LEN..).unwrap_or_default();
    let (deadline, inner) = body
        .split_first_chunk::<DEADLINE_SIZE>()
        .ok_or_else(|| bad("expiry envelope without its deadline"))?;
    if is_expiring(inner) {
        return Err(bad("nested expiry envelope"));
    }
    Ok((Some(u64::from_le_bytes(*deadline)), inner))
}

/// `inner` (a complete stored value, not itself an envelope) with the deadline `at_ms`.
pub fn wrap_expiry(at_ms: u64, inner: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER_LEN + DEADLINE_SIZE + inner.len());
    push_header(&mut v, TYPE_EXPIRING);
    v.extend_from_slice(&at_ms.to_le_bytes());
    v.extend_from_slice(inner);
    v
}

/// Bytes an expiry envelope adds to a value.
pub const EXPIRY_OVERHEAD: usize = HEADER_LEN + DEADLINE_SIZE;

/// Decodes a stored value (an expiry envelope is looked through: its inner value is
/// decoded; whether it has expired is the caller's business).
pub fn decode(v: &[u8]) -> Result<Stored<'_>, DecodeError> {
    let (_, v) = split_expiry(v)?;
    if !v.starts_with(&TAG) {
        return Ok(Stored::Str(v));
    }
    let (Some(&ty), Some(&version)) = (v.get(TYPE_OFFSET), v.get(VERSION_OFFSET)) else {
        return Err(bad("tagged value shorter than its header"));
    };
    let body = v.get(HEADER_LEN..).unwrap_or_default();
    if ty == TYPE_META && version == META_VERSION {
        return Meta::parse(body).map(Stored::Meta);
    }
    if version != VERSION {
        return Err(bad(format!("unknown version {version}")));
    }
    match ty {
        // NOTE: only a string that starts with TAG is ever escaped; any other escaped
        // string is not something this code wrote, so it is refused, not guessed at.
        TYPE_STRING if body.starts_with(&TAG) => Ok(Stored::Str(body)),
        TYPE_STRING => Err(bad("escaped string that does not start with the tag")),
        TYPE_HASH => HashRef::parse(body).map(Stored::Hash),
        other => Err(bad(format!("unknown type byte {other:#04x}"))),
    }
}

/// The bytes to store for the string `raw`: itself, or escaped when it starts with [`TAG`].
pub fn encode_string(raw: &[u8]) -> Cow<'_, [u8]> {
    if raw.starts_with(&TAG) {
        let mut v = Vec::with_capacity(HEADER_LEN + raw.len());
        push_header(&mut v, TYPE_STRING);
        v.extend_from_slice(raw);
        Cow::Owned(v)
    } else {
        Cow::Borrowed(raw)
    }
}

/// Length of [`encode_string`]`(raw)` without building it.
pub fn encoded_string_len(raw: &[u8]) -> usize {
    raw.len() + if raw.starts_with(&TAG) { HEADER_LEN } else { 0 }
}

fn push_header(v: &mut Vec<u8>, ty: u8) {
    v.extend_from_slice(&TAG);
    v.push(ty);
    v.push(VERSION);
}

/// A validated hash body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HashRef<'a> {
    count: usize,
    fields: &'a [u8],
}

impl<'a> HashRef<'a> {
    fn parse(body: &'a [u8]) -> Result<HashRef<'a>, DecodeError> {
        let (count, fields) = take_len(body).ok_or_else(|| bad("hash without field count"))?;
        if count == 0 {
            return Err(bad("hash with zero fields"));
        }
        let mut rest = fields;
        for i in 0..count {
            rest = skip_pair(rest).ok_or_else(|| bad(format!("hash field {i} is truncated")))?;
        }
        if !rest.is_empty() {
            return Err(bad(format!(
                "{} bytes after the last hash field",
                rest.len()
            )));
        }
        Ok(HashRef { count, fields })
    }

    /// Number of fields.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Always false: an empty hash is deleted, never stored.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The fields and values, in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        let mut rest = self.fields;
        (0..self.count).map_while(move |_| {
            let (field, after) = take_bytes(rest)?;
            let (value, after) = take_bytes(after)?;
            rest = after;
            Some((field, value))
        })
    }

    /// The value of `field`.
    pub fn get(&self, field: &[u8]) -> Option<&'a [u8]> {
        self.iter().find(|(f, _)| *f == field).map(|(_, v)| v)
    }
}

fn take_len(b: &[u8]) -> Option<(usize, &[u8])> {
    let (len, rest) = b.split_first_chunk::<LEN_SIZE>()?;
    Some((u32::from_le_bytes(*len) as usize, rest))
}

fn take_bytes(b: &[u8]) -> Option<(&[u8], &[u8])> {
    let (n, rest) = take_len(b)?;
    if rest.len() < n {
        return None;
    }
    Some(rest.split_at(n))
}

fn skip_pair(b: &[u8]) -> Option<&[u8]> {
    let (_, rest) = take_bytes(b)?;
    let (_, rest) = take_bytes(rest)?;
    Some(rest)
}

/// A hash being modified: the fields of a stored hash (borrowed) plus updates (borrowed
/// from the request), in insertion order.
#[derive(Debug, Default)]
pub struct HashEdit<'a> {
    fields: Vec<(&'a [u8], &'a [u8])>,
    /// Position of each field, built once a hash is large enough for linear search to cost.
    index: Option<HashMap<&'a [u8], usize>>,
}

/// From this many fields on, an edit indexes fields instead of searching linearly.
const INDEX_FROM: usize = 32;

impl<'a> HashEdit<'a> {
    /// Starts from a stored hash (or from nothing).
    pub fn new(from: Option<HashRef<'a>>) -> HashEdit<'a> {
        let fields: Vec<_> = from.map(|h| h.iter().collect()).unwrap_or_default();
        let mut e = HashEdit {
            fields,
            index: None,
        };
        e.maybe_index();
        e
    }

    fn maybe_index(&mut self) {
        if self.index.is_none() && self.fields.len() >= INDEX_FROM {
            let index = self.fields.iter().enumerate().map(|(i, (f, _))| (*f, i));
            self.index = Some(index.collect());
        }
    }

    fn position(&self, field: &[u8]) -> Option<usize> {
        match &self.index {
            Some(ix) => ix.get(field).copied(),
            None => self.fields.iter().position(|(f, _)| *f == field),
        }
    }

    /// Sets `field` to `value`; true when the field is new.
    pub fn set(&mut self, field: &'a [u8], value: &'a [u8]) -> bool {
        if let Some(i) = self.position(field) {
            if let Some(slot) = self.fields.get_mut(i) {
                slot.1 = value;
            }
            return false;
        }
        if let Some(ix) = self.index.as_mut() {
            ix.insert(field, self.fields.len());
        }
        self.fields.push((field, value));
        self.maybe_index();
        true
    }

    /// Removes `field`; true when it was there.
    pub fn remove(&mut self, field: &[u8]) -> bool {
        let Some(i) = self.position(field) else {
            return false;
        };
        self.fields.remove(i);
        // Positions after `i` moved; rebuilding is simpler than patching and HDEL is rare.
        self.index = None;
        self.maybe_index();
        true
    }

    /// Number of fields.
    pub fn len(&self) -> usize {
        self.fields.len()
    }

    /// True when no field is left (the key is then deleted).
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// Size of the encoded hash.
    pub fn encoded_len(&self) -> usize {
        let body: usize = self
            .fields
            .iter()
            .map(|(f, v)| 2 * LEN_SIZE + f.len() + v.len())
            .sum();
        HEADER_LEN + LEN_SIZE + body
    }

    /// The bytes to store. Lengths fit in u32 because the caller checks
    /// [`HashEdit::encoded_len`] against the value limit (at most 1 GiB) first.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.encoded_len());
        push_header(&mut v, TYPE_HASH);
        push_len(&mut v, self.fields.len());
        for (f, val) in &self.fields {
            push_len(&mut v, f.len());
            v.extend_from_slice(f);
            push_len(&mut v, val.len());
            v.extend_from_slice(val);
        }
        v
    }
}

/// The kind of a collection stored per element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A hash: one sub-key per field.
    Hash,
    /// A list: one sub-key per element, addressed by a signed 64-bit position.
    List,
    /// A set: one sub-key per member.
    Set,
    /// A sorted set: a member sub-key (holding the score) and a score-ordered index sub-key.
    ZSet,
}

impl Kind {
    fn byte(self) -> u8 {
        match self {
            Kind::Hash => b'h',
            Kind::List => b'l',
            Kind::Set => b's',
            Kind::ZSet => b'z',
        }
    }

    fn of(b: u8) -> Option<Kind> {
        Some(match b {
            b'h' => Kind::Hash,
            b'l' => Kind::List,
            b's' => Kind::Set,
            b'z' => Kind::ZSet,
            _ => return None,
        })
    }

    /// The name TYPE answers.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Hash => "hash",
            Kind::List => "list",
            Kind::Set => "set",
            Kind::ZSet => "zset",
        }
    }
}

/// A collection's metadata record:
/// `TAG | 'm' | 2 | kind(1) | generation(u64 LE) | count(u64 LE) | head(i64 LE) | tail(i64 LE)`.
/// `head`/`tail` are a list's first position and one past its last (zero for the others).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    /// What the collection is.
    pub kind: Kind,
    /// Names this incarnation's elements (unique per creation, never reused).
    pub generation: u64,
    /// Number of elements, >= 1 (an empty collection is deleted).
    pub count: u64,
    /// A list's first position.
    pub head: i64,
    /// One past a list's last position.
    pub tail: i64,
    /// A list whose elements are kept in chunks ([`crate::list_chunk`], kind byte `L`)
    /// rather than one per sub-key (kind byte `l`, the layout of lists created before
    /// chunks existed, still read and written as such). False for the other kinds.
    pub chunked: bool,
}

/// The kind byte of a list of layout 2 (chunked).
const CHUNKED_LIST: u8 = b'L';

/// Size of a metadata body.
const META_BODY: usize = 1 + 8 * 4;

impl Meta {
    /// A new, empty collection of `kind` (stored only once it has an element).
    pub fn new(kind: Kind, generation: u64) -> Meta {
        Meta {
            kind,
            generation,
            count: 0,
            head: 0,
            tail: 0,
            chunked: kind == Kind::List,
        }
    }

    fn parse(body: &[u8]) -> Result<Meta, DecodeError> {
        if body.len() != META_BODY {
            return Err(bad(format!("metadata of {} bytes", body.len())));
        }
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(body.get(1 + 8 * i..9 + 8 * i).unwrap_or(&[0; 8]));
            w
        };
        let byte = body.first().copied().unwrap_or(0);
        let chunked = byte == CHUNKED_LIST;
        let kind = if chunked {
            Some(Kind::List)
        } else {
            Kind::of(byte)
        }
        .ok_or_else(|| bad("metadata of an unknown kind"))?;
        let m = Meta {
            kind,
            generation: u64::from_le_bytes(word(0)),
            count: u64::from_le_bytes(word(1)),
            head: i64::from_le_bytes(word(2)),
            tail: i64::from_le_bytes(word(3)),
            chunked,
        };
        if m.count == 0 {
            return Err(bad("metadata of an empty collection"));
        }
        if kind == Kind::List && m.tail.checked_sub(m.head) != i64::try_from(m.count).ok() {
            return Err(bad("list metadata whose positions do not match its count"));
        }
        Ok(m)
    }

    /// The bytes to store.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(HEADER_LEN + META_BODY);
        v.extend_from_slice(&TAG);
        v.push(TYPE_META);
        v.push(META_VERSION);
        v.push(if self.chunked && self.kind == Kind::List {
            CHUNKED_LIST
        } else {
            self.kind.byte()
        });
        v.extend_from_slice(&self.generation.to_le_bytes());
        v.extend_from_slice(&self.count.to_le_bytes());
        v.extend_from_slice(&self.head.to_le_bytes());
        v.extend_from_slice(&self.tail.to_le_bytes());
        v
    }
}

fn push_len(v: &mut Vec<u8>, n: usize) {
    let n = u32::try_from(n).unwrap_or(u32::MAX);
    v.extend_from_slice(&n.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(pairs: &[(&'static [u8], &'static [u8])]) -> Vec<u8> {
        let mut e = HashEdit::new(None);
        for (f, v) in pairs {
            e.set(f, v);
        }
        e.encode()
    }

    #[test]
    fn metadata_round_trips_and_bad_metadata_is_refused() {
        let m = Meta {
            kind: Kind::List,
            generation: 0xDEAD_BEEF,
            count: 3,
            head: -1,
            tail: 2,
            chunked: false,
        };
        let v = m.encode();
        assert_eq!(decode(&v).unwrap(), Stored::Meta(m));
        assert_eq!(v.get(HEADER_LEN), Some(&b'l'));
        let chunked = Meta { chunked: true, ..m };
        let c = chunked.encode();
        assert_eq!(c.get(HEADER_LEN), Some(&b'L'));
        assert_eq!(decode(&c).unwrap(), Stored::Meta(chunked));
        assert!(Meta::new(Kind::List, 1).chunked && !Meta::new(Kind::Set, 1).chunked);
        let wrapped = wrap_expiry(9, &v);
        assert_eq!(decode(&wrapped).unwrap(), Stored::Meta(m));
        let mut torn = m;
        torn.tail = 5;
        assert!(decode(&torn.encode()).is_err());
        let mut empty = Meta::new(Kind::Hash, 1);
        assert!(decode(&empty.encode()).is_err());
        empty.count = 1;
        assert!(decode(&empty.encode()).is_ok());
        for cut in HEADER_LEN..v.len() {
            assert!(decode(&v[..cut]).is_err());
        }
        let mut unknown = v.clone();
        unknown[HEADER_LEN] = b'q';
        assert!(decode(&unknown).is_err());
    }

    #[test]
    fn plain_strings_are_stored_raw_and_read_back() {
        assert_eq!(encode_string(b"hello"), Cow::Borrowed(&b"hello"[..]));
        assert_eq!(decode(b"hello").unwrap(), Stored::Str(b"hello"));
        assert_eq!(decode(b"").unwrap(), Stored::Str(b""));
        assert_eq!(decode(b"\xFFT").unwrap(), Stored::Str(b"\xFFT"));
    }

    #[test]
    fn string_starting_with_the_tag_is_escaped_and_round_trips() {
        let raw = b"\xFFTKh\x01 looks like a hash";
        let stored = encode_string(raw);
        assert!(matches!(stored, Cow::Owned(_)));
        assert_eq!(stored.len(), encoded_string_len(raw));
        assert_eq!(decode(&stored).unwrap(), Stored::Str(raw));
    }

    #[test]
    fn hash_round_trips_in_insertion_order() {
        let v = hash(&[(b"b", b"2"), (b"a", b""), (b"b", b"3")]);
        let Stored::Hash(h) = decode(&v).unwrap() else {
            panic!("not a hash")
        };
        assert_eq!(h.len(), 2);
        let pairs: Vec<_> = h.iter().collect();
        assert_eq!(pairs, vec![(&b"b"[..], &b"3"[..]), (&b"a"[..], &b""[..])]);
        assert_eq!(h.get(b"a"), Some(&b""[..]));
        assert_eq!(h.get(b"zz"), None);
    }

    #[test]
    fn large_hash_edits_use_the_index_consistently() {
        let names: Vec<Vec<u8>> = (0..100).map(|i| format!("f{i}").into_bytes()).collect();
        let mut e = HashEdit::new(None);
        for n in &names {
            assert!(e.set(n, b"v"));
        }
        assert!(!e.set(&names[7], b"w"));
        assert!(e.remove(&names[3]));
        assert!(!e.remove(&names[3]));
        assert!(!e.set(&names[99], b"x"));
        let v = e.encode();
        assert_eq!(v.len(), e.encoded_len());
        let Stored::Hash(h) = decode(&v).unwrap() else {
            panic!("not a hash")
        };
        assert_eq!(h.len(), 99);
        assert_eq!(h.get(b"f7"), Some(&b"w"[..]));
        assert_eq!(h.get(b"f99"), Some(&b"x"[..]));
        assert_eq!(h.get(b"f3"), None);
    }

    proptest::proptest! {
        /// Whatever bytes a store holds, decoding answers a value or an error, and a
        /// decoded hash's fields lie inside the bytes.
        #[test]
        fn arbitrary_stored_bytes_decode_or_fail_cleanly(
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
            tagged in proptest::prelude::any::<bool>(),
        ) {
            let mut v = if tagged { b"\xFFTKh\x01".to_vec() } else { Vec::new() };
            v.extend_from_slice(&body);
            if let Ok(Stored::Hash(h)) = decode(&v) {
                let bytes: usize = h.iter().map(|(f, x)| f.len() + x.len()).sum();
                proptest::prop_assert!(bytes <= v.len());
                proptest::prop_assert_eq!(h.iter().count(), h.len());
            }
        }
    }

    #[test]
    fn expiry_envelope_round_trips_around_strings_and_hashes() {
        for inner in [
            b"plain".to_vec(),
            encode_string(b"\xFFTKx\x01 tag-like").into_owned(),
            hash(&[(b"f", b"v")]),
            Vec::new(),
        ] {
            let v = wrap_expiry(1_700_000_000_123, &inner);
            assert!(is_expiring(&v));
            assert_eq!(v.len(), inner.len() + EXPIRY_OVERHEAD);
            let (at, got) = split_expiry(&v).unwrap();
            assert_eq!((at, got), (Some(1_700_000_000_123), &inner[..]));
            assert_eq!(decode(&v).unwrap(), decode(&inner).unwrap());
        }
        assert_eq!(split_expiry(b"abc").unwrap(), (None, &b"abc"[..]));
        let nested = wrap_expiry(5, &wrap_expiry(6, b"x"));
        assert!(split_expiry(&nested).is_err());
        assert!(split_expiry(b"\xFFTKx\x01\x00\x01").is_err());
        assert!(split_expiry(b"\xFFTKx\x02\x00\x00\x00\x00\x00\x00\x00\x00").is_err());
    }

    #[test]
    fn malformed_tagged_values_are_errors_not_panics() {
        let good = hash(&[(b"f", b"v")]);
        let mut cases: Vec<Vec<u8>> = vec![
            b"\xFFTK".to_vec(),
            b"\xFFTKh\x02".to_vec(),
            b"\xFFTKq\x01".to_vec(),
            b"\xFFTKs\x01needs no escape".to_vec(),
            b"\xFFTKh\x01\x00\x00\x00\x00".to_vec(),
        ];
        for cut in HEADER_LEN..good.len() {
            cases.push(good[..cut].to_vec());
        }
        let mut trailing = good.clone();
        trailing.push(0);
        cases.push(trailing);
        let mut huge = good.clone();
        huge[HEADER_LEN + LEN_SIZE] = 0xFF;
        cases.push(huge);
        for c in cases {
            assert!(decode(&c).is_err(), "{c:?} decoded");
        }
    }
}
