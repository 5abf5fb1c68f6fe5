//! The read cache (HeterMM §5.1): a sampled FIFO in DRAM pages taken from the pool that
//! the write region also uses, with its own pages array (Fig. 6d).
//!
//! - **Admission**: one in `sample_freq` reads served from pmem copies the record into the
//!   reading thread's cache page (Algorithm 2: per-thread pages) and maps its logical
//!   address to the copy.
//! - **Lookup**: a read below off_DRAM first looks the address up. The paper rewrites the
//!   index's slot to point at the cache entry (through a pointer to the slot); a plug-in
//!   boundary over opaque concurrent indexes cannot do that safely, so we keep the mapping
//!   in a lock-free hash map beside the index (one probe per pmem-region read). A logical
//!   address never changes meaning, so an entry can only go stale by being dropped.
//! - **Invalidation**: an update or delete of a cached record removes its mapping (§5.1:
//!   "the cached entry becomes invalid and waits to be freed").
//! - **Eviction**: FIFO by page. Dropping the oldest page closes the cursors of threads
//!   still writing in it (the alarm of Eq. 3 asks them to leave first; an idle thread's
//!   page is simply closed), synchronizes the epochs, removes the page's mappings,
//!   synchronizes again, and only then reuses the page.
//! - **Size**: the flusher sets a target number of pages (`policy::cache_target`) and the
//!   cache grows from free pages or shrinks back into them.
//!
//! A cache entry is the record's logical address + 1 (written last) followed by the record's
//! bytes; a lookup checks that word, decodes the record (checksum) and compares the key.
//!
//! Thread safety: `Send + Sync`. Admissions and lookups run in pinned operations;
//! maintenance runs on the flusher thread.

use std::collections::VecDeque;
use std::hash::BuildHasherDefault;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;
use tierkv_core::common::KeyHasher;
use tierkv_core::{Counter, Result};

use crate::dram::ring::Ring;
use crate::dram::{Page, PagePool};
use crate::format::record::{self, RecordHeader};
use crate::geometry::Geometry;
use crate::threads::{CLOSED, SlotTable, ThreadSlot, bump, cursor, cursor_page};

/// Cache counters.
#[derive(Debug, Default)]
pub struct CacheCounters {
    /// Reads answered by the cache.
    pub hits: Counter,
    /// Reads below off_DRAM the cache could not answer.
    pub misses: Counter,
    /// Records admitted.
    pub admissions: Counter,
    /// Mappings removed because the record was updated or deleted.
    pub invalidations: Counter,
    /// Pages evicted (FIFO) to make room.
    pub evictions: Counter,
    /// Pages added to the cache.
    pub grows: Counter,
    /// Pages given back to the write region.
    pub shrinks: Counter,
}

/// The read cache.
pub struct ReadCache {
    geo: Geometry,
    ring: Ring,
    /// Hashed with the core's fast [`KeyHasher`] instead of the `std` SipHash, which took a
    /// visible share of every pmem-region read (one probe each); the addresses are the
    /// engine's own, not chosen by users.
    map: papaya::HashMap<u64, u64, BuildHasherDefault<KeyHasher>>,
    /// Next cache page to map.
    next_page: AtomicU64,
    /// dropPage: the oldest cache page still live.
    drop_page: AtomicU64,
    /// Mapped pages not yet handed to a thread (oldest first).
    ready: Mutex<VecDeque<u64>>,
    /// Pages the cache holds.
    held: AtomicUsize,
    /// Pages the policy wants it to hold.
    target: AtomicUsize,
    /// Counters.
    pub counters: CacheCounters,
}

impl ReadCache {
    /// An empty cache over a pool of `pages` pages.
    pub fn new(geo: Geometry, pages: usize) -> ReadCache {
        ReadCache {
            geo,
            ring: Ring::new(pages),
            map: papaya::HashMap::builder()
                .hasher(BuildHasherDefault::default())
                .build(),
            next_page: AtomicU64::new(0),
            drop_page: AtomicU64::new(0),
            ready: Mutex::new(VecDeque::new()),
            held: AtomicUsize::new(0),
            target: AtomicUsize::new(0),
            counters: CacheCounters::default(),
        }
    }

    /// Pages held.
    pub fn pages(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Records mapped.
    pub fn entries(&self) -> usize {
        self.map.len()
    }

    /// The target size in pages.
    pub fn target(&self) -> usize {
        self.target.load(Ordering::Relaxed)
    }

    /// Sets the target size in pages.
    pub fn set_target(&self, pages: usize) {
        self.target.store(pages, Ordering::Relaxed);
    }

    /// True when the cache wants more pages than it holds.
    pub fn wants_pages(&self) -> bool {
        self.pages() < self.target()
    }

    /// The value of the record at `addr` if it is cached (and belongs to `key`).
    pub fn lookup(&self, pool: &PagePool, addr: u64, key: &[u8]) -> Option<Vec<u8>> {
        let ca = *self.map.pin().get(&addr)?;
        let page = pool.page(self.ring.lookup(self.geo.page_of(ca))?);
        let at = self.geo.page_offset(ca);
        let mut bytes = read_entry(page, at, addr)?;
        let r = record::decode(&bytes, addr).ok()?;
        if r.key != key {
            return None;
        }
        // The value is cut out of the entry's copy in place: one allocation per hit.
        let start = record::HEADER_LEN as usize + r.key.len();
        let end = start + r.value.len();
        bytes.truncate(end);
        bytes.drain(..start);
        Some(bytes)
    }

    /// Admits a copy of `rec` (the record at `addr`) into the thread's cache page, if the
    /// cache has room for it now.
    pub fn admit(&self, pool: &PagePool, slot: &ThreadSlot, addr: u64, rec: &[u8]) {
        let len = 8 + rec.len() as u64;
        let page_size = self.geo.page_size();
        if len > page_size {
            return;
        }
        // Eq. 3: leave a page that is about to be dropped (the cache is full and the page
        // is one of its two oldest).
        let keep = |lp: u64| {
            !(self.pages() > 2
                && self.pages() >= self.target()
                && lp <= self.drop_page.load(Ordering::Acquire) + 1)
        };
        let ca = loop {
            if let Some((lp, off)) = bump(&slot.cache_cursor, len, page_size, keep) {
                break self.geo.page_start(lp) + off;
            }
            let Some(lp) = self.ready.lock().pop_front() else {
                slot.cache_cursor.store(CLOSED, Ordering::Release);
                return;
            };
            slot.cache_cursor
                .store(cursor(lp, 0, page_size), Ordering::Release);
        };
        let Some(phys) = self.ring.lookup(self.geo.page_of(ca)) else {
            return;
        };
        write_entry(pool.page(phys), self.geo.page_offset(ca), addr, rec);
        self.map.pin().insert(addr, ca);
        self.counters.admissions.incr();
    }

    /// Forgets the cached copy of `addr` (its record was superseded or deleted).
    pub fn invalidate(&self, addr: u64) {
        if self.map.pin().remove(&addr).is_some() {
            self.counters.invalidations.incr();
        }
    }

    /// Background step: grow toward the target from free pages (keeping `reserve` free for
    /// writers), shrink toward it, and recycle the oldest page when full.
    pub fn maintain(&self, pool: &PagePool, threads: &SlotTable, reserve: usize) -> Result<()> {
        while self.pages() > self.target() {
            if !self.drop_oldest(pool, threads, false)? {
                break;
            }
        }
        if self.target() == 0 || self.ready.lock().len() >= 2 {
            return Ok(());
        }
        if self.pages() < self.target() && pool.free_count() > reserve {
            if let Some(phys) = pool.try_take() {
                self.add_page(phys)?;
                self.counters.grows.incr();
            }
        } else if self.pages() >= self.target() && self.pages() > 2 {
            self.drop_oldest(pool, threads, true)?;
        }
        Ok(())
    }

    fn add_page(&self, phys: u32) -> Result<()> {
        let lp = self.next_page.fetch_add(1, Ordering::AcqRel);
        self.ring.map(lp, phys)?;
        self.held.fetch_add(1, Ordering::Relaxed);
        self.ready.lock().push_back(lp);
        Ok(())
    }

    /// Drops the oldest page (FIFO). With `recycle` the page is reused by the cache as its
    /// newest; otherwise it goes back to the pool. Returns false when there is none.
    fn drop_oldest(&self, pool: &PagePool, threads: &SlotTable, recycle: bool) -> Result<bool> {
        let lp = self.drop_page.load(Ordering::Acquire);
        if lp >= self.next_page.load(Ordering::Acquire) {
            return Ok(false);
        }
        self.ready.lock().retain(|p| *p != lp);
        for s in threads.used_slots() {
            let c = s.cache_cursor.load(Ordering::Acquire);
            if c != CLOSED && cursor_page(c, self.geo.page_size()) == lp {
                let _ =
                    s.cache_cursor
                        .compare_exchange(c, CLOSED, Ordering::AcqRel, Ordering::Relaxed);
            }
        }
        threads.synchronize();
        if let Some(phys) = self.ring.lookup(lp) {
            self.forget_page(pool.page(phys), lp);
        }
        self.drop_page.store(lp + 1, Ordering::Release);
        threads.synchronize();
        let Some(phys) = self.ring.unmap(lp) else {
            return Ok(true);
        };
        self.held.fetch_sub(1, Ordering::Relaxed);
        if recycle {
            for w in pool.page(phys) {
                w.store(0, Ordering::Relaxed);
            }
            self.add_page(phys)?;
            self.counters.evictions.incr();
        } else {
            pool.give_back(&[phys]);
            self.counters.shrinks.incr();
        }
        Ok(true)
    }

    /// Removes the mappings of every entry in cache page `lp`.
    fn forget_page(&self, page: &Page, lp: u64) {
        let map = self.map.pin();
        let mut at = 0u64;
        while at + 8 + record::MIN_RECORD_LEN <= self.geo.page_size() {
            let tag = page
                .get((at / 8) as usize)
                .map_or(0, |w| w.load(Ordering::Acquire));
            let Some(len) = entry_len(page, at).filter(|_| tag != 0) else {
                break;
            };
            let ca = self.geo.page_start(lp) + at;
            let _ = map.remove_if(&(tag - 1), |_, v| *v == ca);
            at += len;
        }
    }
}

/// Bytes of the entry at `at` (tag word + record), from its record header.
fn entry_len(page: &Page, at: u64) -> Option<u64> {
    let w = |i: u64| {
        page.get(((at + 8) / 8 + i) as usize)
            .map(|w| w.load(Ordering::Relaxed))
    };
    let h = RecordHeader::from_words(w(0)?, w(1)?, w(2)?)?;
    Some(8 + h.size())
}

fn write_entry(page: &Page, at: u64, addr: u64, rec: &[u8]) {
    let base = (at / 8) as usize + 1;
    for (i, chunk) in rec.chunks(8).enumerate() {
        let mut b = [0u8; 8];
        b[..chunk.len()].copy_from_slice(chunk);
        if let Some(w) = page.get(base + i) {
            w.store(u64::from_le_bytes(b), Ordering::Relaxed);
        }
    }
    if let Some(w) = page.get(base - 1) {
        w.store(addr + 1, Ordering::Release);
    }
}

/// The record bytes of the entry at `at`, if it is the entry of `addr`.
fn read_entry(page: &Page, at: u64, addr: u64) -> Option<Vec<u8>> {
    let tag = page.get((at / 8) as usize)?.load(Ordering::Acquire);
    if tag != addr + 1 {
        return None;
    }
    let len = entry_len(page, at)? - 8;
    let base = (at / 8) as usize + 1;
    let mut out = Vec::with_capacity(len as usize);
    for i in 0..(len / 8) as usize {
        out.extend_from_slice(&page.get(base + i)?.load(Ordering::Relaxed).to_le_bytes());
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (ReadCache, PagePool, std::sync::Arc<SlotTable>) {
        let geo = Geometry {
            page_bits: 12,
            block_bits: 15,
        };
        (
            ReadCache::new(geo, 8),
            PagePool::new(8, 4096),
            SlotTable::new(),
        )
    }

    #[test]
    fn admitted_records_are_found_until_invalidated() {
        let (c, pool, threads) = setup();
        c.set_target(4);
        c.maintain(&pool, &threads, 1).unwrap();
        assert_eq!(c.pages(), 1);
        let slot = threads.slot(threads.current().unwrap());
        let rec = record::encode(3, b"key", b"value", 5);
        c.admit(&pool, slot, 1 << 20, &rec);
        assert_eq!(c.lookup(&pool, 1 << 20, b"key"), Some(b"value".to_vec()));
        assert_eq!(c.lookup(&pool, 1 << 20, b"other"), None, "key mismatch");
        assert_eq!(c.lookup(&pool, 7, b"key"), None);
        c.invalidate(1 << 20);
        assert_eq!(c.lookup(&pool, 1 << 20, b"key"), None);
        assert_eq!(c.counters.admissions.get(), 1);
    }

    #[test]
    fn fifo_eviction_forgets_the_oldest_page_and_shrinking_returns_pages() {
        let (c, pool, threads) = setup();
        c.set_target(3);
        for _ in 0..3 {
            c.maintain(&pool, &threads, 1).unwrap();
        }
        let slot = threads.slot(threads.current().unwrap());
        let rec = record::encode(1, b"k", &[7u8; 900], 900);
        for i in 0..12u64 {
            c.admit(&pool, slot, i << 12, &rec);
            c.maintain(&pool, &threads, 1).unwrap();
        }
        assert!(
            c.counters.evictions.get() > 0,
            "full cache recycles its oldest page"
        );
        assert_eq!(c.lookup(&pool, 0, b"k"), None, "oldest entry evicted");
        assert!(
            c.lookup(&pool, 11 << 12, b"k").is_some(),
            "newest entry kept"
        );
        c.set_target(0);
        c.maintain(&pool, &threads, 1).unwrap();
        assert_eq!(c.pages(), 0);
        assert_eq!(pool.free_count(), 8);
        assert_eq!(c.entries(), 0);
    }
}
