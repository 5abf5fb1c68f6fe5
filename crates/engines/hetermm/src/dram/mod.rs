//! DRAM: the physical pages shared by the write region and the read cache (HeterMM §4.1.1,
//! §5.1), the two pages arrays that map logical pages onto them (`ring`), and records in
//! pages (`record`).
//!
//! [`PagePool`] owns `P = dram_budget / 2^k` pages of `2^k` bytes, each a slice of
//! `AtomicU64` words: every access to DRAM record bytes is an atomic word load or store,
//! so in-place updates racing with readers (guarded by a seqlock) are data-race free
//! without `unsafe`. Pages are allocated on first use and never returned to the system;
//! they move between the free list, the write region and the read cache (Fig. 6). A page
//! is zeroed before it goes back on the free list, so a fresh page reads as "no records".
//!
//! Thread safety: `Send + Sync`. The free list is a mutex taken once per page handed out
//! or returned; writers that find it empty wait on a condition variable *unpinned* (see
//! `threads.rs`) until the flusher or the cache frees pages.

pub mod record;
pub mod ring;

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

/// A physical page: `2^k / 8` words.
pub type Page = [AtomicU64];

/// The physical DRAM pages.
pub struct PagePool {
    words: usize,
    pages: Box<[OnceLock<Box<Page>>]>,
    free: Mutex<Vec<u32>>,
    free_count: AtomicUsize,
    freed: Condvar,
}

impl PagePool {
    /// `count` pages of `page_size` bytes, all free.
    pub fn new(count: usize, page_size: u64) -> PagePool {
        PagePool {
            words: (page_size / 8) as usize,
            pages: (0..count).map(|_| OnceLock::new()).collect(),
            free: Mutex::new((0..count as u32).rev().collect()),
            free_count: AtomicUsize::new(count),
            freed: Condvar::new(),
        }
    }

    /// Pages in the pool.
    pub fn count(&self) -> usize {
        self.pages.len()
    }

    /// Pages on the free list.
    pub fn free_count(&self) -> usize {
        self.free_count.load(Ordering::Acquire)
    }

    /// Pages that have been touched (DRAM actually in use).
    pub fn allocated(&self) -> usize {
        self.pages.iter().filter(|p| p.get().is_some()).count()
    }

    /// Page `id`'s words (allocated, zeroed, on first use).
    pub fn page(&self, id: u32) -> &Page {
        let cell = &self.pages[id as usize % self.pages.len()];
        cell.get_or_init(|| (0..self.words).map(|_| AtomicU64::new(0)).collect())
    }

    /// Takes a free page, if there is one.
    pub fn try_take(&self) -> Option<u32> {
        let mut free = self.free.lock();
        let id = free.pop()?;
        self.free_count.store(free.len(), Ordering::Release);
        Some(id)
    }

    /// Zeroes the pages and puts them on the free list; wakes waiting writers. The caller
    /// guarantees that no operation can still read them (it synchronized the epochs).
    pub fn give_back(&self, ids: &[u32]) {
        for &id in ids {
            for w in self.page(id) {
                w.store(0, Ordering::Relaxed);
            }
        }
        let mut free = self.free.lock();
        free.extend_from_slice(ids);
        self.free_count.store(free.len(), Ordering::Release);
        drop(free);
        self.freed.notify_all();
    }

    /// Waits up to `timeout` for a page to be given back.
    pub fn wait_for_free(&self, timeout: Duration) {
        self.wait_for_free_pages(1, timeout);
    }

    /// While fewer than `n` pages are free, waits up to `timeout` for pages to be given
    /// back (or for [`wake_all`](Self::wake_all)).
    pub fn wait_for_free_pages(&self, n: usize, timeout: Duration) {
        let mut free = self.free.lock();
        if free.len() < n {
            self.freed.wait_for(&mut free, timeout);
        }
    }

    /// Wakes every waiting writer (on close, or when the flusher reports an error).
    pub fn wake_all(&self) {
        self.freed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_come_back_zeroed() {
        let p = PagePool::new(2, 4096);
        let a = p.try_take().unwrap();
        let b = p.try_take().unwrap();
        assert_ne!(a, b);
        assert!(p.try_take().is_none());
        p.page(a)[3].store(99, Ordering::Relaxed);
        p.give_back(&[a]);
        assert_eq!(p.free_count(), 1);
        let again = p.try_take().unwrap();
        assert_eq!(again, a);
        assert_eq!(p.page(again)[3].load(Ordering::Relaxed), 0);
        assert_eq!(p.page(again).len(), 512);
        assert_eq!(p.allocated(), 1);
    }
}
