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
//! - Only *dirty* lines (stored to since their last persist) can differ from the shadow,
//!   so every mutation marks its lines dirty and persist clears them; an image is a copy
//!   of the live mapping in which each dirty line (or word) is replaced by its persisted
//!   content with probability 1/2. A line marked dirty whose content equals its persisted
//!   content (a race between a store and a copy) makes no difference to the image.
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
//! # Copying a line is atomic
//! `persist` copies a line word by word, and other threads may store to the same line (and
//! persist it) meanwhile. Without care, a slow copy could read an old word, and store it into
//! the shadow after a newer copy of the same line finished — undoing a persist that had
//! returned. So each line is copied under one of [`STRIPES`] striped locks (by line
//! number): copies of one line are serialized, each reads the live words after the previous
//! one stored its own. A thread's store that follows its own persist of the same line can
//! therefore never appear in a shadow line whose other words predate that persist.
//!
//! Thread safety: `Shadow` is `Send + Sync`; the shadow's words are atomics; the gate
//! orders image building against mutations as described above.

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Mutex, RwLock, RwLockReadGuard};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::mapping::{Mapping, memory_bytes, word_from_memory_bytes};
use super::persist::LINE;

const WORDS_PER_LINE: usize = LINE / 8;
/// Locks serializing copies of the same line (by line number modulo this).
const STRIPES: usize = 64;

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
    /// The persisted content, word by word.
    words: Box<[AtomicU64]>,
    /// One bit per line: set when the line may differ from its persisted content.
    dirty: Box<[AtomicU64]>,
    gate: RwLock<()>,
    line_locks: Box<[Mutex<()>]>,
}

impl Shadow {
    /// A shadow equal to the current content of `map` (everything counts as persisted).
    /// Called before the mapping is shared, so nothing writes it meanwhile.
    pub(super) fn of(map: &Mapping) -> Shadow {
        let bytes = map.slice(0, map.len()).unwrap_or_default();
        let words = bytes
            .chunks_exact(8)
            .map(|c| {
                let mut b = [0u8; 8];
                b.copy_from_slice(c);
                AtomicU64::new(word_from_memory_bytes(b))
            })
            .collect();
        let lines = map.len().div_ceil(LINE);
        Shadow {
            words,
            dirty: (0..lines.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            gate: RwLock::new(()),
            line_locks: (0..STRIPES).map(|_| Mutex::new(())).collect(),
        }
    }

    /// Held (shared) by every mutation of the pool; see the module doc.
    pub(super) fn gate(&self) -> RwLockReadGuard<'_, ()> {
        self.gate.read()
    }

    /// Records that `[off, off + len)` was just stored to (called after the stores,
    /// before the mutation releases the gate).
    pub(super) fn mark_dirty(&self, off: usize, len: usize) {
        for line in off / LINE..off.saturating_add(len).div_ceil(LINE) {
            if let Some(w) = self.dirty.get(line / 64) {
                // Release: a persist that sees the bit also sees the stores before it.
                w.fetch_or(1 << (line % 64), Ordering::Release);
            }
        }
    }

    /// Copies the lines covering `[off, off + len)` from `map` into the shadow. The caller
    /// holds [`Shadow::gate`] and has checked the range.
    pub(super) fn persist_lines(&self, map: &Mapping, off: usize, len: usize) {
        for line in off / LINE..off.saturating_add(len).div_ceil(LINE) {
            let _copying = self.line_locks.get(line % STRIPES).map(Mutex::lock);
            // IMPORTANT: clear before copying. A store racing with the copy either is
            // copied or sets the bit again afterwards; it is never lost.
            if let Some(w) = self.dirty.get(line / 64) {
                w.fetch_and(!(1 << (line % 64)), Ordering::Acquire);
            }
            for i in line * WORDS_PER_LINE..(line + 1) * WORDS_PER_LINE {
                if let (Some(shadow), Some(live)) = (self.words.get(i), map.word(i * 8)) {
                    shadow.store(live.load(Ordering::Relaxed), Ordering::Relaxed);
                }
            }
        }
    }

    /// The image a power failure could leave now (see the module doc).
    pub(super) fn crash_image(&self, map: &Mapping, seed: u64, opts: CrashImageOptions) -> Vec<u8> {
        let _frozen = self.gate.write();
        // No mutation is in progress (they hold the gate), so this plain copy of the live
        // mapping does not race with any store.
        let mut image = map.slice(0, map.len()).unwrap_or_default().to_vec();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        for (wi, bits) in self.dirty.iter().enumerate() {
            let mut b = bits.load(Ordering::Relaxed);
            while b != 0 {
                let line = wi * 64 + b.trailing_zeros() as usize;
                b &= b - 1;
                self.choose_line(line, &mut image, &mut rng, opts);
            }
        }
        image
    }

    /// Replaces (some words of) a dirty line of the live copy `image` by their persisted
    /// content. Clean lines equal their persisted content already.
    fn choose_line(
        &self,
        line: usize,
        image: &mut [u8],
        rng: &mut ChaCha8Rng,
        opts: CrashImageOptions,
    ) {
        let keep_live_line = !opts.tear_words && rng.random_bool(0.5);
        if keep_live_line {
            return;
        }
        for i in line * WORDS_PER_LINE..(line + 1) * WORDS_PER_LINE {
            let take_persisted = !opts.tear_words || rng.random_bool(0.5);
            if let (true, Some(p), Some(dst)) = (
                take_persisted,
                self.words.get(i),
                image.get_mut(i * 8..i * 8 + 8),
            ) {
                dst.copy_from_slice(&memory_bytes(p.load(Ordering::Relaxed)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::mapping::{mapped_temp_file as mapped, word_from_memory_bytes};
    use super::*;

    /// A store as the pool makes it: through the word, then marked dirty.
    fn put(m: &Mapping, s: &Shadow, off: usize, bytes: [u8; 8]) {
        m.word(off)
            .unwrap()
            .store(word_from_memory_bytes(bytes), Ordering::Relaxed);
        s.mark_dirty(off, 8);
    }

    #[test]
    fn persist_copies_whole_lines_including_neighbours() {
        let (_f, m) = mapped(4096);
        let s = Shadow::of(&m);
        put(&m, &s, 64, *b"neighbor");
        put(&m, &s, 120, *b"target!!");
        put(&m, &s, 128, *b"nextline");
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
            put(&m, &s, i * 80 / 8 * 8, (i as u64).to_le_bytes());
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
            put(&m, &s, 256 + w * 8, [0xAB; 8]);
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
            put(&m, &s, 256 + w * 8, [0xAB; 8]);
        }
        let torn = (0..200).any(|seed| {
            let img = s.crash_image(&m, seed, CrashImageOptions::torn_words());
            let line = &img[256..320];
            line.contains(&0) && line.contains(&0xAB)
        });
        assert!(torn);
    }

    /// Regression (found by `tests/pmem_alloc_crash_images.rs`): without the per-line
    /// locks a slow copy of a line stored an old word into the shadow after a newer copy
    /// of the same line had finished, so an acknowledged persist was lost.
    #[test]
    fn concurrent_copies_of_a_line_never_undo_a_finished_persist() {
        let (_f, m) = mapped(4096);
        let s = Shadow::of(&m);
        let stop = std::sync::atomic::AtomicBool::new(false);
        let started = std::sync::Barrier::new(3);
        std::thread::scope(|scope| {
            for _ in 0..2 {
                // Other threads keep persisting a neighbour in the same line.
                scope.spawn(|| {
                    started.wait();
                    while !stop.load(Ordering::Relaxed) {
                        s.persist_lines(&m, 8, 8);
                    }
                });
            }
            started.wait();
            for i in 1..=100_000u64 {
                put(&m, &s, 0, i.to_le_bytes());
                s.persist_lines(&m, 0, 8);
                let persisted = s.words[0].load(Ordering::Relaxed);
                if persisted != word_from_memory_bytes(i.to_le_bytes()) {
                    stop.store(true, Ordering::Relaxed);
                    panic!("persist of value {i} was undone by a concurrent copy of its line");
                }
            }
            stop.store(true, Ordering::Relaxed);
        });
    }
}
