//! List chunks: how a list keeps up to [`SLOTS`] neighbouring elements in one store value
//! (list layout 2, metadata kind byte `L`; see [`crate::encoding::Meta::chunked`]).
//!
//! Position `p` of a chunked list lives in chunk `p.div_euclid(SLOTS)` at slot
//! `p.rem_euclid(SLOTS)`. A chunk is stored under the list's element prefix + `'c'` + the
//! chunk number made order-preserving (`crate::commands`' list module builds the key). A
//! push or pop at either end rewrites one small chunk and the metadata instead of adding
//! or removing one store key per element: consecutive pushes hit the same hot key, so the
//! engine's index neither grows nor misses the cache per element (issue 25's list
//! benchmark: one new hash-table entry per LPUSH was the largest cost on `dram:hash`), and
//! LRANGE reads one value per 32 elements.
//!
//! ```text
//! chunk   first(u8, < SLOTS) | entry * n        (n >= 1, first + n <= SLOTS)
//! entry   len(u8, 0..=INLINE_MAX) | bytes(len)  an element stored inline
//!       | 0xFE                                  a hole: no element at this slot
//!       | 0xFF                                  an element stored on its own, under the
//!                                               list's element prefix + its position
//!                                               (as in layout 1), because it is longer
//!                                               than INLINE_MAX bytes
//! ```
//! Entry `i` is slot `first + i`. The first and the last entry are never holes (a chunk
//! is trimmed when it is written; a chunk with no entry left is deleted). Holes appear only
//! where an element inside a chunk was deleted while its neighbours stay (LTRIM and LREM
//! rewrite ranges; a list's live slots are always contiguous, so a hole is never read).
//!
//! Bounds: a chunk takes at most `1 + SLOTS * (1 + INLINE_MAX)` = 1,057 bytes, below every
//! engine's value limit, so a push rewrites at most about a kilobyte (typically a few
//! dozen bytes: small elements are what lists hold).
//!
//! Invariants: [`ChunkRef::parse`] accepts exactly the bytes [`Chunk::bytes`] can produce
//! (canonical: no leading or trailing hole, no trailing bytes, no unknown tag) and reports
//! anything else as an error, never a panic (fuzzed: `fuzz/fuzz_targets/server_list_chunk.rs`).
//!
//! Thread-safety: plain values; the list commands hold the key's lock.

use crate::encoding::DecodeError;

/// Slots per chunk.
pub const SLOTS: i64 = 32;
/// Longest element stored inline.
pub const INLINE_MAX: usize = 32;
/// Largest encoded chunk.
pub const MAX_CHUNK_BYTES: usize = 1 + SLOTS as usize * (1 + INLINE_MAX);

const HOLE: u8 = 0xFE;
const EXTERNAL: u8 = 0xFF;

/// The chunk number and the slot of position `p`.
pub fn locate(p: i64) -> (i64, usize) {
    (p.div_euclid(SLOTS), p.rem_euclid(SLOTS) as usize)
}

/// What a slot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry<'a> {
    /// The element itself.
    Inline(&'a [u8]),
    /// The element is stored under its own position key.
    External,
    /// Nothing.
    Hole,
}

impl Entry<'_> {
    fn encoded_len(&self) -> usize {
        match self {
            Entry::Inline(b) => 1 + b.len(),
            Entry::External | Entry::Hole => 1,
        }
    }

    fn encode_into(&self, out: &mut Vec<u8>) {
        match self {
            Entry::Inline(b) => {
                out.push(u8::try_from(b.len()).unwrap_or(u8::MAX));
                out.extend_from_slice(b);
            }
            Entry::External => out.push(EXTERNAL),
            Entry::Hole => out.push(HOLE),
        }
    }
}

/// The byte offsets of a chunk's entries: `at[i]..at[i + 1]` is entry `i`.
struct Offsets {
    at: [u16; SLOTS as usize + 1],
    n: usize,
}

/// A parsed, borrowed chunk.
#[derive(Clone, Copy, Debug)]
pub struct ChunkRef<'a> {
    bytes: &'a [u8],
    first: usize,
    n: usize,
}

fn bad(what: &str) -> DecodeError {
    crate::encoding::decode_error(format!("list chunk: {what}"))
}

/// The entry starting at `bytes[i]` and its encoded length.
fn entry_at(bytes: &[u8], i: usize) -> Result<(Entry<'_>, usize), DecodeError> {
    let tag = *bytes.get(i).ok_or_else(|| bad("truncated"))?;
    match tag {
        HOLE => Ok((Entry::Hole, 1)),
        EXTERNAL => Ok((Entry::External, 1)),
        t if usize::from(t) <= INLINE_MAX => {
            let len = usize::from(t);
            let b = bytes
                .get(i + 1..i + 1 + len)
                .ok_or_else(|| bad("an element runs past the end"))?;
            Ok((Entry::Inline(b), 1 + len))
        }
        t => Err(bad(&format!("unknown entry tag {t:#04x}"))),
    }
}

/// The offsets of `bytes`' entries, checking that each is whole, that there are no more
/// than the slots from `first` on, and that no tag is unknown.
fn offsets(bytes: &[u8], first: usize) -> Result<Offsets, DecodeError> {
    let mut o = Offsets {
        at: [0; SLOTS as usize + 1],
        n: 0,
    };
    let room = (SLOTS as usize).saturating_sub(first);
    let mut i = 1;
    o.at[0] = 1;
    while let Some(&tag) = bytes.get(i) {
        if o.n >= room {
            return Err(bad("more entries than slots"));
        }
        i += match tag {
            HOLE | EXTERNAL => 1,
            t if usize::from(t) <= INLINE_MAX => 1 + usize::from(t),
            t => return Err(bad(&format!("unknown entry tag {t:#04x}"))),
        };
        if i > bytes.len() {
            return Err(bad("an element runs past the end"));
        }
        o.n += 1;
        // i <= MAX_CHUNK_BYTES here (at most SLOTS entries of at most 1 + INLINE_MAX).
        o.at[o.n] = i as u16;
    }
    Ok(o)
}

/// Checks a whole chunk (module doc); its offsets.
fn check(bytes: &[u8]) -> Result<(usize, Offsets), DecodeError> {
    let first = usize::from(*bytes.first().ok_or_else(|| bad("empty"))?);
    if first >= SLOTS as usize {
        return Err(bad(&format!("first slot {first} out of range")));
    }
    let o = offsets(bytes, first)?;
    if o.n == 0 {
        return Err(bad("no entries"));
    }
    let is_hole = |i: usize| bytes.get(usize::from(o.at[i])) == Some(&HOLE);
    if is_hole(0) || is_hole(o.n - 1) {
        return Err(bad("a hole at an end"));
    }
    Ok((first, o))
}

impl<'a> ChunkRef<'a> {
    /// Parses and checks `bytes` (module doc).
    pub fn parse(bytes: &'a [u8]) -> Result<ChunkRef<'a>, DecodeError> {
        let (first, o) = check(bytes)?;
        Ok(ChunkRef {
            bytes,
            first,
            n: o.n,
        })
    }

    /// The first slot with an entry.
    pub fn first(&self) -> usize {
        self.first
    }

    /// One past the last slot with an entry.
    pub fn end(&self) -> usize {
        self.first + self.n
    }

    /// The entries from slot `from` (clamped to the chunk's range) on, with their slots.
    pub fn entries_from(&self, from: usize) -> impl Iterator<Item = (usize, Entry<'a>)> + 'a {
        let (bytes, first, n) = (self.bytes, self.first, self.n);
        let mut i = 1;
        let mut slot = first;
        std::iter::from_fn(move || {
            while slot < first + n {
                let (e, len) = entry_at(bytes, i).ok()?;
                let s = slot;
                i += len;
                slot += 1;
                if s >= from {
                    return Some((s, e));
                }
            }
            None
        })
    }

    /// What slot `slot` holds (a hole outside the chunk's range).
    pub fn get(&self, slot: usize) -> Entry<'a> {
        self.entries_from(slot)
            .next()
            .filter(|(s, _)| *s == slot)
            .map_or(Entry::Hole, |(_, e)| e)
    }
}

/// An owned chunk being edited, with its entries' offsets kept (reads are O(1)). Two
/// chunks are equal when their bytes are.
#[derive(Clone, Debug)]
pub struct Chunk {
    /// Encoded bytes; empty for a chunk with no entries.
    bytes: Vec<u8>,
    /// `at[i]..at[i + 1]` is entry `i`, for `i < n`.
    at: [u16; SLOTS as usize + 1],
    n: usize,
}

impl PartialEq for Chunk {
    fn eq(&self, other: &Chunk) -> bool {
        self.bytes == other.bytes
    }
}

impl Eq for Chunk {}

impl Default for Chunk {
    fn default() -> Chunk {
        Chunk {
            bytes: Vec::new(),
            at: [0; SLOTS as usize + 1],
            n: 0,
        }
    }
}

impl Chunk {
    /// An empty chunk.
    pub fn new() -> Chunk {
        Chunk::default()
    }

    /// A chunk read back from the store, checked.
    pub fn from_stored(bytes: Vec<u8>) -> Result<Chunk, DecodeError> {
        let (_, o) = check(&bytes)?;
        Ok(Chunk {
            bytes,
            at: o.at,
            n: o.n,
        })
    }

    /// Recomputes the offsets of bytes built here (canonical by construction).
    fn reindex(&mut self) {
        match self.bytes.first() {
            Some(&first) => {
                let o = offsets(&self.bytes, usize::from(first)).unwrap_or(Offsets {
                    at: [0; SLOTS as usize + 1],
                    n: 0,
                });
                self.at = o.at;
                self.n = o.n;
            }
            None => self.n = 0,
        }
    }

    /// True when no slot holds an element (the chunk is deleted rather than stored).
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The bytes to store (empty when [`Chunk::is_empty`]).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    fn first(&self) -> usize {
        self.bytes.first().map_or(0, |&f| usize::from(f))
    }

    /// A parsed view.
    pub fn view(&self) -> Option<ChunkRef<'_>> {
        (self.n > 0).then(|| ChunkRef {
            bytes: &self.bytes,
            first: self.first(),
            n: self.n,
        })
    }

    /// What slot `slot` holds.
    pub fn get(&self, slot: usize) -> Entry<'_> {
        let first = self.first();
        if self.n == 0 || slot < first || slot >= first + self.n {
            return Entry::Hole;
        }
        entry_at(&self.bytes, usize::from(self.at[slot - first])).map_or(Entry::Hole, |(e, _)| e)
    }

    /// Puts `entry` into `slot` (< [`SLOTS`]), filling any gap to the existing entries with
    /// holes; a hole at an end is trimmed away.
    pub fn set(&mut self, slot: usize, entry: Entry<'_>) {
        debug_assert!(slot < SLOTS as usize);
        if self.n == 0 {
            if entry != Entry::Hole {
                self.bytes.clear();
                self.bytes.push(slot as u8);
                entry.encode_into(&mut self.bytes);
                self.reindex();
            }
            return;
        }
        let (first, end) = (self.first(), self.first() + self.n);
        if slot == end && entry != Entry::Hole {
            // An append (RPUSH): in place.
            entry.encode_into(&mut self.bytes);
            self.n += 1;
            self.at[self.n] = self.bytes.len() as u16;
            return;
        }
        if slot + 1 == first && entry != Entry::Hole {
            // A prepend (LPUSH): the new entry replaces the first-slot byte's place, the
            // offsets shift by its length.
            let mut head = Vec::with_capacity(1 + entry.encoded_len());
            head.push(slot as u8);
            entry.encode_into(&mut head);
            let grow = head.len() - 1;
            self.bytes.splice(0..1, head);
            for k in (0..=self.n).rev() {
                self.at[k + 1] = self.at[k] + grow as u16;
            }
            self.at[0] = 1;
            self.n += 1;
            return;
        }
        if slot == first && entry == Entry::Hole && self.n > 1 {
            // The first entry goes (LPOP): drop it and any holes after it in place.
            let is_hole = |i: usize| self.bytes.get(usize::from(self.at[i])) == Some(&HOLE);
            let mut k = 1;
            while k < self.n && is_hole(k) {
                k += 1;
            }
            // k < n: the last entry is never a hole.
            let cut = self.at[k] - 1;
            self.bytes.drain(1..usize::from(self.at[k]));
            self.bytes[0] = (first + k) as u8;
            for j in 0..=(self.n - k) {
                self.at[j] = self.at[j + k] - cut;
            }
            self.n -= k;
            return;
        }
        if slot + 1 == end && entry == Entry::Hole {
            // The last entry goes (RPOP): truncate, then any holes before it.
            self.n -= 1;
            while self.n > 0 && self.bytes.get(usize::from(self.at[self.n - 1])) == Some(&HOLE) {
                self.n -= 1;
            }
            if self.n == 0 {
                self.bytes.clear();
            } else {
                self.bytes.truncate(usize::from(self.at[self.n]));
            }
            return;
        }
        if entry == Entry::Hole && (slot >= end || slot < first) {
            return;
        }
        let mut b = Vec::with_capacity(self.bytes.len() + entry.encoded_len() + SLOTS as usize);
        if slot < first {
            b.push(slot as u8);
            entry.encode_into(&mut b);
            b.resize(b.len() + (first - slot - 1), HOLE);
            b.extend_from_slice(&self.bytes[1..]);
        } else if slot >= end {
            b.extend_from_slice(&self.bytes);
            b.resize(b.len() + (slot - end), HOLE);
            entry.encode_into(&mut b);
        } else {
            let i = slot - first;
            let (from, to) = (usize::from(self.at[i]), usize::from(self.at[i + 1]));
            b.extend_from_slice(&self.bytes[..from]);
            entry.encode_into(&mut b);
            b.extend_from_slice(&self.bytes[to..]);
        }
        self.bytes = b;
        self.reindex();
        self.trim();
    }

    /// Drops holes at both ends (and the whole chunk when nothing else is left).
    fn trim(&mut self) {
        let Some(&first) = self.bytes.first() else {
            return;
        };
        let is_hole = |i: usize| self.bytes.get(usize::from(self.at[i])) == Some(&HOLE);
        let (mut lo, mut hi) = (0, self.n);
        while lo < hi && is_hole(lo) {
            lo += 1;
        }
        while hi > lo && is_hole(hi - 1) {
            hi -= 1;
        }
        if lo == hi {
            self.bytes.clear();
            self.n = 0;
            return;
        }
        if lo == 0 && hi == self.n {
            return;
        }
        let mut b = Vec::with_capacity(self.bytes.len());
        b.push(first + lo as u8);
        b.extend_from_slice(&self.bytes[usize::from(self.at[lo])..usize::from(self.at[hi])]);
        self.bytes = b;
        self.reindex();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(c: &Chunk) -> Vec<(usize, Entry<'_>)> {
        c.view().map_or(Vec::new(), |v| v.entries_from(0).collect())
    }

    #[test]
    fn positions_map_to_chunks_and_slots() {
        assert_eq!(locate(0), (0, 0));
        assert_eq!(locate(31), (0, 31));
        assert_eq!(locate(32), (1, 0));
        assert_eq!(locate(-1), (-1, 31));
        assert_eq!(locate(-32), (-1, 0));
        assert_eq!(locate(-33), (-2, 31));
        assert_eq!(locate(i64::MIN), (i64::MIN / 32, 0));
    }

    #[test]
    fn pushes_at_both_ends_and_pops_keep_a_canonical_chunk() {
        let mut c = Chunk::new();
        c.set(5, Entry::Inline(b"e"));
        c.set(4, Entry::Inline(b"d"));
        c.set(6, Entry::External);
        assert_eq!(
            slots(&c),
            vec![
                (4, Entry::Inline(b"d")),
                (5, Entry::Inline(b"e")),
                (6, Entry::External)
            ]
        );
        assert_eq!(c.bytes(), &[4, 1, b'd', 1, b'e', EXTERNAL]);
        c.set(4, Entry::Hole);
        assert_eq!(c.bytes(), &[5, 1, b'e', EXTERNAL]);
        c.set(6, Entry::Hole);
        assert_eq!(c.bytes(), &[5, 1, b'e']);
        c.set(5, Entry::Hole);
        assert!(c.is_empty());
        assert_eq!(c.get(5), Entry::Hole);
    }

    #[test]
    fn gaps_are_filled_with_holes_and_trimmed_when_an_end_goes() {
        let mut c = Chunk::new();
        c.set(0, Entry::Inline(b""));
        c.set(3, Entry::Inline(b"xyz"));
        assert_eq!(c.bytes(), &[0, 0, HOLE, HOLE, 3, b'x', b'y', b'z']);
        assert_eq!(c.get(1), Entry::Hole);
        c.set(2, Entry::Inline(b"q"));
        c.set(0, Entry::Hole);
        assert_eq!(c.bytes(), &[2, 1, b'q', 3, b'x', b'y', b'z']);
        c.set(31, Entry::Inline(b"end"));
        assert_eq!(c.get(31), Entry::Inline(b"end"));
        assert!(Chunk::from_stored(c.bytes().to_vec()).is_ok());
        c.set(31, Entry::Hole);
        assert_eq!(c.bytes(), &[2, 1, b'q', 3, b'x', b'y', b'z']);
    }

    #[test]
    fn replacing_an_entry_keeps_its_neighbours() {
        let mut c = Chunk::new();
        for s in 0..SLOTS as usize {
            c.set(s, Entry::Inline(format!("{s}").as_bytes()));
        }
        c.set(7, Entry::Inline(&[b'x'; INLINE_MAX]));
        c.set(8, Entry::External);
        let all = slots(&c);
        assert_eq!(all.len(), SLOTS as usize);
        assert_eq!(all[6], (6, Entry::Inline(b"6")));
        assert_eq!(all[7], (7, Entry::Inline(&[b'x'; INLINE_MAX])));
        assert_eq!(all[8], (8, Entry::External));
        assert_eq!(all[9], (9, Entry::Inline(b"9")));
        assert_eq!(
            c.view().unwrap().entries_from(30).collect::<Vec<_>>(),
            vec![(30, Entry::Inline(b"30")), (31, Entry::Inline(b"31"))]
        );
    }

    #[test]
    fn a_full_chunk_of_the_longest_inline_elements_fits_the_bound() {
        let mut c = Chunk::new();
        for s in 0..SLOTS as usize {
            c.set(s, Entry::Inline(&[7; INLINE_MAX]));
        }
        assert_eq!(c.bytes().len(), MAX_CHUNK_BYTES);
        assert!(Chunk::from_stored(c.bytes().to_vec()).is_ok());
    }

    #[derive(Clone, Debug)]
    enum Op {
        Inline(usize, Vec<u8>),
        External(usize),
        Hole(usize),
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        let slot = 0..SLOTS as usize;
        prop_oneof![
            (
                slot.clone(),
                proptest::collection::vec(any::<u8>(), 0..=INLINE_MAX)
            )
                .prop_map(|(s, v)| Op::Inline(s, v)),
            slot.clone().prop_map(Op::External),
            slot.prop_map(Op::Hole),
        ]
    }

    proptest::proptest! {
        /// Any sequence of edits reads back like an array of slots, and the bytes stay
        /// canonical (they parse, and reparse to the same entries).
        #[test]
        fn edits_match_an_array_of_slots(ops in proptest::collection::vec(op(), 0..200)) {
            let mut c = Chunk::new();
            let mut model: Vec<Option<Option<Vec<u8>>>> = vec![None; SLOTS as usize];
            for op in ops {
                match op {
                    Op::Inline(s, v) => {
                        c.set(s, Entry::Inline(&v));
                        model[s] = Some(Some(v));
                    }
                    Op::External(s) => {
                        c.set(s, Entry::External);
                        model[s] = Some(None);
                    }
                    Op::Hole(s) => {
                        c.set(s, Entry::Hole);
                        model[s] = None;
                    }
                }
                for (s, want) in model.iter().enumerate() {
                    let got = c.get(s);
                    let expect = match want {
                        None => Entry::Hole,
                        Some(None) => Entry::External,
                        Some(Some(v)) => Entry::Inline(v),
                    };
                    proptest::prop_assert_eq!(got, expect, "slot {}", s);
                }
                let live = model.iter().filter(|m| m.is_some()).count();
                proptest::prop_assert_eq!(c.is_empty(), live == 0);
                if !c.is_empty() {
                    let again = Chunk::from_stored(c.bytes().to_vec()).unwrap();
                    proptest::prop_assert_eq!(&again, &c);
                }
            }
        }
    }

    #[test]
    fn damaged_chunks_are_errors() {
        for bad in [
            &[][..],
            &[32, 0],
            &[0],
            &[0, HOLE, 1, b'a'],
            &[0, 1, b'a', HOLE],
            &[0, 2, b'a'],
            &[0, 0xF0],
            &[31, 0, 0],
        ] {
            assert!(ChunkRef::parse(bad).is_err(), "{bad:?}");
            assert!(Chunk::from_stored(bad.to_vec()).is_err(), "{bad:?}");
        }
        let mut long = vec![0u8];
        long.extend(std::iter::repeat_n(0u8, SLOTS as usize + 1));
        assert!(ChunkRef::parse(&long).is_err());
        long.truncate(1 + SLOTS as usize);
        assert!(ChunkRef::parse(&long).is_ok());
    }
}
