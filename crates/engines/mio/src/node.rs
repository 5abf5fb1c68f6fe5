//! The skiplist node layout shared by the DRAM MemTable arena and the PMTables on pmem
//! (MioDB §4.2: the arena is copied to pmem as it is, so both use one layout). Byte table in
//! `FORMAT.md` § Skiplist node:
//!
//! ```text
//! 0        8    seq_kind   seq << 8 | kind (1 = put, 2 = delete)
//! 8        2    key_len
//! 10       1    height     1 ..= MAX_HEIGHT
//! 11       1    reserved   0
//! 12       4    value_len
//! 16       8*h  next[0..h] (0 = none)
//! 16+8h    key, value, zero padding to 8
//! ```
//!
//! [`decode_header`] is total: it checks everything a node read back from pmem could get
//! wrong and returns an error, never panics (fuzz target `mio_node`).
//!
//! Thread safety: pure functions.

use tierkv_core::{Error, Result, Tier};

/// Offset of the seq/kind word.
pub const SEQ_KIND_OFF: usize = 0;
/// Offset of the key length.
pub const KEY_LEN_OFF: usize = SEQ_KIND_OFF + 8;
/// Offset of the height byte.
pub const HEIGHT_OFF: usize = KEY_LEN_OFF + 2;
/// Offset of the value length.
pub const VALUE_LEN_OFF: usize = HEIGHT_OFF + 2;
/// Offset of `next[0]`.
pub const LINKS_OFF: usize = VALUE_LEN_OFF + 4;
/// The tallest node (and the head's height).
pub const MAX_HEIGHT: usize = 16;
/// Bytes of the head node (no key, no value).
pub const HEAD_LEN: usize = LINKS_OFF + 8 * MAX_HEIGHT;
/// The largest seq a node can carry.
pub const MAX_SEQ: u64 = (1 << 56) - 1;

/// What a node records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A value.
    Put,
    /// A tombstone.
    Delete,
}

impl Kind {
    /// The kind byte.
    pub fn code(self) -> u8 {
        match self {
            Kind::Put => 1,
            Kind::Delete => 2,
        }
    }

    /// The kind of a kind byte.
    pub fn from_code(c: u8) -> Option<Kind> {
        match c {
            1 => Some(Kind::Put),
            2 => Some(Kind::Delete),
            _ => None,
        }
    }
}

/// Packs a seq and a kind into one word.
pub fn seq_kind(seq: u64, kind: Kind) -> u64 {
    (seq << 8) | u64::from(kind.code())
}

/// The decoded fixed part of a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeHeader {
    /// Sequence number (larger = newer).
    pub seq: u64,
    /// Put or delete.
    pub kind: Kind,
    /// Key bytes.
    pub key_len: usize,
    /// Links.
    pub height: usize,
    /// Value bytes.
    pub value_len: usize,
}

impl NodeHeader {
    /// Offset of the key inside the node.
    pub fn key_off(&self) -> usize {
        LINKS_OFF + 8 * self.height
    }
    /// Offset of the value inside the node.
    pub fn value_off(&self) -> usize {
        self.key_off() + self.key_len
    }
    /// The node's size, padded to 8.
    pub fn size(&self) -> usize {
        node_len(self.key_len, self.value_len, self.height)
    }
}

/// Offset of link `level` inside a node.
pub fn link_off(level: usize) -> u64 {
    (LINKS_OFF + 8 * level) as u64
}

/// The size of a node, padded to 8.
pub fn node_len(key_len: usize, value_len: usize, height: usize) -> usize {
    (LINKS_OFF + 8 * height + key_len + value_len).next_multiple_of(8)
}

/// Encodes the two header words of a node.
pub fn encode_header(
    seq: u64,
    kind: Kind,
    key_len: usize,
    height: usize,
    value_len: usize,
) -> [u64; 2] {
    let w1 =
        (key_len as u64 & 0xffff) | ((height as u64 & 0xff) << 16) | ((value_len as u64) << 32);
    [seq_kind(seq, kind), w1]
}

/// Decodes a node's two header words (the head node, with seq_kind 0, is refused: callers
/// never decode it). `at` names the node in errors.
pub fn decode_header(w0: u64, w1: u64, at: u64) -> Result<NodeHeader> {
    let bad = |what: &str| Error::corruption(Tier::Pmem, at, format!("skiplist node: {what}"));
    let kind = Kind::from_code((w0 & 0xff) as u8).ok_or_else(|| bad("invalid kind"))?;
    let key_len = (w1 & 0xffff) as usize;
    let height = ((w1 >> 16) & 0xff) as usize;
    if (w1 >> 24) & 0xff != 0 {
        return Err(bad("reserved byte is not zero"));
    }
    let value_len = (w1 >> 32) as usize;
    if height == 0 || height > MAX_HEIGHT {
        return Err(bad(&format!("height {height} outside 1..={MAX_HEIGHT}")));
    }
    if kind == Kind::Delete && value_len != 0 {
        return Err(bad("a delete with a value"));
    }
    Ok(NodeHeader {
        seq: w0 >> 8,
        kind,
        key_len,
        height,
        value_len,
    })
}

/// Decodes a node from bytes (for tools and fuzzing): the header, checked to lie in `bytes`.
pub fn decode_node(bytes: &[u8]) -> Result<NodeHeader> {
    let word = |i: usize| -> Result<u64> {
        bytes
            .get(i..i + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
            .ok_or_else(|| Error::corruption(Tier::Pmem, i as u64, "skiplist node: truncated"))
    };
    let h = decode_header(word(0)?, word(8)?, 0)?;
    if h.size() > bytes.len() {
        return Err(Error::corruption(
            Tier::Pmem,
            0,
            "skiplist node: runs past its buffer",
        ));
    }
    Ok(h)
}

/// A random height: geometric with p = 1/4 (LevelDB, MioDB), capped at [`MAX_HEIGHT`].
pub fn random_height(rng: &mut u64) -> usize {
    let mut h = 1;
    while h < MAX_HEIGHT {
        // xorshift64*
        *rng ^= *rng >> 12;
        *rng ^= *rng << 25;
        *rng ^= *rng >> 27;
        let r = rng.wrapping_mul(0x2545_f491_4f6c_dd1d);
        if r >> 62 != 0 {
            break;
        }
        h += 1;
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_bad_fields_are_refused() {
        let [a, b] = encode_header(77, Kind::Put, 5, 3, 900);
        let h = decode_header(a, b, 0).unwrap();
        assert_eq!(
            (h.seq, h.kind, h.key_len, h.height, h.value_len),
            (77, Kind::Put, 5, 3, 900)
        );
        assert_eq!(h.size(), node_len(5, 900, 3));
        assert!(decode_header(0, b, 0).is_err(), "kind 0");
        let [a, b] = encode_header(1, Kind::Put, 5, 0, 1);
        assert!(decode_header(a, b, 0).is_err(), "height 0");
        let [a, b] = encode_header(1, Kind::Delete, 5, 1, 1);
        assert!(decode_header(a, b, 0).is_err(), "delete with value");
        assert!(decode_node(&[1, 0, 0]).is_err());
    }

    #[test]
    fn heights_are_geometric() {
        let mut rng = 0x1234_5678u64;
        let hs: Vec<usize> = (0..10_000).map(|_| random_height(&mut rng)).collect();
        let ones = hs.iter().filter(|h| **h == 1).count();
        assert!((7_000..8_000).contains(&ones), "{ones}");
        assert!(hs.iter().all(|h| (1..=MAX_HEIGHT).contains(h)));
    }
}
