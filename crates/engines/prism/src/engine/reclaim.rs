//! The background mechanisms that move values between tiers, as synchronous steps the
//! background threads (and `flush`, and tests) call (STYLE §8):
//!
//! - [`Core::reclaim_pass`]: PWB reclamation (PRISM §4.3, §5.2, Figure 4). For each PWB
//!   the policy (`pwb::reclaim::choose`) picks; the well-coupled records of `[head, tail)`
//!   are written to Value Storage in chunk-sized batches (synced on return), each HSIT
//!   pointer is moved from the record to its new location by CAS (a lost CAS means the key
//!   was written or deleted meanwhile: the new copy is invalidated), the moved pointers are
//!   persisted, a grace period lets readers of the old records finish, and only then the
//!   head is persisted and writers may reuse the space.
//! - [`Core::gc_pass`]: Value Storage garbage collection (§5.2), whose relocation callback
//!   moves HSIT pointers by CAS and re-points the SVC link.
//! - [`Core::rewrite_chain`]: writes the members of an evicted scan chain, sorted by key,
//!   together into one chunk (§4.4 ⑤⑥), with the same CAS protocol.
//!
//! Thread safety: the reclamation of one PWB is serialised by its lock in
//! `Core::reclaim_locks` (several reclaimer threads work on different PWBs at once); GC
//! passes and chain rewrites are serialised by `Core::gc_lock`; all run concurrently with
//! user operations.

use tierkv_core::{Error, Result};

use super::core::{ChainBatch, Core};
use crate::hsit::entry::{ForwardPointer, Location};
use crate::hsit::epoch;
use crate::pwb::Pwb;
use crate::pwb::reclaim::{Choice, LiveRecord, batches, choose, collect_live, partial_end};
use crate::pwb::record::HEADER_LEN;
use crate::value_storage::chunk_format::{payload_capacity, record_footprint};
use crate::value_storage::{ValueLocation, ValueStorage};

impl Core {
    /// One reclamation pass over every PWB: those past their watermark (or with a writer
    /// waiting for space), or all non-empty ones when `force`d. A forced pass waits for a
    /// PWB another thread is reclaiming; an unforced one skips it. Reclaimer `worker` of
    /// `workers` starts at a different PWB so that workers spread out. True if any PWB was
    /// reclaimed.
    pub fn reclaim_pass(&self, force: bool, worker: usize, workers: usize) -> Result<bool> {
        let n = self.pwbs.len();
        let start = worker * n / workers.max(1);
        let mut any = false;
        for i in (0..n).map(|i| (start + i) % n) {
            let (Some(pwb), Some(lock)) = (self.pwbs.get(i), self.reclaim_locks.get(i)) else {
                continue;
            };
            let _serial = if force {
                lock.lock()
            } else if let Some(g) = lock.try_lock() {
                g
            } else {
                continue;
            };
            let ring = pwb.ring();
            if let Choice::Reclaim { upto, budget } = choose(
                &ring,
                pwb.watermark(),
                pwb.retain(),
                force || pwb.has_waiters(),
            ) {
                let to = partial_end(pwb, ring.head, upto, budget)?;
                self.reclaim_range(pwb, ring.head, to)?;
                any = true;
            }
        }
        Ok(any)
    }

    /// Moves the well-coupled records of `[from, to)` to Value Storage, then the head.
    fn reclaim_range(&self, pwb: &Pwb, from: u64, to: u64) -> Result<()> {
        let live = collect_live(pwb, from, to, &mut |slot, off| {
            Ok(self.hsit.contains(slot)
                && Some(self.hsit.load(slot)?.clean()) == ForwardPointer::to(Location::Pwb(off)))
        })?;
        let lens: Vec<u32> = live.iter().map(|r| r.len).collect();
        let cap = payload_capacity(self.sb.chunk_size) as u64;
        let mut moved_bytes = 0u64;
        for range in batches(&lens, footprint, cap)? {
            let recs = live.get(range).unwrap_or_default();
            moved_bytes += self.move_records(recs)?;
        }
        let span = to - from;
        self.counters
            .pwb_reclaim_dropped_bytes
            .add(span.saturating_sub(moved_bytes));
        // IMPORTANT: no reader may still be reading [from, to) when writers reuse it
        // (PWB invariant 3): wait out everyone pinned now.
        epoch::synchronize();
        pwb.advance_head(to)?;
        self.counters.pwb_reclaims.incr();
        if self.storages.iter().any(ValueStorage::needs_gc) {
            self.gc_signal.raise();
        }
        Ok(())
    }

    /// Writes one chunk of records and re-points HSIT at them; returns the ring bytes the
    /// moved records occupied.
    fn move_records(&self, recs: &[LiveRecord]) -> Result<u64> {
        let values = recs
            .iter()
            .map(|r| {
                let v = self.pool.read(r.off + HEADER_LEN as u64, r.len as usize)?;
                Ok((r.slot, v))
            })
            .collect::<Result<Vec<(u64, &[u8])>>>()?;
        let (storage, locs) = self.write_chunk(&values, true)?;
        let mut ring_bytes = 0;
        for (r, loc) in recs.iter().zip(locs) {
            ring_bytes += crate::pwb::record::footprint(r.len as usize);
            let new = Location::Flash(loc.pack());
            if self.hsit.relocate(r.slot, Location::Pwb(r.off), new)? {
                self.counters.pwb_reclaim_values.incr();
                self.counters.pwb_reclaim_bytes.add(u64::from(r.len));
            } else {
                self.counters.pwb_reclaim_lost.incr();
                storage.invalidate(loc)?;
            }
        }
        Ok(ring_bytes)
    }

    /// Writes `values` as one chunk to a Value Storage (an idle one if any); when it is
    /// full, collects garbage (if `may_gc`: the caller does not hold `gc_lock`) and tries
    /// again, then tries the others.
    fn write_chunk(
        &self,
        values: &[(u64, &[u8])],
        may_gc: bool,
    ) -> Result<(&ValueStorage, Vec<ValueLocation>)> {
        let first = self.pick_storage()?;
        let order =
            std::iter::once(first).chain(self.storages.iter().filter(|s| !std::ptr::eq(*s, first)));
        let mut last = None;
        for storage in order {
            for attempt in 0..2 {
                match storage.write_chunk(values) {
                    Ok(locs) => return Ok((storage, locs)),
                    Err(e @ Error::NoSpace { .. }) => {
                        last = Some(e);
                        if attempt == 0 && may_gc {
                            self.gc_storage(storage)?;
                        }
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Err(last.unwrap_or_else(|| Error::invalid("no Value Storage to write to")))
    }

    /// Collects garbage on every Value Storage that wants it. True if any chunk was freed.
    pub fn gc_pass(&self) -> Result<bool> {
        let mut any = false;
        for s in &self.storages {
            if s.needs_gc() {
                any |= self.gc_storage(s)?;
            }
        }
        Ok(any)
    }

    /// GC steps on `storage` until it no longer wants GC or a step frees nothing.
    fn gc_storage(&self, storage: &ValueStorage) -> Result<bool> {
        let _serial = self.gc_lock.lock();
        let relocate =
            |slot: u64, old: ValueLocation, new: ValueLocation| self.gc_relocate(slot, old, new);
        let mut freed_any = false;
        loop {
            let report = storage.gc_step(&relocate)?;
            if report.chunks_retired == 0 {
                return Ok(freed_any);
            }
            freed_any = true;
            if !storage.needs_gc() {
                return Ok(true);
            }
        }
    }

    /// GC's relocation: moves `slot` from `old` to `new` if it still points at `old`.
    fn gc_relocate(&self, slot: u64, old: ValueLocation, new: ValueLocation) -> Result<bool> {
        if !self.hsit.contains(slot) {
            return Ok(false);
        }
        let won = self.hsit.relocate(
            slot,
            Location::Flash(old.pack()),
            Location::Flash(new.pack()),
        )?;
        if won {
            let guard = crossbeam_epoch::pin();
            self.hsit
                .cache()
                .relocate(slot, old.pack(), new.pack(), &guard);
        }
        Ok(won)
    }

    /// Rewrites the still-current members of an evicted scan chain together, in key order,
    /// into one chunk (§4.4). Members whose key was written, deleted or moved since they
    /// were cached are left alone.
    pub fn rewrite_chain(&self, chain: ChainBatch) -> Result<()> {
        let _serial = self.gc_lock.lock();
        let mut members = Vec::with_capacity(chain.len());
        for (cv, packed) in chain {
            let slot = cv.slot();
            let current = self.hsit.contains(slot)
                && self.hsit.load(slot)?.clean()
                    == ForwardPointer::to(Location::Flash(packed)).unwrap_or(ForwardPointer::NONE);
            if current {
                members.push((cv, ValueLocation::unpack(packed)));
            }
        }
        let first_chunk = members.first().map(|(_, l)| (l.storage, l.chunk));
        if members.len() < 2
            || members
                .iter()
                .all(|(_, l)| Some((l.storage, l.chunk)) == first_chunk)
        {
            return Ok(());
        }
        let lens: Vec<u32> = members
            .iter()
            .map(|(cv, _)| u32::try_from(cv.value().len()).unwrap_or(u32::MAX))
            .collect();
        let cap = payload_capacity(self.sb.chunk_size) as u64;
        for range in batches(&lens, footprint, cap)? {
            let part = members.get(range).unwrap_or_default();
            let values: Vec<(u64, &[u8])> = part
                .iter()
                .map(|(cv, _)| (cv.slot(), &cv.value()[..]))
                .collect();
            // IMPORTANT: no inline GC here: this thread holds `gc_lock`.
            let (storage, locs) = match self.write_chunk(&values, false) {
                Ok(written) => written,
                // Co-locating a chain is an optimisation: a full device just skips it.
                Err(Error::NoSpace { .. }) => return Ok(()),
                Err(e) => return Err(e),
            };
            for ((cv, old), new) in part.iter().zip(locs) {
                if self.gc_relocate(cv.slot(), *old, new)? {
                    self.storage_of(*old)?.invalidate(*old)?;
                    self.counters.chain_values_rewritten.incr();
                } else {
                    storage.invalidate(new)?;
                }
            }
        }
        Ok(())
    }
}

/// Bytes a value of `len` bytes takes in a chunk.
fn footprint(len: u32) -> u64 {
    record_footprint(len as usize).map_or(u64::MAX, |f| f as u64)
}
