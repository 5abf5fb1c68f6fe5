//! A *pages array* (HeterMM §4.2 Eq. 1 and §5.1 Fig. 6): logical page `p` lives in slot
//! `p mod P`, which records which physical page holds it. The write region has one ring
//! and the read cache another (Fig. 6d: "a similar but separate pages array").
//!
//! A slot is one word, `tag(p) << 24 | physical` (0 = empty), so a reader can check that
//! the slot still holds the page it asked for; with epochs that check never fails, and when
//! it does the caller reports corruption instead of reading another page's bytes. Logical
//! pages are handed out in increasing order and freed oldest first, so at most `P` are
//! mapped at once and their slots never collide.
//!
//! The tag is the page's lap of the ring, `(p / P) mod (2^40 - 1) + 1`: the slot index
//! already says `p mod P`, so the lap tells the page apart from every other page of its
//! slot, and it wraps instead of running out. (Until issue 22 the tag was `p + 1`, whose
//! top bits were shifted out past page 2^40: pages that far on were never found again. A
//! page number is any u64 now.) Two pages of one slot with the same tag are 2^40 − 1 laps
//! apart; a reader's check is done under an epoch, and a slot is reused only after the
//! epochs showed that no reader still holds its old page, so the reader never sees even the
//! next lap in the slot, let alone that one.
//!
//! Thread safety: `Send + Sync`; slots are atomics.

use std::sync::atomic::{AtomicU64, Ordering};

use tierkv_core::{Error, Result, Tier};

const PHYS_BITS: u32 = 24;
const PHYS_MASK: u64 = (1 << PHYS_BITS) - 1;
/// Laps a tag tells apart: tags are `1..=LAPS`, 40 bits, never 0 (the empty slot).
const LAPS: u64 = (1 << (64 - PHYS_BITS)) - 1;
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

    /// The tag of `page` in its slot: its lap of the ring, wrapped, plus 1.
    fn tag(&self, page: u64) -> u64 {
        (page / self.slots.len() as u64) % LAPS + 1
    }

    /// Maps logical page `page` to physical page `phys`. Its slot must be empty (the page
    /// `P` before it has been freed).
    pub fn map(&self, page: u64, phys: u32) -> Result<()> {
        let w = self.tag(page) << PHYS_BITS | u64::from(phys) & PHYS_MASK;
        self.slot(page)
            .compare_exchange(0, w, Ordering::SeqCst, Ordering::SeqCst)
            .map(|_| ())
            .map_err(|old| {
                Error::corruption(
                    Tier::Dram,
                    page,
                    format!(
                        "pages array slot of page {page} still holds page {}",
                        self.page_of(page, old)
                    ),
                )
            })
    }

    /// The physical page holding logical page `page`, if it is mapped.
    pub fn lookup(&self, page: u64) -> Option<u32> {
        let w = self.slot(page).load(Ordering::Acquire);
        (w != 0 && (w >> PHYS_BITS) == self.tag(page)).then_some((w & PHYS_MASK) as u32)
    }

    /// The page that slot word `w` of `page`'s slot names, taken to be in the lap nearest
    /// below `page`'s (for error messages).
    fn page_of(&self, page: u64, w: u64) -> u64 {
        let len = self.slots.len() as u64;
        let lap = (w >> PHYS_BITS).wrapping_sub(1);
        let ours = page / len;
        let back = (ours % LAPS + LAPS - lap % LAPS) % LAPS;
        ours.wrapping_sub(back)
            .wrapping_mul(len)
            .wrapping_add(page % len)
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

    #[test]
    fn page_numbers_past_2_to_the_40_are_found() {
        // The old tag `p + 1` lost its top bits past 2^40: these were never found again.
        for len in [1usize, 3, 4, 4096] {
            let r = Ring::new(len);
            for p in [
                (1u64 << 40) - 1,
                1 << 40,
                (1 << 40) + 1,
                1 << 55,
                u64::MAX / 2,
                u64::MAX - 3 * 4096,
            ] {
                r.map(p, 7).unwrap();
                assert_eq!(r.lookup(p), Some(7), "len {len} page {p}");
                for other in [p.wrapping_sub(len as u64), p.wrapping_add(len as u64)] {
                    assert_eq!(r.lookup(other), None, "len {len}: {other} is not {p}");
                }
                let msg = r
                    .map(p.wrapping_add(len as u64), 1)
                    .unwrap_err()
                    .to_string();
                assert!(msg.contains(&format!("still holds page {p}")), "{msg}");
                assert_eq!(r.unmap(p), Some(7));
            }
        }
    }
}
