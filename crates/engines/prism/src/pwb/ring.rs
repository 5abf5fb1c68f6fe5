//! Ring arithmetic of a PWB (PRISM §4.3; spec: `FORMAT.md` § PWB ring).
//!
//! A PWB is a ring of `size` bytes. Positions are *logical* byte offsets that only grow
//! (`head <= tail`, `tail - head <= size`); a logical position `x` lives at ring offset
//! `x % size`. `[head, tail)` holds the records not yet reclaimed, in append order. Only
//! `head` is persisted (in the PWB's descriptor line); `tail` is found again at recovery
//! from the records HSIT points to (§5.5), see [`recovered_tail`].
//!
//! Thread safety: a plain value; the PWB keeps it under its append lock.

use super::record::{HEADER_LEN, RECORD_ALIGN};

/// Where an append goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reservation {
    /// A pad record to write first, at this logical position, spanning this many bytes to
    /// the ring's end.
    pub pad: Option<(u64, u64)>,
    /// Logical position of the record.
    pub at: u64,
    /// The tail after the append.
    pub new_tail: u64,
}

/// The head and tail of one PWB ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ring {
    /// Ring size in bytes (a multiple of [`RECORD_ALIGN`]).
    pub size: u64,
    /// Oldest unreclaimed position.
    pub head: u64,
    /// Next append position.
    pub tail: u64,
}

impl Ring {
    /// Bytes in use.
    pub fn used(&self) -> u64 {
        self.tail - self.head
    }

    /// Ring offset of logical position `x`.
    pub fn offset(&self, x: u64) -> u64 {
        x % self.size
    }

    /// Where a record of `footprint` bytes would go, or `None` if the ring lacks the space
    /// now (it may have it after reclamation).
    pub fn reserve(&self, footprint: u64) -> Option<Reservation> {
        debug_assert!(footprint.is_multiple_of(RECORD_ALIGN) && footprint >= HEADER_LEN as u64);
        let to_end = self.size - self.offset(self.tail);
        let (pad, at) = if footprint <= to_end {
            (None, self.tail)
        } else {
            (Some((self.tail, to_end)), self.tail + to_end)
        };
        let new_tail = at + footprint;
        (new_tail - self.head <= self.size).then_some(Reservation { pad, at, new_tail })
    }

    /// True when a record of `footprint` bytes can never fit, whatever is reclaimed.
    pub fn never_fits(size: u64, footprint: u64) -> bool {
        // Worst case: the tail sits just past the start, so a pad of almost the whole ring
        // precedes the record. Requiring half the ring keeps that case possible.
        footprint > size / 2
    }

    /// Logical position, relative to `head`, of the record at ring offset `off`.
    pub fn distance_from_head(size: u64, head: u64, off: u64) -> u64 {
        (off + size - head % size) % size
    }
}

/// The tail to resume appending at after a crash: just past the furthest record (in ring
/// order from `head`) that HSIT still points to. `live_ends` are the ring-order distances
/// from `head` of the *ends* of those records.
pub fn recovered_tail(head: u64, live_ends: impl IntoIterator<Item = u64>) -> u64 {
    head + live_ends.into_iter().max().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_fits_before_the_end_without_a_pad() {
        let r = Ring {
            size: 256,
            head: 0,
            tail: 64,
        };
        assert_eq!(
            r.reserve(32),
            Some(Reservation {
                pad: None,
                at: 64,
                new_tail: 96
            })
        );
    }

    #[test]
    fn append_that_would_wrap_is_preceded_by_a_pad() {
        let r = Ring {
            size: 256,
            head: 200,
            tail: 240,
        };
        let res = r.reserve(32).unwrap();
        assert_eq!(res.pad, Some((240, 16)));
        assert_eq!(res.at, 256);
        assert_eq!(r.offset(res.at), 0);
        assert_eq!(res.new_tail, 288);
    }

    #[test]
    fn a_full_ring_refuses_until_the_head_moves() {
        let mut r = Ring {
            size: 256,
            head: 0,
            tail: 224,
        };
        assert!(r.reserve(32).is_some());
        assert!(r.reserve(48).is_none());
        r.head = 64;
        assert!(r.reserve(48).is_some());
    }

    #[test]
    fn the_pad_counts_against_free_space() {
        // 64 bytes free: 16 up to the end of the ring, 48 at its start. A 64-byte record
        // does not fit (it would need a 16-byte pad first); a 48-byte one does.
        let r = Ring {
            size: 256,
            head: 48 + 256,
            tail: 240 + 256,
        };
        assert_eq!(r.used(), 192);
        assert!(r.reserve(64).is_none());
        let res = r.reserve(48).unwrap();
        assert_eq!(res.pad, Some((496, 16)));
        assert_eq!(res.new_tail - r.head, 256);
    }

    #[test]
    fn distance_is_measured_in_ring_order() {
        assert_eq!(Ring::distance_from_head(256, 512 + 200, 200), 0);
        assert_eq!(Ring::distance_from_head(256, 200, 16), 72);
        assert_eq!(Ring::distance_from_head(256, 200, 240), 40);
    }

    #[test]
    fn recovered_tail_is_past_the_furthest_live_record() {
        assert_eq!(recovered_tail(1000, []), 1000);
        assert_eq!(recovered_tail(1000, [32, 96, 48]), 1096);
    }

    #[test]
    fn huge_records_never_fit() {
        assert!(Ring::never_fits(256, 144));
        assert!(!Ring::never_fits(256, 128));
    }
}
