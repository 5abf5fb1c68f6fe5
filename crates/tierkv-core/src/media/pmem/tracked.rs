//! Tracked mode (DESIGN §4, STYLE §7 "Crash"): a shadow *persisted image* beside the live
//! mapping, and the crash images a power failure could leave.
//!
//! - The shadow holds, for every word of the pool, its content as of the last `persist`
//!   that covered it. At open it is a copy of the file (whatever is in the file counts as
//!   persisted). `persist(off, len)` copies every 64-byte line it covers, whole, from the
//!   live mapping into the shadow — as `clwb` writes back whole lines, neighbours
//!   included.
//! - A *crash image* is what the media could hold after a power failure now: each 64-byte
//!   line independently either its persisted content or its live content (an unpersisted
//!   line may have been evicted from the cache early). With
//!   [`CrashImageOptions::tear_words`] each aligned 8-byte word is chosen independently
//!   instead (no store of 8 aligned bytes or fewer tears; larger ones may).
//!   The choices come from a ChaCha8 generator seeded with the caller's seed, so an image
//!   is reproducible from (pool state, seed, options).
//!
//! # Consistency of a snapshot taken while other threads run
//! Every mutation of a Tracked pool (`write`, `fill`, the atomic word operations,
//! `persist`) holds the shared side of [`Shadow::gate`] for its duration; building a crash
//! image holds the exclusive side. So an image is taken at one instant between mutations:
//! each call is wholly before or wholly after it. In particular a `persist` that returned
//! before the image was started (as observed through any happens-before edge, e.g. the
//! lock of a test's log of acknowledged operations) is wholly in the shadow, and a
//! `persist` still running is either wholly in or wholly out, which is a legal
//! crash state because nothing was acknowledged for it yet. What is *not* modelled:
//! reads through slices (they do not change the media), and the partial progress of a
//! single multi-line `write` (but every line it touched is independently old or new in
//! the image unless persisted, which covers the same crash states at line granularity).
//! The cost is a shared lock per mutation, paid only in this test mode.
//!
//! Thread safety: `Shadow` is `Send + Sync`; the shadow's words are atomics; the gate
//! orders image building against mutations as described above.

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{RwLock, RwLockReadGuard};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::mapping::{Mapping, memory_bytes};
use super::persist::LINE;

const WORDS_PER_LINE: usize = LINE / 8;

/// How a crash image is built.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CrashImageOptions {
    /// Choose persisted-or-live per aligned 8-byte word instead of per 64-byte line.
    pub tear_words: bool,
}

impl CrashImageOptions {
    /// Whole lines: each 64-byte line is its persisted or its live content.
    pub fn lines() -> Self {
        CrashImageOptions { tear_words: false }
    }
    /// Torn lines: each 8-byte word is its persisted or its live content.
    pub fn torn_words() -> Self {
        CrashImageOptions { tear_words: true }
    }
}

/// The persisted image of a Tracked pool.
pub(super) struct Shadow {
    words: Box<[AtomicU64]>,
    gate: RwLock<()>,
}

impl Shadow {
    /// A shadow equal to the current content of `map` (everything counts as persisted).
    pub(super) fn of(map: &Mapping) -> Shadow {
        let words = (0..map.len() / 8)
            .map(|i| AtomicU64::new(live_word(map, i)))
            .collect();
        Shadow {
            words,
            gate: RwLock::new(()),
        }
    }

    /// Held (shared) by every mutation of the pool; see the module doc.
    pub(super) fn gate(&self) -> RwLockReadGuard<'_, ()> {
        self.gate.read()
    }

    /// Copies the lines covering `[off, off + len)` from `map` into the shadow. The caller
    /// holds [`Shadow::gate`] and has checked the range.
    pub(super) fn persist_lines(&self, map: &Mapping, off: usize, len: usize) {
        let first = off / LINE * WORDS_PER_LINE;
        let end = off.saturating_add(len).div_ceil(LINE) * WORDS_PER_LINE;
        for i in first..end.min(self.words.len()) {
            if let Some(w) = self.words.get(i) {
                w.store(live_word(map, i), Ordering::Relaxed);
            }
        }
    }

    /// The image a power failure could leave now (see the module doc).
    pub(super) fn crash_image(&self, map: &Mapping, seed: u64, opts: CrashImageOptions) -> Vec<u8> {
        let _frozen = self.gate.write();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut image = Vec::with_capacity(self.words.len() * 8);
        let mut line = [0u64; WORDS_PER_LINE];
        for (l, persisted) in self.words.chunks(WORDS_PER_LINE).enumerate() {
            let mut differs = false;
            for (j, slot) in line.iter_mut().enumerate().take(persisted.len()) {
                *slot = live_word(map, l * WORDS_PER_LINE + j);
                differs |= persisted
                    .get(j)
                    .is_some_and(|p| p.load(Ordering::Relaxed) != *slot);
            }
            // Lines whose two versions agree need no choice (and draw no random bits).
            let take_live_line = differs && !opts.tear_words && rng.random_bool(0.5);
            for (j, p) in persisted.iter().enumerate() {
                let persisted_w = p.load(Ordering::Relaxed);
                let live_w = line.get(j).copied().unwrap_or(persisted_w);
                let take_live = if opts.tear_words {
                    persisted_w != live_w && rng.random_bool(0.5)
                } else {
                    take_live_line
                };
                let w = if take_live { live_w } else { persisted_w };
                image.extend_from_slice(&memory_bytes(w));
            }
        }
        image
    }
}

/// The live word `i` of the mapping (0 if out of range, which callers never ask for).
fn live_word(map: &Mapping, i: usize) -> u64 {
    map.word(i * 8).map_or(0, |w| w.load(Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::super::mapping::{mapped_temp_file as mapped, word_from_memory_bytes};
    use super::*;

    fn put(m: &Mapping, off: usize, bytes: [u8; 8]) {
        m.word(off)
            .unwrap()
            .store(word_from_memory_bytes(bytes), Ordering::Relaxed);
    }

    #[test]
    fn persist_copies_whole_lines_including_neighbours() {
        let (_f, m) = mapped(4096);
        let s = Shadow::of(&m);
        put(&m, 64, *b"neighbor");
        put(&m, 120, *b"target!!");
        put(&m, 128, *b"nextline");
        s.persist_lines(&m, 120, 8);
        for seed in 0..64 {
            let img = s.crash_image(&m, seed, CrashImageOptions::torn_words());
            assert_eq!(&img[64..72], b"neighbor");
            assert_eq!(&img[120..128], b"target!!");
        }
        let images: Vec<_> = (0..64)
            .map(|seed| s.crash_image(&m, seed, CrashImageOptions::lines())[128..136].to_vec())
            .collect();
        assert!(images.iter().any(|b| b == b"nextline"));
        assert!(images.iter().any(|b| b == &[0u8; 8]));
    }

    #[test]
    fn same_seed_same_image() {
        let (_f, m) = mapped(8192);
        let s = Shadow::of(&m);
        for i in 0..100 {
            put(&m, i * 80 / 8 * 8, (i as u64).to_le_bytes());
        }
        let a = s.crash_image(&m, 7, CrashImageOptions::torn_words());
        let b = s.crash_image(&m, 7, CrashImageOptions::torn_words());
        let c = s.crash_image(&m, 8, CrashImageOptions::torn_words());
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.len(), 8192);
    }

    #[test]
    fn line_mode_never_splits_a_line() {
        let (_f, m) = mapped(4096);
        let s = Shadow::of(&m);
        for w in 0..8 {
            put(&m, 256 + w * 8, [0xAB; 8]);
        }
        for seed in 0..200 {
            let img = s.crash_image(&m, seed, CrashImageOptions::lines());
            let line = &img[256..320];
            assert!(line.iter().all(|b| *b == 0) || line.iter().all(|b| *b == 0xAB));
        }
    }

    #[test]
    fn torn_mode_splits_some_line() {
        let (_f, m) = mapped(4096);
        let s = Shadow::of(&m);
        for w in 0..8 {
            put(&m, 256 + w * 8, [0xAB; 8]);
        }
        let torn = (0..200).any(|seed| {
            let img = s.crash_image(&m, seed, CrashImageOptions::torn_words());
            let line = &img[256..320];
            line.contains(&0) && line.contains(&0xAB)
        });
        assert!(torn);
    }
}
