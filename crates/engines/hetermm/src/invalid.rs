//! Pending invalidations: the *marking stage* of space reclamation (HeterMM §5.2, Fig. 7a).
//!
//! When a record X stops being the current version of its key (an out-of-place update
//! wrote N, a delete removed it, or X was never installed), X must eventually get its bit
//! in the invalid bitmap of its pmem block, so that recovery ignores it and reorganisation
//! drops it. The bit may become durable only once the event that invalidated X is itself
//! durable in the persisted region — otherwise a crash could leave neither X nor N — so
//! each invalidation is *keyed* by the block at whose flush it is applied:
//!
//! - out-of-place update: `max(block(X), block(N))`;
//! - delete: `max(block(X), block(off_ReadOnly))` as read by the deleting operation (a
//!   block still in the mutable region, so not yet flushed);
//! - a record written but not installed (a failed put, a lost race of a lock-free index):
//!   `block(X)`.
//!
//! Each key block is at or beyond the mutable region at some moment of the (pinned)
//! operation that registers it — the new record was allocated there, or the delete read
//! off_ReadOnly there — and the flusher drains the registrations only after making that
//! block read-only and synchronizing the epochs, so no invalidation keyed at a block arrives
//! after that block is flushed. (One arriving late anyway, e.g. an effect of a guard that
//! waited unpinned for a page before it dropped, is applied at the next flush; that only
//! delays a mark whose replacement is already durable.) Threads buffer their registrations in their own slot (no shared lock
//! on the write path); the flusher drains every slot before each flush.
//!
//! Thread safety: `PendingMarks` belongs to the flusher (behind its mutex).

use std::collections::BTreeMap;

use crate::threads::SlotTable;

/// One registered invalidation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Invalidation {
    /// The logical address of the record that is no longer current.
    pub target: u64,
    /// The block at whose flush the mark is applied.
    pub key_block: u64,
}

/// Invalidations drained from the threads, by key block.
#[derive(Debug, Default)]
pub struct PendingMarks {
    by_block: BTreeMap<u64, Vec<u64>>,
}

impl PendingMarks {
    /// Moves every thread's buffered invalidations (and those of exited threads) here.
    pub fn drain_from(&mut self, table: &SlotTable) {
        for slot in table.used_slots() {
            let taken = std::mem::take(&mut *slot.pending.lock());
            self.add(taken);
        }
        let orphaned = std::mem::take(&mut *table.orphaned.lock());
        self.add(orphaned);
    }

    /// Adds invalidations.
    pub fn add(&mut self, items: impl IntoIterator<Item = Invalidation>) {
        for i in items {
            self.by_block.entry(i.key_block).or_default().push(i.target);
        }
    }

    /// Removes and returns every target keyed at a block `<= block`.
    pub fn take_through(&mut self, block: u64) -> Vec<u64> {
        let later = self.by_block.split_off(&(block.saturating_add(1)));
        let due = std::mem::replace(&mut self.by_block, later);
        due.into_values().flatten().collect()
    }

    /// The highest key block with invalidations waiting.
    pub fn last_key(&self) -> Option<u64> {
        self.by_block.keys().next_back().copied()
    }

    /// Invalidations waiting.
    pub fn len(&self) -> usize {
        self.by_block.values().map(Vec::len).sum()
    }

    /// True when none are waiting.
    pub fn is_empty(&self) -> bool {
        self.by_block.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_come_out_by_key_block() {
        let mut p = PendingMarks::default();
        p.add([
            Invalidation {
                target: 1,
                key_block: 3,
            },
            Invalidation {
                target: 2,
                key_block: 1,
            },
            Invalidation {
                target: 3,
                key_block: 5,
            },
        ]);
        assert_eq!(p.len(), 3);
        assert_eq!(p.last_key(), Some(5));
        let mut due = p.take_through(3);
        due.sort_unstable();
        assert_eq!(due, vec![1, 2]);
        assert_eq!(p.take_through(4), Vec::<u64>::new());
        assert_eq!(p.take_through(u64::MAX), vec![3]);
        assert!(p.is_empty());
    }

    #[test]
    fn draining_collects_every_slot_and_exited_threads() {
        let t = SlotTable::new();
        let i = t.current().unwrap();
        t.slot(i).pending.lock().push(Invalidation {
            target: 7,
            key_block: 0,
        });
        t.orphaned.lock().push(Invalidation {
            target: 8,
            key_block: 0,
        });
        let mut p = PendingMarks::default();
        p.drain_from(&t);
        assert_eq!(p.len(), 2);
        assert!(t.slot(i).pending.lock().is_empty());
    }
}
