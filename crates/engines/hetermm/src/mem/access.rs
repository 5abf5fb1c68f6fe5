//! get_value / set_value / delete (HeterMM §4.2, §4.3) on a [`HeterMem`].
//!
//! - **get**: Eq. 1 — above off_DRAM the record is read from its DRAM page (seqlock);
//!   below it the read cache is asked first, then the pmem block (checksum-verified), and
//!   one in SampleFreq such reads is admitted to the cache. A DRAM version whose log entry
//!   is not durable yet is waited for (FORMAT.md § Readers and in-flight puts).
//! - **set**: a record above off_ReadOnly is updated in place if the value fits; anything
//!   else gets a new record at a new logical address from the thread's page (Algorithm 2),
//!   after sealing the old record if it is still in DRAM. The operation-log entry is then
//!   prepared; [`HeterMem::complete`] writes and persists it once the index's lock is
//!   released, before the put returns (FORMAT.md § Writes).
//! - **delete**: seals the record, logs the delete (persisted under the index's lock), and
//!   registers its invalidation.
//!
//! Every timestamp is taken while the index's own synchronization (or the record's lock,
//! for in-place updates) orders it after the version it replaces (invariant 5 in `mod.rs`).
//!
//! Thread safety: called inside a pinned [`Guard`] by any number of threads.

use std::sync::atomic::Ordering;

use tierkv_core::{Error, Result, Tier};

use super::HookPoint;
use super::guard::Outcome;
use super::guard::Pending;
use super::{Guard, HeterMem};
use crate::dram::record as dram_record;
use crate::format::log::{EntryKind, Place};
use crate::format::record::{self, record_len};
use crate::nvm::read as nvm_read;
use crate::oplog::{LogTicket, NewEntry};
use crate::threads::ThreadSlot;

impl HeterMem {
    /// get_value: the value of the record at `addr`, which must belong to `key`.
    pub fn read_value(&self, g: &Guard<'_>, addr: u64, key: &[u8]) -> Result<Vec<u8>> {
        self.health.check_open()?;
        let slot = self.threads.slot(g.slot());
        ThreadSlot::bump(&slot.reads);
        let ops = &self.counters.ops;
        if addr >= self.off_dram() {
            let value = self.read_durable_dram(addr, key)?;
            ops.reads_from_dram.incr();
            ops.user_bytes_read.add(value.len() as u64);
            return Ok(value);
        }
        if let Some(cache) = &self.cache {
            if let Some(value) = cache.lookup(&self.pages, addr, key) {
                cache.counters.hits.incr();
                ops.reads_from_dram.incr();
                ops.user_bytes_read.add(value.len() as u64);
                return Ok(value);
            }
            cache.counters.misses.incr();
        }
        let loc = nvm_read::locate(self.pool(), &self.blocks, &self.geo, addr)?;
        let rec = nvm_read::read_record(self.pool(), &loc)?;
        if rec.key != key {
            return Err(Error::corruption(
                Tier::Pmem,
                loc.off,
                "an index entry points at another key's record",
            ));
        }
        ops.reads_from_pmem.incr();
        ops.user_bytes_read.add(rec.value.len() as u64);
        let value = rec.value.to_vec();
        if let Some(cache) = &self.cache
            && ThreadSlot::bump(&slot.pmem_reads).is_multiple_of(u64::from(self.opts.sample_freq))
        {
            cache.admit(
                &self.pages,
                slot,
                addr,
                self.pool().read(loc.off, loc.len as usize)?,
            );
        }
        Ok(value)
    }

    /// The value of the DRAM record at `addr` once its log entry is durable (FORMAT.md §
    /// Readers and in-flight puts): a put's entry is written after the index's lock is
    /// released, so a reader may find a version whose entry is still being persisted; it
    /// waits for that persist (only a reader of that very key, and at most one grouped
    /// persist) rather than return a value that a crash could still take away after the
    /// reader returned it. With the log off nothing waits (no write is durable before its
    /// flush). A poisoned store ends the wait with its error.
    fn read_durable_dram(&self, addr: u64, key: &[u8]) -> Result<Vec<u8>> {
        let (page, at) = (self.dram_page(addr)?, self.geo.page_offset(addr));
        loop {
            let (value, meta) = dram_record::read_value_and_meta(page, at, key)?;
            if self.oplog.is_none() || !self.opts.durable_reads || dram_record::is_logged(meta) {
                return Ok(value);
            }
            self.counters.reads_waited.incr();
            let poisoned = || self.health.poisoned.get().is_some();
            if !dram_record::wait_for_change(page, at, meta, poisoned) {
                self.health.check_writable()?;
            }
        }
    }

    /// Hints that the record at `addr` is read soon: its first lines, in its DRAM page or,
    /// below off_DRAM, in its full pmem block (a compact block's record is found through
    /// its hash table, which this does not walk). Reads and changes nothing.
    pub fn prefetch_record(&self, _g: &Guard<'_>, addr: u64) {
        const AHEAD: usize = 128;
        if addr >= self.off_dram() {
            if let Ok(page) = self.dram_page(addr) {
                let word = (self.geo.page_offset(addr) / 8) as usize;
                if let Some(w) = page.get(word) {
                    tierkv_core::common::prefetch::prefetch(w);
                }
                if let Some(w) = page.get(word + AHEAD / 8 - 1) {
                    tierkv_core::common::prefetch::prefetch(w);
                }
            }
            return;
        }
        if let Some((base, false)) = self.blocks.base(self.geo.block_of(addr)) {
            self.pool()
                .prefetch(base + self.geo.block_offset(addr), AHEAD);
        }
    }

    /// The DRAM page holding `addr` (which is above off_DRAM, in a pinned operation).
    pub fn dram_page(&self, addr: u64) -> Result<&crate::dram::Page> {
        let phys = self.ring.lookup(self.geo.page_of(addr)).ok_or_else(|| {
            Error::corruption(
                Tier::Dram,
                addr,
                format!("address {addr:#x} is in no DRAM page"),
            )
        })?;
        Ok(self.pages.page(phys))
    }

    /// set_value: stores `key` = `value`; `old` is the key's current address. Returns the
    /// address the index must hold.
    pub fn write_value(
        &self,
        g: &Guard<'_>,
        old: Option<u64>,
        key: &[u8],
        value: &[u8],
    ) -> Result<u64> {
        self.settle_earlier_attempt(g, key, old)?;
        let r = self.write_value_inner(g, old, key, value);
        match r {
            Ok(addr) => g.record(key, old, Outcome::Installed(addr)),
            Err(_) => {
                // A failure after the entry was prepared: an in-place update is visible
                // and is logged; a new record is not installed and its entry never written.
                if let Some(p) = g.take_pending() {
                    if p.in_place {
                        self.write_pending(p)?;
                    } else {
                        g.forget_logged();
                    }
                }
                g.record(key, old, Outcome::Unchanged);
            }
        }
        r
    }

    /// Settles what an earlier call of this operation left (a lock-free index's attempt
    /// that lost its race, or another key's write): its prepared entry is dropped if the
    /// attempt lost and was out of place (its record was never installed, so nobody saw
    /// it), and written otherwise (an in-place update took effect when it was made; its
    /// timestamp is older than the seal of whatever replaced it). An entry already written
    /// by a lost attempt is withdrawn.
    fn settle_earlier_attempt(&self, g: &Guard<'_>, key: &[u8], old: Option<u64>) -> Result<()> {
        if g.has_pending() {
            let lost = g.attempt_lost(key, old);
            if let Some(p) = g.take_pending() {
                if lost && !p.in_place {
                    drop(p);
                    if let Some(log) = &self.oplog {
                        log.counters.retracted.incr();
                    }
                    return Ok(());
                }
                return self.write_pending(p);
            }
        }
        self.retract_lost_attempt(g, key, old)
    }

    /// A lock-free index calls `set_value` (or `remove_value`) again for a key when its
    /// compare-and-swap lost to another writer; `old` is then what that writer installed,
    /// not what the earlier attempt left. The earlier attempt's log entry is withdrawn
    /// before anything else (`oplog.rs`): it carries a timestamp taken before the CAS, which
    /// may be newer than the winner's, and recovery would rank it above the winner's
    /// acknowledged write — or, once its record is flushed (and marked as an orphan), treat
    /// it as flushed and drop the winner's record. An attempt whose result is `old` (an
    /// in-place update the retry starts from) was installed and stays.
    fn retract_lost_attempt(&self, g: &Guard<'_>, key: &[u8], old: Option<u64>) -> Result<()> {
        let Some(log) = &self.oplog else {
            return Ok(());
        };
        if !g.attempt_lost(key, old) {
            return Ok(());
        }
        log.retract(&self.nvm, g.slot()).inspect_err(|e| {
            self.health.poison(format!(
                "hetermm: a lost attempt's log entry could not be withdrawn: {e}"
            ));
        })
    }

    fn write_value_inner(
        &self,
        g: &Guard<'_>,
        old: Option<u64>,
        key: &[u8],
        value: &[u8],
    ) -> Result<u64> {
        self.health.check_writable()?;
        self.check_payload(key, value)?;
        self.run_hook(HookPoint::Write, value)?;
        self.threads
            .slot(g.slot())
            .writes
            .fetch_add(1, Ordering::Relaxed);
        if let Some(a) = old {
            // IMPORTANT: the log page first — an in-place update is visible at once, so
            // the entry that makes it durable must not be able to fail for lack of space.
            if a >= self.off_read_only() {
                // The ticket borrows the guard's memory, which outlives the guard.
                let ticket = g.mem().log_ticket(g, key.len(), value.len())?;
                if let Some(ts) = self.try_in_place(a, key, value)? {
                    let at = Place {
                        address: a,
                        record: a,
                    };
                    if let Err(e) = self.defer_log(g, ticket, put_entry(ts, key, value, at), true) {
                        self.health.poison(format!(
                            "hetermm: an in-place update could not be logged: {e}"
                        ));
                        return Err(e);
                    }
                    self.counters.in_place.incr();
                    self.count_put(key, value);
                    self.run_hook(HookPoint::Logged, value)?;
                    return Ok(a);
                }
            }
            self.seal(a)?;
        }
        let (addr, ts) = self.new_record(g, key, value, || self.next_ts())?;
        // IMPORTANT: the entry covers the replaced version's address too (FORMAT.md §
        // Covered address): it must outlive that version's own entry.
        let at = Place {
            address: old.map_or(addr, |o| o.max(addr)),
            record: addr,
        };
        let deferred = g
            .mem()
            .log_ticket(g, key.len(), value.len())
            .and_then(|t| self.defer_log(g, t, put_entry(ts, key, value, at), false));
        if let Err(e) = deferred {
            g.invalidate(addr, addr);
            return Err(e);
        }
        self.counters.out_of_place.incr();
        self.count_put(key, value);
        self.run_hook(HookPoint::Logged, value)?;
        Ok(addr)
    }

    /// Recovery's replay of a logged put: a new record with the entry's timestamp, not
    /// logged again (the old log keeps it durable until the forced flush after recovery);
    /// returns its address, for the index. May wait for the flusher (unpinned).
    pub fn restore_value(&self, g: &Guard<'_>, key: &[u8], value: &[u8], ts: u64) -> Result<u64> {
        self.check_payload(key, value)?;
        self.reserve(g, key.len(), value.len())?;
        let (addr, _) = self.new_record(g, key, value, || ts)?;
        // Its entry, in the old log, is durable: readers need not wait for it.
        dram_record::set_logged(self.dram_page(addr)?, self.geo.page_offset(addr), ts);
        self.counters.out_of_place.incr();
        Ok(addr)
    }

    /// Writes a new record in the thread's page (its reservation, if it has one) with the
    /// timestamp `ts()` takes; returns its address and timestamp.
    fn new_record(
        &self,
        g: &Guard<'_>,
        key: &[u8],
        value: &[u8],
        ts: impl FnOnce() -> u64,
    ) -> Result<(u64, u64)> {
        let len = record_len(key.len() as u64, value.len() as u64);
        let cap = (len - record::HEADER_LEN - key.len() as u64) as u32;
        let addr = self.claim(g, len)?;
        let ts = ts();
        let page = self.dram_page(addr)?;
        if let Err(e) =
            dram_record::write_new(page, self.geo.page_offset(addr), ts, key, value, cap)
        {
            // A hole in the middle of a page would hide the records after it.
            self.health
                .poison(format!("hetermm: a record could not be written: {e}"));
            return Err(e);
        }
        Ok((addr, ts))
    }

    fn count_put(&self, key: &[u8], value: &[u8]) {
        self.counters
            .ops
            .user_bytes_written
            .add((key.len() + value.len()) as u64);
    }

    /// Updates the record at `a` in place if it is in the mutable region and the value
    /// fits; returns its new timestamp.
    fn try_in_place(&self, a: u64, key: &[u8], value: &[u8]) -> Result<Option<u64>> {
        if a < self.off_read_only() {
            return Ok(None);
        }
        dram_record::update_in_place(
            self.dram_page(a)?,
            self.geo.page_offset(a),
            key,
            value,
            || self.next_ts(),
        )
    }

    /// Seals the record at `a` if it is still in DRAM (no in-place update after this).
    pub(crate) fn seal(&self, a: u64) -> Result<()> {
        if a < self.off_dram() {
            return Ok(());
        }
        dram_record::seal(self.dram_page(a)?, self.geo.page_offset(a))
    }

    /// Deletes the record at `old` (the key's current address). Its invalidation waits in
    /// the guard until the removal is known to stand (`guard.rs`).
    pub fn delete_value(&self, g: &Guard<'_>, old: u64, key: &[u8]) -> Result<()> {
        self.settle_earlier_attempt(g, key, Some(old))?;
        let r = self.delete_value_inner(g, old, key);
        match r {
            Ok(frontier) => g.record(key, Some(old), Outcome::Removed(frontier)),
            Err(_) => g.record(key, Some(old), Outcome::Unchanged),
        }
        r.map(drop)
    }

    /// [`HeterMem::delete_value`] but the effect; returns the delete frontier it read.
    fn delete_value_inner(&self, g: &Guard<'_>, old: u64, key: &[u8]) -> Result<u64> {
        self.health.check_writable()?;
        self.check_clock()?;
        self.run_hook(HookPoint::Write, &[])?;
        self.threads
            .slot(g.slot())
            .writes
            .fetch_add(1, Ordering::Relaxed);
        self.seal(old)?;
        let ts = self.next_ts();
        let frontier = self.off_read_only();
        let at = Place {
            address: old.max(frontier),
            record: old,
        };
        let e = NewEntry {
            ts,
            kind: EntryKind::Delete,
            key,
            value: &[],
            at,
        };
        self.log(g, e)?;
        self.counters.deletes.incr();
        self.run_hook(HookPoint::Logged, &[])?;
        Ok(frontier)
    }

    /// Appends the operation-log entry of a write (unless the log is off, or recovery is
    /// replaying the old log) and marks the DRAM record as logged.
    fn log(&self, g: &Guard<'_>, e: NewEntry<'_>) -> Result<()> {
        let ticket = self.log_ticket(g, e.key.len(), e.value.len())?;
        self.commit_log(g, ticket, e)
    }

    /// The thread's log page with room for an entry (`None`: nothing is logged — the log is
    /// off, or recovery replays the old log).
    fn log_ticket(
        &self,
        g: &Guard<'_>,
        key_len: usize,
        value_len: usize,
    ) -> Result<Option<LogTicket<'_>>> {
        let Some(log) = &self.oplog else {
            return Ok(None);
        };
        if self.replaying.load(Ordering::Relaxed) {
            return Ok(None);
        }
        log.begin(&self.nvm, g.slot(), key_len, value_len)
            .inspect_err(|e| {
                self.note_no_space(e);
            })
            .map(Some)
    }

    /// Writes the entry into the page `ticket` holds; notes it in the guard (it may still
    /// be retracted) and in the DRAM record (its entry is durable).
    fn commit_log(
        &self,
        g: &Guard<'_>,
        ticket: Option<LogTicket<'_>>,
        e: NewEntry<'_>,
    ) -> Result<()> {
        let Some(ticket) = ticket else {
            return Ok(());
        };
        ticket.commit(&self.nvm, &e)?;
        let (put, record) = (e.kind == EntryKind::Put, e.at.record);
        g.note_logged(e.key, put.then_some(record));
        if put && record >= self.off_dram() {
            dram_record::set_logged(self.dram_page(record)?, self.geo.page_offset(record), e.ts);
        }
        Ok(())
    }

    /// A put's entry, prepared under the index's lock and kept in the guard until
    /// [`HeterMem::complete`] writes it, after the lock (FORMAT.md § Writes). With no
    /// ticket (the log is off, or recovery replays the old log) nothing is logged, and the
    /// record counts as durable as far as readers are concerned.
    fn defer_log<'a>(
        &self,
        g: &Guard<'a>,
        ticket: Option<LogTicket<'a>>,
        e: NewEntry<'_>,
        in_place: bool,
    ) -> Result<()> {
        let record = e.at.record;
        let Some(ticket) = ticket else {
            if record >= self.off_dram() {
                dram_record::set_logged(
                    self.dram_page(record)?,
                    self.geo.page_offset(record),
                    e.ts,
                );
            }
            return Ok(());
        };
        let entry = ticket.prepare(&e)?;
        g.defer(Pending {
            entry,
            record,
            in_place,
        });
        g.note_logged(e.key, Some(record));
        Ok(())
    }

    /// Writes the put's log entry this operation prepared, if any (two persists, grouped
    /// with concurrent writers'), and marks its record durable for readers. Called once
    /// the index's lock is released and before the put is acknowledged; the guard's drop
    /// calls it too. A failure poisons the store: the record is already visible.
    pub fn complete(&self, g: &Guard<'_>) -> Result<()> {
        match g.take_pending() {
            Some(p) => self.write_pending(p),
            None => Ok(()),
        }
    }

    /// Writes a prepared entry and marks its record durable for readers.
    fn write_pending(&self, p: Pending<'_>) -> Result<()> {
        let ts = p.entry.ts();
        let record = p.record;
        let written = self
            .run_hook(HookPoint::Persisting, &[])
            .and_then(|()| p.entry.write(&self.nvm));
        if let Err(e) = written {
            self.health.poison(format!(
                "hetermm: a put's log entry could not be written: {e}"
            ));
            return Err(e);
        }
        if record >= self.off_dram() {
            dram_record::set_logged(self.dram_page(record)?, self.geo.page_offset(record), ts);
        }
        Ok(())
    }

    /// Recovery's setAddr (Algorithm 1, lines 19-26): of the key's current address and a
    /// candidate found in a pmem block, the one with the newer timestamp stays; the other is
    /// collected as a loser.
    pub fn recover_value(
        &self,
        g: &Guard<'_>,
        current: Option<u64>,
        key: &[u8],
        candidate: u64,
    ) -> Result<u64> {
        let winner = match current {
            None => candidate,
            Some(c) if c == candidate => c,
            Some(c) => {
                if self.persisted_ts(candidate)? > self.persisted_ts(c)? {
                    candidate
                } else {
                    g.invalidate(candidate, candidate);
                    c
                }
            }
        };
        if current != Some(winner) {
            g.record(key, current, Outcome::Installed(winner));
        }
        Ok(winner)
    }

    /// The timestamp of the record at `addr` in the persisted region.
    pub fn persisted_ts(&self, addr: u64) -> Result<u64> {
        let loc = nvm_read::locate(self.pool(), &self.blocks, &self.geo, addr)?;
        Ok(nvm_read::read_record(self.pool(), &loc)?.header.ts())
    }
}

/// The log entry of a put.
fn put_entry<'a>(ts: u64, key: &'a [u8], value: &'a [u8], at: Place) -> NewEntry<'a> {
    NewEntry {
        ts,
        kind: EntryKind::Put,
        key,
        value,
        at,
    }
}
