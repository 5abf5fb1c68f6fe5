//! A *pages array* (HeterMM §4.2 Eq. 1 and §5.1 Fig. 6): logical page `p` lives in slot
//! `p mod P`, which records which physical page holds it. The write region has one ring
//! and the read cache another (Fig. 6d: "a similar but separate pages array").
//!
//! A slot is one word, `(p + 1) << 24 | physical` (0 = empty), so a reader can check that
//! the slot still holds the page it asked for; with epochs that check never fails, and when
//! it does the caller reports corruption instead of reading another page's bytes. Logical
//! pages are handed out in increasing order and freed oldest first, so at most `P` are
//! mapped at once and their slots never collide.
//!
//! Thread safety: `Send + Sync`; slots are atomics.

use std::sync::atomic::{AtomicU64, Ordering};

use tierkv_core::{Error, Result, Tier};

const PHYS_BITS: u32 = 24;
const PHYS_MASK: u64 = (1 << PHYS_BITS) - 1;
/// The most physical pages a ring can name.
pub const MAX_PAGES: usize = 1 << PHYS_BITS;

/// A pages array.
pub struct Ring {
    slots: Box<[AtomicU64]>,
}

impl Ring {
    /// A ring of `len` empty slots.
    pub fn new(len: usize) -> Ring {
        Ring {
            slots: (0..len.max(1)).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn slot(&self, page: u64) -> &AtomicU64 {
        &self.slots[(page % self.slots.len() as u64) as usize]
    }

    /// Maps logical page `page` to physical page `phys`. Its slot must be empty (the page
    /// `P` before it has been freed).
    pub fn map(&self, page: u64, phys: u32) -> Result<()> {
        let w = (page + 1) << PHYS_BITS | u64::from(phys) & PHYS_MASK;
        self.slot(page)
            .compare_exchange(0, w, Ordering::SeqCst, Ordering::SeqCst)
            .map(|_| ())
            .map_err(|old| {
                Error::corruption(
                    Tier::Dram,
                    page,
                    format!(
                        "pages array slot of page {page} still holds page {}",
                        (old >> PHYS_BITS).wrapping_sub(1)
                    ),
                )
            })
    }

    /// The physical page holding logical page `page`, if it is mapped.
    pub fn lookup(&self, page: u64) -> Option<u32> {
        let w = self.slot(page).load(Ordering::Acquire);
        (w != 0 && (w >> PHYS_BITS) == page + 1).then_some((w & PHYS_MASK) as u32)
    }

    /// Unmaps logical page `page`; returns its physical page.
    pub fn unmap(&self, page: u64) -> Option<u32> {
        let phys = self.lookup(page)?;
        self.slot(page).store(0, Ordering::SeqCst);
        Some(phys)
    }

    /// Slots (P).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// True for a ring of no slots (never: rings have at least one).
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_map_to_their_slot_and_collisions_are_refused() {
        let r = Ring::new(4);
        r.map(5, 2).unwrap();
        assert_eq!(r.lookup(5), Some(2));
        assert_eq!(r.lookup(1), None, "same slot, other page");
        assert!(r.map(9, 3).is_err(), "slot of 9 is held by 5");
        assert_eq!(r.unmap(5), Some(2));
        r.map(9, 3).unwrap();
        assert_eq!(r.lookup(9), Some(3));
        assert_eq!(r.unmap(5), None);
    }
}
