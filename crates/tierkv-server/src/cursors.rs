//! [`CursorTable`]: where `SCAN` keeps the key each unfinished scan resumes at.
//!
//! # Why a table and not the key itself in the cursor
//! On an ordered engine a scan's position *is* a key: the next key to visit. Sending that
//! key to the client as the cursor would make the server stateless, but Redis clients parse
//! the cursor as an unsigned 64-bit integer (`redis-cli` with `strtoull`, redis-rs and
//! go-redis as `u64`), and a key does not fit in one. So the reply's cursor is a number,
//! and the number maps to the resume key here: cursor `n` means "continue at the key stored
//! under `n`". Cursor `0` starts a scan and, in a reply, ends it (as in Redis).
//!
//! Cursors are handed out in increasing order (never reused, never 0, and the first one of
//! a server run is random, so a cursor from an earlier run is very unlikely to exist). The
//! table is bounded by entries and by bytes; when full, the oldest cursors are forgotten.
//! An unknown cursor gets an error that tells the client to start again from 0, rather than
//! a silently wrong page. A cursor stays valid after use, so a client may retry a page.
//!
//! Thread-safety: one mutex around the map; a lookup or insert is a few hundred ns and
//! happens once per SCAN call, not per key.

use std::collections::BTreeMap;

use parking_lot::Mutex;

/// Most cursors kept.
pub const MAX_CURSORS: usize = 100_000;
/// Most bytes of resume keys kept.
pub const MAX_CURSOR_BYTES: usize = 64 << 20;

#[derive(Debug)]
struct Inner {
    next_id: u64,
    bytes: usize,
    keys: BTreeMap<u64, Box<[u8]>>,
}

/// The cursor table.
#[derive(Debug)]
pub struct CursorTable {
    inner: Mutex<Inner>,
}

impl CursorTable {
    /// An empty table whose cursors start near `first_id / 2` (the top bit stays clear, so
    /// ids never wrap to 0 in practice).
    pub fn new(first_id: u64) -> CursorTable {
        CursorTable {
            inner: Mutex::new(Inner {
                next_id: (first_id >> 1).max(1),
                bytes: 0,
                keys: BTreeMap::new(),
            }),
        }
    }

    /// Stores a resume key; returns its cursor.
    pub fn insert(&self, key: &[u8]) -> u64 {
        let mut t = self.inner.lock();
        let id = t.next_id;
        t.next_id = id.checked_add(1).unwrap_or(1);
        t.bytes += key.len();
        t.keys.insert(id, key.into());
        while t.keys.len() > MAX_CURSORS || t.bytes > MAX_CURSOR_BYTES {
            match t.keys.pop_first() {
                Some((_, k)) => t.bytes -= k.len(),
                None => break,
            }
        }
        id
    }

    /// The resume key of `cursor`, if it is still known.
    pub fn get(&self, cursor: u64) -> Option<Vec<u8>> {
        self.inner.lock().keys.get(&cursor).map(|k| k.to_vec())
    }

    /// Number of cursors kept.
    pub fn len(&self) -> usize {
        self.inner.lock().keys.len()
    }

    /// True when no cursor is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_are_distinct_nonzero_and_resolve() {
        let t = CursorTable::new(0);
        let a = t.insert(b"k1");
        let b = t.insert(b"k2");
        assert!(a != 0 && b != 0 && a != b);
        assert_eq!(t.get(a).unwrap(), b"k1");
        assert_eq!(t.get(b).unwrap(), b"k2");
        assert_eq!(t.get(a).unwrap(), b"k1", "a cursor may be used twice");
        assert!(t.get(b + 1000).is_none());
    }

    #[test]
    fn table_forgets_the_oldest_cursors_when_full() {
        let t = CursorTable::new(12345);
        let first = t.insert(b"first");
        for i in 0..MAX_CURSORS {
            t.insert(format!("k{i}").as_bytes());
        }
        assert_eq!(t.len(), MAX_CURSORS);
        assert!(t.get(first).is_none());
        let big = vec![7u8; 1 << 20];
        for _ in 0..(MAX_CURSOR_BYTES >> 20) + 2 {
            t.insert(&big);
        }
        assert!(t.inner.lock().bytes <= MAX_CURSOR_BYTES);
    }
}
