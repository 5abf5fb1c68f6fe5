//! Hot objects met on flash: what read-triggered compactions promote (PrismDB §4.2
//! "Object promotions", §5.3 "Read-triggered compactions").
//!
//! A get served by a flash table notes its object here when the key is tracked and the
//! mapper pins its clock value (the key belongs on the fast tier, `mapper.rs`), with the
//! value it read and the number of the table it came from. A compaction that promotes
//! takes these notes, most read first, and copies each to the fast tier while the table
//! it came from still holds the key's newest version (no fast-tier version, the same table
//! in the table set: tables are immutable, so the noted value is that version) —
//! `compaction.rs` (`promote_noted`).
//!
//! Ours, not the paper's: the paper promotes the hot objects a compaction meets in its key
//! range. Under YCSB's scrambled zipfian a 16 MiB table's range held about 150 hot keys
//! only on flash (1%), so one table rewrite in a read-only phase promoted almost nothing,
//! and finding them meant a scan of the whole tracker under its lock (every get waits for
//! it). The notes give a compaction the partition's hottest flash objects wherever they
//! are, their values in hand (no flash read), in O(notes).
//!
//! Bounded by bytes (`hot_notes`, a slice of the DRAM budget taken from the block cache's
//! default): when full, a note for a new key is dropped (a hot key is read again soon).
//!
//! Thread safety: behind the partition's `hot` mutex.

use std::collections::HashMap;

use crate::key::{DramKey, dram_key};

/// One noted object.
#[derive(Debug)]
pub struct Note {
    /// Its value, as read from the table.
    pub value: Vec<u8>,
    /// Number of the table it was read from.
    pub table: u64,
    /// Flash reads of it since it was noted.
    pub reads: u32,
}

/// Bytes a note is counted for besides its key and value (map entry, headers).
const NOTE_OVERHEAD: usize = 64;

/// The hot objects of one partition met on flash.
#[derive(Debug, Default)]
pub struct HotNotes {
    notes: HashMap<DramKey, Note, foldhash::fast::RandomState>,
    bytes: usize,
    cap: usize,
}

fn note_bytes(key: &[u8], value: &[u8]) -> usize {
    key.len() + value.len() + NOTE_OVERHEAD
}

impl HotNotes {
    /// Notes that hold at most `cap` bytes.
    pub fn new(cap: usize) -> HotNotes {
        HotNotes {
            cap,
            ..HotNotes::default()
        }
    }

    /// Notes that `key` was read from table `table` with `value`: a new note, or one more
    /// read of a noted key (its value and table replaced by these, the newer read).
    pub fn note(&mut self, key: &[u8], table: u64, value: &[u8]) {
        if let Some(n) = self.notes.get_mut(key) {
            n.reads = n.reads.saturating_add(1);
            if n.table != table {
                self.bytes = self.bytes - n.value.len() + value.len();
                n.table = table;
                n.value.clear();
                n.value.extend_from_slice(value);
            }
            return;
        }
        let b = note_bytes(key, value);
        if self.bytes + b > self.cap {
            return;
        }
        self.bytes += b;
        self.notes.insert(
            dram_key(key),
            Note {
                value: value.to_vec(),
                table,
                reads: 1,
            },
        );
    }

    /// Notes held.
    pub fn len(&self) -> usize {
        self.notes.len()
    }

    /// True when nothing is noted.
    pub fn is_empty(&self) -> bool {
        self.notes.is_empty()
    }

    /// Bytes the notes take (the fast-tier bytes they would take are about the same).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Every note, most read first; the notes are left empty.
    pub fn take(&mut self) -> Vec<(DramKey, Note)> {
        self.bytes = 0;
        let mut all: Vec<(DramKey, Note)> = self.notes.drain().collect();
        all.sort_unstable_by_key(|n| std::cmp::Reverse(n.1.reads));
        all
    }

    /// Puts back notes a compaction could not promote (no room left), unless the key was
    /// noted again meanwhile.
    pub fn restore(&mut self, left: Vec<(DramKey, Note)>) {
        for (k, n) in left {
            let b = note_bytes(&k, &n.value);
            if self.notes.contains_key(k.as_slice()) || self.bytes + b > self.cap {
                continue;
            }
            self.bytes += b;
            self.notes.insert(k, n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_bounded_counted_and_taken_most_read_first() {
        let mut h = HotNotes::new(3 * (NOTE_OVERHEAD + 10));
        h.note(b"aaaaa", 1, b"11111");
        h.note(b"bbbbb", 1, b"22222");
        h.note(b"bbbbb", 2, b"33333");
        h.note(b"ccccc", 1, b"44444");
        // Full: a new key is dropped, a noted one still counts.
        h.note(b"ddddd", 1, b"55555");
        h.note(b"ccccc", 1, b"44444");
        h.note(b"ccccc", 1, b"44444");
        assert_eq!(h.len(), 3);
        assert_eq!(h.bytes(), 3 * (NOTE_OVERHEAD + 10));
        let all = h.take();
        assert!(h.is_empty());
        assert_eq!(h.bytes(), 0);
        let keys: Vec<&[u8]> = all.iter().map(|(k, _)| k.as_slice()).collect();
        assert_eq!(keys, [&b"ccccc"[..], b"bbbbb", b"aaaaa"]);
        // The newer read's table and value.
        assert_eq!(all[1].1.table, 2);
        assert_eq!(all[1].1.value, b"33333");
        h.note(b"bbbbb", 7, b"9");
        h.restore(all);
        // The new note of bbbbb stays; the others are back.
        assert_eq!(h.len(), 3);
        assert_eq!(h.bytes(), 2 * (NOTE_OVERHEAD + 10) + NOTE_OVERHEAD + 6);
    }
}
