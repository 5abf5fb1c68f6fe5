//! A merge of several skiplists (MemTables and PMTables) and, in `mio:flash`, of flash
//! table streams (`flash.rs`) into one stream holding the newest version of each key: what
//! a scan reads (§4.6, "scans merge over all tables") and what a copying compaction writes. Seqs are global and grow with every write, so
//! the newest version of a key is the one with the largest seq, wherever it is.
//!
//! Thread safety: a merge belongs to one thread.

use tierkv_core::Result;

use crate::flash::FlashStream;
use crate::skiplist::{Cursor, Entry, Source};

/// One input of a merge.
enum Input<'a> {
    List(Cursor<&'a dyn Source>),
    Flash(FlashStream<'a>),
}

impl Input<'_> {
    fn current_key(&mut self) -> Result<Option<(Vec<u8>, u64)>> {
        match self {
            Input::List(c) => c.current_key(),
            Input::Flash(f) => f.current_key(),
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

/// The merge of some cursors.
pub struct Merge<'a> {
    cursors: Vec<Input<'a>>,
}

impl<'a> Merge<'a> {
    /// A merge of the skiplists `(source, head)`, each positioned at `start`.
    pub fn new(lists: &[(&'a dyn Source, u64)], start: &[u8]) -> Result<Merge<'a>> {
        let cursors = lists
            .iter()
            .map(|(s, head)| Cursor::seek(*s, *head, start).map(Input::List))
            .collect::<Result<Vec<_>>>()?;
        Ok(Merge { cursors })
    }

    /// A merge of the skiplists `lists` and the flash streams `flash` (positioned at the
    /// same start by their caller).
    pub fn with_flash(
        lists: &[(&'a dyn Source, u64)],
        flash: Vec<FlashStream<'a>>,
        start: &[u8],
    ) -> Result<Merge<'a>> {
        let mut m = Merge::new(lists, start)?;
        m.cursors.extend(flash.into_iter().map(Input::Flash));
        Ok(m)
    }

    /// The newest version of the next key (tombstones included), or `None` at the end.
    pub fn next_entry(&mut self) -> Result<Option<Entry>> {
        let mut best: Option<(usize, Vec<u8>, u64)> = None;
        for (i, c) in self.cursors.iter_mut().enumerate() {
            if let Some((k, seq)) = c.current_key()? {
                let better = match &best {
                    None => true,
                    Some((_, bk, bs)) => k < *bk || (k == *bk && seq > *bs),
                };
                if better {
                    best = Some((i, k, seq));
                }
            }
        }
        let Some((i, key, _)) = best else {
            return Ok(None);
        };
        let entry = match self.cursors.get_mut(i) {
            Some(c) => c.current()?,
            None => None,
        };
        // Skip every version of this key in every list.
        for c in &mut self.cursors {
            while let Some((k, _)) = c.current_key()? {
                if k != key {
                    break;
                }
                c.advance()?;
            }
        }
        Ok(entry)
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
