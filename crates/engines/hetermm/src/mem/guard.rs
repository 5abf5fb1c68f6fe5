//! [`Guard`]: one index operation's pin (epoch) and the invalidations it causes.
//!
//! A guard is created by [`HeterMemory::pin`](crate::HeterMemory::pin) before the index is
//! touched and dropped after it. While it lives, every logical address the thread read
//! from its index stays readable (no page or block is freed under it).
//!
//! **Effects.** `set_value` does not register the invalidation of the record it replaces
//! right away: a lock-free index may call it several times for one key (retrying a lost
//! race) and only the last call's address is installed. So each call records an *effect*
//! (old address → outcome) per key, and when a new effect arrives for the same key the
//! earlier one is resolved:
//! - if the new call starts from the address the earlier call produced, the earlier one
//!   was installed: the address it replaced is invalidated now;
//! - otherwise the earlier call's new record was never installed: it is invalidated as an
//!   orphan (and the address it replaced is someone else's business).
//!
//! When the guard drops, each remaining effect's replaced address is invalidated. Deletes
//! are effects too (`Removed`): a lock-free index whose removal lost its race calls
//! `remove_value` again with what is current now — possibly the very same address, put
//! back by an in-place update — and if that call fails the address stays installed, so
//! the lost removal must not have marked it (a reorganisation then dropped a record the
//! index still held: `Corruption` on a later get). Only the last removal, if it succeeded,
//! invalidates its record, when the guard drops. An invalidation's key block is
//! `max(block(target), block(superseder))`, a block that cannot be flushed before the
//! guard drops (`invalid.rs`).
//!
//! **Reservation.** A writer reserves the space of its record with `reserve` *before* it
//! takes its index's lock (that is where it may have to wait for the flusher, unpinned);
//! `set_value` then writes into the reservation and never waits. A thread blocked on an
//! index lock is pinned, so if the lock's holder waited for the flusher, and the flusher for
//! the epoch, nobody would move. A reservation left unused (the update went in place) is
//! given back, or becomes a padding record if the thread allocated after it.
//!
//! Thread safety: a guard belongs to its thread (it is `!Send`).

use std::cell::{Cell, RefCell};
use std::marker::PhantomData;

use super::HeterMem;
use crate::invalid::Invalidation;
use crate::oplog::PreparedEntry;

/// What a `set_value` did for a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It produced this address (equal to the old one for an in-place update).
    Installed(u64),
    /// It failed and changed nothing.
    Unchanged,
    /// A delete removed the record (the delete frontier it read, its superseder).
    Removed(u64),
}

#[derive(Debug)]
struct Effect {
    key: Box<[u8]>,
    old: Option<u64>,
    outcome: Outcome,
}

/// A logged attempt: its key and where it left the key (`None`: deleted).
type Attempt = (Box<[u8]>, Option<u64>);

/// A put's log entry, prepared under the index's lock and written after it
/// ([`HeterMem::complete`]).
pub struct Pending<'a> {
    /// The entry, holding the thread's log page.
    pub entry: PreparedEntry<'a>,
    /// The record it makes durable.
    pub record: u64,
    /// True for an in-place update (its change was visible at once).
    pub in_place: bool,
}

/// An operation in progress on a [`HeterMem`] (see the module doc).
pub struct Guard<'a> {
    mem: &'a HeterMem,
    slot: usize,
    recovery: bool,
    effects: RefCell<Vec<Effect>>,
    /// Space reserved by `reserve` for the next out-of-place record: (address, length).
    reserved: Cell<Option<(u64, u64)>>,
    /// The key of the last log entry this operation wrote and the address that attempt left
    /// the key at (`None`: deleted), while it may still be retracted (`access.rs`).
    logged: RefCell<Option<Attempt>>,
    /// The put's log entry, until it is written after the index's lock is released.
    pending: RefCell<Option<Pending<'a>>>,
    _not_send: PhantomData<*const ()>,
}

impl<'a> Guard<'a> {
    pub(super) fn new(mem: &'a HeterMem, slot: usize, recovery: bool) -> Guard<'a> {
        Guard {
            mem,
            slot,
            recovery,
            effects: RefCell::new(Vec::new()),
            reserved: Cell::new(None),
            logged: RefCell::new(None),
            pending: RefCell::new(None),
            _not_send: PhantomData,
        }
    }

    /// The memory this operation runs on (borrowed for the guard's whole life).
    pub fn mem(&self) -> &'a HeterMem {
        self.mem
    }

    /// The thread's slot index.
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// True in recovery.
    pub fn is_recovery(&self) -> bool {
        self.recovery
    }

    /// Takes the reservation, if any.
    pub fn take_reserved(&self) -> Option<(u64, u64)> {
        self.reserved.take()
    }

    /// Sets the reservation.
    pub fn set_reserved(&self, r: Option<(u64, u64)>) {
        self.reserved.set(r);
    }

    /// The reservation's length, if any.
    pub fn reserved_len(&self) -> Option<u64> {
        self.reserved.get().map(|(_, len)| len)
    }

    /// Keeps a put's prepared log entry until [`HeterMem::complete`] (or the drop) writes it.
    pub fn defer(&self, p: Pending<'a>) {
        *self.pending.borrow_mut() = Some(p);
    }

    /// True while a prepared log entry waits to be written.
    pub fn has_pending(&self) -> bool {
        self.pending.borrow().is_some()
    }

    /// Takes the prepared log entry, if any.
    pub fn take_pending(&self) -> Option<Pending<'a>> {
        self.pending.borrow_mut().take()
    }

    /// Notes that an attempt wrote a log entry for `key`, leaving it at `left`.
    pub fn note_logged(&self, key: &[u8], left: Option<u64>) {
        *self.logged.borrow_mut() = Some((key.into(), left));
    }

    /// Forgets the last logged attempt (its prepared entry was dropped, never written).
    pub fn forget_logged(&self) {
        *self.logged.borrow_mut() = None;
    }

    /// True when a new attempt for `key` starting from `old` means that this operation's
    /// last logged attempt for it lost its race (it left the key elsewhere); forgets it.
    pub fn attempt_lost(&self, key: &[u8], old: Option<u64>) -> bool {
        let mut logged = self.logged.borrow_mut();
        let lost = logged
            .as_ref()
            .is_some_and(|(k, left)| &**k == key && *left != old);
        if lost {
            *logged = None;
        }
        lost
    }

    /// Runs `f` unpinned (a wait for background progress), then pins again.
    pub fn unpinned<T>(&self, f: impl FnOnce() -> T) -> T {
        self.mem.threads.unpin(self.slot);
        let r = f();
        // Re-pinning cannot fail: the slot was just unpinned by this thread.
        let _ = self.mem.threads.pin(self.slot);
        r
    }

    /// Records what a `set_value` for `key` did (see the module doc).
    pub fn record(&self, key: &[u8], old: Option<u64>, outcome: Outcome) {
        let mut effects = self.effects.borrow_mut();
        if let Some(e) = effects.iter_mut().find(|e| &*e.key == key) {
            if let Outcome::Installed(made) = e.outcome
                && Some(made) != e.old
            {
                if old == Some(made) {
                    if let Some(replaced) = e.old {
                        self.invalidate(replaced, made);
                    }
                } else {
                    self.invalidate(made, made);
                }
            }
            e.old = old;
            e.outcome = outcome;
            return;
        }
        effects.push(Effect {
            key: key.into(),
            old,
            outcome,
        });
    }

    /// Registers that the record at `target` is no longer current because of `superseder`
    /// (a record, or the delete frontier; `target` itself for an orphan).
    pub fn invalidate(&self, target: u64, superseder: u64) {
        let mem = self.mem;
        if let Some(cache) = &mem.cache {
            cache.invalidate(target);
        }
        if self.recovery {
            mem.recovery_losers.lock().push(target);
            return;
        }
        let g = &mem.geo;
        // NOTE: exactly the superseder's block, not a later one: a delete's log entry covers
        // `max(target, frontier)` and is reclaimed once off_DRAM passes it, so its mark must
        // be applied by then. The block is not flushed yet: the superseder was allocated (or
        // the frontier read) in this still-pinned operation.
        let key_block = g.block_of(target).max(g.block_of(superseder));
        mem.threads
            .slot(self.slot)
            .pending
            .lock()
            .push(Invalidation { target, key_block });
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        // IMPORTANT: an index that did not call `complete` still gets its put's entry
        // written before the operation ends (an error poisons the store there).
        let _ = self.mem.complete(self);
        self.mem.release_reservation(self);
        if self.logged.borrow_mut().take().is_some()
            && let Some(log) = &self.mem.oplog
        {
            log.settle(self.slot);
        }
        for e in std::mem::take(&mut *self.effects.borrow_mut()) {
            match (e.outcome, e.old) {
                (Outcome::Installed(made), Some(replaced)) if made != replaced => {
                    self.invalidate(replaced, made);
                }
                (Outcome::Removed(frontier), Some(removed)) => self.invalidate(removed, frontier),
                _ => {}
            }
        }
        self.mem.threads.unpin(self.slot);
    }
}
