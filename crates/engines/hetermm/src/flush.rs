//! Background flushing (HeterMM §4.1.2) and the flusher's other duties: the read cache's
//! size (§5.1), log reclamation and compression (§5.3.1), pmem blocks prepared ahead
//! (§4.1.1).
//!
//! **Persisting stage** of the oldest DRAM block B: off_ReadOnly is moved past B (the
//! overlap region; usually done one flush ahead, so hot records in B get a chance to be
//! updated — copied out of place to the tail — before B is persisted) and the epochs are
//! synchronized, so no in-place update or allocation can touch B any more. The thread
//! buffers of pending invalidations are drained. B's pages are copied into a block image,
//! its header written, and the bits of its records already known invalid set in its bitmap;
//! the image is written to a prepared pmem run and persisted, then published (directory
//! word, `blocks` array). Pending marks for older blocks are applied and persisted.
//! **Freeing stage**: off_DRAM moves past B, the epochs are synchronized again (no reader
//! still reads B's pages), and B's pages go back to the free list.
//!
//! Crash points (see FORMAT.md § Crash consistency for the whole argument): before the
//! directory word is durable, B does not exist on pmem (its run is collected at recovery)
//! and its records are in the log; after it, B is complete and checksummed. Marks on older
//! blocks are applied only after B is published, so a record is never marked before what
//! replaced it is durable.
//!
//! Thread safety: one flusher at a time — the caller holds [`HeterMem::flusher`].

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tierkv_core::{Error, Result, Tier};

use crate::dram::record as dram_record;
use crate::format::block::{BlockHeader, mark_position, walk};
use crate::format::dir::DirEntry;
use crate::format::log::{EntryKind, Place};
use crate::format::record::RecordHeader;
use crate::format::u64_at;
use crate::invalid::PendingMarks;
use crate::mem::HeterMem;
use crate::nvm::blocks::{BlockInfo, Layout};
use crate::nvm::marks;
use crate::oplog::{LogBlock, NewEntry, OwnedEntry};
use crate::policy::{self, DramSnapshot, LogAction, Window};

/// How often the read-cache policy looks at the workload.
const POLICY_PERIOD: Duration = Duration::from_millis(10);
/// Pmem runs kept prepared for the next flushes.
const PREPARED_BLOCKS: usize = 2;

/// The flusher's own state.
#[derive(Debug, Default)]
pub struct FlushState {
    /// Invalidations drained from the threads.
    pub marks: PendingMarks,
    /// Runs allocated ahead for the next blocks.
    pub prepared: VecDeque<u64>,
    /// Log blocks written before the last recovery, retired by the first forced flush.
    pub old_logs: Vec<u64>,
    last_reads: u64,
    last_writes: u64,
    last_policy: Option<Instant>,
    /// The buffer a block's image is built in, kept from flush to flush (a fresh 2 MiB
    /// buffer per flush cost page faults and allocator work on the writers' cores).
    image: Vec<u8>,
}

impl HeterMem {
    /// One round of background work; returns whether it did anything.
    pub fn flusher_step(&self, st: &mut FlushState) -> Result<bool> {
        // IMPORTANT: no step on a poisoned store (see `flush_oldest`); the flusher thread
        // looks only between rounds, and a forced flush that failed is followed by a round.
        self.health.check_not_poisoned()?;
        if self.nvm.reserve.dipped() && self.room.pending() && self.serving.load(Ordering::Acquire)
        {
            return self.room_pass(st).map(|()| true);
        }
        let mut worked = self.cache_step(st)?;
        // A forced flush after recovery that failed (pmem full) is retried: until it
        // succeeds the old logs stand and no log block is reclaimed.
        if !st.old_logs.is_empty() && self.serving.load(Ordering::Acquire) {
            self.flush_all(st)?;
            worked = true;
        }
        let snap = self.dram_snapshot();
        if policy::should_prepare_overlap(snap) {
            self.prepare_overlap();
        }
        if policy::should_flush(snap) {
            self.flush_oldest(st)?;
            worked = true;
        }
        worked |= self.log_step(st)?;
        if self.nvm.reserve.dipped() {
            // IMPORTANT: not during recovery: its forced flush retires the old logs, which
            // the replay reads from.
            if self.serving.load(Ordering::Acquire) {
                worked |= self.full_pool_step(st)?;
            }
        } else if !worked {
            self.prepare_ahead(st)?;
        }
        Ok(worked)
    }

    /// A room pass, for writers waiting while the reserve is dipped (`mem/mod.rs`
    /// `admit_write`): flushes all of DRAM (applying every pending mark and retiring the
    /// log), reorganises every block over the threshold, moves blocks down while that
    /// frees a run, and refills the reserve. If the reserve is still short, the pool is
    /// full for good: the requests made before the pass began are answered (their writes
    /// get `NoSpace`). The pass always answers, even when a step fails; the failure is
    /// then reported as any other flusher error.
    fn room_pass(&self, st: &mut FlushState) -> Result<()> {
        let request = self.room.begin();
        let worked = self
            .flush_all(st)
            .and_then(|()| self.reorganise_all())
            .and_then(|_| self.defragment_for_reserve());
        let full = self.nvm.top_up_reserve().map(|topped| !topped);
        if !matches!(full, Ok(false)) {
            self.room.gave_up(request);
        }
        self.room.end(request);
        self.counters.room_passes.incr();
        worked.and(full.map(drop))
    }

    /// Moves blocks down while the reserve cannot be refilled and one still moves.
    fn defragment_for_reserve(&self) -> Result<()> {
        for _ in 0..=self.blocks.len() {
            if self.nvm.top_up_reserve()? || !self.relocate_one()? {
                break;
            }
        }
        Ok(())
    }

    /// While the pmem reserve is dipped (`nvm/reserve.rs`, writes refused): refills it from
    /// what reorganisation freed, and otherwise flushes everything that is in DRAM or keyed
    /// to a block not flushed yet — the deletes' marks, so that reorganisation can free
    /// their records' space, and the log, so that its blocks are retired. Returns whether
    /// it did anything.
    fn full_pool_step(&self, st: &mut FlushState) -> Result<bool> {
        if self.nvm.top_up_reserve()? {
            return Ok(true);
        }
        // The free chunks may lie in holes too short for a block: ask the reclaimer to
        // move blocks down (it answers with a pass that gives up when nothing moves).
        if !self.defrag.pending() {
            self.defrag.request();
            self.wake_reclaimer.raise();
        }
        st.marks.drain_from(&self.threads);
        let in_dram = self.regions.next_page.load(Ordering::SeqCst)
            > self.geo.first_page(self.geo.block_of(self.off_dram()));
        let logged = self.oplog.as_ref().is_some_and(|l| l.block_count() > 0);
        if !in_dram && st.marks.is_empty() && !logged && st.old_logs.is_empty() {
            return Ok(false);
        }
        // Only DRAM contents and marks make it work again at once; a log that cannot be
        // retired yet (a writer's entry still unsettled) is retried after the idle wait.
        let worked = in_dram || !st.marks.is_empty();
        self.flush_all(st)?;
        Ok(worked)
    }

    /// The first block not completely handed out.
    fn complete_limit(&self) -> u64 {
        self.geo
            .block_of_page(self.regions.next_page.load(Ordering::SeqCst))
    }

    fn dram_snapshot(&self) -> DramSnapshot {
        DramSnapshot {
            free: self.pages.free_count(),
            threshold: self.free_target(),
            complete_blocks: self
                .complete_limit()
                .saturating_sub(self.geo.block_of(self.off_dram())),
            cache_wants: self.cache.as_ref().is_some_and(|c| c.wants_pages()),
        }
    }

    /// Keeps `overlap_blocks` complete blocks read-only ahead of the next flush.
    fn prepare_overlap(&self) {
        let want = (self.geo.block_of(self.off_dram()) + self.opts.overlap_blocks)
            .min(self.complete_limit());
        self.make_read_only(want);
    }

    /// Moves off_ReadOnly (and the alarm) to the start of `end_block` and waits until no
    /// operation that saw the old value is running.
    fn make_read_only(&self, end_block: u64) {
        let end = self.geo.block_start(end_block);
        if self.off_read_only() >= end {
            return;
        }
        self.regions.alarm.store(end, Ordering::SeqCst);
        self.regions.off_read_only.store(end, Ordering::SeqCst);
        self.threads.synchronize();
    }

    /// Persists and frees the oldest DRAM block (the caller checked it is complete).
    pub fn flush_oldest(&self, st: &mut FlushState) -> Result<()> {
        // IMPORTANT: never on a poisoned store. A flush that failed after its block's
        // directory word was durable, retried, would publish the block again under a second
        // generation-0 word, which recovery refuses (`background.rs`).
        self.health.check_not_poisoned()?;
        let started = Instant::now();
        let b = self.geo.block_of(self.off_dram());
        // Nothing is handed out past the table (`check_block_number`); never publish there.
        if b >= self.blocks.capacity() {
            return Err(self.blocks_used_up(b));
        }
        self.make_read_only(b + 1);
        let first = self.geo.first_page(b);
        let mapped: Vec<(u64, u32)> = (first..first + self.geo.pages_per_block())
            .filter_map(|lp| self.ring.lookup(lp).map(|p| (lp, p)))
            .collect();
        self.run_hook(crate::mem::HookPoint::Flushing, &[])?;
        // The run first: running out of pmem leaves everything as it was, to retry.
        let run = match (mapped.is_empty(), st.prepared.pop_front()) {
            (true, prepared) => {
                st.prepared.extend(prepared);
                None
            }
            (false, Some(off)) => Some(off),
            (false, None) => Some(self.nvm.alloc_block_or_reserve()?),
        };
        st.marks.drain_from(&self.threads);
        let mut in_block = Vec::new();
        let mut older = Vec::new();
        for t in st.marks.take_through(b) {
            match self.geo.block_of(t).cmp(&b) {
                std::cmp::Ordering::Equal => in_block.push(self.geo.block_offset(t)),
                std::cmp::Ordering::Less => older.push(t),
                std::cmp::Ordering::Greater => st.marks.add([crate::invalid::Invalidation {
                    target: t,
                    key_block: self.geo.block_of(t),
                }]),
            }
        }
        if let Some(off) = run {
            self.persist_block(b, off, &mapped, &in_block, &mut st.image)?;
            self.run_hook(crate::mem::HookPoint::Published, &[])?;
        }
        self.apply_marks(&older)?;
        self.pool().crash_point("hetermm.flush.marks_applied");
        // IMPORTANT: the frontier moves only after B and every mark keyed at B are durable,
        // and never while recovery's replayed writes are unflushed (the old logs still
        // stand for them; `flush_all` moves it when they are flushed).
        if st.old_logs.is_empty() {
            self.nvm.set_flush_frontier(self.geo.block_start(b + 1))?;
        }
        self.pool().crash_point("hetermm.flush.before_free");
        // Freeing stage.
        self.regions
            .off_dram
            .store(self.geo.block_start(b + 1), Ordering::SeqCst);
        self.threads.synchronize();
        self.run_hook(crate::mem::HookPoint::Freeing, &[])?;
        let phys: Vec<u32> = mapped
            .iter()
            .filter_map(|(lp, _)| self.ring.unmap(*lp))
            .collect();
        // Only now may writers reserve the pages a ring length past this block's
        // (`Regions::unmapped_below`); before the pages come back, which wakes them.
        self.regions
            .unmapped_below
            .fetch_max(self.geo.first_page(b + 1), Ordering::SeqCst);
        self.pages.give_back(&phys);
        self.counters
            .flush_micros
            .add(started.elapsed().as_micros() as u64);
        Ok(())
    }

    fn blocks_used_up(&self, b: u64) -> Error {
        Error::no_space(
            Tier::Pmem,
            format!(
                "hetermm logical block numbers are used up: block {b} is past the {} the store \
                 may use",
                self.blocks.capacity()
            ),
        )
    }

    /// Writes block `b`'s image to the run at `off` and publishes it.
    fn persist_block(
        &self,
        b: u64,
        off: u64,
        mapped: &[(u64, u32)],
        invalid: &[u64],
        image: &mut Vec<u8>,
    ) -> Result<()> {
        let live = self.block_image(b, mapped, invalid, image)?;
        let pool = self.pool();
        pool.write(off, image)?;
        pool.persist(off, image.len())?;
        pool.crash_point("hetermm.flush.block_written");
        // IMPORTANT: the directory word publishes the block only after all of it is durable.
        self.nvm.set_dir_entry(
            off,
            DirEntry::Data {
                block_no: b,
                compact: false,
                generation: 0,
            },
        )?;
        pool.crash_point("hetermm.flush.published");
        let info = BlockInfo {
            off,
            run_len: self.nvm.chunks_for(self.geo.block_size()) * self.nvm.sb.chunk_size,
            layout: Layout::Full,
            live,
            capacity: self.geo.block_capacity(),
            generation: 0,
        };
        self.blocks.publish(b, info)?;
        self.counters.flushes.incr();
        self.counters.flushed_bytes.add(live);
        if info.invalid_fraction() > self.opts.reorg_threshold {
            self.wake_reclaimer.raise();
        }
        Ok(())
    }

    /// Builds in `image` block `b` as it goes to pmem: its pages, header, and the bits of
    /// the records at block offsets `invalid`; returns the bytes of its valid records.
    fn block_image(
        &self,
        b: u64,
        mapped: &[(u64, u32)],
        invalid: &[u64],
        image: &mut Vec<u8>,
    ) -> Result<u64> {
        let page = self.geo.page_size() as usize;
        image.clear();
        image.resize(self.geo.block_size() as usize, 0);
        let first = self.geo.first_page(b);
        for &(lp, phys) in mapped {
            let at = ((lp - first) as usize) * page;
            dram_record::copy_page(self.pages.page(phys), &mut image[at..at + page]);
        }
        let header = BlockHeader {
            page_bits: self.geo.page_bits as u8,
            block_bits: self.geo.block_bits as u8,
            block_no: b,
        };
        image[..crate::format::HEADER_LEN].copy_from_slice(&header.encode());
        let mut live = 0;
        walk(image, 0, &header, |f| live += f.record.header.size()).map_err(|e| {
            Error::corruption(
                Tier::Dram,
                self.geo.block_start(b),
                format!("block {b} in DRAM: {e}"),
            )
        })?;
        for &rel in invalid {
            let (word, bit) = mark_position(rel);
            let w = u64_at(image, word as usize).unwrap_or_default();
            let len = image
                .get(rel as usize..)
                .and_then(RecordHeader::decode)
                .map(|h| h.size())
                .ok_or_else(|| Error::corruption(Tier::Dram, rel, "a mark names no record"))?;
            if w & bit == 0 {
                image[word as usize..word as usize + 8].copy_from_slice(&(w | bit).to_le_bytes());
                live -= len.min(live);
                self.counters.marks.incr();
            }
        }
        Ok(live)
    }

    /// Applies marks to records of published blocks.
    pub fn apply_marks(&self, targets: &[u64]) -> Result<()> {
        let mut by_block: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        for &t in targets {
            by_block
                .entry(self.geo.block_of(t))
                .or_default()
                .push(self.geo.block_offset(t));
        }
        for (b, rels) in by_block {
            let Some(cell) = self.blocks.info(b) else {
                continue;
            };
            self.run_hook(crate::mem::HookPoint::Marking, &b.to_le_bytes())?;
            let mut info = cell.lock();
            // IMPORTANT: the reclaimer may have dropped the block (no valid record left)
            // while this thread waited for its lock: the cell then names a run that is
            // freed, maybe already another block's or a log's. Its records were all marked
            // before the drop, so these marks are not needed. (A reorganised block's cell
            // names its new copy: swapped under this lock.)
            if self.blocks.base(b).map(|(base, _)| base) != Some(info.off) {
                continue;
            }
            marks::mark(self.pool(), &self.geo, b, &mut info, &rels)?;
            self.counters.marks.add(rels.len() as u64);
            if info.invalid_fraction() > self.opts.reorg_threshold {
                self.wake_reclaimer.raise();
            }
        }
        Ok(())
    }

    /// Forced flush (`flush()`, close, recovery): closes the tail block (its unused pages
    /// become a hole), persists every DRAM block, and lets the log go.
    pub fn flush_all(&self, st: &mut FlushState) -> Result<()> {
        // Not even with nothing left to flush: no frontier move, no log retired.
        self.health.check_not_poisoned()?;
        self.counters.forced_flushes.incr();
        let ppb = self.geo.pages_per_block();
        let np = self.regions.next_page.load(Ordering::SeqCst);
        // IMPORTANT: up to the last block a drained invalidation is keyed to, even if no
        // page of it was handed out: a delete of a record already in pmem is keyed to the
        // block at off_ReadOnly (`invalid.rs`).
        st.marks.drain_from(&self.threads);
        let end_block = np
            .div_ceil(ppb)
            .max(st.marks.last_key().map_or(0, |k| k + 1));
        if end_block > self.blocks.capacity() {
            return Err(self.blocks_used_up(end_block - 1));
        }
        self.regions
            .next_page
            .fetch_max(end_block * ppb, Ordering::SeqCst);
        self.make_read_only(end_block);
        while self.geo.block_of(self.off_dram()) < end_block {
            self.flush_oldest(st)?;
        }
        // IMPORTANT: before any log goes: what they protected is flushed now.
        self.nvm.set_flush_frontier(self.off_dram())?;
        if let Some(log) = &self.oplog {
            log.close_current();
            log.reclaim(&self.nvm, self.off_dram())?;
        }
        for off in std::mem::take(&mut st.old_logs) {
            self.nvm.set_dir_entry(off, DirEntry::None)?;
            self.nvm.free_run(off)?;
        }
        Ok(())
    }

    fn cache_step(&self, st: &mut FlushState) -> Result<bool> {
        let Some(cache) = &self.cache else {
            return Ok(false);
        };
        let now = Instant::now();
        if st
            .last_policy
            .is_none_or(|t| now.duration_since(t) >= POLICY_PERIOD)
        {
            let (mut reads, mut writes) = (0, 0);
            for s in self.threads.used_slots() {
                reads += s.reads.load(Ordering::Relaxed);
                writes += s.writes.load(Ordering::Relaxed);
            }
            let window = Window {
                reads: reads - st.last_reads.min(reads),
                writes: writes - st.last_writes.min(writes),
            };
            (st.last_reads, st.last_writes, st.last_policy) = (reads, writes, Some(now));
            let ppb = self.geo.pages_per_block() as usize;
            let min_write = (self.opts.overlap_blocks as usize + 2) * ppb + self.free_pages;
            let target =
                policy::cache_target(window, cache.target(), self.pages.count(), min_write);
            if target != cache.target() {
                cache.set_target(target);
                self.counters.cache_resizes.incr();
            }
        }
        let before = (cache.pages(), cache.counters.evictions.get());
        cache.maintain(&self.pages, &self.threads, self.free_target())?;
        Ok((cache.pages(), cache.counters.evictions.get()) != before)
    }

    fn log_step(&self, st: &mut FlushState) -> Result<bool> {
        let Some(log) = &self.oplog else {
            return Ok(false);
        };
        // IMPORTANT: not while recovery's old logs stand: the flush frontier does not move
        // until they are retired, and recovery treats an entry whose record is at or above
        // it as unflushed — its successor's entry must still be there (FORMAT.md § Flush
        // frontier).
        if !st.old_logs.is_empty() {
            return Ok(false);
        }
        let mut worked = log.reclaim(&self.nvm, self.off_dram())? > 0;
        let flushable_end = self.geo.block_start(self.complete_limit());
        match policy::log_action(
            log.block_count(),
            self.log_blocks_max,
            log.oldest_max_address(),
            flushable_end,
        ) {
            LogAction::Nothing => {}
            LogAction::Flush => {
                if self.dram_snapshot().complete_blocks > 0 {
                    self.flush_oldest(st)?;
                    worked = true;
                }
            }
            LogAction::Compress => {
                if let Some(front) = log.frozen_oldest() {
                    self.compress_log_block(&front)?;
                    worked = true;
                }
            }
        }
        Ok(worked)
    }

    /// §5.3.1 log compression: re-appends the entries of `block` that may still be the
    /// newest durable version of their record, then retires the block.
    fn compress_log_block(&self, block: &Arc<LogBlock>) -> Result<()> {
        let Some(log) = &self.oplog else {
            return Ok(());
        };
        let slot = self.threads.current()?;
        for e in log.entries(&self.nvm, block)? {
            if self.log_entry_needed(&e) {
                let at = Place {
                    address: e.address,
                    record: e.record,
                };
                let copy = NewEntry {
                    ts: e.ts,
                    kind: e.kind,
                    key: &e.key,
                    value: &e.value,
                    at,
                };
                log.append(&self.nvm, slot, &copy)?;
                log.settle(slot);
                log.counters.copied.incr();
            }
        }
        self.pool().crash_point("hetermm.log.compress_copied");
        log.retire(&self.nvm, block)?;
        log.counters.compressed.incr();
        Ok(())
    }

    /// An entry is obsolete when what it protects is persisted (its covered address is
    /// below off_DRAM), or when its record was updated in place since, that newer version's
    /// own entry is durable, and the newer entry covers as much as this one (it does when
    /// this entry covers only its own record: an in-place update covers its record).
    fn log_entry_needed(&self, e: &OwnedEntry) -> bool {
        if e.address < self.off_dram() {
            return false;
        }
        if e.kind != EntryKind::Put || e.address != e.record {
            return true;
        }
        let newer = self.ring.lookup(self.geo.page_of(e.record)).and_then(|p| {
            dram_record::ts_and_logged(self.pages.page(p), self.geo.page_offset(e.record))
        });
        !matches!(newer, Some((ts, true)) if ts > e.ts)
    }

    /// Idle work: keep pmem runs prepared for the next flushes and the log.
    fn prepare_ahead(&self, st: &mut FlushState) -> Result<()> {
        while st.prepared.len() < PREPARED_BLOCKS {
            match self.nvm.alloc_block() {
                Ok(off) => st.prepared.push_back(off),
                Err(Error::NoSpace { .. }) => break,
                Err(e) => return Err(e),
            }
        }
        if let Some(log) = &self.oplog {
            match log.prepare(&self.nvm) {
                Ok(()) | Err(Error::NoSpace { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Gives prepared runs and the reserve back (at close).
    pub fn release_prepared(&self, st: &mut FlushState) -> Result<()> {
        for off in st.prepared.drain(..) {
            self.nvm.free_run(off)?;
        }
        self.nvm.reserve.drain(|off| self.nvm.free_run(off))?;
        if let Some(log) = &self.oplog {
            log.release_spare(&self.nvm)?;
        }
        Ok(())
    }
}
