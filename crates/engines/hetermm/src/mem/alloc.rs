//! Thread-oriented allocation of logical addresses (HeterMM §5.4, Algorithm 2).
//!
//! A thread allocates records from its own DRAM page with one compare-and-swap on its own
//! cursor. When the page is full — or the *alarm* says it is about to become read-only
//! (Eq. 2: its start is below the address the flusher will next move off_ReadOnly to) —
//! the thread leaves it (the unused rest is a hole that reorganisation absorbs, standing in
//! for the paper's `addInvalid` of the wasted space) and gets the next logical page:
//! a free physical page from the pool, then a page number from the global counter
//! (GlobalAllocated), then the mapping in the pages array.
//!
//! Waiting: with no free page (or no room in the pages array) the thread wakes the
//! flusher and waits *unpinned*, so the flusher's epoch synchronization never waits for it.
//! Nothing the operation read before the wait is used after it, and it holds no page
//! number while it waits.
//!
//! Thread safety: each thread uses its own cursor; the page counter and free list are
//! shared.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tierkv_core::{Error, Result, Tier};

use super::{Guard, HeterMem};
use crate::dram::record as dram_record;
use crate::format::record::record_len;
use crate::threads::{CLOSED, bump, cursor};

/// How long a writer waits for the log to shrink while no log block is retired.
const LOG_WAIT_IDLE: Duration = Duration::from_secs(1);

/// A writer's wait for the log to shrink ([`HeterMem::wait_for_log_room`]): it goes on
/// while the log reaches a new low in its block count at least every `idle`.
///
/// IMPORTANT: a new low, not a retired block. Log compression (§5.3.1) retires the oldest
/// block after copying its needed entries to the head, so when every entry is still
/// needed — the records they protect lie in DRAM blocks that cannot be flushed yet,
/// because a writer waiting here holds its page in the oldest of them — each compression
/// retires one block and fills another: the count stands still while the retired count
/// rises. Writers that took a retirement for progress waited for ever beside a flusher
/// compressing the same entries round after round (hetermm's `batch_sigkill` child: every
/// writer in this wait, stop 49's CI run out of time).
#[derive(Debug)]
pub(crate) struct LogShrinkWait {
    fewest: usize,
    since: Instant,
}

impl LogShrinkWait {
    /// A wait that began at `now` with `blocks` live log blocks.
    pub(crate) fn new(blocks: usize, now: Instant) -> LogShrinkWait {
        LogShrinkWait {
            fewest: blocks,
            since: now,
        }
    }

    /// Whether to keep waiting, the log holding `blocks` blocks at `now`.
    pub(crate) fn keep_waiting(&mut self, blocks: usize, now: Instant, idle: Duration) -> bool {
        if blocks < self.fewest {
            (self.fewest, self.since) = (blocks, now);
            return true;
        }
        now.saturating_duration_since(self.since) < idle
    }
}

impl HeterMem {
    /// Reserves the space of a record with this key and value length for the guard's next
    /// out-of-place write (may wait for the flusher; call it before taking an index lock).
    pub fn reserve(&self, g: &Guard<'_>, key_len: usize, value_len: usize) -> Result<()> {
        self.check_payload_len(key_len, value_len)?;
        self.admit_write(g)?;
        self.reserve_log(g, key_len, value_len)?;
        let len = record_len(key_len as u64, value_len as u64);
        if g.reserved_len() == Some(len) {
            return Ok(());
        }
        self.release_reservation(g);
        let addr = self.alloc_record(g, len)?;
        g.set_reserved(Some((addr, len)));
        Ok(())
    }

    /// Reserves room for the log entry of a delete (no record: a delete is possible however
    /// full the pool is, `nvm/reserve.rs`).
    pub fn reserve_delete(&self, g: &Guard<'_>, key_len: usize) -> Result<()> {
        self.check_payload_len(key_len, 0)?;
        self.reserve_log(g, key_len, 0)
    }

    /// Makes room in the thread's log page for the entry of a write (a new page, and a new
    /// log block, may be needed), waiting unpinned while the reclaimer defragments pmem.
    pub(crate) fn reserve_log(
        &self,
        g: &Guard<'_>,
        key_len: usize,
        value_len: usize,
    ) -> Result<()> {
        let Some(log) = &self.oplog else {
            return Ok(());
        };
        if self.replaying.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.wait_for_log_room(g, log);
        loop {
            match log.ensure_room(&self.nvm, g.slot(), key_len, value_len) {
                Err(e @ Error::NoSpace { .. }) => {
                    // NOTE: a new request per retry, so in effect a wait until the log
                    // gets room: this is also a delete's wait, whose log block may come
                    // from the reserve, and which the flusher's full-pool work (`flush.rs`
                    // `full_pool_step`: retire the log, refill the reserve) ends, not a
                    // defragmentation pass. A write batch's wait for a log block keeps one
                    // request ([`space_request`](Self::space_request)).
                    let request = self.note_no_space(&e).unwrap_or_default();
                    self.wait_for_space(g, e, request)?;
                }
                other => return other,
            }
        }
    }

    /// The defragmentation request of one wait for pmem: asked for at its first failure and
    /// kept for all of its retries, so that the wait ends with `NoSpace` once a pass that
    /// began after that failure gave up.
    ///
    /// IMPORTANT: not a new request per retry. A request made after the last pass gave up
    /// is a new one, so a writer that asked again on every failed retry saw a pass's answer
    /// only if it landed between its request and its check: it waited until luck (a
    /// write batch spanning log pages on a full pool: 1 to 1,300 s, `tests/batch_model.rs`).
    pub(crate) fn space_request(&self, e: &Error, request: &mut Option<u64>) -> u64 {
        match *request {
            Some(r) => {
                self.wake_reclaimer.raise();
                r
            }
            None => {
                let r = self.note_no_space(e).unwrap_or_default();
                *request = Some(r);
                r
            }
        }
    }

    /// Back-pressure from the log (ours): while the log holds `log_blocks_limit` blocks or
    /// more, a new write waits (unpinned) for the flusher to flush or compress the oldest
    /// ones. The log protects what is in DRAM, and with values of up to half a page its
    /// pages are half empty, so writers that never waited grew it to three times its budget
    /// (22 blocks of 1 MiB for a budget of 7 in a 64 MiB pool) and left no room in the pool
    /// for blocks: the transient `NoSpace` of stress seeds 3051 and 2005.
    ///
    /// The wait ends when the log is under the limit, or when it cannot shrink by the
    /// flusher alone: the reserve is dipped or the flusher is stalled (pmem full: the
    /// write then goes on and the reserve rules decide), the store stops, or the log did
    /// not shrink for [`LOG_WAIT_IDLE`] ([`LogShrinkWait`]: the write goes on, as if there
    /// were no limit).
    pub(crate) fn wait_for_log_room(&self, g: &Guard<'_>, log: &crate::oplog::OpLog) {
        // The common case, with no clock read and no lock.
        if log.block_count() < self.log_blocks_limit {
            return;
        }
        let mut wait = LogShrinkWait::new(log.block_count(), Instant::now());
        while log.block_count() >= self.log_blocks_limit
            && self.health.check_writable().is_ok()
            && !self.nvm.reserve.dipped()
            && self.health.stalled.lock().is_none()
        {
            if !wait.keep_waiting(log.block_count(), Instant::now(), LOG_WAIT_IDLE) {
                return;
            }
            self.wake_flusher.raise();
            g.unpinned(|| std::thread::sleep(Duration::from_micros(200)));
            self.counters.log_waits.incr();
        }
    }

    /// After an allocation failed for lack of pmem (defragmentation request `request`):
    /// waits (unpinned) while the reclaimer defragments; returns the error once a pass that
    /// began after the request has given up, or the store stops.
    pub(crate) fn wait_for_space(&self, g: &Guard<'_>, e: Error, request: u64) -> Result<()> {
        self.health.check_writable()?;
        if self.defrag.answered(request) {
            return Err(e);
        }
        self.wake_flusher.raise();
        // NOTE: a sleep, not a wait for a free DRAM page: pmem is what is short, and that
        // wait returns at once while any page is free (the retries spun).
        g.unpinned(|| std::thread::sleep(super::ROOM_POLL));
        Ok(())
    }

    /// After a write batch with puts that spans log pages found no run for a log block
    /// (the allocator's: it never takes the reserve's, `oplog.rs` `begin_span`) and gave
    /// its records back: waits (unpinned, holding nothing) until the log holds a run for
    /// its next block — then the batch reserves again — or returns `e` once the
    /// defragmentation pass asked for at the first failure (`request`, kept for every
    /// retry) gave up. While the reserve is dipped it returns at once: the batch's
    /// admission (`admit_write`) decides then, and no run is taken that the reserve needs.
    ///
    /// IMPORTANT: not a retry at once. Each retry reserved the batch's records and gave
    /// them back as padding, DRAM pages the flusher had to write to pmem (dipping the
    /// reserve) and reorganisation had to free again (refilling it): on a full pool that
    /// churn, with a new request per retry, kept every pass from finding the pool full, and
    /// the batch was refused only by luck, after up to thousands of room passes.
    pub(crate) fn wait_for_log_block(
        &self,
        g: &Guard<'_>,
        log: &crate::oplog::OpLog,
        e: Error,
        request: u64,
    ) -> Result<()> {
        loop {
            self.health.check_writable()?;
            if self.nvm.reserve.dipped() {
                return Ok(());
            }
            match log.prepare(&self.nvm) {
                Ok(()) => return Ok(()),
                Err(Error::NoSpace { .. }) => {}
                Err(other) => return Err(other),
            }
            if self.defrag.answered(request) {
                return Err(e);
            }
            self.wake_reclaimer.raise();
            g.unpinned(|| std::thread::sleep(super::ROOM_POLL));
        }
    }

    /// The flusher's stall, as an error, once a defragmentation pass asked for by this wait
    /// (`request`, set on the first stall it sees) has given up.
    fn stall_error(&self, request: &mut Option<u64>) -> Option<Error> {
        let why = self.health.stalled.lock().clone()?;
        let r = *request.get_or_insert_with(|| {
            let r = self.defrag.request();
            self.wake_reclaimer.raise();
            r
        });
        self.defrag
            .answered(r)
            .then(|| Error::no_space(Tier::Pmem, why))
    }

    /// Space for a record of `len` bytes: the guard's reservation, or a fresh allocation
    /// (which may wait: only without a reservation).
    pub fn claim(&self, g: &Guard<'_>, len: u64) -> Result<u64> {
        match g.take_reserved() {
            Some((addr, l)) if l == len => Ok(addr),
            other => {
                if let Some(r) = other {
                    self.give_back(g, r);
                }
                self.alloc_record(g, len)
            }
        }
    }

    /// Gives an unused reservation back.
    pub fn release_reservation(&self, g: &Guard<'_>) {
        if let Some(r) = g.take_reserved() {
            self.give_back(g, r);
        }
    }

    /// Un-bumps the thread's cursor if the reservation is its last allocation; otherwise
    /// fills it with a padding record (so its page stays walkable) and marks it invalid.
    fn give_back(&self, g: &Guard<'_>, (addr, len): (u64, u64)) {
        let slot = self.threads.slot(g.slot());
        let (page, off) = (self.geo.page_of(addr), self.geo.page_offset(addr));
        let undone = slot
            .write_cursor
            .compare_exchange(
                cursor(page, off + len, self.geo.page_size()),
                cursor(page, off, self.geo.page_size()),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok();
        if undone {
            return;
        }
        match self
            .dram_page(addr)
            .and_then(|p| dram_record::write_padding(p, off, len))
        {
            Ok(()) => g.invalidate(addr, addr),
            Err(e) => self
                .health
                .poison(format!("hetermm: a reservation could not be padded: {e}")),
        }
    }

    /// Allocates `len` bytes (<= page size) in the thread's page; returns the address.
    pub fn alloc_record(&self, g: &Guard<'_>, len: u64) -> Result<u64> {
        let slot = self.threads.slot(g.slot());
        loop {
            let alarm = self.regions.alarm.load(Ordering::SeqCst);
            let in_time = |p: u64| self.geo.page_start(p) >= alarm;
            if let Some((page, off)) = bump(&slot.write_cursor, len, self.geo.page_size(), in_time)
            {
                return Ok(self.geo.page_start(page) + off);
            }
            let c = slot.write_cursor.load(Ordering::Acquire);
            if c != CLOSED && !in_time(crate::threads::cursor_page(c, self.geo.page_size())) {
                self.counters.alarms.incr();
            }
            self.next_write_page(g)?;
        }
    }

    /// Leaves the thread's page and maps the next logical page for it.
    fn next_write_page(&self, g: &Guard<'_>) -> Result<()> {
        let slot = self.threads.slot(g.slot());
        slot.write_cursor.store(CLOSED, Ordering::SeqCst);
        let phys = self.take_free_page(g)?;
        let lp = self.reserve_page(g);
        self.install_write_page(g, phys, lp)
    }

    /// Maps logical page `lp` (or gives `phys` back on an error) and makes it the thread's.
    fn install_write_page(&self, g: &Guard<'_>, phys: u32, lp: Result<u64>) -> Result<()> {
        let mapped = lp.and_then(|lp| self.ring.map(lp, phys).map(|()| lp));
        let lp = match mapped {
            Ok(lp) => lp,
            Err(e) => {
                self.pages.give_back(&[phys]);
                return Err(e);
            }
        };
        let first = self.geo.first_usable(lp) - self.geo.page_start(lp);
        let slot = self.threads.slot(g.slot());
        slot.write_cursor
            .store(cursor(lp, first, self.geo.page_size()), Ordering::SeqCst);
        Ok(())
    }

    /// The addresses of records of these lengths for one write batch (ours, issue 24), in
    /// order, in the thread's page and in as many fresh pages as they need — reserved all
    /// at once: the batch holds them pinned until its commit, so it may never wait while it
    /// holds some (the flusher could copy a block with a reserved, unwritten record).
    /// Waits (unpinned, holding none) until `pages` pages are free, then takes what it
    /// needs without waiting; when that still falls short (racing writers took the pages),
    /// gives everything back and waits again. While it waits the flusher keeps `pages`
    /// free rather than `free_pages` ([`free_target`](Self::free_target)); `pages` is at
    /// most `free_pages + overlap_blocks × 2^(m-k)` (`mem/batch.rs`), a block fewer than
    /// the write region can always have free (the read cache leaves writes `free_pages` and
    /// `overlap_blocks + 2` blocks; all but the newest, incomplete block can be flushed), so
    /// the wait ends; a stalled flusher (a full pool) ends it with `NoSpace`.
    pub(crate) fn alloc_batch_records(
        &self,
        g: &Guard<'_>,
        lens: &[u64],
        pages: usize,
    ) -> Result<Vec<(u64, u64)>> {
        let mut request = None;
        let got = self.batch_records_waiting(g, lens, pages, &mut request);
        // Another batch may want more: it raises the target again on its next round.
        let _ =
            self.batch_pages_wanted
                .compare_exchange(pages, 0, Ordering::AcqRel, Ordering::Relaxed);
        got
    }

    /// The free DRAM pages the flusher keeps: `free_pages`, or more while a write batch
    /// waits for them.
    pub fn free_target(&self) -> usize {
        self.free_pages
            .max(self.batch_pages_wanted.load(Ordering::Acquire))
    }

    fn batch_records_waiting(
        &self,
        g: &Guard<'_>,
        lens: &[u64],
        pages: usize,
        request: &mut Option<u64>,
    ) -> Result<Vec<(u64, u64)>> {
        loop {
            self.admit_write(g)?;
            if self.pages.free_count() >= pages {
                let mut got = Vec::with_capacity(lens.len());
                for &len in lens {
                    match self.try_alloc_record(g, len) {
                        Ok(Some(a)) => got.push((a, len)),
                        Ok(None) => break,
                        Err(e) => {
                            self.give_back_all(g, got);
                            return Err(e);
                        }
                    }
                }
                if got.len() == lens.len() {
                    return Ok(got);
                }
                self.give_back_all(g, got);
                self.counters.page_waits.incr();
            }
            self.health.check_writable()?;
            if let Some(e) = self.stall_error(request) {
                return Err(e);
            }
            if pages > self.free_pages {
                self.batch_pages_wanted.fetch_max(pages, Ordering::AcqRel);
            }
            self.wake_flusher.raise();
            // NOTE: until `pages` are free, not one: waiting for any free page returned at
            // once while fewer were free, and the batch spun on a core the flusher needs.
            g.unpinned(|| {
                self.pages
                    .wait_for_free_pages(pages, Duration::from_millis(5))
            });
        }
    }

    /// Gives reservations back, the last first (so the thread's cursor un-bumps when it can).
    pub(crate) fn give_back_all(&self, g: &Guard<'_>, got: Vec<(u64, u64)>) {
        for r in got.into_iter().rev() {
            self.give_back(g, r);
        }
    }

    /// [`alloc_record`](Self::alloc_record) without waiting: `None` when it would have to
    /// wait for a free page, a slot in the pages array or the pmem reserve.
    fn try_alloc_record(&self, g: &Guard<'_>, len: u64) -> Result<Option<u64>> {
        let slot = self.threads.slot(g.slot());
        loop {
            let alarm = self.regions.alarm.load(Ordering::SeqCst);
            let in_time = |p: u64| self.geo.page_start(p) >= alarm;
            if let Some((page, off)) = bump(&slot.write_cursor, len, self.geo.page_size(), in_time)
            {
                return Ok(Some(self.geo.page_start(page) + off));
            }
            slot.write_cursor.store(CLOSED, Ordering::SeqCst);
            // IMPORTANT: as in `reserve_page`, no new page once the reserve has dipped.
            if self.nvm.reserve.dipped() {
                return Ok(None);
            }
            let Some(phys) = self.pages.try_take() else {
                return Ok(None);
            };
            match self.try_page_number() {
                Ok(Some(lp)) => self.install_write_page(g, phys, Ok(lp))?,
                other => {
                    self.pages.give_back(&[phys]);
                    return other.map(|_| None);
                }
            }
        }
    }

    /// A free physical page, waiting for the flusher (unpinned) when there is none.
    fn take_free_page(&self, g: &Guard<'_>) -> Result<u32> {
        let mut waited = false;
        let mut request = None;
        loop {
            if let Some(p) = self.pages.try_take() {
                if waited {
                    self.counters.page_waits.incr();
                }
                return Ok(p);
            }
            self.health.check_writable()?;
            if let Some(e) = self.stall_error(&mut request) {
                return Err(e);
            }
            waited = true;
            self.wake_flusher.raise();
            g.unpinned(|| self.pages.wait_for_free(Duration::from_millis(5)));
        }
    }

    /// Takes the next logical page number (GlobalAllocated), waiting (unpinned) while its
    /// slot in the pages array still holds the page `P` before it. The number is taken
    /// with a compare-and-swap only once it has room, so from reservation to mapping the
    /// thread stays pinned and the flusher never copies a block with a page half-mapped.
    fn reserve_page(&self, g: &Guard<'_>) -> Result<u64> {
        let mut request = None;
        loop {
            // IMPORTANT: no new page once the reserve has dipped (`nvm/reserve.rs`), checked
            // before the number is taken. A writer that read the reserve whole just before
            // the dip still takes its one page; the reserve's slack covers those.
            self.admit_write(g)?;
            if let Some(np) = self.try_page_number()? {
                return Ok(np);
            }
            self.health.check_writable()?;
            if let Some(e) = self.stall_error(&mut request) {
                return Err(e);
            }
            self.wake_flusher.raise();
            g.unpinned(|| self.pages.wait_for_free(Duration::from_millis(5)));
        }
    }

    /// Takes the next logical page number, or `None` while its slot in the pages array
    /// still holds the page a ring length before it (`Regions::unmapped_below`, which
    /// trails `off_dram` in a flush's freeing stage).
    fn try_page_number(&self) -> Result<Option<u64>> {
        loop {
            let np = self.regions.next_page.load(Ordering::SeqCst);
            self.check_block_number(self.geo.block_of_page(np))?;
            let unmapped = self.regions.unmapped_below.load(Ordering::SeqCst);
            if np >= unmapped + self.ring.len() as u64 {
                return Ok(None);
            }
            if self
                .regions
                .next_page
                .compare_exchange(np, np + 1, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                return Ok(Some(np));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDLE: Duration = Duration::from_secs(1);

    #[test]
    fn a_log_that_keeps_shrinking_keeps_its_writers_waiting() {
        let t0 = Instant::now();
        let mut w = LogShrinkWait::new(9, t0);
        for (i, blocks) in [8, 7, 6, 5].into_iter().enumerate() {
            let at = t0 + IDLE * (i as u32 + 1) - Duration::from_millis(1);
            assert!(w.keep_waiting(blocks, at, IDLE), "{blocks} blocks");
        }
    }

    #[test]
    fn compressions_that_leave_the_count_where_it_was_end_the_wait_after_idle() {
        // Each compression retires a block and fills another: 9, 10, 9, 10, ... never a
        // new low (what the retired count took for progress).
        let t0 = Instant::now();
        let mut w = LogShrinkWait::new(9, t0);
        let mut at = t0;
        let mut waited = Duration::ZERO;
        for round in 0..1000u32 {
            at += Duration::from_millis(10);
            if !w.keep_waiting(9 + (round % 2) as usize, at, IDLE) {
                waited = at - t0;
                break;
            }
        }
        assert_eq!(waited, IDLE, "the wait ends after idle, not never");
    }

    #[test]
    fn a_new_low_restarts_the_idle_time() {
        let t0 = Instant::now();
        let mut w = LogShrinkWait::new(9, t0);
        assert!(w.keep_waiting(9, t0 + IDLE / 2, IDLE));
        assert!(w.keep_waiting(8, t0 + IDLE * 9 / 10, IDLE));
        assert!(
            w.keep_waiting(9, t0 + IDLE * 3 / 2, IDLE),
            "within idle of the low"
        );
        assert!(
            !w.keep_waiting(8, t0 + IDLE * 2, IDLE),
            "8 is not a new low"
        );
    }
}
