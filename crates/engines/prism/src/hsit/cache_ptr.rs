//! The DRAM array parallel to HSIT that points each entry at its value's copy in the
//! Scan-aware Value Cache (PRISM §4.4, §4.5; "nullify all pointers in HSIT pointing to SVC"
//! at recovery, §5.5, is free: the array lives in DRAM and starts empty).
//!
//! Each slot holds a [`CacheLink`]: the cached value together with the Value Storage
//! location it was read from. A reader uses a link only when its location equals the
//! entry's current forward pointer, so a link left behind by a relocation or a racing
//! update is never returned as the value.
//!
//! # Reclamation (§4.4, §5.4)
//! A link is unlinked with an atomic swap/CAS and destroyed through `crossbeam-epoch`
//! (`defer_destroy`): it is freed only after every thread pinned when it was unlinked has
//! unpinned — the paper's two epochs. Every access takes the caller's [`Guard`], so a
//! reader's reference stays valid for as long as its guard.
//!
//! Thread safety: all methods take `&self` and are lock-free. Its `unsafe` blocks (epoch-
//! protected dereferences) each state their invariant.

use std::sync::OnceLock;
use std::sync::atomic::Ordering;

use crossbeam_epoch::{Atomic, Guard, Owned, Shared};

/// A cached value and the location it was read from.
#[derive(Debug)]
pub struct CacheLink<V> {
    /// The packed Value Storage location the value came from.
    pub loc: u64,
    /// The cached value.
    pub value: V,
}

/// The links of one HSIT segment.
type Segment<V> = Box<[Atomic<CacheLink<V>>]>;

/// One [`Atomic`] link per HSIT entry, in segments that mirror HSIT's.
pub struct CachePointers<V> {
    segments: Box<[OnceLock<Segment<V>>]>,
    seg_entries: u64,
}

impl<V> std::fmt::Debug for CachePointers<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachePointers")
            .field("seg_entries", &self.seg_entries)
            .finish_non_exhaustive()
    }
}

impl<V: Clone + Send + Sync + 'static> CachePointers<V> {
    /// An empty array for up to `max_segments` segments of `seg_entries` entries.
    pub fn new(max_segments: usize, seg_entries: u64) -> Self {
        CachePointers {
            segments: (0..max_segments).map(|_| OnceLock::new()).collect(),
            seg_entries: seg_entries.max(1),
        }
    }

    /// Makes the links of segment `seg` exist (called when HSIT gains the segment).
    pub fn add_segment(&self, seg: usize) {
        if let Some(cell) = self.segments.get(seg) {
            cell.get_or_init(|| {
                (0..self.seg_entries)
                    .map(|_| Atomic::null())
                    .collect::<Vec<_>>()
                    .into_boxed_slice()
            });
        }
    }

    fn cell(&self, slot: u64) -> Option<&Atomic<CacheLink<V>>> {
        let seg = usize::try_from(slot / self.seg_entries).ok()?;
        let idx = usize::try_from(slot % self.seg_entries).ok()?;
        self.segments.get(seg)?.get()?.get(idx)
    }

    /// The cached value of `slot` if it was read from `loc`.
    pub fn get(&self, slot: u64, loc: u64, guard: &Guard) -> Option<V> {
        let link = self.cell(slot)?.load(Ordering::Acquire, guard);
        // SAFETY: `link` was loaded under `guard`; links are destroyed only through
        // `defer_destroy` after being unlinked, so it stays valid while `guard` lives.
        #[expect(unsafe_code, reason = "epoch-protected read of a lock-free link")]
        let link = unsafe { link.as_ref() }?;
        (link.loc == loc).then(|| link.value.clone())
    }

    /// Points `slot` at `value`, read from `loc`, replacing any link.
    pub fn install(&self, slot: u64, loc: u64, value: V, guard: &Guard) {
        if let Some(cell) = self.cell(slot) {
            let old = cell.swap(
                Owned::new(CacheLink { loc, value }),
                Ordering::AcqRel,
                guard,
            );
            retire(old, guard);
        }
    }

    /// Unlinks whatever `slot` points to.
    pub fn clear(&self, slot: u64, guard: &Guard) {
        let _ = self.take(slot, guard);
    }

    /// Unlinks whatever `slot` points to and returns its value (for the SVC to forget).
    pub fn take(&self, slot: u64, guard: &Guard) -> Option<V> {
        let cell = self.cell(slot)?;
        if cell.load(Ordering::Relaxed, guard).is_null() {
            return None;
        }
        let old = cell.swap(Shared::null(), Ordering::AcqRel, guard);
        // SAFETY: `old` was loaded (by the swap) under `guard`; see `get`.
        #[expect(unsafe_code, reason = "epoch-protected read of a lock-free link")]
        let value = unsafe { old.as_ref() }.map(|l| l.value.clone());
        retire(old, guard);
        value
    }

    /// The location `slot`'s link was read from, if the link holds a value `is_it` accepts.
    pub fn loc_of(&self, slot: u64, is_it: impl Fn(&V) -> bool, guard: &Guard) -> Option<u64> {
        let cur = self.cell(slot)?.load(Ordering::Acquire, guard);
        // SAFETY: loaded under `guard`; see `get`.
        #[expect(unsafe_code, reason = "epoch-protected read of a lock-free link")]
        let link = unsafe { cur.as_ref() }?;
        is_it(&link.value).then_some(link.loc)
    }

    /// Unlinks `slot`'s link only if `is_it` accepts its value (the SVC evicting one
    /// particular entry). Returns the location the removed link was read from.
    pub fn clear_if(&self, slot: u64, is_it: impl Fn(&V) -> bool, guard: &Guard) -> Option<u64> {
        let cell = self.cell(slot)?;
        let cur = cell.load(Ordering::Acquire, guard);
        // SAFETY: loaded under `guard`; see `get`.
        #[expect(unsafe_code, reason = "epoch-protected read of a lock-free link")]
        let link = unsafe { cur.as_ref() }?;
        if !is_it(&link.value) {
            return None;
        }
        let loc = link.loc;
        cell.compare_exchange(
            cur,
            Shared::null(),
            Ordering::AcqRel,
            Ordering::Acquire,
            guard,
        )
        .ok()?;
        retire(cur, guard);
        Some(loc)
    }

    /// Re-points `slot`'s link from `old_loc` to `new_loc` (its value was moved on flash by
    /// GC or a scan-chain rewrite; the value itself is unchanged).
    pub fn relocate(&self, slot: u64, old_loc: u64, new_loc: u64, guard: &Guard) {
        let Some(cell) = self.cell(slot) else {
            return;
        };
        let cur = cell.load(Ordering::Acquire, guard);
        // SAFETY: loaded under `guard`; see `get`.
        #[expect(unsafe_code, reason = "epoch-protected read of a lock-free link")]
        let Some(link) = (unsafe { cur.as_ref() }) else {
            return;
        };
        if link.loc != old_loc {
            return;
        }
        let new = Owned::new(CacheLink {
            loc: new_loc,
            value: link.value.clone(),
        });
        if cell
            .compare_exchange(cur, new, Ordering::AcqRel, Ordering::Acquire, guard)
            .is_ok()
        {
            retire(cur, guard);
        }
    }
}

fn retire<V>(old: Shared<'_, CacheLink<V>>, guard: &Guard) {
    if !old.is_null() {
        // SAFETY: `old` was just unlinked from its cell by a successful swap/CAS, so no new
        // reader can reach it; readers that loaded it earlier hold guards, and the link is
        // freed only after all of them unpin.
        #[expect(unsafe_code, reason = "epoch-deferred destruction of an unlinked link")]
        unsafe {
            guard.defer_destroy(old);
        }
    }
}

impl<V> Drop for CachePointers<V> {
    fn drop(&mut self) {
        for seg in self.segments.iter_mut().filter_map(OnceLock::get_mut) {
            for cell in seg.iter() {
                // SAFETY: `&mut self` means no other thread can access the array; links
                // already retired were swapped out, so each remaining one is owned by its
                // cell alone and is dropped exactly once here.
                #[expect(unsafe_code, reason = "dropping the links left in the array")]
                unsafe {
                    let link = cell.load(Ordering::Relaxed, crossbeam_epoch::unprotected());
                    if !link.is_null() {
                        drop(link.into_owned());
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn a_link_is_returned_only_for_its_location() {
        let c: CachePointers<Arc<[u8]>> = CachePointers::new(2, 4);
        c.add_segment(0);
        let g = crossbeam_epoch::pin();
        c.install(3, 77, Arc::from(&b"v"[..]), &g);
        assert_eq!(c.get(3, 77, &g).as_deref(), Some(&b"v"[..]));
        assert_eq!(c.get(3, 78, &g), None);
        assert_eq!(c.get(2, 77, &g), None);
    }

    #[test]
    fn slots_of_missing_segments_are_ignored() {
        let c: CachePointers<Arc<[u8]>> = CachePointers::new(2, 4);
        let g = crossbeam_epoch::pin();
        c.install(5, 1, Arc::from(&b"v"[..]), &g);
        assert_eq!(c.get(5, 1, &g), None);
        c.clear(100, &g);
    }

    #[test]
    fn clear_if_removes_only_the_named_value() {
        let c: CachePointers<Arc<[u8]>> = CachePointers::new(1, 4);
        c.add_segment(0);
        let g = crossbeam_epoch::pin();
        let a: Arc<[u8]> = Arc::from(&b"a"[..]);
        let b: Arc<[u8]> = Arc::from(&b"b"[..]);
        c.install(1, 5, a.clone(), &g);
        assert_eq!(c.clear_if(1, |v| Arc::ptr_eq(v, &b), &g), None);
        assert!(c.get(1, 5, &g).is_some());
        assert_eq!(c.loc_of(1, |v| Arc::ptr_eq(v, &a), &g), Some(5));
        assert_eq!(c.loc_of(1, |v| Arc::ptr_eq(v, &b), &g), None);
        assert_eq!(c.clear_if(1, |v| Arc::ptr_eq(v, &a), &g), Some(5));
        assert!(c.get(1, 5, &g).is_none());
    }

    #[test]
    fn relocate_moves_a_link_that_matches_the_old_location() {
        let c: CachePointers<Arc<[u8]>> = CachePointers::new(1, 4);
        c.add_segment(0);
        let g = crossbeam_epoch::pin();
        c.install(0, 5, Arc::from(&b"a"[..]), &g);
        c.relocate(0, 6, 9, &g);
        assert!(c.get(0, 5, &g).is_some());
        c.relocate(0, 5, 9, &g);
        assert!(c.get(0, 5, &g).is_none());
        assert!(c.get(0, 9, &g).is_some());
    }

    #[test]
    fn retired_values_are_freed_and_live_ones_dropped_with_the_array() {
        let v: Arc<[u8]> = Arc::from(&b"x"[..]);
        {
            let c: CachePointers<Arc<[u8]>> = CachePointers::new(1, 8);
            c.add_segment(0);
            let g = crossbeam_epoch::pin();
            for s in 0..8 {
                c.install(s, s, v.clone(), &g);
            }
            c.clear(0, &g);
            c.install(1, 1, v.clone(), &g);
        }
        // Retired links are freed by the epoch collector eventually; make it run. Other
        // tests of this binary pin the same global collector, so under load the epoch may
        // need a while to advance (64 quick flushes failed in CI with 3 of 8 still held).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while Arc::strong_count(&v) > 1 && std::time::Instant::now() < deadline {
            crossbeam_epoch::pin().flush();
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(Arc::strong_count(&v), 1);
    }

    #[test]
    fn concurrent_installs_and_clears_leave_a_consistent_array() {
        let c: Arc<CachePointers<Arc<[u8]>>> = Arc::new(CachePointers::new(1, 16));
        c.add_segment(0);
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let c = c.clone();
                s.spawn(move || {
                    for i in 0..2000u64 {
                        let g = crossbeam_epoch::pin();
                        let slot = (i + t) % 16;
                        match i % 3 {
                            0 => c.install(slot, i, Arc::from(&i.to_le_bytes()[..]), &g),
                            1 => c.clear(slot, &g),
                            _ => {
                                if let Some(v) = c.get(slot, i - 2, &g) {
                                    assert_eq!(&v[..], &(i - 2).to_le_bytes()[..]);
                                }
                            }
                        }
                    }
                });
            }
        });
    }
}
