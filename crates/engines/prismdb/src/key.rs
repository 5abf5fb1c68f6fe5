//! Keys held by the partitions' DRAM structures (the index, the tracker).
//!
//! A [`DramKey`] keeps up to [`INLINE_KEY`] bytes inline (YCSB's keys are 5-23 bytes) and
//! longer keys on the heap. Inline keys sit in the B-tree node or hash slot that holds
//! them, so a search compares bytes it has already loaded instead of following one heap
//! pointer per key compared: with `Vec<u8>` keys those compares were a sixth of a 2M-record
//! load's CPU (`__memcmp` under `BTreeMap::get`, most of it cache misses).

use std::collections::BTreeMap;
use std::collections::btree_map;
use std::ops::Bound;

use smallvec::SmallVec;

/// Bytes a key keeps inline.
pub const INLINE_KEY: usize = 24;

/// A key in a DRAM structure: ordered and hashed as its bytes.
pub type DramKey = SmallVec<[u8; INLINE_KEY]>;

/// `key` as a [`DramKey`].
pub fn dram_key(key: &[u8]) -> DramKey {
    SmallVec::from_slice(key)
}

/// The entries of `map` with keys `>= start`, in order.
pub fn range_from<'a, V>(
    map: &'a BTreeMap<DramKey, V>,
    start: &[u8],
) -> btree_map::Range<'a, DramKey, V> {
    map.range::<[u8], _>((Bound::Included(start), Bound::Unbounded))
}

/// [`range_from`], mutable.
pub fn range_from_mut<'a, V>(
    map: &'a mut BTreeMap<DramKey, V>,
    start: &[u8],
) -> btree_map::RangeMut<'a, DramKey, V> {
    map.range_mut::<[u8], _>((Bound::Included(start), Bound::Unbounded))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dram_keys_order_like_their_bytes_inline_or_not() {
        let long = vec![b'k'; INLINE_KEY + 9];
        let mut m: BTreeMap<DramKey, u8> = BTreeMap::new();
        for (i, k) in [&b"b"[..], b"a", b"ab", &long, b""].iter().enumerate() {
            m.insert(dram_key(k), i as u8);
        }
        let keys: Vec<&[u8]> = m.keys().map(|k| k.as_slice()).collect();
        assert_eq!(keys, vec![&b""[..], b"a", b"ab", b"b", &long[..]]);
        assert_eq!(m.get(&long[..]), Some(&3));
        let from: Vec<u8> = range_from(&m, b"aa").map(|(_, v)| *v).collect();
        assert_eq!(from, vec![2, 0, 3]);
    }
}
