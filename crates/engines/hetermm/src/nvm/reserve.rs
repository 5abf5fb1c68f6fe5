//! The pmem reserve (ours; the paper does not say what happens when pmem fills): block-sized
//! runs held back from the allocator so that a full pool is never a dead end.
//!
//! **What it must cover.** Everything that still has to reach pmem once writes are refused:
//! flushing all of DRAM (every block the write region's pages can span), the log blocks that
//! deletes and the writes already admitted need, and one reorganisation copy (a compact
//! block can be up to about 1.5 blocks: its hash table and bitmap beside the records). So
//! `target = dram_blocks + LOG_BLOCKS + REORG_BLOCKS + RACING_BLOCKS` runs of one block each.
//!
//! **Why runs and not a count.** Free chunks can lie in holes too short for a block (compact
//! blocks are shorter runs); a count of free chunks would promise flushes the allocator
//! cannot serve. Held runs are whole blocks. They are allocated under the data tag and named
//! by no directory word, so a crash leaves them as garbage that recovery frees — and recovery
//! then takes them again (greedy first-fit over a free interval gets at least as many block
//! runs as disjoint block runs were freed in it).
//!
//! **The rule.** Allocations that keep the store's promises — a flush, a log block, a
//! reorganisation copy — take from the allocator first and from the reserve when it has no
//! run. The first run taken from the reserve *dips* it: from then on no new write is
//! admitted before it touches anything (`mem/mod.rs` `admit_write`), so nothing new is
//! committed that the reserve would have to cover. At the dip the reserve held
//! `dram_blocks + LOG_BLOCKS + REORG_BLOCKS` runs while DRAM held at most `dram_blocks`
//! blocks, so what is in DRAM can always be flushed, deletes logged and one block
//! reorganised. Space freed later (deletes, then marks, then reorganisation) refills the
//! reserve first; once it is full again, writes are admitted again.
//!
//! **Refused for good, not for a moment.** A dip does not mean the pool is full: the
//! allocator may have failed while blocks over the reorganisation threshold wait for the
//! reclaimer, or while the free chunks lie in short holes. So a writer that finds the
//! reserve dipped waits (unpinned) for a *room pass* of the flusher that begins after it
//! asks (`flush.rs` `room_pass`: flush all of DRAM and its marks, reorganise every block
//! over the threshold, move blocks down, refill the reserve). If the reserve is full after
//! it, the write goes on; if not, the pool is full for good and the write gets `NoSpace`.
//! A genuinely full pool therefore refuses after one pass (milliseconds), and asking again
//! finds it still full: the next pass frees nothing either.
//!
//! **Its size.** DRAM is at most an eighth of the pool (`mem/mod.rs`) and the log keeps at
//! most an eighth of the pool's blocks before compressing, so the reserve is a bounded
//! share of a small pool (a quarter of a 64 MiB pool held back for DRAM alone refused
//! writes under load with a few MiB live). A writer that saw the
//! reserve whole just before the dip may still take one page; `RACING_BLOCKS` cover those
//! (a page number taken and then refused, a hole, was the earlier design: the full-pool test
//! then failed now and then with a pages-array slot still holding a flushed page, a fault
//! not understood yet — see the round-2 report).
//!
//! Thread safety: `Send + Sync`; the runs are behind a mutex, the dip flag is `SeqCst` (see
//! `mem/alloc.rs` for the order argument with the page counter).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use parking_lot::Mutex;
use tierkv_core::{Error, Result, Tier};

/// Log blocks the reserve covers beyond DRAM (deletes while full, the log blocks the writes
/// admitted before the dip may still start, and one block that compression copies into).
pub const LOG_BLOCKS: usize = 4;
/// Blocks the reserve keeps for one reorganisation copy (a compact block of up to ~1.5
/// blocks).
pub const REORG_BLOCKS: usize = 2;
/// Blocks for the pages of writers that checked the reserve just before it dipped (each
/// takes at most one page; two blocks cover 2 × pages-per-block such writers).
pub const RACING_BLOCKS: usize = 2;

/// The reserve of block runs.
#[derive(Debug, Default)]
pub struct Reserve {
    runs: Mutex<Vec<u64>>,
    target: AtomicUsize,
    dipped: AtomicBool,
}

impl Reserve {
    /// Sets how many runs the reserve keeps (at open).
    pub fn set_target(&self, runs: usize) {
        self.target.store(runs, Ordering::Relaxed);
    }

    /// How many runs the reserve keeps.
    pub fn target(&self) -> usize {
        self.target.load(Ordering::Relaxed)
    }

    /// Runs held now.
    pub fn held(&self) -> usize {
        self.runs.lock().len()
    }

    /// True from the first run taken until the reserve is full again: new writes are
    /// refused meanwhile.
    pub fn dipped(&self) -> bool {
        self.dipped.load(Ordering::SeqCst)
    }

    /// Tops the reserve up with runs from `alloc` (returning `NoSpace` from it ends the
    /// top-up); once full, lifts the dip. Returns whether it is full.
    pub fn top_up(&self, mut alloc: impl FnMut() -> Result<u64>) -> Result<bool> {
        let mut runs = self.runs.lock();
        while runs.len() < self.target() {
            match alloc() {
                Ok(off) => runs.push(off),
                Err(Error::NoSpace { .. }) => {
                    self.dipped.store(true, Ordering::SeqCst);
                    return Ok(false);
                }
                Err(e) => return Err(e),
            }
        }
        self.dipped.store(false, Ordering::SeqCst);
        Ok(true)
    }

    /// Takes a run out of the reserve (an allocation the store's promises need, which the
    /// allocator could not serve). Dips the reserve first.
    pub fn take(&self, what: &str) -> Result<u64> {
        // IMPORTANT: the dip is visible before the run is gone (`mem/alloc.rs`).
        self.dipped.store(true, Ordering::SeqCst);
        self.runs.lock().pop().ok_or_else(|| {
            Error::no_space(
                Tier::Pmem,
                format!("hetermm: the pmem reserve is exhausted (needed for {what})"),
            )
        })
    }

    /// Gives `n` runs back to the allocator through `free` (so that a run of another length
    /// can be allocated in their place). Dips the reserve.
    pub fn release(&self, n: usize, mut free: impl FnMut(u64) -> Result<()>) -> Result<usize> {
        self.dipped.store(true, Ordering::SeqCst);
        let mut runs = self.runs.lock();
        let mut done = 0;
        while done < n {
            let Some(off) = runs.pop() else { break };
            free(off)?;
            done += 1;
        }
        Ok(done)
    }

    /// Gives every run back (at close).
    pub fn drain(&self, mut free: impl FnMut(u64) -> Result<()>) -> Result<()> {
        let mut runs = self.runs.lock();
        while let Some(off) = runs.pop() {
            free(off)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reserve_dips_when_taken_from_and_lifts_when_full_again() {
        let r = Reserve::default();
        r.set_target(3);
        let next = std::cell::Cell::new(0u64);
        let free_runs = std::cell::Cell::new(5);
        let alloc = || {
            if free_runs.get() == 0 {
                return Err(Error::no_space(Tier::Pmem, "full"));
            }
            free_runs.set(free_runs.get() - 1);
            next.set(next.get() + 1);
            Ok(next.get())
        };
        assert!(r.top_up(alloc).unwrap());
        assert!(!r.dipped());
        assert_eq!(r.take("a flush").unwrap(), 3);
        assert!(r.dipped(), "taking dips the reserve");
        assert!(r.top_up(alloc).unwrap(), "refilled");
        assert!(!r.dipped());
        free_runs.set(0);
        r.take("a flush").unwrap();
        assert!(!r.top_up(alloc).unwrap());
        assert!(r.dipped(), "stays dipped while it cannot be refilled");
        let mut freed = Vec::new();
        assert_eq!(
            r.release(5, |o| {
                freed.push(o);
                Ok(())
            })
            .unwrap(),
            2
        );
        assert!(
            r.take("x")
                .is_err_and(|e| matches!(e, Error::NoSpace { .. }))
        );
    }
}
