//! Per-thread state (HeterMM §5.4, Algorithm 2) and the epochs that tell background work
//! when no worker can still see what it is about to change.
//!
//! Every client thread that touches a store gets a [`ThreadSlot`] of that store on its first
//! operation (a *lease* kept in a thread-local; released when the thread exits). A slot
//! holds the thread's allocation cursors — the next free logical address in its DRAM page
//! and in its cache page, each a whole page handed to this thread so that it allocates with
//! one uncontended compare-and-swap on its own cache line instead of a global one (its log
//! page is kept by `oplog.rs`, indexed by the same slot) — its epoch word, its buffered
//! invalidations and its counters.
//!
//! # Epochs (instead of the paper's 5-second sleep)
//! An operation *pins* its slot (stores the global epoch into it) for its whole duration
//! and unpins at the end. [`SlotTable::synchronize`] advances the global epoch and waits
//! until no slot is pinned at an older one. So a background thread that changes a region
//! marker (off_ReadOnly, off_DRAM, a block's base address) and then synchronizes knows that
//! every operation that could have read the old value has finished; later ones see the new
//! value. All epoch and marker accesses are `SeqCst`, which makes the argument a single
//! total order: either the worker's pin precedes the synchronizer's scan of its slot (the
//! synchronizer waits for it), or the marker store precedes the worker's load of the marker.
//! A pinned thread never waits for background progress (it unpins first, `dram::PagePool`),
//! so synchronize cannot deadlock.
//!
//! # Cursors and the alarm
//! A cursor is an `AtomicU64` holding the next free address in the thread's current page,
//! or [`CLOSED`]. Only the owner allocates from it; background threads may close it
//! (compare-and-swap to `CLOSED`) to take a page away from an idle thread — the alarm of
//! Algorithm 2 made robust to threads that never allocate again.
//!
//! Thread safety: `SlotTable` is `Send + Sync`; a slot's cursors are written by its owner
//! and closed by background threads with CAS; its pending list is a mutex taken by the owner
//! and by the flusher that drains it.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use crossbeam::utils::CachePadded;
use parking_lot::Mutex;
use tierkv_core::{Error, Result};

use crate::invalid::Invalidation;

/// A cursor that holds no page.
pub const CLOSED: u64 = u64::MAX;
/// Bits of a cursor's offset in pages of `page_size` bytes (a power of two): one more than
/// the page's, since a full page's cursor holds the offset `page_size` itself.
const fn off_bits(page_size: u64) -> u32 {
    page_size.trailing_zeros() + 1
}

/// A cursor at byte `off` of logical page `page` (pages of `page_size` bytes). Packing the
/// page apart from the offset keeps a full page's cursor (offset = page size) from reading
/// as the next page's start. Every page whose addresses are below 2^63 fits: `page <<
/// (k + 1)` is below 2^64 exactly when `page << k` is below 2^63 (FORMAT.md § Counters;
/// until issue 22 the offset took a fixed 25 bits, so pages past 2^39 lost their top bits).
/// A cursor is never [`CLOSED`], whose top bit is set.
pub const fn cursor(page: u64, off: u64, page_size: u64) -> u64 {
    page << off_bits(page_size) | off
}

/// The page of a cursor.
pub const fn cursor_page(c: u64, page_size: u64) -> u64 {
    c >> off_bits(page_size)
}

/// The offset of a cursor in its page.
pub const fn cursor_off(c: u64, page_size: u64) -> u64 {
    c & ((1 << off_bits(page_size)) - 1)
}

/// Takes `len` bytes from the page a cursor holds, if it holds one with room and
/// `keep(page)` allows it; returns (page, offset).
pub fn bump(
    cur: &AtomicU64,
    len: u64,
    page_size: u64,
    keep: impl Fn(u64) -> bool,
) -> Option<(u64, u64)> {
    loop {
        let c = cur.load(Ordering::Acquire);
        let (page, off) = (cursor_page(c, page_size), cursor_off(c, page_size));
        if c == CLOSED || !keep(page) || off + len > page_size {
            return None;
        }
        if cur
            .compare_exchange_weak(c, c + len, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            return Some((page, off));
        }
    }
}
/// Slots per store: at most this many threads operate on one store at a time.
pub const MAX_THREADS: usize = 512;

/// One thread's state in one store.
#[derive(Debug)]
pub struct ThreadSlot {
    in_use: AtomicBool,
    /// The epoch this thread is pinned at; 0 when it is not in an operation.
    epoch: AtomicU64,
    /// Next free logical address in the thread's DRAM page (Algorithm 2's `curr`).
    pub write_cursor: AtomicU64,
    /// Next free cache address in the thread's read-cache page.
    pub cache_cursor: AtomicU64,
    /// Reads made by this thread (for the read-cache policy). Only the slot's own thread
    /// adds to it and to `pmem_reads` (with a load and a store, [`ThreadSlot::bump`]: no
    /// locked instruction per read); others only load them.
    pub reads: AtomicU64,
    /// Writes made by this thread (for the read-cache policy).
    pub writes: AtomicU64,
    /// Pmem reads, counted for SampleFreq.
    pub pmem_reads: AtomicU64,
    /// Invalidations registered by this thread and not yet drained by the flusher.
    pub pending: Mutex<Vec<Invalidation>>,
}

impl ThreadSlot {
    /// Adds one to a counter of this slot that only the slot's own thread (the one holding
    /// its lease) writes, and returns its previous value.
    pub fn bump(counter: &AtomicU64) -> u64 {
        let n = counter.load(Ordering::Relaxed);
        counter.store(n.wrapping_add(1), Ordering::Relaxed);
        n
    }
}

impl Default for ThreadSlot {
    fn default() -> Self {
        ThreadSlot {
            in_use: AtomicBool::new(false),
            epoch: AtomicU64::new(0),
            write_cursor: AtomicU64::new(CLOSED),
            cache_cursor: AtomicU64::new(CLOSED),
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            pmem_reads: AtomicU64::new(0),
            pending: Mutex::new(Vec::new()),
        }
    }
}

/// The slots of one store, and its epochs.
#[derive(Debug)]
pub struct SlotTable {
    id: u64,
    slots: Box<[CachePadded<ThreadSlot>]>,
    /// Slots `0..high_water` have ever been used.
    high_water: AtomicUsize,
    global_epoch: AtomicU64,
    /// Invalidations of threads that exited before the flusher drained them.
    pub orphaned: Mutex<Vec<Invalidation>>,
}

struct Lease {
    table_id: u64,
    index: usize,
    table: Weak<SlotTable>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(t) = self.table.upgrade() {
            t.release(self.index);
        }
    }
}

thread_local! {
    static LEASES: RefCell<Vec<Lease>> = const { RefCell::new(Vec::new()) };
}

impl SlotTable {
    /// A table with no slot in use.
    pub fn new() -> Arc<SlotTable> {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        Arc::new(SlotTable {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            slots: (0..MAX_THREADS)
                .map(|_| CachePadded::new(ThreadSlot::default()))
                .collect(),
            high_water: AtomicUsize::new(0),
            global_epoch: AtomicU64::new(1),
            orphaned: Mutex::new(Vec::new()),
        })
    }

    /// The calling thread's slot index, leasing one on first use.
    pub fn current(self: &Arc<Self>) -> Result<usize> {
        let found = LEASES
            .try_with(|l| {
                l.borrow()
                    .iter()
                    .find(|x| x.table_id == self.id)
                    .map(|x| x.index)
            })
            .map_err(|_| {
                Error::Unsupported("a store cannot be used by an exiting thread".into())
            })?;
        if let Some(i) = found {
            return Ok(i);
        }
        let index = self.acquire()?;
        let lease = Lease {
            table_id: self.id,
            index,
            table: Arc::downgrade(self),
        };
        let kept = LEASES.try_with(|l| {
            let mut l = l.borrow_mut();
            l.retain(|x| x.table.strong_count() > 0);
            l.push(lease);
        });
        if kept.is_err() {
            self.release(index);
            return Err(Error::Unsupported(
                "a store cannot be used by an exiting thread".into(),
            ));
        }
        Ok(index)
    }

    fn acquire(&self) -> Result<usize> {
        for (i, s) in self.slots.iter().enumerate() {
            if s.in_use
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                self.high_water.fetch_max(i + 1, Ordering::SeqCst);
                return Ok(i);
            }
        }
        Err(Error::Unsupported(format!(
            "more than {MAX_THREADS} threads use one hetermm store at once"
        )))
    }

    /// Returns slot `i` (its thread exited): its pages are abandoned (their unused rest
    /// becomes a hole) and its buffered invalidations move to [`SlotTable::orphaned`].
    fn release(&self, i: usize) {
        let Some(s) = self.slots.get(i) else { return };
        s.write_cursor.store(CLOSED, Ordering::SeqCst);
        s.cache_cursor.store(CLOSED, Ordering::SeqCst);
        let left = std::mem::take(&mut *s.pending.lock());
        self.orphaned.lock().extend(left);
        s.in_use.store(false, Ordering::Release);
    }

    /// Slot `i`.
    pub fn slot(&self, i: usize) -> &ThreadSlot {
        // `i` comes from `current`, so it is in range; the modulo only rules out a panic.
        &self.slots[i % MAX_THREADS]
    }

    /// Every slot that has ever been used (in use or not).
    pub fn used_slots(&self) -> impl Iterator<Item = &ThreadSlot> {
        let n = self.high_water.load(Ordering::SeqCst);
        self.slots.iter().take(n).map(|s| &**s)
    }

    /// Pins slot `i` at the current epoch. An operation must not nest inside another one
    /// on the same store and thread.
    pub fn pin(&self, i: usize) -> Result<()> {
        let s = self.slot(i);
        if s.epoch.load(Ordering::Relaxed) != 0 {
            return Err(Error::Unsupported(
                "nested operations on one hetermm store from one thread".into(),
            ));
        }
        s.epoch
            .store(self.global_epoch.load(Ordering::SeqCst), Ordering::SeqCst);
        Ok(())
    }

    /// Unpins slot `i`.
    ///
    /// A release store is enough here (and cheaper than a sequentially consistent one, a
    /// locked exchange on x86, once per operation): what must be ordered is everything
    /// the operation read before this store, against the reclamation of a
    /// [`SlotTable::synchronize`] whose load of the epoch sees the 0 (that load
    /// synchronizes with this store). Pinning keeps its full fence: the index must not be
    /// read before the epoch is published.
    pub fn unpin(&self, i: usize) {
        self.slot(i).epoch.store(0, Ordering::Release);
    }

    /// True when slot `i` is pinned.
    pub fn is_pinned(&self, i: usize) -> bool {
        self.slot(i).epoch.load(Ordering::SeqCst) != 0
    }

    /// The global epoch (tests wait for a synchronization to begin).
    #[cfg(test)]
    pub fn epoch(&self) -> u64 {
        self.global_epoch.load(Ordering::SeqCst)
    }

    /// Waits until every operation that was running when this was called has finished.
    pub fn synchronize(&self) {
        let target = self.global_epoch.fetch_add(1, Ordering::SeqCst) + 1;
        for s in self.used_slots() {
            let mut spins = 0u32;
            loop {
                let e = s.epoch.load(Ordering::SeqCst);
                if e == 0 || e >= target {
                    break;
                }
                spins += 1;
                if spins < 64 {
                    std::hint::spin_loop();
                } else if spins < 1024 {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(std::time::Duration::from_micros(50));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn a_thread_keeps_its_slot_and_releases_it_when_it_exits() {
        let t = SlotTable::new();
        let a = t.current().unwrap();
        assert_eq!(t.current().unwrap(), a);
        let t2 = t.clone();
        let b = std::thread::spawn(move || {
            let b = t2.current().unwrap();
            t2.slot(b).write_cursor.store(4096, Ordering::SeqCst);
            t2.slot(b).pending.lock().push(Invalidation {
                target: 1,
                key_block: 0,
            });
            b
        })
        .join()
        .unwrap();
        assert_ne!(a, b);
        assert_eq!(t.slot(b).write_cursor.load(Ordering::SeqCst), CLOSED);
        assert_eq!(t.orphaned.lock().len(), 1);
        let t3 = t.clone();
        let c = std::thread::spawn(move || t3.current().unwrap())
            .join()
            .unwrap();
        assert_eq!(c, b, "a released slot is reused");
    }

    #[test]
    fn a_full_page_cursor_never_spills_into_the_next_page() {
        let c = AtomicU64::new(cursor(7, 4000, 4096));
        assert_eq!(bump(&c, 96, 4096, |_| true), Some((7, 4000)));
        assert_eq!(cursor_off(c.load(Ordering::SeqCst), 4096), 4096);
        assert_eq!(bump(&c, 8, 4096, |_| true), None, "full page");
        // The last pages below 2^63, for the smallest and largest pages.
        for k in [12u32, 24] {
            let size = 1u64 << k;
            let last = (1u64 << (63 - k)) - 1;
            for page in [1 << 38, (1 << 39) - 1, last / 2 + 1, last] {
                let c = AtomicU64::new(cursor(page, size - 8, size));
                assert_ne!(c.load(Ordering::SeqCst), CLOSED);
                assert_eq!(bump(&c, 8, size, |_| true), Some((page, size - 8)), "k {k}");
                assert_eq!(cursor_page(c.load(Ordering::SeqCst), size), page);
                assert_eq!(bump(&c, 8, size, |_| true), None, "k {k}: full page");
            }
        }
        let c = AtomicU64::new(cursor(7, 0, 4096));
        assert_eq!(bump(&c, 8, 4096, |p| p != 7), None, "page refused (alarm)");
        assert_eq!(bump(&AtomicU64::new(CLOSED), 8, 4096, |_| true), None);
    }

    #[test]
    fn nested_pins_are_refused() {
        let t = SlotTable::new();
        let i = t.current().unwrap();
        t.pin(i).unwrap();
        assert!(t.pin(i).is_err());
        t.unpin(i);
        t.pin(i).unwrap();
        t.unpin(i);
    }

    #[test]
    fn synchronize_waits_for_operations_that_started_before_it() {
        let t = SlotTable::new();
        let entered = std::sync::Barrier::new(2);
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let i = t.current().unwrap();
                t.pin(i).unwrap();
                entered.wait();
                std::thread::sleep(std::time::Duration::from_millis(30));
                done.store(true, Ordering::SeqCst);
                t.unpin(i);
            });
            entered.wait();
            t.synchronize();
            assert!(
                done.load(Ordering::SeqCst),
                "synchronize returned while a pinned operation ran"
            );
        });
    }
}
