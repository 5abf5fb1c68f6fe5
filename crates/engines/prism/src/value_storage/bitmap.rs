//! The DRAM validity bitmap of one chunk, with its live-value and live-byte counts
//! (PRISM §5.1: "each chunk has a validity bitmap in DRAM, where each bit represents
//! whether the corresponding value is valid").
//!
//! One bit covers [`BITMAP_UNIT`] bytes of the chunk; a record's bit is the unit its first
//! byte falls in. Records are at least one unit long, so no two records share a bit.
//!
//! Invariants: `live_values` is the number of set bits and `live_bytes` the sum of the
//! footprints of the records whose bits are set, provided every clear names the footprint
//! its set named (the footprint comes from the same [`super::ValueLocation`]). Setting a
//! set bit or clearing a clear one changes nothing (both are idempotent), so a location
//! invalidated twice does not corrupt the counts.
//!
//! Thread safety: lock-free; bits and counts are atomics updated with `fetch_or` /
//! `fetch_and` so concurrent set/clear of different bits never lose updates. The counts
//! may lag the bits by one operation as seen from another thread (they are read for GC
//! policy and statistics, where that is harmless); [`ChunkBitmap::reset`] is called only
//! when no one else touches the chunk.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::chunk_format::BITMAP_UNIT;

/// The validity bitmap of one chunk.
#[derive(Debug)]
pub struct ChunkBitmap {
    words: Box<[AtomicU64]>,
    live_values: AtomicU32,
    live_bytes: AtomicU64,
}

impl ChunkBitmap {
    /// An all-clear bitmap for a chunk of `chunk_size` bytes.
    pub fn new(chunk_size: u32) -> Self {
        let units = (chunk_size as usize).div_ceil(BITMAP_UNIT);
        ChunkBitmap {
            words: (0..units.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            live_values: AtomicU32::new(0),
            live_bytes: AtomicU64::new(0),
        }
    }

    fn bit(&self, offset: u32) -> Option<(&AtomicU64, u64)> {
        let unit = offset as usize / BITMAP_UNIT;
        Some((self.words.get(unit / 64)?, 1u64 << (unit % 64)))
    }

    /// Marks the record at `offset` (of `footprint` bytes) valid; true if it was not.
    pub fn set(&self, offset: u32, footprint: u32) -> bool {
        let Some((w, b)) = self.bit(offset) else {
            return false;
        };
        let was = w.fetch_or(b, Ordering::AcqRel) & b != 0;
        if !was {
            self.live_values.fetch_add(1, Ordering::AcqRel);
            self.live_bytes
                .fetch_add(u64::from(footprint), Ordering::AcqRel);
        }
        !was
    }

    /// Marks the record at `offset` invalid; true if it was valid.
    pub fn clear(&self, offset: u32, footprint: u32) -> bool {
        let Some((w, b)) = self.bit(offset) else {
            return false;
        };
        let was = w.fetch_and(!b, Ordering::AcqRel) & b != 0;
        if was {
            self.live_values.fetch_sub(1, Ordering::AcqRel);
            self.live_bytes
                .fetch_sub(u64::from(footprint), Ordering::AcqRel);
        }
        was
    }

    /// True if the record at `offset` is valid.
    pub fn is_set(&self, offset: u32) -> bool {
        self.bit(offset)
            .is_some_and(|(w, b)| w.load(Ordering::Acquire) & b != 0)
    }

    /// The number of valid records.
    pub fn live_values(&self) -> u32 {
        self.live_values.load(Ordering::Acquire)
    }

    /// The footprint bytes of valid records.
    pub fn live_bytes(&self) -> u64 {
        self.live_bytes.load(Ordering::Acquire)
    }

    /// Clears every bit (the chunk is being freed: nobody references it any more).
    pub fn reset(&self) {
        for w in self.words.iter() {
            w.store(0, Ordering::Release);
        }
        self.live_values.store(0, Ordering::Release);
        self.live_bytes.store(0, Ordering::Release);
    }

    /// DRAM held by this bitmap.
    pub fn dram_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.words.len() * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_and_clear_are_idempotent_and_keep_counts() {
        let b = ChunkBitmap::new(8192);
        assert!(b.set(64, 80));
        assert!(!b.set(64, 80));
        assert!(b.set(144, 64));
        assert_eq!((b.live_values(), b.live_bytes()), (2, 144));
        assert!(b.clear(64, 80));
        assert!(!b.clear(64, 80));
        assert!(b.is_set(144) && !b.is_set(64));
        assert_eq!((b.live_values(), b.live_bytes()), (1, 64));
        b.reset();
        assert_eq!((b.live_values(), b.live_bytes()), (0, 0));
        assert!(!b.is_set(144));
    }

    #[test]
    fn offsets_past_the_chunk_are_ignored_not_a_panic() {
        let b = ChunkBitmap::new(8192);
        assert!(!b.set(1 << 30, 64));
        assert!(!b.clear(1 << 30, 64));
        assert_eq!(b.live_values(), 0);
    }

    #[test]
    fn concurrent_sets_and_clears_of_distinct_bits_keep_exact_counts() {
        let b = ChunkBitmap::new(512 * 1024);
        std::thread::scope(|s| {
            for t in 0..4u32 {
                let b = &b;
                s.spawn(move || {
                    for i in 0..2048u32 {
                        let off = (i * 4 + t) * 64;
                        b.set(off, 64);
                        if i % 2 == 0 {
                            b.clear(off, 64);
                        }
                    }
                });
            }
        });
        assert_eq!(b.live_values(), 4 * 1024);
        assert_eq!(b.live_bytes(), 4 * 1024 * 64);
    }
}
