//! The DRAM mirror of one chunk's persistent state, rebuilt at open and kept equal to the
//! live (not necessarily persisted) metadata by every operation; `check` compares them.
//!
//! Thread safety: each `ChunkDram` sits behind its chunk's mutex in the allocator.

use super::class::SlabGeometry;

/// The DRAM state of one chunk.
#[derive(Debug)]
pub(super) enum ChunkDram {
    /// Free (in the free-chunk set, or in transit to an allocation).
    Free,
    /// The head of a run.
    Run {
        /// The run's tag.
        tag: u32,
        /// Chunks in the run.
        len: u32,
    },
    /// A continuation chunk of a run.
    Cont,
    /// A slab.
    Slab(SlabDram),
}

/// The DRAM state of a slab chunk: its bitmap and how many objects are allocated.
#[derive(Debug)]
pub(super) struct SlabDram {
    /// Size-class index.
    pub(super) class: u8,
    /// Objects allocated (= bits set).
    pub(super) used: u32,
    /// Objects in the chunk.
    pub(super) capacity: u32,
    /// The allocation bitmap (bit i of word w = object 64 w + i), `ceil(capacity / 64)` words.
    bits: Vec<u64>,
    /// Where the next search for a free slot starts.
    next_word: usize,
    /// Being evacuated (`evacuate.rs`): no allocation lands in it, it is in no class's
    /// free-slot set, and it goes back to the free chunks when its last object is freed.
    /// DRAM only: after a crash it is an ordinary slab again.
    pub(super) evacuating: bool,
}

impl SlabDram {
    /// An empty slab of class `class`.
    pub(super) fn empty(class: u8, g: &SlabGeometry) -> SlabDram {
        SlabDram {
            class,
            used: 0,
            capacity: g.capacity,
            bits: vec![0; words_for(g.capacity)],
            next_word: 0,
            evacuating: false,
        }
    }

    /// A slab with the given bitmap words; `None` if a bit at or past the capacity is set.
    pub(super) fn from_bits(class: u8, g: &SlabGeometry, words: &[u64]) -> Option<SlabDram> {
        if first_bit_beyond_capacity(words, g.capacity).is_some() {
            return None;
        }
        let n = words_for(g.capacity);
        let bits: Vec<u64> = words
            .iter()
            .copied()
            .take(n)
            .chain(std::iter::repeat(0))
            .take(n)
            .collect();
        let used = bits.iter().map(|w| w.count_ones()).sum();
        Some(SlabDram {
            class,
            used,
            capacity: g.capacity,
            bits,
            next_word: 0,
            evacuating: false,
        })
    }

    /// Marks a free object allocated and returns its index; `None` if the slab is full.
    pub(super) fn take(&mut self) -> Option<u32> {
        let n = self.bits.len();
        for step in 0..n {
            let wi = (self.next_word + step) % n;
            let mask = self.valid_mask(wi);
            let word = self.bits.get_mut(wi)?;
            let free = !*word & mask;
            if free != 0 {
                let b = free.trailing_zeros();
                *word |= 1 << b;
                self.used += 1;
                self.next_word = wi;
                return u32::try_from(wi * 64).ok().map(|base| base + b);
            }
        }
        None
    }

    /// Whether object `i` is allocated.
    pub(super) fn is_set(&self, i: u32) -> bool {
        let (wi, bit) = split(i);
        self.bits.get(wi).is_some_and(|w| w & bit != 0)
    }

    /// Marks object `i` free (it must be allocated).
    pub(super) fn clear(&mut self, i: u32) {
        let (wi, bit) = split(i);
        if let Some(w) = self.bits.get_mut(wi).filter(|w| **w & bit != 0) {
            *w &= !bit;
            self.used -= 1;
            self.next_word = wi;
        }
    }

    /// The bitmap words.
    pub(super) fn words(&self) -> &[u64] {
        &self.bits
    }

    /// Whether every object is allocated.
    pub(super) fn is_full(&self) -> bool {
        self.used == self.capacity
    }

    /// Whether it belongs in its class's free-slot set: a free slot, not being evacuated.
    pub(super) fn offers_slots(&self) -> bool {
        !self.is_full() && !self.evacuating
    }

    fn valid_mask(&self, wi: usize) -> u64 {
        let valid = (self.capacity as usize).saturating_sub(wi * 64);
        if valid >= 64 {
            u64::MAX
        } else {
            (1u64 << valid) - 1
        }
    }
}

/// The word index and bit mask of object `i`.
pub(super) fn split(i: u32) -> (usize, u64) {
    ((i / 64) as usize, 1u64 << (i % 64))
}

/// The first set bit at or past `capacity` in `words`, if any (padding included).
pub(super) fn first_bit_beyond_capacity(words: &[u64], capacity: u32) -> Option<u64> {
    words.iter().enumerate().find_map(|(wi, w)| {
        let first_invalid = u64::from(capacity).saturating_sub(wi as u64 * 64);
        let beyond = if first_invalid >= 64 {
            0
        } else {
            *w & !((1u64 << first_invalid) - 1)
        };
        (beyond != 0).then(|| wi as u64 * 64 + u64::from(beyond.trailing_zeros()))
    })
}

fn words_for(capacity: u32) -> usize {
    (capacity as usize).div_ceil(64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geom(capacity: u32) -> SlabGeometry {
        SlabGeometry {
            size: 16,
            capacity,
            bitmap_bytes: u64::from(capacity).div_ceil(512) * 64,
        }
    }

    #[test]
    fn take_fills_exactly_to_capacity() {
        let mut s = SlabDram::empty(0, &geom(70));
        let mut got: Vec<u32> = std::iter::from_fn(|| s.take()).collect();
        got.sort_unstable();
        assert_eq!(got, (0..70).collect::<Vec<_>>());
        assert!(s.is_full());
        s.clear(69);
        s.clear(3);
        assert_eq!(s.used, 68);
        let mut again = vec![s.take().unwrap(), s.take().unwrap()];
        again.sort_unstable();
        assert_eq!(again, [3, 69]);
        assert_eq!(s.take(), None);
    }

    #[test]
    fn clear_of_a_free_object_changes_nothing() {
        let mut s = SlabDram::empty(0, &geom(10));
        s.clear(4);
        assert_eq!(s.used, 0);
        assert!(!s.is_set(4));
    }

    #[test]
    fn bits_beyond_capacity_are_found() {
        assert_eq!(first_bit_beyond_capacity(&[u64::MAX, 0b11], 66), None);
        assert_eq!(first_bit_beyond_capacity(&[u64::MAX, 0b111], 66), Some(66));
        assert_eq!(first_bit_beyond_capacity(&[0, 0, 1 << 5], 100), Some(133));
        assert!(SlabDram::from_bits(0, &geom(66), &[0, 0b100]).is_none());
        let s = SlabDram::from_bits(0, &geom(66), &[0b1011, 0b10, 0]).unwrap();
        assert_eq!(s.used, 4);
        assert!(s.is_set(65) && !s.is_set(2));
    }
}
