//! Search and iteration over a skiplist in the node layout of `node.rs`, wherever its
//! nodes live: in a DRAM arena (links are arena offsets) or in pmem (links are pool
//! offsets). MioDB §4.2-4.3: MemTables and PMTables are one structure.
//!
//! Order: key ascending, then seq descending, so the first node of a key is its newest
//! version. Every link read from a source is `Acquire`, so a node published by a `Release`
//! store of its predecessor's link is read whole.
//!
//! Thread safety: readers only; a source's writer publishes nodes with Release stores.

use std::borrow::Cow;
use std::cmp::Ordering;

use tierkv_core::Result;

use crate::node::{self, Kind, LINKS_OFF, NodeHeader};

/// Where a skiplist's nodes are read from.
pub trait Source {
    /// The aligned word at `off` (Acquire).
    fn word(&self, off: u64) -> Result<u64>;
    /// `len` bytes at `off`.
    fn bytes(&self, off: u64, len: usize) -> Result<Cow<'_, [u8]>>;
    /// The `len` bytes at `off` compared with `key` (a source that would copy them for
    /// [`Source::bytes`] compares them in place).
    fn cmp_key(&self, off: u64, len: usize, key: &[u8]) -> Result<Ordering> {
        Ok(self.bytes(off, len)?.as_ref().cmp(key))
    }
    /// Hints that the node at `off` will be read soon (nothing by default).
    fn prefetch_node(&self, _off: u64) {}
}

impl<T: Source + ?Sized> Source for &T {
    fn word(&self, off: u64) -> Result<u64> {
        (**self).word(off)
    }
    fn bytes(&self, off: u64, len: usize) -> Result<Cow<'_, [u8]>> {
        (**self).bytes(off, len)
    }
    fn cmp_key(&self, off: u64, len: usize, key: &[u8]) -> Result<Ordering> {
        (**self).cmp_key(off, len, key)
    }
    fn prefetch_node(&self, off: u64) {
        (**self).prefetch_node(off)
    }
}

/// One version of a key, as read from a skiplist.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The key.
    pub key: Vec<u8>,
    /// Its seq.
    pub seq: u64,
    /// The value; `None` for a tombstone.
    pub value: Option<Vec<u8>>,
    /// The node's height (kept when a compaction copies it).
    pub height: usize,
}

/// The header of the node at `off`.
pub fn header<S: Source + ?Sized>(s: &S, off: u64) -> Result<NodeHeader> {
    node::decode_header(s.word(off)?, s.word(off + 8)?, off)
}

/// Link `level` of the node at `off`.
pub fn next<S: Source + ?Sized>(s: &S, off: u64, level: usize) -> Result<u64> {
    s.word(off + (LINKS_OFF + 8 * level) as u64)
}

/// The key of the node at `off`.
pub fn key<'a, S: Source + ?Sized>(s: &'a S, off: u64, h: &NodeHeader) -> Result<Cow<'a, [u8]>> {
    s.bytes(off + h.key_off() as u64, h.key_len)
}

/// The whole entry at `off`.
pub fn entry<S: Source + ?Sized>(s: &S, off: u64) -> Result<Entry> {
    let h = header(s, off)?;
    let key = key(s, off, &h)?.into_owned();
    let value = match h.kind {
        Kind::Put => Some(
            s.bytes(off + h.value_off() as u64, h.value_len)?
                .into_owned(),
        ),
        Kind::Delete => None,
    };
    Ok(Entry {
        key,
        seq: h.seq,
        value,
        height: h.height,
    })
}

/// Compares the node at `off` (header `h`) with the target (`key`, `seq`) in skiplist
/// order, reading the node's key in place.
pub fn cmp_at<S: Source + ?Sized>(
    s: &S,
    off: u64,
    h: &NodeHeader,
    key: &[u8],
    seq: u64,
) -> Result<Ordering> {
    Ok(s.cmp_key(off + h.key_off() as u64, h.key_len, key)?
        .then(seq.cmp(&h.seq)))
}

/// Compares the node (`nkey`, `nseq`) with the target (`key`, `seq`) in skiplist order.
pub fn cmp_node(nkey: &[u8], nseq: u64, key: &[u8], seq: u64) -> Ordering {
    nkey.cmp(key).then(seq.cmp(&nseq))
}

/// Fills `preds` with, per level, the last node before (`key`, `seq`) in skiplist order,
/// starting from the head at `head`; returns the node after `preds[0]` (0 if none).
pub fn find_preds<S: Source + ?Sized>(
    s: &S,
    head: u64,
    key: &[u8],
    seq: u64,
    preds: &mut [u64; node::MAX_HEIGHT],
) -> Result<u64> {
    find_preds_from(s, head, &Finger::default(), key, seq, preds)
}

/// Where the last search of a merge of sorted input ended, per level (0: nowhere): the
/// next search starts there instead of at the head (a finger search), so a merge of n
/// nodes into a list costs about n + m node visits instead of n·log m.
///
/// Valid while every node it holds stays in the list at its level: the caller owns the
/// list's changes meanwhile (the zero-copy merge of a level, the lazy copy under the
/// repository mutex) and never unlinks a node before the last search's target.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Finger([u64; node::MAX_HEIGHT]);

impl Finger {
    /// After an insert of `node` (`height` levels) with predecessors `preds`: the node
    /// below its height, the predecessors above.
    pub fn after_insert(&mut self, preds: &[u64; node::MAX_HEIGHT], node: u64, height: usize) {
        for (l, f) in self.0.iter_mut().enumerate() {
            *f = if l < height { node } else { preds[l] };
        }
    }

    /// After a search that inserted nothing: its predecessors.
    pub fn after_search(&mut self, preds: &[u64; node::MAX_HEIGHT]) {
        self.0 = *preds;
    }
}

/// [`find_preds`] starting each level from the finger's node where that lies further on
/// than where the level above ended and still before (`key`, `seq`) (so a finger that
/// does not fit is ignored, never followed past the target).
pub fn find_preds_from<S: Source + ?Sized>(
    s: &S,
    head: u64,
    finger: &Finger,
    key: &[u8],
    seq: u64,
    preds: &mut [u64; node::MAX_HEIGHT],
) -> Result<u64> {
    let mut x = head;
    let mut after = 0;
    for level in (0..node::MAX_HEIGHT).rev() {
        let f = finger.0[level];
        // The finger holds the same node at many neighbouring levels (the last inserted
        // node below its height, one predecessor above). A node the level above already
        // weighed needs no second look: it was taken (and `x` is it or lies past it) or
        // it lay at or past the target, or not past `x`, and `x` only moves on.
        let weighed = finger.0.get(level + 1) == Some(&f);
        if f != 0 && f != x && f != head && !weighed {
            let hf = header(s, f)?;
            let kf = key_of(s, f, &hf)?;
            let before_target = cmp_at(s, f, &hf, key, seq)? == Ordering::Less;
            let further = x == head || {
                let hx = header(s, x)?;
                cmp_node(&key_of(s, x, &hx)?, hx.seq, &kf, hf.seq) == Ordering::Less
            };
            if before_target && further {
                x = f;
            }
        }
        loop {
            let n = next(s, x, level)?;
            if n == 0 {
                after = 0;
                break;
            }
            // The node that ended the level above is known not to lie before the target.
            if n == after {
                break;
            }
            prefetch_descent(s, x, n, level)?;
            let h = header(s, n)?;
            if cmp_at(s, n, &h, key, seq)? == Ordering::Less {
                x = n;
            } else {
                after = n;
                break;
            }
        }
        preds[level] = x;
    }
    Ok(after)
}

/// While the search at `level` reads `n`, the node after `x` one level down: where the
/// search goes next if `n` is past the target. Its fetch then overlaps `n`'s instead of
/// following it (a search ends each level with such an overshoot; on pmem tables each
/// node is a cache miss).
fn prefetch_descent<S: Source + ?Sized>(s: &S, x: u64, n: u64, level: usize) -> Result<()> {
    if level > 0 {
        let below = next(s, x, level - 1)?;
        if below != 0 && below != n {
            s.prefetch_node(below);
        }
    }
    Ok(())
}

fn key_of<'a, S: Source + ?Sized>(s: &'a S, off: u64, h: &NodeHeader) -> Result<Cow<'a, [u8]>> {
    key(s, off, h)
}

/// The first node at or after `key` (its newest version), or 0.
///
/// IMPORTANT: the answer is the node the level-0 walk stopped at, never a second load of
/// its predecessor's link: in a MemTable a writer may link a new node between the two
/// loads, and that node may lie *before* `key` (a scan would start below its start) or be
/// another key (a get would miss `key` and read an older version further down).
pub fn seek<S: Source + ?Sized>(s: &S, head: u64, key: &[u8]) -> Result<u64> {
    seek_from(s, head, None, key)
}

/// [`seek`] starting at `start` instead of the head when given: a node still linked in
/// the list, taller than [`INDEX_LEVEL`](crate::seek_index::INDEX_LEVEL), whose key is
/// smaller than `key` (what a table's seek index answers); the search then walks only the
/// levels below that height.
pub fn seek_from<S: Source + ?Sized>(
    s: &S,
    head: u64,
    start: Option<u64>,
    key: &[u8],
) -> Result<u64> {
    let (mut x, top) = match start {
        Some(n) => (n, crate::seek_index::INDEX_LEVEL + 1),
        None => (head, node::MAX_HEIGHT),
    };
    let mut at = 0;
    for level in (0..top).rev() {
        loop {
            let n = next(s, x, level)?;
            if n == 0 {
                at = 0;
                break;
            }
            if n == at {
                break; // ended the level above: not before `key`
            }
            prefetch_descent(s, x, n, level)?;
            let h = header(s, n)?;
            if s.cmp_key(n + h.key_off() as u64, h.key_len, key)? == Ordering::Less {
                x = n;
            } else {
                at = n;
                break;
            }
        }
    }
    Ok(at)
}

/// The newest version of `key`: `Some(entry)` (a tombstone has no value) or `None`.
pub fn get<S: Source + ?Sized>(s: &S, head: u64, key: &[u8]) -> Result<Option<Entry>> {
    get_from(s, head, None, key)
}

/// [`get`] whose search starts at `start` ([`seek_from`]).
pub fn get_from<S: Source + ?Sized>(
    s: &S,
    head: u64,
    start: Option<u64>,
    key: &[u8],
) -> Result<Option<Entry>> {
    let n = seek_from(s, head, start, key)?;
    if n == 0 {
        return Ok(None);
    }
    let h = header(s, n)?;
    if s.cmp_key(n + h.key_off() as u64, h.key_len, key)? != Ordering::Equal {
        return Ok(None);
    }
    entry(s, n).map(Some)
}

/// Walks the list of `level` from the head at `head`, calling `visit(off, header, key)` on
/// every node and checking that each follows its predecessor in skiplist order (a node
/// out of order is `Corruption`). Returns the nodes visited.
pub fn walk_level<S: Source + ?Sized>(
    s: &S,
    head: u64,
    level: usize,
    mut visit: impl FnMut(u64, &NodeHeader, &[u8]) -> Result<()>,
) -> Result<u64> {
    let mut at = next(s, head, level)?;
    let mut prev: Option<(Vec<u8>, u64)> = None;
    let mut n = 0;
    while at != 0 {
        let h = header(s, at)?;
        let k = key(s, at, &h)?.into_owned();
        if let Some((pk, ps)) = &prev
            && cmp_node(pk, *ps, &k, h.seq) != Ordering::Less
        {
            return Err(tierkv_core::Error::corruption(
                tierkv_core::Tier::Pmem,
                at,
                format!("skiplist level {level} out of order"),
            ));
        }
        visit(at, &h, &k)?;
        n += 1;
        prev = Some((k, h.seq));
        at = next(s, at, level)?;
    }
    Ok(n)
}

/// A forward cursor over the nodes of one skiplist (every version).
pub struct Cursor<S> {
    src: S,
    at: u64,
}

impl<S: Source> Cursor<S> {
    /// A cursor at the first node at or after `key`.
    pub fn seek(src: S, head: u64, key: &[u8]) -> Result<Self> {
        Cursor::seek_from(src, head, None, key)
    }

    /// [`Cursor::seek`] whose search starts at `start` ([`seek_from`]).
    pub fn seek_from(src: S, head: u64, start: Option<u64>, key: &[u8]) -> Result<Self> {
        let at = seek_from(&src, head, start, key)?;
        Ok(Cursor { src, at })
    }

    /// The node under the cursor, if any.
    pub fn current(&self) -> Result<Option<Entry>> {
        if self.at == 0 {
            return Ok(None);
        }
        entry(&self.src, self.at).map(Some)
    }

    /// The key under the cursor, if any (without copying the value).
    pub fn current_key(&self) -> Result<Option<(Vec<u8>, u64)>> {
        if self.at == 0 {
            return Ok(None);
        }
        let h = header(&self.src, self.at)?;
        Ok(Some((key(&self.src, self.at, &h)?.into_owned(), h.seq)))
    }

    /// The key under the cursor copied into `key` (its old contents replaced) and its seq;
    /// `None` at the end (then `key` is left alone).
    pub fn current_key_into(&self, key: &mut Vec<u8>) -> Result<Option<u64>> {
        if self.at == 0 {
            return Ok(None);
        }
        let h = header(&self.src, self.at)?;
        key.clear();
        key.extend_from_slice(&self::key(&self.src, self.at, &h)?);
        // The node after this one is where the cursor goes next: its fetch (a cache miss on
        // pmem) then overlaps the work until the merge advances this cursor.
        let after = next(&self.src, self.at, 0)?;
        if after != 0 {
            self.src.prefetch_node(after);
        }
        Ok(Some(h.seq))
    }

    /// Moves to the next node.
    pub fn advance(&mut self) -> Result<()> {
        if self.at != 0 {
            self.at = next(&self.src, self.at, 0)?;
        }
        Ok(())
    }

    /// Where the cursor is (0 at the end).
    pub fn position(&self) -> u64 {
        self.at
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arena::Arena;
    use crate::node::Kind;

    /// A finger search over probes in ascending order finds exactly the predecessors a
    /// search from the head finds, at every level (the finger then holds the same node at
    /// many levels, which the search weighs once).
    #[test]
    fn a_finger_search_finds_the_predecessors_a_search_from_the_head_finds() {
        let a = Arena::new(1 << 20, 11);
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for seq in 1..=3_000u64 {
            let k = format!("k{:05}", next() % 20_000);
            a.insert(seq, Kind::Put, k.as_bytes(), b"v").unwrap();
        }
        let mut probes: Vec<(String, u64)> = (0..2_000)
            .map(|_| (format!("k{:05}", next() % 20_500), next() % 4_000))
            .collect();
        probes.sort_by(|x, y| x.0.cmp(&y.0).then(y.1.cmp(&x.1)));
        let mut finger = Finger::default();
        for (key, seq) in &probes {
            let (mut from_head, mut from_finger) = ([0; node::MAX_HEIGHT], [0; node::MAX_HEIGHT]);
            let a1 = find_preds(&a, 0, key.as_bytes(), *seq, &mut from_head).unwrap();
            let a2 =
                find_preds_from(&a, 0, &finger, key.as_bytes(), *seq, &mut from_finger).unwrap();
            assert_eq!(from_finger, from_head, "predecessors of {key}@{seq}");
            assert_eq!(a1, a2, "the node after {key}@{seq}");
            finger.after_search(&from_finger);
        }
    }
}
