//! The key of the ordered indexes (`btree`, and the locked [`super::index::BTreeIndex`]).
//!
//! Up to 16 bytes inline (no allocation per key; recovery of 4,000,000 8-byte keys spent a
//! quarter of its time allocating and faulting in one boxed key each), zero-padded, so that
//! two such keys compare as one big-endian 128-bit integer and then by length — where
//! `memcmp` calls were a fifth of building a tree from 4,000,000 sorted keys. Longer keys are
//! on the heap. Invariant: a `TreeKey` orders and compares exactly like its bytes.

use std::hash::{Hash, Hasher};

/// A key of an ordered index, ordered like its bytes.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum TreeKey {
    /// A key of at most [`INLINE_KEY`] bytes, zero-padded, and its length.
    Inline { bytes: [u8; INLINE_KEY], len: u8 },
    /// A longer key.
    Heap(Box<[u8]>),
}

/// The longest key kept inline.
const INLINE_KEY: usize = 16;

impl TreeKey {
    /// The tree key of `key`.
    pub(crate) fn new(key: &[u8]) -> TreeKey {
        let mut bytes = [0; INLINE_KEY];
        match bytes.get_mut(..key.len()) {
            Some(head) => {
                head.copy_from_slice(key);
                TreeKey::Inline {
                    bytes,
                    len: key.len() as u8,
                }
            }
            None => TreeKey::Heap(key.into()),
        }
    }

    /// The key's bytes.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            TreeKey::Inline { bytes, len } => &bytes[..usize::from(*len)],
            TreeKey::Heap(b) => b,
        }
    }
}

impl Ord for TreeKey {
    #[expect(
        clippy::big_endian_bytes,
        reason = "an in-memory comparison: big-endian is what orders like the bytes"
    )]
    fn cmp(&self, other: &TreeKey) -> std::cmp::Ordering {
        match (self, other) {
            // Zero padding: with equal padded bytes the shorter key is a prefix of the longer.
            (TreeKey::Inline { bytes: a, len: la }, TreeKey::Inline { bytes: b, len: lb }) => {
                u128::from_be_bytes(*a)
                    .cmp(&u128::from_be_bytes(*b))
                    .then(la.cmp(lb))
            }
            _ => self.as_bytes().cmp(other.as_bytes()),
        }
    }
}

impl PartialOrd for TreeKey {
    fn partial_cmp(&self, other: &TreeKey) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Hash for TreeKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match self {
            // Equal keys have equal variants (the length decides) and equal padded bytes.
            TreeKey::Inline { bytes, len } => {
                let (lo, hi) = bytes.split_at(8);
                state.write_u64(le_u64(lo));
                state.write_u64(le_u64(hi) ^ u64::from(*len));
            }
            TreeKey::Heap(b) => state.write(b),
        }
    }
}

/// The little-endian value of up to 8 bytes (zero-extended).
fn le_u64(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w[..b.len().min(8)].copy_from_slice(&b[..b.len().min(8)]);
    u64::from_le_bytes(w)
}

/// A fast hasher for `TreeKey`s (FxHash's multiply-rotate per word, then a MurmurHash3
/// finalizer so that every bit of the result depends on every input bit); not resistant
/// to chosen keys, like the `std` hasher with its fixed default keys that it replaces.
/// Engines use it for maps keyed by their own values (hetermm's read-cache map of
/// addresses), never for keys a user chooses.
#[derive(Default, Clone, Copy)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            self.write_u64(le_u64(chunk));
        }
        self.write_u64(bytes.len() as u64);
    }

    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn finish(&self) -> u64 {
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}

impl std::borrow::Borrow<[u8]> for TreeKey {
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Tree keys order and compare exactly like their bytes (the trees are searched
        /// with them and scanned in their order), across the inline/heap boundary.
        #[test]
        fn tree_keys_order_like_their_bytes(
            a in proptest::collection::vec(prop_oneof![Just(0u8), Just(1), Just(255), any::<u8>()], 0..40),
            b in proptest::collection::vec(prop_oneof![Just(0u8), Just(1), Just(255), any::<u8>()], 0..40),
        ) {
            let (ka, kb) = (TreeKey::new(&a), TreeKey::new(&b));
            prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
            prop_assert_eq!(ka == kb, a == b);
            prop_assert_eq!(ka.as_bytes(), &a[..]);
            let prefix = &a[..a.len() / 2];
            prop_assert_eq!(TreeKey::new(prefix).cmp(&ka), prefix.cmp(&a[..]));
        }
    }
}
