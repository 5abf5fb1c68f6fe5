//! Where Redis keys and the elements of collections live in the store's one flat keyspace
//! (value encoding format 2, the "Value encoding" section of this crate's `README.md`;
//! the layout follows Apache Kvrocks: a metadata record under the key, one sub-key per
//! element).
//!
//! ```text
//! user key, db 0      <key>                                 (as written by `Db::put`)
//! user key, db n>0    INTERNAL | 'd' | n(1) | <key>
//! element             INTERNAL | 'e' | db(1) | klen(u32 LE) | <key> | generation(u64 LE)
//!                     | <element suffix: type-specific, see the collection modules>
//! database map        INTERNAL | 'c' | "dbmap"             (SWAPDB, see crate::dbmap)
//! INTERNAL            FF FE 74 6B  ("\xFF\xFEtk")
//! ```
//!
//! The `db` byte of a store key is the *physical* database; [`crate::dbmap`] says which
//! logical database (the one a client SELECTs) it holds.
//!
//! Keys a client names may not start with [`INTERNAL`] (refused before any command runs),
//! so a user key can never collide with an internal one. An element key names its user
//! key by length and bytes, so elements of different keys never share a prefix, and
//! carries the generation of the collection it belongs to: deleting or overwriting a
//! collection replaces (or removes) its metadata record, which makes every element of the
//! old generation garbage at once, O(1); the sweep ([`crate::expiry`]) reclaims them.
//!
//! Thread-safety: pure functions.

use std::borrow::Cow;
use std::ops::Bound;

/// The first bytes of every internal key.
pub const INTERNAL: [u8; 4] = [0xFF, 0xFE, b't', b'k'];
/// Sub-space of the user keys of databases 1 to 15.
const SPACE_DB: u8 = b'd';
/// Sub-space of the elements of collections.
const SPACE_ELEMENTS: u8 = b'e';
/// Sub-space of the server's own records (the database map).
const SPACE_CONFIG: u8 = b'c';
/// Number of databases (SELECT 0..DATABASES).
pub const DATABASES: u8 = 16;
/// Bytes an element key adds around the user key and the element suffix.
pub const ELEMENT_OVERHEAD: usize = INTERNAL.len() + 2 + 4 + 8;

/// True when `key` lies in the reserved internal range.
pub fn is_internal(key: &[u8]) -> bool {
    key.starts_with(&INTERNAL)
}

/// The ranges the schema adapters of `tierkv-core` write in the store's one keyspace
/// (`tierkv::core::schema::keys`: the catalog, consolidated rows, scattered fields), in key
/// order. Walks of database 0 jump over them and FLUSHDB/FLUSHALL leave them alone (a
/// schema's rows are removed through the schema API, see `crate::commands::rows`).
pub const ADAPTER_PREFIXES: [[u8; 2]; 3] = [
    [tierkv::core::schema::keys::RESERVED, b'C'],
    [tierkv::core::schema::keys::RESERVED, b'F'],
    [tierkv::core::schema::keys::RESERVED, b'R'],
];

/// The reserved prefix `key` starts with: [`INTERNAL`] or one of [`ADAPTER_PREFIXES`].
fn reserved_prefix(key: &[u8]) -> Option<&'static [u8]> {
    if is_internal(key) {
        return Some(&INTERNAL);
    }
    adapter_prefix(key)
}

/// The schema adapters' prefix ([`ADAPTER_PREFIXES`]) `key` starts with.
pub fn adapter_prefix(key: &[u8]) -> Option<&'static [u8]> {
    ADAPTER_PREFIXES
        .iter()
        .find(|p| key.starts_with(&p[..]))
        .map(|p| &p[..])
}

/// True when a client may not name `key`: it is internal or the schema adapters'.
pub fn is_reserved(key: &[u8]) -> bool {
    reserved_prefix(key).is_some()
}

/// A range of store keys.
pub type KeyRange = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// The ranges of store keys outside every key starting with one of `excluded` (prefixes
/// in key order, none a prefix of another), in key order.
pub fn ranges_outside(excluded: &[&[u8]]) -> Vec<KeyRange> {
    let mut out = Vec::new();
    let mut from = Bound::Unbounded;
    for p in excluded {
        out.push((from, Bound::Excluded(p.to_vec())));
        match successor(p) {
            Some(after) => from = Bound::Included(after),
            None => return out,
        }
    }
    out.push((from, Bound::Unbounded));
    out
}

/// The ranges that hold database 0's user keys (everything but the reserved ranges).
pub fn db0_ranges() -> Vec<KeyRange> {
    let mut excluded: Vec<&[u8]> = ADAPTER_PREFIXES.iter().map(|p| &p[..]).collect();
    excluded.push(&INTERNAL);
    ranges_outside(&excluded)
}

/// The store key of the user key `key` in database `db`.
pub fn user_key(db: u8, key: &[u8]) -> Cow<'_, [u8]> {
    if db == 0 {
        return Cow::Borrowed(key);
    }
    let mut k = Vec::with_capacity(INTERNAL.len() + 2 + key.len());
    k.extend_from_slice(&INTERNAL);
    k.push(SPACE_DB);
    k.push(db);
    k.extend_from_slice(key);
    Cow::Owned(k)
}

/// The store key of the database map ([`crate::dbmap`]).
pub fn dbmap_key() -> Vec<u8> {
    let mut k = INTERNAL.to_vec();
    k.push(SPACE_CONFIG);
    k.extend_from_slice(b"dbmap");
    k
}

/// The prefix under which the user keys of database `db > 0` are stored.
pub fn db_prefix(db: u8) -> Vec<u8> {
    let mut k = INTERNAL.to_vec();
    k.push(SPACE_DB);
    k.push(db);
    k
}

/// The user key of a store key seen by a walk of database `db`: `None` for a key of
/// another database or an internal key.
pub fn user_key_of(db: u8, stored: &[u8]) -> Option<&[u8]> {
    if db == 0 {
        return (!is_reserved(stored)).then_some(stored);
    }
    let p = db_prefix(db);
    stored.strip_prefix(p.as_slice())
}

/// The database whose user key the store key `stored` is (`None`: an internal key); the
/// inverse of [`user_key`] over the databases ([`user_key_of`] for each).
pub fn db_of(stored: &[u8]) -> Option<u8> {
    if !is_reserved(stored) {
        return Some(0);
    }
    match stored.strip_prefix(&INTERNAL) {
        Some([SPACE_DB, db, ..]) if *db > 0 && *db < DATABASES => Some(*db),
        _ => None,
    }
}

/// Where a walk of database `db` starting at user key `from` begins in the store.
pub fn walk_start(db: u8, from: &[u8]) -> Vec<u8> {
    user_key(db, from).into_owned()
}

/// Where a walk of database `db` goes on (inclusive) after the store key `k` that is not
/// one of its keys (`None`: the walk is over). Database 0 skips the internal range; the
/// others end at the end of their prefix. Database 0 also skips the schema adapters'
/// ranges ([`ADAPTER_PREFIXES`]).
pub fn walk_skip(db: u8, k: &[u8]) -> Option<Vec<u8>> {
    if db == 0 {
        return reserved_prefix(k).and_then(successor);
    }
    None
}

/// The smallest key after `k`.
pub fn after(k: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(k.len() + 1);
    v.extend_from_slice(k);
    v.push(0);
    v
}

/// The user key a lock of the store key `stored` is taken on (commands lock user keys):
/// the key without its database prefix.
pub fn lock_key(stored: &[u8]) -> &[u8] {
    match stored.strip_prefix(&INTERNAL) {
        Some([SPACE_DB, _, rest @ ..]) => rest,
        _ => stored,
    }
}

/// The smallest key greater than every key starting with `prefix` (`None`: no such key).
pub fn successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut p = prefix.to_vec();
    while let Some(last) = p.pop() {
        if last < 0xFF {
            p.push(last + 1);
            return Some(p);
        }
    }
    None
}

/// The common prefix of every element of generation `generation` of `key` in `db`.
pub fn element_prefix(db: u8, key: &[u8], generation: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(ELEMENT_OVERHEAD + key.len());
    k.extend_from_slice(&INTERNAL);
    k.push(SPACE_ELEMENTS);
    k.push(db);
    let len = u32::try_from(key.len()).unwrap_or(u32::MAX);
    k.extend_from_slice(&len.to_le_bytes());
    k.extend_from_slice(key);
    k.extend_from_slice(&generation.to_le_bytes());
    k
}

/// The first key of the element space (for the reclaiming sweep).
pub fn elements_start() -> Vec<u8> {
    let mut k = INTERNAL.to_vec();
    k.push(SPACE_ELEMENTS);
    k
}

/// An element key taken apart.
#[derive(Debug, PartialEq, Eq)]
pub struct ElementKey<'a> {
    /// Database.
    pub db: u8,
    /// The user key.
    pub key: &'a [u8],
    /// The collection's generation.
    pub generation: u64,
    /// Length of the prefix ([`element_prefix`]) in the stored key.
    pub prefix_len: usize,
}

/// Parses an element key; `None` for any other key or a malformed one.
pub fn parse_element(k: &[u8]) -> Option<ElementKey<'_>> {
    let rest = k.strip_prefix(&INTERNAL)?;
    let (&space, rest) = rest.split_first()?;
    if space != SPACE_ELEMENTS {
        return None;
    }
    let (&db, rest) = rest.split_first()?;
    let (len, rest) = rest.split_first_chunk::<4>()?;
    let len = u32::from_le_bytes(*len) as usize;
    if rest.len() < len {
        return None;
    }
    let (key, rest) = rest.split_at(len);
    let (generation, _) = rest.split_first_chunk::<8>()?;
    Some(ElementKey {
        db,
        key,
        generation: u64::from_le_bytes(*generation),
        prefix_len: ELEMENT_OVERHEAD + len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_keys_round_trip_and_never_share_a_prefix_across_keys() {
        let a = element_prefix(3, b"ab", 7);
        let b = element_prefix(3, b"a", 7);
        assert!(!a.starts_with(&b) && !b.starts_with(&a));
        let mut full = a.clone();
        full.extend_from_slice(b"field");
        let p = parse_element(&full).unwrap();
        assert_eq!((p.db, p.key, p.generation), (3, &b"ab"[..], 7));
        assert_eq!(&full[p.prefix_len..], b"field");
        assert!(parse_element(b"plain").is_none());
        assert!(parse_element(&full[..full.len() - 9]).is_none());
    }

    #[test]
    fn databases_map_to_disjoint_ranges() {
        assert_eq!(user_key(0, b"k"), Cow::Borrowed(&b"k"[..]));
        let k1 = user_key(1, b"k");
        assert!(is_internal(&k1));
        assert_eq!(user_key_of(1, &k1), Some(&b"k"[..]));
        assert_eq!(user_key_of(2, &k1), None);
        assert_eq!(user_key_of(0, &k1), None);
        assert_eq!(user_key_of(0, b"k"), Some(&b"k"[..]));
        assert_eq!(db_of(b"k"), Some(0));
        assert_eq!(db_of(&k1), Some(1));
        assert_eq!(db_of(&user_key(15, b"")), Some(15));
        assert_eq!(db_of(&element_prefix(1, b"k", 7)), None);
        assert_eq!(db_of(&dbmap_key()), None);
        assert_eq!(successor(b"a\xFF"), Some(b"b".to_vec()));
        assert_eq!(successor(b"\xFF"), None);
    }

    #[test]
    fn database_0_skips_the_schema_adapters_ranges() {
        let catalog = tierkv::core::schema::keys::CATALOG_KEY;
        assert!(is_reserved(catalog) && !is_reserved(b"\xFFA"));
        assert_eq!(user_key_of(0, catalog), None);
        assert_eq!(walk_skip(0, catalog), Some(b"\xFFD".to_vec()));
        let ranges = db0_ranges();
        assert_eq!(ranges.len(), 5);
        let inside = |k: &[u8]| {
            ranges
                .iter()
                .any(|r| std::ops::RangeBounds::contains(r, &k.to_vec()))
        };
        for k in [&b""[..], b"a", b"\xFFA", b"\xFFD", b"\xFFS", b"\xFF\xFF"] {
            assert!(inside(k), "{k:?}");
        }
        for k in [catalog, b"\xFFR\x01\0\0\0row", b"\xFFF", &INTERNAL[..]] {
            assert!(!inside(k), "{k:?}");
        }
    }
}
