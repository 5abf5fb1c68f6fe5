//! The HSIT free list (PRISM §5.4: "a deleted HSIT entry is added to the free list").
//!
//! Lives in DRAM only: at recovery it is rebuilt as every entry no key reaches (§5.5), so
//! it needs no persistence. Entries below `next` were handed out at some time; entries at
//! or above it were never used. A slot enters the list either at recovery or — for a
//! deleted key — after two epochs (see `hsit::Hsit::retire_slot`), so that no thread that
//! found the slot through the key index can still be using it.
//!
//! Thread safety: a mutex-protected stack plus an atomic bump counter; all `&self`.

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

/// Free HSIT slots.
#[derive(Debug, Default)]
pub struct FreeList {
    stack: Mutex<Vec<u64>>,
    next: AtomicU64,
}

impl FreeList {
    /// A list whose never-used slots start at `next`, plus `free` slots below it.
    pub fn new(next: u64, free: Vec<u64>) -> Self {
        FreeList {
            stack: Mutex::new(free),
            next: AtomicU64::new(next),
        }
    }

    /// Replaces the whole list (recovery): never-used slots start at `next`.
    pub fn reset(&self, next: u64, free: Vec<u64>) {
        let mut stack = self.stack.lock();
        *stack = free;
        self.next.store(next, Ordering::Release);
    }

    /// A free slot below `capacity`, or `None` when every slot below it is in use.
    pub fn pop(&self, capacity: u64) -> Option<u64> {
        if let Some(s) = self.stack.lock().pop() {
            return Some(s);
        }
        let mut cur = self.next.load(Ordering::Relaxed);
        loop {
            if cur >= capacity {
                return None;
            }
            match self
                .next
                .compare_exchange_weak(cur, cur + 1, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return Some(cur),
                Err(now) => cur = now,
            }
        }
    }

    /// Returns a slot to the list.
    pub fn push(&self, slot: u64) {
        self.stack.lock().push(slot);
    }

    /// Slots ever handed out (the bump counter).
    pub fn high_water(&self) -> u64 {
        self.next.load(Ordering::Relaxed)
    }

    /// Slots waiting in the stack.
    pub fn stacked(&self) -> usize {
        self.stack.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_slots_are_reused_before_new_ones() {
        let f = FreeList::new(10, vec![3]);
        assert_eq!(f.pop(100), Some(3));
        assert_eq!(f.pop(100), Some(10));
        f.push(7);
        assert_eq!(f.pop(100), Some(7));
        assert_eq!(f.pop(100), Some(11));
        assert_eq!(f.high_water(), 12);
        f.reset(5, vec![1]);
        assert_eq!(f.pop(100), Some(1));
        assert_eq!(f.pop(100), Some(5));
    }

    #[test]
    fn capacity_bounds_the_bump_counter() {
        let f = FreeList::new(2, Vec::new());
        assert_eq!(f.pop(3), Some(2));
        assert_eq!(f.pop(3), None);
        assert_eq!(f.pop(4), Some(3));
    }

    #[test]
    fn concurrent_pops_hand_out_distinct_slots() {
        let f = FreeList::new(0, Vec::new());
        let got: Vec<Vec<u64>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| s.spawn(|| (0..500).filter_map(|_| f.pop(u64::MAX)).collect()))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut all: Vec<u64> = got.into_iter().flatten().collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 2000);
    }
}
