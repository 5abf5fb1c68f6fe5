//! The DRAM handle of one leaf node: where it is on pmem, its anchor, and the version
//! lock that serialises its writers and lets its readers go without locks.
//!
//! PACTree (SOSP '21 §4) keeps a version lock in every data node; we keep it in DRAM
//! beside the node instead (DESIGN §5, "PACTree -> any persistent range index"), because
//! a lock word on pmem costs a pmem write per acquisition and must be reset after a
//! crash, while nothing about it needs to survive one.
//!
//! Invariants:
//! - `version` is even when no writer holds the leaf and odd while one does (a seqlock).
//!   Every change to the node's pmem bytes happens while it is odd.
//! - `splits` counts the splits of this leaf. It only changes while the leaf is locked,
//!   after the new right sibling is in the search layer and before the unlock; a reader
//!   that found this leaf in the search layer re-checks it after its optimistic read,
//!   which tells it whether the leaf still covers the key it looked for.
//! - `off` and `anchor` never change: a leaf keeps its anchor for life (no merges).
//!
//! Thread safety: `Leaf` is `Sync`. Writers take [`Leaf::lock`] (a parking mutex, so a
//! writer waiting behind a persist sleeps); readers use [`Leaf::read_optimistic`], which
//! never blocks a writer and retries when one intervened.

use std::sync::atomic::{AtomicU64, Ordering, fence};

use crossbeam::utils::Backoff;
use parking_lot::{Mutex, MutexGuard};
use tierkv_core::Result;

/// One leaf node's DRAM handle.
#[derive(Debug)]
pub(crate) struct Leaf {
    /// Pool offset of the node.
    pub(crate) off: u64,
    /// The smallest key the leaf may hold (immutable).
    pub(crate) anchor: Box<[u8]>,
    writer: Mutex<()>,
    version: AtomicU64,
    splits: AtomicU64,
}

/// Exclusive access to a leaf; its version is odd while this lives.
pub(crate) struct LeafGuard<'a> {
    leaf: &'a Leaf,
    _writer: MutexGuard<'a, ()>,
}

impl Leaf {
    /// A handle for the node at `off` with `anchor`.
    pub(crate) fn new(off: u64, anchor: Box<[u8]>) -> Leaf {
        Leaf {
            off,
            anchor,
            writer: Mutex::new(()),
            version: AtomicU64::new(0),
            splits: AtomicU64::new(0),
        }
    }

    /// The split count (Acquire: pairs with the Release of [`LeafGuard::note_split`]).
    pub(crate) fn splits(&self) -> u64 {
        self.splits.load(Ordering::Acquire)
    }

    /// Locks the leaf for writing: waits for other writers, then makes the version odd.
    pub(crate) fn lock(&self) -> LeafGuard<'_> {
        let writer = self.writer.lock();
        let v = self.version.load(Ordering::Relaxed);
        self.version.store(v.wrapping_add(1), Ordering::Relaxed);
        // Readers that see any of the writes below also see the odd version.
        fence(Ordering::Release);
        LeafGuard {
            leaf: self,
            _writer: writer,
        }
    }

    /// Runs `read` on a consistent view of the leaf: retries it until no writer held the
    /// leaf during the whole call. An error from `read` is returned only when the view
    /// was consistent (a torn view may decode as garbage; that is a retry, not an error).
    pub(crate) fn read_optimistic<T>(&self, mut read: impl FnMut() -> Result<T>) -> Result<T> {
        let backoff = Backoff::new();
        loop {
            let before = self.version.load(Ordering::Acquire);
            if before % 2 == 1 {
                backoff.snooze();
                continue;
            }
            let result = read();
            fence(Ordering::Acquire);
            if self.version.load(Ordering::Relaxed) == before {
                return result;
            }
            backoff.spin();
        }
    }
}

impl LeafGuard<'_> {
    /// Records a completed split (the right sibling is linked and in the search layer).
    pub(crate) fn note_split(&self) {
        self.leaf.splits.fetch_add(1, Ordering::Release);
    }
}

impl Drop for LeafGuard<'_> {
    fn drop(&mut self) {
        let v = self.leaf.version.load(Ordering::Relaxed);
        self.leaf
            .version
            .store(v.wrapping_add(1), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;
    use tierkv_core::Error;

    #[test]
    fn version_is_odd_only_while_locked() {
        let leaf = Leaf::new(64, Box::from(&b""[..]));
        assert_eq!(leaf.version.load(Ordering::Relaxed), 0);
        {
            let g = leaf.lock();
            assert_eq!(leaf.version.load(Ordering::Relaxed), 1);
            g.note_split();
        }
        assert_eq!(leaf.version.load(Ordering::Relaxed), 2);
        assert_eq!(leaf.splits(), 1);
    }

    #[test]
    fn optimistic_read_returns_error_only_from_a_consistent_view() {
        let leaf = Leaf::new(64, Box::from(&b"a"[..]));
        let r: Result<()> = leaf.read_optimistic(|| Err(Error::invalid("consistent")));
        assert!(matches!(r, Err(Error::InvalidArgument(_))));
    }

    #[test]
    fn optimistic_reader_never_sees_a_half_done_write() {
        // Two words that a writer keeps equal under the lock; readers must never see them
        // differ in a validated read.
        let leaf = Arc::new(Leaf::new(64, Box::from(&b""[..])));
        let words = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (leaf, words, stop) = (leaf.clone(), words.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let _g = leaf.lock();
                    i += 1;
                    words[0].store(i, Ordering::Relaxed);
                    std::hint::spin_loop();
                    words[1].store(i, Ordering::Relaxed);
                }
                i
            })
        };
        // Read until the writer has visibly made progress many times over.
        let mut seen_progress = 0;
        let mut reads = 0u64;
        while seen_progress < 10_000 {
            let (a, b) = leaf
                .read_optimistic(|| {
                    Ok((
                        words[0].load(Ordering::Relaxed),
                        words[1].load(Ordering::Relaxed),
                    ))
                })
                .unwrap();
            assert_eq!(a, b, "validated read saw a torn pair");
            seen_progress = seen_progress.max(a);
            reads += 1;
        }
        stop.store(true, Ordering::Relaxed);
        let writes = writer.join().unwrap();
        assert!(reads > 0 && seen_progress <= writes);
    }
}
