//! Recovery after a restart or a crash (PRISM §5.5 "Fast recovery"; the argument for why
//! it is correct is `FORMAT.md` § Crash consistency).
//!
//! By the time this runs, the media layers have opened: the allocator repaired its
//! metadata, HSIT read its segment directory (freeing segments a crash left unrecorded),
//! the key index repaired interrupted splits and rebuilt its DRAM search layer, each PWB
//! read its persisted head, each Value Storage opened with empty validity bitmaps. Then:
//!
//! 1. The key index is walked in `recovery_threads` partitions in parallel. For each
//!    `(key, slot)`: the slot's key tag must match the key, and no slot may be reached
//!    twice; a dirty bit that reached the media is cleared (the pointer it marks was
//!    persisted after its value, so it is valid); then by the pointer's medium:
//!    - none: a delete persisted its pointer but crashed before removing the key from the
//!      index — the delete is finished here;
//!    - PWB: the record must be well-coupled (backward pointer = slot, checksum); its end,
//!      in ring order from the head, is a candidate for the PWB's tail;
//!    - Value Storage: the value's validity bit is set (no flash read: the bitmaps are
//!      rebuilt from HSIT alone, as §5.5 says).
//! 2. Each PWB resumes appending after its furthest well-coupled record.
//! 3. The HSIT free list becomes every slot below the highest reached one that no key
//!    reaches (unreachable slots hold values of puts that never completed).
//! 4. The SVC pointers need nothing: they live in DRAM and start empty.
//!
//! Nothing is read from flash, and nothing is written to it.
//!
//! Thread safety: runs before the store is shared; the walk's threads share only the
//! bitmap of reached slots (atomic words) and merge what they found when they end.

use std::sync::atomic::{AtomicU64, Ordering};

use tierkv_core::{Error, Result, Tier};

use crate::engine::core::Core;
use crate::hsit::entry::{Location, key_tag};
use crate::pwb::ring::{Ring, recovered_tail};
use crate::value_storage::ValueLocation;

/// What recovery found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Keys in the index after recovery.
    pub keys: u64,
    /// Keys whose value is in a PWB.
    pub pwb_values: u64,
    /// Keys whose value is in Value Storage.
    pub flash_values: u64,
    /// Deletes finished by recovery.
    pub finished_deletes: u64,
    /// HSIT slots returned to the free list.
    pub free_slots: u64,
}

/// A bitmap of slots, set from many threads.
struct SlotBitmap(Vec<AtomicU64>);

impl SlotBitmap {
    fn new(slots: u64) -> Self {
        SlotBitmap((0..slots.div_ceil(64)).map(|_| AtomicU64::new(0)).collect())
    }

    /// Sets the bit; true if it was already set.
    fn test_and_set(&self, slot: u64) -> bool {
        let bit = 1u64 << (slot % 64);
        usize::try_from(slot / 64)
            .ok()
            .and_then(|w| self.0.get(w))
            .is_some_and(|w| w.fetch_or(bit, Ordering::AcqRel) & bit != 0)
    }

    fn clear(&self, slot: u64) {
        if let Some(w) = usize::try_from(slot / 64).ok().and_then(|w| self.0.get(w)) {
            w.fetch_and(!(1u64 << (slot % 64)), Ordering::AcqRel);
        }
    }

    fn is_set(&self, slot: u64) -> bool {
        usize::try_from(slot / 64)
            .ok()
            .and_then(|w| self.0.get(w))
            .is_some_and(|w| w.load(Ordering::Acquire) & (1u64 << (slot % 64)) != 0)
    }
}

/// State shared by the walk's threads (read-mostly: the bitmap's bits are the only shared
/// writes).
struct Walk<'a> {
    core: &'a Core,
    reached: SlotBitmap,
}

/// What one walking thread found; merged after the walk (no shared counters on the hot
/// path).
#[derive(Default)]
struct Found {
    high_water: u64,
    /// Per PWB: the furthest end of a well-coupled record, in ring order from its head.
    pwb_ends: Vec<u64>,
    /// Packed Value Storage locations HSIT points to.
    flash: Vec<u64>,
    pending_deletes: Vec<(Vec<u8>, u64)>,
    pwb_values: u64,
}

impl Found {
    fn merge(mut self, other: Found) -> Found {
        self.high_water = self.high_water.max(other.high_water);
        for (a, b) in self.pwb_ends.iter_mut().zip(other.pwb_ends) {
            *a = (*a).max(b);
        }
        self.flash.extend(other.flash);
        self.pending_deletes.extend(other.pending_deletes);
        self.pwb_values += other.pwb_values;
        self
    }
}

/// Recovers `core` (see the module doc).
pub fn recover(core: &Core) -> Result<RecoveryReport> {
    let walk = Walk {
        core,
        reached: SlotBitmap::new(core.hsit.capacity()),
    };
    let threads = core.opts.recovery_threads.max(1);
    let parts = core.index.partitions(threads);
    let mut found = std::thread::scope(|s| {
        let handles: Vec<_> = parts
            .iter()
            .map(|range| {
                let walk = &walk;
                s.spawn(move || {
                    let mut found = Found {
                        pwb_ends: vec![0; core.pwbs.len()],
                        ..Found::default()
                    };
                    core.index
                        .for_each_in(range, &mut |key, slot| walk.visit(&mut found, key, slot))
                        .map(|()| found)
                })
            })
            .collect();
        let mut all = Found {
            pwb_ends: vec![0; core.pwbs.len()],
            ..Found::default()
        };
        for h in handles {
            let found = h
                .join()
                .unwrap_or_else(|_| Err(Error::Poisoned("a recovery thread panicked".into())))?;
            all = all.merge(found);
        }
        Ok::<_, Error>(all)
    })?;
    mark_valid(core, &mut found.flash, threads)?;
    let finished_deletes = walk.finish_deletes(&found.pending_deletes)?;
    for s in &core.storages {
        // Chunks no HSIT entry reaches become free; writes are accepted from here on.
        s.finish_recovery();
    }
    for (pwb, end) in core.pwbs.iter().zip(&found.pwb_ends) {
        let head = pwb.ring().head;
        pwb.set_recovered_tail(recovered_tail(head, [*end]));
    }
    let free: Vec<u64> = (0..found.high_water)
        .filter(|s| !walk.reached.is_set(*s))
        .collect();
    let free_slots = free.len() as u64;
    core.hsit.rebuild_free_list(found.high_water, free);
    Ok(RecoveryReport {
        keys: core.index.len() as u64,
        pwb_values: found.pwb_values,
        flash_values: found.flash.len() as u64,
        finished_deletes,
        free_slots,
    })
}

/// Rebuilds the validity bitmaps. The locations are sorted (storage, chunk, offset) and
/// cut into one contiguous run per thread at chunk boundaries, so each thread walks its
/// chunks' bitmaps in order and no two threads touch one chunk.
fn mark_valid(core: &Core, flash: &mut [u64], threads: usize) -> Result<()> {
    flash.sort_unstable();
    let runs = split_runs(flash, threads, |p| {
        let l = ValueLocation::unpack(p);
        (l.storage, l.chunk)
    });
    std::thread::scope(|s| {
        let handles: Vec<_> = runs
            .into_iter()
            .map(|run| {
                s.spawn(move || {
                    run.iter().try_for_each(|&p| {
                        let loc = ValueLocation::unpack(p);
                        core.storage_of(loc)?.mark_valid(loc)
                    })
                })
            })
            .collect();
        handles.into_iter().try_for_each(|h| {
            h.join()
                .unwrap_or_else(|_| Err(Error::Poisoned("a recovery thread panicked".into())))
        })
    })
}

/// Cuts sorted `items` into at most `parts` contiguous runs of about equal length, never
/// between two items with the same `group`.
fn split_runs<G: PartialEq>(items: &[u64], parts: usize, group: impl Fn(u64) -> G) -> Vec<&[u64]> {
    let mut runs = Vec::with_capacity(parts);
    let mut rest = items;
    for left in (1..=parts.max(1)).rev() {
        let mut cut = rest.len() / left;
        while let (Some(a), Some(b)) = (rest.get(cut.wrapping_sub(1)), rest.get(cut)) {
            if group(*a) != group(*b) {
                break;
            }
            cut += 1;
        }
        let (run, tail) = rest.split_at(cut.min(rest.len()));
        runs.push(run);
        rest = tail;
    }
    runs
}

impl Walk<'_> {
    fn visit(&self, found: &mut Found, key: &[u8], slot: u64) -> Result<()> {
        let core = self.core;
        let bad = |what: String| {
            Error::corruption(
                Tier::Pmem,
                core.hsit.entry_off(slot).unwrap_or(0),
                format!(
                    "recovery, key {:?}, HSIT slot {slot}: {what}",
                    String::from_utf8_lossy(key)
                ),
            )
        };
        if !core.hsit.contains(slot) {
            return Err(bad("the slot is beyond the table".into()));
        }
        let (fp, tag) = core.hsit.load_entry(slot)?;
        if tag != key_tag(key) {
            return Err(bad("the entry's key tag belongs to another key".into()));
        }
        if self.reached.test_and_set(slot) {
            return Err(bad("two keys lead to the same entry".into()));
        }
        found.high_water = found.high_water.max(slot + 1);
        if fp.is_dirty() {
            core.hsit.clean_dirty(slot, fp)?;
        }
        match core.location_of(slot, fp)? {
            Location::None => found.pending_deletes.push((key.to_vec(), slot)),
            Location::Pwb(off) => {
                let pwb = core
                    .pwbs
                    .holding(off)
                    .ok_or_else(|| bad(format!("pointer {off:#x} is outside every PWB")))?;
                let (h, value) = pwb.record_at(off)?;
                if h.backptr != slot || !h.verifies(value) {
                    return Err(bad(format!(
                        "the PWB record at {off:#x} is not well-coupled (backward pointer {})",
                        h.backptr
                    )));
                }
                let ring = pwb.ring();
                let end = Ring::distance_from_head(ring.size, ring.head, pwb.ring_offset(off))
                    + h.footprint();
                if end > ring.size {
                    return Err(bad("the PWB record runs past the ring".into()));
                }
                if let Some(e) = found.pwb_ends.get_mut(pwb.id() as usize) {
                    *e = (*e).max(end);
                }
                found.pwb_values += 1;
            }
            Location::Flash(p) => found.flash.push(p),
        }
        Ok(())
    }

    /// Removes from the index the keys whose delete was interrupted; their slots become free.
    fn finish_deletes(&self, pending: &[(Vec<u8>, u64)]) -> Result<u64> {
        for (key, slot) in pending {
            self.core.index.remove(key)?;
            self.reached.clear(*slot);
        }
        Ok(pending.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_cover_everything_and_never_split_a_group() {
        let items: Vec<u64> = vec![1, 1, 1, 2, 3, 3, 3, 3, 4, 5, 5, 6];
        for parts in 1..6 {
            let runs = split_runs(&items, parts, |x| x);
            assert!(runs.len() <= parts);
            assert_eq!(runs.concat(), items);
            for w in runs.windows(2) {
                if let (Some(a), Some(b)) = (w[0].last(), w[1].first()) {
                    assert_ne!(a, b, "group {a} split across runs with {parts} parts");
                }
            }
        }
        assert_eq!(split_runs(&[], 3, |x| x).concat(), Vec::<u64>::new());
    }

    #[test]
    fn slot_bitmap_sets_once_and_clears() {
        let b = SlotBitmap::new(130);
        assert!(!b.test_and_set(129));
        assert!(b.test_and_set(129));
        assert!(b.is_set(129));
        b.clear(129);
        assert!(!b.is_set(129));
        // Out-of-range slots are never reported as set.
        assert!(!b.test_and_set(10_000));
        assert!(!b.is_set(10_000));
    }
}
