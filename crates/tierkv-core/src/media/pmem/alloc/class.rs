//! Size classes and the layout of a slab chunk (`../FORMAT.md` § Slab chunks).
//!
//! Classes go from 16 bytes to `chunk_size / 8` with two classes per power of two
//! (`2^k` and `1.5 × 2^k`: 16, 24, 32, 48, 64, 96, ...), so internal fragmentation stays
//! under 50% (33% past 16 bytes), and every class is a multiple of 8 (objects are 8-byte
//! aligned, so they can hold atomic words). A request larger than the largest class takes a
//! run of whole chunks.
//!
//! A slab chunk of class `c` holds its allocation bitmap first, then its objects:
//!
//! ```text
//! chunk_off                    bitmap: ceil(capacity / 64) u64 words, bit i = object i
//!                              allocated; zero-padded to a 64-byte line
//! chunk_off + bitmap_bytes     object 0, object 1, ... object capacity-1 (size bytes each)
//! ```
//! `capacity` is the largest count for which bitmap and objects fit in the chunk. Bits at
//! or past `capacity` (and padding words) are always zero.
//!
//! Thread safety: immutable after construction.

/// The smallest size class.
pub const MIN_CLASS_SIZE: u64 = 16;
/// The largest class is `chunk_size / MAX_CLASS_DIVISOR`.
pub const MAX_CLASS_DIVISOR: u64 = 8;

/// Where things are in a slab chunk of one size class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlabGeometry {
    /// Object size in bytes (a multiple of 8).
    pub size: u64,
    /// Objects per chunk.
    pub capacity: u32,
    /// Bytes of the bitmap area (a multiple of 64) before object 0.
    pub bitmap_bytes: u64,
}

impl SlabGeometry {
    fn for_size(chunk_size: u64, size: u64) -> SlabGeometry {
        let bitmap_bytes = |n: u64| n.div_ceil(64) * 8;
        let line_bytes = |n: u64| bitmap_bytes(n).div_ceil(64) * 64;
        let mut n = chunk_size / size;
        while n > 0 && line_bytes(n) + n * size > chunk_size {
            n -= 1;
        }
        SlabGeometry {
            size,
            capacity: u32::try_from(n).unwrap_or(u32::MAX),
            bitmap_bytes: line_bytes(n),
        }
    }

    /// Number of u64 words of the bitmap area (padding included).
    pub fn bitmap_words(&self) -> usize {
        (self.bitmap_bytes / 8) as usize
    }

    /// Offset of object `i` from the start of its chunk.
    pub fn object_rel(&self, i: u32) -> u64 {
        self.bitmap_bytes + u64::from(i) * self.size
    }

    /// The object starting `rel` bytes into the chunk, if one does.
    pub fn object_at(&self, rel: u64) -> Option<u32> {
        let r = rel.checked_sub(self.bitmap_bytes)?;
        if r % self.size != 0 {
            return None;
        }
        u32::try_from(r / self.size)
            .ok()
            .filter(|i| *i < self.capacity)
    }
}

/// The size classes of one chunk size.
#[derive(Clone, Debug)]
pub struct SizeClasses {
    geoms: Vec<SlabGeometry>,
}

impl SizeClasses {
    /// The classes for `chunk_size` (a power of two >= 4096).
    pub fn new(chunk_size: u64) -> SizeClasses {
        let max = chunk_size / MAX_CLASS_DIVISOR;
        let mut geoms = Vec::new();
        let mut p = MIN_CLASS_SIZE;
        while p <= max {
            geoms.push(SlabGeometry::for_size(chunk_size, p));
            let mid = p + p / 2;
            if mid <= max {
                geoms.push(SlabGeometry::for_size(chunk_size, mid));
            }
            p *= 2;
        }
        SizeClasses { geoms }
    }

    /// The smallest class that holds `size` bytes, if any.
    pub fn class_for(&self, size: u64) -> Option<u8> {
        let i = self.geoms.partition_point(|g| g.size < size);
        (i < self.geoms.len())
            .then(|| u8::try_from(i).ok())
            .flatten()
    }

    /// The geometry of class `c`.
    pub fn get(&self, c: u8) -> Option<&SlabGeometry> {
        self.geoms.get(usize::from(c))
    }

    /// Number of classes.
    pub fn count(&self) -> usize {
        self.geoms.len()
    }

    /// The largest size served from slabs.
    pub fn max_small(&self) -> u64 {
        self.geoms.last().map_or(0, |g| g.size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_increasing_multiples_of_eight_up_to_an_eighth() {
        for shift in 12..=24 {
            let chunk = 1u64 << shift;
            let c = SizeClasses::new(chunk);
            assert_eq!(c.get(0).unwrap().size, 16);
            assert_eq!(c.max_small(), chunk / 8);
            let sizes: Vec<u64> = (0..c.count())
                .map(|i| c.get(i as u8).unwrap().size)
                .collect();
            assert!(
                sizes
                    .windows(2)
                    .all(|w| w[0] < w[1] && w[1] <= w[0] * 3 / 2 + 8)
            );
            assert!(sizes.iter().all(|s| s % 8 == 0));
        }
        let c = SizeClasses::new(256 << 10);
        let first: Vec<u64> = (0..6).map(|i| c.get(i).unwrap().size).collect();
        assert_eq!(first, [16, 24, 32, 48, 64, 96]);
    }

    #[test]
    fn every_slab_fits_its_chunk_and_is_full() {
        for chunk in [4096u64, 64 << 10, 256 << 10] {
            let c = SizeClasses::new(chunk);
            for i in 0..c.count() {
                let g = c.get(i as u8).unwrap();
                assert!(g.capacity >= 7, "{g:?}");
                assert!(g.object_rel(g.capacity) <= chunk, "{g:?}");
                assert!(u64::from(g.capacity) <= g.bitmap_bytes * 8);
                assert_eq!(g.bitmap_bytes % 64, 0);
                // One more object would not fit.
                let more = SlabGeometry::for_size(chunk, g.size);
                assert_eq!(more.capacity, g.capacity);
                let bigger_bitmap = (u64::from(g.capacity) + 1).div_ceil(512) * 64;
                assert!(bigger_bitmap + (u64::from(g.capacity) + 1) * g.size > chunk);
            }
        }
    }

    #[test]
    fn class_for_picks_the_smallest_fit() {
        let c = SizeClasses::new(256 << 10);
        assert_eq!(c.class_for(1), Some(0));
        assert_eq!(c.class_for(16), Some(0));
        assert_eq!(c.class_for(17), Some(1));
        assert_eq!(c.get(c.class_for(1000).unwrap()).unwrap().size, 1024);
        assert_eq!(c.class_for(32 << 10), Some((c.count() - 1) as u8));
        assert_eq!(c.class_for((32 << 10) + 1), None);
    }

    #[test]
    fn object_at_accepts_only_object_starts() {
        let g = SizeClasses::new(64 << 10).get(1).copied().unwrap();
        assert_eq!(g.object_at(g.object_rel(5)), Some(5));
        assert_eq!(g.object_at(g.object_rel(5) + 8), None);
        assert_eq!(g.object_at(0), None);
        assert_eq!(g.object_at(g.object_rel(g.capacity)), None);
    }
}
