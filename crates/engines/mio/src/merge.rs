//! A merge of several skiplists (MemTables and PMTables) and, in `mio:flash`, of flash
//! table streams (`flash.rs`) into one stream holding the newest version of each key: what
//! a scan reads (§4.6, "scans merge over all tables") and what a copying compaction writes. Seqs are global and grow with every write, so
//! the newest version of a key is the one with the largest seq, wherever it is.
//!
//! Thread safety: a merge belongs to one thread.

use tierkv_core::{Error, Result, Tier};

use crate::flash::FlashStream;
use crate::skiplist::{Cursor, Entry, Source};

/// One input of a merge.
enum Input<'a> {
    List(Cursor<&'a dyn Source>),
    Flash(FlashStream<'a>),
}

impl Input<'_> {
    fn current_key_into(&mut self, key: &mut Vec<u8>) -> Result<Option<u64>> {
        match self {
            Input::List(c) => c.current_key_into(key),
            Input::Flash(f) => f.current_key_into(key),
        }
    }
    fn current(&mut self) -> Result<Option<Entry>> {
        match self {
            Input::List(c) => c.current(),
            Input::Flash(f) => f.current(),
        }
    }
    fn advance(&mut self) -> Result<()> {
        match self {
            Input::List(c) => c.advance(),
            Input::Flash(f) => f.advance(),
        }
    }
}

/// An input with its current key and seq read once per position (a merge compares them
/// in DRAM; the input is read again only when it moves).
struct Head<'a> {
    input: Input<'a>,
    /// The current key (meaningless at the end).
    key: Vec<u8>,
    /// The current seq; `None` at the end.
    seq: Option<u64>,
}

impl Head<'_> {
    fn load(&mut self) -> Result<()> {
        self.seq = self.input.current_key_into(&mut self.key)?;
        Ok(())
    }
}

/// The merge of some cursors.
pub struct Merge<'a> {
    heads: Vec<Head<'a>>,
}

impl<'a> Merge<'a> {
    /// A merge of the skiplists `(source, head)`, each positioned at `start`.
    pub fn new(lists: &[(&'a dyn Source, u64)], start: &[u8]) -> Result<Merge<'a>> {
        let inputs = lists
            .iter()
            .map(|(s, head)| Cursor::seek(*s, *head, start).map(Input::List))
            .collect::<Result<Vec<_>>>()?;
        Merge::of(inputs)
    }

    /// A merge of the skiplists `lists` (source, head, where a search for `start` may
    /// begin: [`skiplist::seek_from`](crate::skiplist::seek_from)) and the flash streams
    /// `flash` (positioned at the same start by their caller).
    pub fn with_flash(
        lists: &[(&'a dyn Source, u64, Option<u64>)],
        flash: Vec<FlashStream<'a>>,
        start: &[u8],
    ) -> Result<Merge<'a>> {
        let mut inputs = lists
            .iter()
            .map(|(s, head, from)| Cursor::seek_from(*s, *head, *from, start).map(Input::List))
            .collect::<Result<Vec<_>>>()?;
        inputs.extend(flash.into_iter().map(Input::Flash));
        Merge::of(inputs)
    }

    fn of(inputs: Vec<Input<'a>>) -> Result<Merge<'a>> {
        let mut heads = Vec::with_capacity(inputs.len());
        for input in inputs {
            let mut h = Head {
                input,
                key: Vec::new(),
                seq: None,
            };
            h.load()?;
            heads.push(h);
        }
        Ok(Merge { heads })
    }

    /// The newest version of the next key (tombstones included), or `None` at the end.
    pub fn next_entry(&mut self) -> Result<Option<Entry>> {
        let mut best: Option<(usize, u64)> = None;
        for (i, h) in self.heads.iter().enumerate() {
            let Some(seq) = h.seq else { continue };
            let better = match best {
                None => true,
                Some((b, bs)) => {
                    let bk = &self.heads[b].key;
                    h.key < *bk || (h.key == *bk && seq > bs)
                }
            };
            if better {
                best = Some((i, seq));
            }
        }
        let Some((i, _)) = best else {
            return Ok(None);
        };
        let Some(entry) = self.heads[i].input.current()? else {
            // Unreachable: an input with a current key has a current entry.
            return Err(Error::corruption(
                Tier::Pmem,
                0,
                "mio merge: an input lost its current entry",
            ));
        };
        // Skip every version of this key in every input.
        for h in &mut self.heads {
            while h.seq.is_some() && h.key == entry.key {
                h.input.advance()?;
                h.load()?;
            }
        }
        Ok(Some(entry))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arena::Arena;
    use crate::node::Kind;

    #[test]
    fn newest_version_wins_across_lists() {
        let (a, b) = (Arena::new(1 << 14, 1), Arena::new(1 << 14, 2));
        a.insert(1, Kind::Put, b"x", b"old").unwrap();
        a.insert(2, Kind::Put, b"y", b"keep").unwrap();
        b.insert(3, Kind::Put, b"x", b"new").unwrap();
        b.insert(4, Kind::Delete, b"z", b"").unwrap();
        a.insert(5, Kind::Put, b"z", b"newer than the delete")
            .unwrap();
        let mut m = Merge::new(&[(&a as &dyn Source, 0), (&b as &dyn Source, 0)], b"").unwrap();
        let mut got = Vec::new();
        while let Some(e) = m.next_entry().unwrap() {
            got.push((e.key, e.seq, e.value));
        }
        assert_eq!(
            got,
            vec![
                (b"x".to_vec(), 3, Some(b"new".to_vec())),
                (b"y".to_vec(), 2, Some(b"keep".to_vec())),
                (b"z".to_vec(), 5, Some(b"newer than the delete".to_vec())),
            ]
        );
    }
}
