//! The write paths: put (insert or update) and delete (PRISM §5.4, §5.5, Figure 6).
//!
//! # Put
//! 1. Find the key's HSIT slot in the key index (or take a free slot for a new key).
//! 2. Append the value with that slot as its backward pointer to the calling thread's PWB
//!    and persist it; keep the PWB's append lock (PWB invariant 2).
//! 3. Existing key: publish the record in HSIT — CAS the forward pointer with the dirty
//!    bit, persist, clear the bit (the linearization point is the CAS). New key: store the
//!    key tag and the pointer in the fresh slot and persist them, then `insert_if_absent`
//!    into the key index (durable on return; the linearization point). Losing that race
//!    frees the fresh slot and retries as an update of the winner's slot, with the record
//!    re-bound to it.
//! 4. Clean up behind the old value: invalidate its Value Storage bit, unlink its SVC copy.
//!
//! A put that finds the slot's pointer *none* has met a delete that has nulled the entry
//! but not yet removed the key from the index: it waits for that removal, then inserts.
//!
//! # Delete
//! CAS the pointer to none with the dirty bit, persist, clear (the linearization point);
//! remove the key from the index (durable on return); invalidate the old value; return the
//! slot to the free list after two epochs. A crash after the CAS persisted but before the
//! index removal leaves an index entry whose slot points nowhere: recovery finishes the
//! delete.
//!
//! # Failures
//! A failure after the append (put) or of any step of a delete poisons the engine
//! ([`Core::poison_on_failure`]), as a background failure does: otherwise a delete whose
//! index removal failed would leave a "none" pointer that a later put of the key waits on
//! for ever. The exceptions leave nothing half done: no space in the HSIT or the key index
//! for a new key (the fresh slot is freed again; the record is ill-coupled garbage).
//!
//! Everything runs pinned (`crossbeam_epoch`), so no slot found through the index can be
//! reused under the operation (HSIT invariant 3).
//!
//! Thread safety: any number of threads; writers of one key are ordered by the HSIT CAS
//! and the key index.

use crossbeam_epoch::Guard;
use tierkv_core::{Error, Result, Tier};

use super::core::Core;
use crate::hsit::entry::{Location, key_tag};
use crate::pwb::{Append, ReservedRun};

/// Where a put is heading.
#[derive(Clone, Copy, Debug)]
enum Target {
    /// Update the existing entry of the key.
    Slot(u64),
    /// Insert the key with this fresh slot.
    Fresh(u64),
}

impl Core {
    /// Stores `value` under `key`; durable on return.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.life.check_writable()?;
        self.limits.check_key(key)?;
        self.limits.check_value(value)?;
        let pwb = self.pwbs.for_current_thread()?;
        let wake = || self.reclaim_signal.raise();
        let seen = self.space.refusals();
        let check = || self.writer_may_wait(seen);
        // IMPORTANT: room is reserved before pinning: the reclaimer that makes room waits
        // for pinned threads (PWB invariant 3).
        let reserved = pwb.reserve(value.len(), &wake, &check)?;
        self.put_with(key, value, |backptr| reserved.write(backptr, value))
    }

    /// A put of a committed write batch (`batch/mod.rs`), into the room its batch
    /// reserved: `run` (the next record of the run must have `value`'s length). A new
    /// key's HSIT slot and key-index room were reserved with the run, so this needs no
    /// space. NOTE: no writability check: a background failure that poisoned the engine
    /// after the batch committed does not stop it (it needs nothing of the background
    /// work); finishing it live is what the next open would do.
    pub(crate) fn put_in_run(
        &self,
        run: &mut ReservedRun<'_>,
        key: &[u8],
        value: &[u8],
    ) -> Result<()> {
        self.put_with(key, value, |backptr| run.write(backptr, value))
    }

    /// Steps 1-4 of a put whose PWB room is reserved: `append` writes the record with the
    /// backward pointer it is given.
    fn put_with<'a>(
        &self,
        key: &[u8],
        value: &[u8],
        append: impl FnOnce(u64) -> Result<Append<'a>>,
    ) -> Result<()> {
        let mut guard = crossbeam_epoch::pin();
        let target = match self.index.get(key)? {
            Some(slot) => Target::Slot(slot),
            None => Target::Fresh(self.hsit.alloc_slot()?),
        };
        let backptr = match target {
            Target::Slot(s) | Target::Fresh(s) => s,
        };
        // IMPORTANT: from the append on, a failure poisons the engine (unless undone), so
        // that no later writer waits for a step that will never finish.
        let done = (|| {
            let append = append(backptr)?;
            self.publish_put(key, value, &append, target, &mut guard)
        })();
        self.poison_on_failure(done)?;
        self.counters
            .ops
            .user_bytes_written
            .add((key.len() + value.len()) as u64);
        Ok(())
    }

    /// Publishes the appended record under `key` (steps 3 and 4).
    fn publish_put(
        &self,
        key: &[u8],
        value: &[u8],
        append: &Append<'_>,
        mut target: Target,
        guard: &mut Guard,
    ) -> Result<()> {
        let mut bound = match target {
            Target::Slot(s) | Target::Fresh(s) => s,
        };
        loop {
            let slot = match target {
                Target::Slot(s) | Target::Fresh(s) => s,
            };
            if slot != bound {
                append.rebind(slot, value)?;
                bound = slot;
            }
            target = match target {
                Target::Fresh(s) => match self.insert_fresh(key, s, append)? {
                    None => return Ok(()),
                    Some(winner) => Target::Slot(winner),
                },
                Target::Slot(s) => match self.update_slot(s, append, guard)? {
                    true => return Ok(()),
                    false => {
                        // The key is being deleted: wait for the index to let go of it,
                        // unpinned so that the deleter's epoch can pass, then start over.
                        self.wait_for_removal(key, s, guard)?;
                        match self.index.get(key)? {
                            Some(slot) => Target::Slot(slot),
                            None => Target::Fresh(self.hsit.alloc_slot()?),
                        }
                    }
                },
            };
        }
    }

    /// New key: initialise `slot` and insert it. `None` when inserted, `Some(winner)` when
    /// another thread inserted the key first (`slot` is freed again).
    fn insert_fresh(&self, key: &[u8], slot: u64, append: &Append<'_>) -> Result<Option<u64>> {
        let rec = Location::Pwb(append.record_off());
        // IMPORTANT: the entry is durable before the index can lead to it.
        self.hsit.init_slot(slot, key_tag(key), rec)?;
        let inserted = match self.index.insert_if_absent(key, slot) {
            Ok(inserted) => inserted,
            // The index took nothing (its contract): undo the slot; the record stays
            // ill-coupled garbage. Nothing is half done, so the engine is not poisoned.
            Err(e @ (Error::NoSpace { .. } | Error::InvalidArgument(_))) => {
                self.hsit.clear_unreachable(slot)?;
                self.hsit.free_slot_now(slot);
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        match inserted {
            Ok(()) => Ok(None),
            Err(winner) => {
                self.counters.index_race_losses.incr();
                // Never reachable: no reader can hold it, so it is free at once.
                self.hsit.clear_unreachable(slot)?;
                self.hsit.free_slot_now(slot);
                Ok(Some(winner))
            }
        }
    }

    /// Existing key: publish the record in `slot`. False when the slot points nowhere (a
    /// delete is in progress).
    fn update_slot(&self, slot: u64, append: &Append<'_>, guard: &Guard) -> Result<bool> {
        let rec = Location::Pwb(append.record_off());
        loop {
            let cur = self.load_for_use(slot)?;
            let old = self.location_of(slot, cur)?;
            if old == Location::None {
                return Ok(false);
            }
            match self.hsit.publish(slot, cur, rec)? {
                Ok(()) => {
                    self.forget(slot, old, guard)?;
                    return Ok(true);
                }
                Err(_) => self.counters.put_retries.incr(),
            }
        }
    }

    /// Waits (unpinned) until the index no longer maps `key` to the deleted `slot`.
    fn wait_for_removal(&self, key: &[u8], slot: u64, guard: &mut Guard) -> Result<()> {
        let mut spins = 0u32;
        loop {
            guard.repin();
            if self.index.get(key)? != Some(slot) || !self.hsit.load(slot)?.is_none() {
                return Ok(());
            }
            self.life.check_writable()?;
            guard.repin_after(|| {
                spins += 1;
                if spins < 100 {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(std::time::Duration::from_micros(100));
                }
            });
        }
    }

    /// Deletes `key`; durable on return. Deleting an absent key is not an error.
    pub fn delete(&self, key: &[u8]) -> Result<()> {
        self.life.check_writable()?;
        self.delete_committed(key)
    }

    /// A delete of a committed write batch: [`Self::delete`] without the writability
    /// check (see [`Self::put_in_run`]).
    pub(crate) fn delete_committed(&self, key: &[u8]) -> Result<()> {
        self.limits.check_key(key)?;
        let done = self.delete_pinned(key);
        self.poison_on_failure(done)
    }

    /// [`Self::delete`] after the argument checks.
    fn delete_pinned(&self, key: &[u8]) -> Result<()> {
        let guard = crossbeam_epoch::pin();
        loop {
            let Some(slot) = self.index.get(key)? else {
                return Ok(());
            };
            let cur = self.load_for_use(slot)?;
            let old = self.location_of(slot, cur)?;
            if old == Location::None {
                // Another delete got here first (and its pointer is persisted: the load
                // helped if it was dirty); it finishes the index removal.
                return Ok(());
            }
            if self.hsit.publish(slot, cur, Location::None)?.is_err() {
                self.counters.put_retries.incr();
                continue;
            }
            match self.index.remove(key)? {
                Some(s) if s == slot => {}
                other => {
                    return Err(Error::corruption(
                        Tier::Pmem,
                        slot,
                        format!(
                            "the key index mapped a key being deleted from slot {slot} to {other:?}"
                        ),
                    ));
                }
            }
            self.forget(slot, old, &guard)?;
            self.hsit.retire_slot(slot, &guard);
            return Ok(());
        }
    }

    /// After `slot` stopped pointing at `old`: invalidate it on flash and unlink its SVC
    /// copy.
    fn forget(&self, slot: u64, old: Location, guard: &Guard) -> Result<()> {
        self.invalidate(old)?;
        if let Some(v) = self.hsit.cache().take(slot, guard) {
            self.svc.remove(&v);
        }
        Ok(())
    }

    /// Loads `slot`'s pointer for use, persisting it first if it is dirty (§5.4).
    pub(crate) fn load_for_use(&self, slot: u64) -> Result<crate::hsit::entry::ForwardPointer> {
        let raw = self.hsit.load(slot)?;
        if raw.is_dirty() {
            self.counters.dirty_pointer_helps.incr();
            return self.hsit.load_persisted(slot);
        }
        Ok(raw)
    }

    /// The location a pointer leads to, or corruption for an unknown encoding.
    pub(crate) fn location_of(
        &self,
        slot: u64,
        fp: crate::hsit::entry::ForwardPointer,
    ) -> Result<Location> {
        fp.location().ok_or_else(|| {
            Error::corruption(
                Tier::Pmem,
                self.hsit.entry_off(slot).unwrap_or(0),
                format!(
                    "HSIT slot {slot} holds an unknown forward pointer {:#x}",
                    fp.raw()
                ),
            )
        })
    }
}
