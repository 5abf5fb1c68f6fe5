//! Hot objects met on flash: what read-triggered compactions promote (PrismDB §4.2
//! "Object promotions", §5.3 "Read-triggered compactions").
//!
//! A get served by a flash table notes its object here when the key is tracked and the
//! mapper pins its clock value (the key belongs on the fast tier, `mapper.rs`), with the
//! value it read and the number of the table it came from. A note is *ready* once its key
//! was read from flash `promote_reads` times since it was noted (option; 1, the paper's
//! criterion: any object the mapper pins). A compaction that promotes takes the ready
//! notes, most read first, and copies each to the fast tier while the table
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
//! default): when full, the notes not ready are dropped, and if it is still full, so is
//! the note for a new key (a hot key is read again soon).
//!
//! Measured (2M records, 100,000 operations per YCSB phase): with `promote_reads=1` the
//! fast tier served 47.2-47.6% of C's reads against 46.0-46.4% with promotions off, in
//! every run, at a cost in B and C throughput (the table rewrites that make room);
//! with 2, about 0.1 points more for no cost, as the keys read again from flash within a
//! phase are the few that A's updates had not brought to the fast tier already.
//!
//! Thread safety: behind the partition's `hot` mutex.

use std::collections::HashMap;

use crate::key::{DramKey, dram_key};

/// One noted object.
#[derive(Debug, Default)]
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
    /// Notes ready, and their bytes.
    ready: usize,
    ready_bytes: usize,
    cap: usize,
    /// Flash reads of a noted key (the one that noted it included) that make it ready.
    ready_reads: u32,
}

fn note_bytes(key: &[u8], value: &[u8]) -> usize {
    key.len() + value.len() + NOTE_OVERHEAD
}

impl HotNotes {
    /// Notes that hold at most `cap` bytes and are ready after `ready_reads` flash reads.
    pub fn new(cap: usize, ready_reads: u32) -> HotNotes {
        HotNotes {
            cap,
            ready_reads: ready_reads.max(1),
            ..HotNotes::default()
        }
    }

    /// Notes that `key` was read from table `table` with `value`: a new note, or one more
    /// read of a noted key (its value and table replaced by these, the newer read).
    /// When full, the notes not ready yet are dropped to make room.
    pub fn note(&mut self, key: &[u8], table: u64, value: &[u8]) {
        if let Some(n) = self.notes.get_mut(key) {
            let was_ready = n.reads >= self.ready_reads;
            let old = note_bytes(key, &n.value);
            n.reads = n.reads.saturating_add(1);
            if n.table != table {
                self.bytes = self.bytes - n.value.len() + value.len();
                n.table = table;
                n.value.clear();
                n.value.extend_from_slice(value);
            }
            if was_ready {
                self.ready_bytes = self.ready_bytes - old + note_bytes(key, &n.value);
            } else if n.reads >= self.ready_reads {
                self.ready += 1;
                self.ready_bytes += note_bytes(key, &n.value);
            }
            return;
        }
        let b = note_bytes(key, value);
        if self.bytes + b > self.cap {
            let ready_reads = self.ready_reads;
            self.notes.retain(|_, n| n.reads >= ready_reads);
            self.bytes = self.ready_bytes;
        }
        if self.bytes + b > self.cap {
            return;
        }
        self.bytes += b;
        if self.ready_reads <= 1 {
            self.ready += 1;
            self.ready_bytes += b;
        }
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

    /// Notes ready.
    pub fn ready(&self) -> usize {
        self.ready
    }

    /// Bytes of the notes ready.
    pub fn ready_bytes(&self) -> usize {
        self.ready_bytes
    }

    /// Drops every note.
    pub fn clear(&mut self) {
        self.notes.clear();
        (self.bytes, self.ready, self.ready_bytes) = (0, 0, 0);
    }

    /// The notes ready, most read first, taken out (the others stay).
    pub fn take_ready(&mut self) -> Vec<(DramKey, Note)> {
        let mut ready = Vec::with_capacity(self.ready);
        let ready_reads = self.ready_reads;
        self.notes.retain(|k, n| {
            if n.reads < ready_reads {
                return true;
            }
            ready.push((k.clone(), std::mem::take(n)));
            false
        });
        self.bytes -= self.ready_bytes;
        (self.ready, self.ready_bytes) = (0, 0);
        ready.sort_unstable_by_key(|n| std::cmp::Reverse(n.1.reads));
        ready
    }

    /// Puts back ready notes a compaction could not promote (no room left), unless the
    /// key was noted again meanwhile.
    pub fn restore(&mut self, left: Vec<(DramKey, Note)>) {
        for (k, n) in left {
            let b = note_bytes(&k, &n.value);
            if self.notes.contains_key(k.as_slice()) || self.bytes + b > self.cap {
                continue;
            }
            self.bytes += b;
            if n.reads >= self.ready_reads {
                self.ready += 1;
                self.ready_bytes += b;
            }
            self.notes.insert(k, n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_bounded_counted_and_taken_most_read_first_once_ready() {
        let one = NOTE_OVERHEAD + 10;
        let mut h = HotNotes::new(3 * one, 2);
        h.note(b"aaaaa", 1, b"11111");
        h.note(b"bbbbb", 1, b"22222");
        h.note(b"ccccc", 1, b"44444");
        assert_eq!((h.len(), h.ready(), h.bytes()), (3, 0, 3 * one));
        // Read again: ready (bbbbb from another table, with that table's value).
        h.note(b"bbbbb", 2, b"33333");
        h.note(b"ccccc", 1, b"44444");
        h.note(b"ccccc", 1, b"44444");
        assert_eq!((h.ready(), h.ready_bytes()), (2, 2 * one));
        // Full: a new key drops the notes not ready (aaaaa) and takes its place.
        h.note(b"ddddd", 1, b"55555");
        assert_eq!((h.len(), h.ready(), h.bytes()), (3, 2, 3 * one));
        let ready = h.take_ready();
        let keys: Vec<&[u8]> = ready.iter().map(|(k, _)| k.as_slice()).collect();
        assert_eq!(keys, [&b"ccccc"[..], b"bbbbb"]);
        assert_eq!(ready[1].1.table, 2);
        assert_eq!(ready[1].1.value, b"33333");
        assert_eq!(
            (h.len(), h.ready(), h.bytes(), h.ready_bytes()),
            (1, 0, one, 0)
        );
        // Back, but not over a newer note of the same key.
        h.note(b"bbbbb", 7, b"9");
        h.restore(ready);
        assert_eq!((h.len(), h.ready()), (3, 1));
        assert_eq!(h.bytes(), 2 * one + NOTE_OVERHEAD + 6);
        h.clear();
        assert_eq!(
            (h.len(), h.ready(), h.bytes(), h.ready_bytes()),
            (0, 0, 0, 0)
        );
    }

    #[test]
    fn with_one_read_a_note_is_ready_at_once() {
        let one = NOTE_OVERHEAD + 10;
        let mut h = HotNotes::new(2 * one, 1);
        h.note(b"aaaaa", 1, b"11111");
        h.note(b"bbbbb", 1, b"22222");
        assert_eq!((h.ready(), h.ready_bytes()), (2, 2 * one));
        // Full of ready notes: a new key is dropped.
        h.note(b"ccccc", 1, b"33333");
        assert_eq!((h.len(), h.bytes()), (2, 2 * one));
        assert_eq!(h.take_ready().len(), 2);
        assert_eq!((h.len(), h.bytes(), h.ready()), (0, 0, 0));
    }
}
