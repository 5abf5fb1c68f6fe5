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

use std::ops::Range;
use std::sync::Arc;

use tierkv_core::{Error, Result};

use super::core::{ChainBatch, Core};
use crate::hsit::entry::{ForwardPointer, Location, Relocation};
use crate::hsit::epoch;
use crate::pwb::Pwb;
use crate::pwb::reclaim::{Choice, LiveRecord, batches, choose, collect_live, partial_end};
use crate::pwb::record::HEADER_LEN;
use crate::svc::CachedValue;
use crate::value_storage::chunk_format::{BLOCK, Placement, values_fitting};
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
        let mut moved_bytes = 0u64;
        for range in self.chunk_batches(&lens, self.reclaim_placement())? {
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
        self.pool.crash_point("prism.reclaim.head_persisted");
        self.space.cleared();
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
        let (storage, locs) = self.write_chunk(&values, true, self.reclaim_placement())?;
        crate::faults::hook_at(crate::faults::Point::ReclaimChunkWritten);
        self.pool.crash_point("prism.reclaim.chunk_synced");
        let mut ring_bytes = 0;
        let mut moves = recs.iter().zip(locs);
        while let Some((r, loc)) = moves.next() {
            ring_bytes += crate::pwb::record::footprint(r.len as usize);
            let new = Location::Flash(loc.pack());
            let failed = match self.hsit.relocate(r.slot, Location::Pwb(r.off), new) {
                Ok(Relocation::Moved) => {
                    self.counters.pwb_reclaim_values.incr();
                    self.counters.pwb_reclaim_bytes.add(u64::from(r.len));
                    continue;
                }
                Ok(Relocation::Lost) => {
                    self.counters.pwb_reclaim_lost.incr();
                    storage.invalidate(loc)?;
                    continue;
                }
                // HSIT points at `loc`, durably or not; the record stays too (the head
                // does not move).
                Ok(Relocation::Unpersisted(e)) => e,
                Err(e) => {
                    storage.invalidate(loc)?;
                    e
                }
            };
            // The records not moved stay in the PWB; their copies are garbage.
            for (_, rest) in moves {
                storage.invalidate(rest)?;
            }
            return Err(failed);
        }
        self.pool.crash_point("prism.reclaim.pointers_moved");
        Ok(ring_bytes)
    }

    /// Writes `values` as one chunk to a Value Storage (an idle one if any); when it is
    /// full, collects garbage (if `may_gc`: the caller does not hold `gc_lock`) and tries
    /// again, then tries the others.
    fn write_chunk(
        &self,
        values: &[(u64, &[u8])],
        may_gc: bool,
        placement: Placement,
    ) -> Result<(&ValueStorage, Vec<ValueLocation>)> {
        let first = self.pick_storage()?;
        let order =
            std::iter::once(first).chain(self.storages.iter().filter(|s| !std::ptr::eq(*s, first)));
        let mut last = None;
        for storage in order {
            for attempt in 0..2 {
                match storage.write_chunk_placed(values, placement) {
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

    /// How PWB reclamation lays out its chunks: block-aligned (unless the `block_aligned`
    /// option is off), as its values are in write order and each is read on its own.
    fn reclaim_placement(&self) -> Placement {
        if self.opts.block_aligned {
            Placement::BlockAligned
        } else {
            Placement::Packed
        }
    }

    /// `lens` split into runs of values that fit one chunk laid out by `placement`.
    fn chunk_batches(&self, lens: &[u32], placement: Placement) -> Result<Vec<Range<usize>>> {
        let chunk_size = self.sb.chunk_size;
        batches(lens, |rest| {
            values_fitting(chunk_size, rest.iter().map(|&l| l as usize), placement)
        })
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
    pub(crate) fn gc_storage(&self, storage: &ValueStorage) -> Result<bool> {
        let _serial = self.gc_lock.lock();
        // The first relocation of a step comes right after its copies were synced.
        let first = std::cell::Cell::new(true);
        let relocate = |slot: u64, old: ValueLocation, new: ValueLocation| {
            if first.replace(false) {
                self.pool.crash_point("prism.gc.after_copy");
            }
            let r = self.gc_relocate(slot, old, new);
            self.pool.crash_point("prism.gc.after_switch");
            r
        };
        let mut freed_any = false;
        loop {
            let report = storage.gc_step(&relocate)?;
            first.set(true);
            if report.chunks_retired == 0 {
                return Ok(freed_any);
            }
            self.pool.crash_point("prism.gc.victims_retired");
            freed_any = true;
            if !storage.needs_gc() {
                return Ok(true);
            }
        }
    }

    /// GC's relocation: moves `slot` from `old` to `new` if it still points at `old`.
    fn gc_relocate(&self, slot: u64, old: ValueLocation, new: ValueLocation) -> Result<Relocation> {
        if !self.hsit.contains(slot) {
            return Ok(Relocation::Lost);
        }
        let done = self.hsit.relocate(
            slot,
            Location::Flash(old.pack()),
            Location::Flash(new.pack()),
        )?;
        if matches!(done, Relocation::Moved | Relocation::Unpersisted(_)) {
            let guard = crossbeam_epoch::pin();
            self.hsit
                .cache()
                .relocate(slot, old.pack(), new.pack(), &guard);
        }
        Ok(done)
    }

    /// The members of one evicted scan chain worth moving (§4.4): still current (their key
    /// was not written, deleted or moved since they were cached), not all in one chunk
    /// already, and not in a run of key-order neighbours ([`scattered_members`]); none
    /// when fewer than two are left. In key order.
    fn chain_members(&self, chain: ChainBatch) -> Result<Vec<(Arc<CachedValue>, ValueLocation)>> {
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
        if members
            .iter()
            .all(|(_, l)| Some((l.storage, l.chunk)) == first_chunk)
        {
            return Ok(Vec::new());
        }
        // Members already next to a key-order neighbour (an earlier write-back put them
        // there) stay: moving them would not make a scan read fewer blocks.
        let locs: Vec<ValueLocation> = members.iter().map(|(_, l)| *l).collect();
        let scattered = scattered_members(&locs);
        self.counters
            .chain_values_in_place
            .add((members.len() - scattered.len()) as u64);
        let members: Vec<_> = members
            .into_iter()
            .enumerate()
            .filter(|(i, _)| scattered.binary_search(i).is_ok())
            .map(|(_, m)| m)
            .collect();
        Ok(if members.len() < 2 {
            Vec::new()
        } else {
            members
        })
    }

    /// Rewrites the still-current members of an evicted scan chain together, in key order,
    /// into one chunk (§4.4). Members whose key was written, deleted or moved since they
    /// were cached are left alone.
    pub fn rewrite_chain(&self, chain: ChainBatch) -> Result<()> {
        self.rewrite_chains(vec![chain])
    }

    /// [`Core::rewrite_chain`] for several chains at once: each chain's members stay
    /// together and in key order, and the chains share chunk writes (one write and one
    /// sync per chunk instead of one per chain). With 32 scanning threads keeping the
    /// device busy a chain's own write and sync took about 20 ms, so the GC thread
    /// rewrote some 70 chains a second and dropped the rest (YCSB-E, 1M records: 2-3% of
    /// the evicted chains were co-located).
    pub fn rewrite_chains(&self, chains: Vec<ChainBatch>) -> Result<()> {
        let _serial = self.gc_lock.lock();
        let mut seen = std::collections::HashSet::new();
        let mut members = Vec::new();
        for chain in chains {
            for m in self.chain_members(chain)? {
                // A value on two queued chains (a later scan took it into its own) moves once.
                if seen.insert(m.0.slot()) {
                    members.push(m);
                }
            }
        }
        if members.len() < 2 {
            return Ok(());
        }
        let lens: Vec<u32> = members
            .iter()
            .map(|(cv, _)| u32::try_from(cv.value().len()).unwrap_or(u32::MAX))
            .collect();
        for range in self.chunk_batches(&lens, Placement::Packed)? {
            let part = members.get(range).unwrap_or_default();
            let values: Vec<(u64, &[u8])> = part
                .iter()
                .map(|(cv, _)| (cv.slot(), &cv.value()[..]))
                .collect();
            // IMPORTANT: no inline GC here: this thread holds `gc_lock`.
            // Packed: the members are in key order, and a scan reads them in one go.
            let (storage, locs) = match self.write_chunk(&values, false, Placement::Packed) {
                Ok(written) => written,
                // Co-locating a chain is an optimisation: a full device just skips it.
                Err(Error::NoSpace { .. }) => return Ok(()),
                Err(e) => return Err(e),
            };
            self.pool.crash_point("prism.chain.after_copy");
            let mut moves = part.iter().zip(locs);
            while let Some(((cv, old), new)) = moves.next() {
                let failed = match self.gc_relocate(cv.slot(), *old, new) {
                    Ok(Relocation::Moved) => {
                        self.pool.crash_point("prism.chain.after_switch");
                        self.storage_of(*old)?.invalidate(*old)?;
                        self.counters.chain_values_rewritten.incr();
                        continue;
                    }
                    Ok(Relocation::Lost) => {
                        storage.invalidate(new)?;
                        continue;
                    }
                    // Both copies stay valid: either may be the durable one.
                    Ok(Relocation::Unpersisted(e)) => e,
                    Err(e) => {
                        storage.invalidate(new)?;
                        e
                    }
                };
                for (_, rest) in moves {
                    storage.invalidate(rest)?;
                }
                return Err(failed);
            }
        }
        Ok(())
    }
}

/// The members of an evicted scan chain (in key order, with their current locations) that
/// are worth rewriting together (§4.4): those not in a run of key-order neighbours that one
/// merged read already fetches — same chunk, ascending, blocks touching or overlapping, as
/// `ValueStorage::read_many` merges them. Without this, chains of overlapping scans moved
/// the same values from chunk to chunk (YCSB-E wrote 150 flash bytes per user byte).
/// Returns indexes into `locs`, ascending.
pub fn scattered_members(locs: &[ValueLocation]) -> Vec<usize> {
    let block = BLOCK as u64;
    let follows = |a: &ValueLocation, b: &ValueLocation| {
        let a_last = (u64::from(a.offset) + u64::from(a.len).max(1) - 1) / block;
        (a.storage, a.chunk) == (b.storage, b.chunk)
            && b.offset > a.offset
            && u64::from(b.offset) / block <= a_last + 1
    };
    (0..locs.len())
        .filter(|&i| {
            let after = i > 0 && follows(&locs[i - 1], &locs[i]);
            let before = locs.get(i + 1).is_some_and(|n| follows(&locs[i], n));
            !after && !before
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(chunk: u32, offset: u32) -> ValueLocation {
        ValueLocation {
            storage: 0,
            chunk,
            offset,
            len: 1040,
        }
    }

    #[test]
    fn runs_of_neighbours_stay_and_scattered_members_move() {
        // 0-2: one run in chunk 5; 3: alone in chunk 9; 4: chunk 5 again, far from the run;
        // 5-6: adjacent blocks of chunk 7; 7: chunk 7 but three blocks further.
        let locs = [
            at(5, 64),
            at(5, 1104),
            at(5, 2144),
            at(9, 64),
            at(5, 200_000),
            at(7, 4000),
            at(7, 8192),
            at(7, 8192 + 4 * 4096),
        ];
        assert_eq!(scattered_members(&locs), vec![3, 4, 7]);
    }

    #[test]
    fn descending_or_other_storage_neighbours_are_not_runs() {
        let mut other = at(5, 1104);
        other.storage = 1;
        assert_eq!(scattered_members(&[at(5, 1104), at(5, 64)]), vec![0, 1]);
        assert_eq!(scattered_members(&[at(5, 64), other]), vec![0, 1]);
        assert_eq!(scattered_members(&[]), Vec::<usize>::new());
        assert_eq!(scattered_members(&[at(1, 64)]), vec![0]);
    }
}
