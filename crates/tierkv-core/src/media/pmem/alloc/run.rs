//! Whole-chunk allocations: runs of contiguous chunks (`mod.rs`, table rows "alloc run"
//! and "free run"), and taking chunks from the free-chunk set.
//!
//! A run of `n` chunks is a head word `Run(tag, n)` followed by `n - 1` words
//! `Cont(1) .. Cont(n-1)`. The continuations are made durable before the head, and the head
//! is freed (durably) before the continuations, so a crash leaves either the whole run, no
//! run, or continuations without their head — orphans that `open` resets to Free.
//!
//! Thread safety: see the lock order in `mod.rs`.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use parking_lot::MutexGuard;

use super::PmemAllocator;
use super::dram::ChunkDram;
use super::layout::{ChunkState, MAX_RUN_CHUNKS};
use crate::api::error::{Error, Result, Tier};

impl PmemAllocator {
    /// Allocates a run of `n` chunks tagged `tag`; returns the first chunk's offset.
    pub(super) fn alloc_run(&self, tag: u32, n: u64) -> Result<u64> {
        if n == 0 {
            return Err(Error::invalid("allocation of 0 chunks"));
        }
        if n > self.layout.chunk_count.min(MAX_RUN_CHUNKS) {
            return Err(self.no_space(format!(
                "{n} chunks of {} bytes requested; the region has {}",
                self.layout.chunk_size, self.layout.chunk_count
            )));
        }
        let n = n as u32;
        let k = self.take_free_run(n)?;
        let mut guards: Vec<MutexGuard<'_, ChunkDram>> = Vec::with_capacity(n as usize);
        for j in k..k + n {
            guards.push(self.lock_chunk(j)?);
        }
        if n > 1 {
            for j in 1..n {
                self.pool.store_u64(
                    self.layout.state_off(k + j),
                    ChunkState::Cont { back: j }.encode(),
                )?;
            }
            // IMPORTANT: the continuations are durable before the head claims them.
            self.pool
                .persist(self.layout.state_off(k + 1), 8 * (n as usize - 1))?;
        }
        self.set_state(k, ChunkState::Run { tag, len: n })?;
        for (j, g) in guards.iter_mut().enumerate() {
            **g = if j == 0 {
                ChunkDram::Run { tag, len: n }
            } else {
                ChunkDram::Cont
            };
        }
        self.in_transit.fetch_sub(n as usize, Ordering::Relaxed);
        Ok(self.layout.chunk_off(k))
    }

    /// Frees the run whose head is chunk `k` (locked by `head`).
    pub(super) fn free_run(&self, k: u32, mut head: MutexGuard<'_, ChunkDram>) -> Result<()> {
        let ChunkDram::Run { len, .. } = *head else {
            return Err(self.corrupt(
                self.layout.chunk_off(k),
                format!("chunk {k} is not the head of a run"),
            ));
        };
        let mut conts: Vec<MutexGuard<'_, ChunkDram>> = Vec::with_capacity(len as usize);
        for j in k + 1..k + len {
            conts.push(self.lock_chunk(j)?);
        }
        // IMPORTANT: the head is freed first; from then on a crash leaves only orphans.
        self.set_state(k, ChunkState::Free)?;
        if len > 1 {
            for j in k + 1..k + len {
                self.pool
                    .store_u64(self.layout.state_off(j), ChunkState::Free.encode())?;
            }
            self.pool
                .persist(self.layout.state_off(k + 1), 8 * (len as usize - 1))?;
        }
        *head = ChunkDram::Free;
        for g in &mut conts {
            **g = ChunkDram::Free;
        }
        self.free_chunks.lock().extend(k..k + len);
        Ok(())
    }

    /// Takes `n` contiguous free chunks out of the free set (lowest first), releasing empty
    /// slabs once if none are found. The caller sets their DRAM state and decrements
    /// `in_transit` by `n`.
    pub(super) fn take_free_run(&self, n: u32) -> Result<u32> {
        for attempt in 0..2 {
            {
                let mut free = self.free_chunks.lock();
                if let Some(k) = find_run(&free, n) {
                    for j in k..k + n {
                        free.remove(&j);
                    }
                    self.in_transit.fetch_add(n as usize, Ordering::Relaxed);
                    return Ok(k);
                }
            }
            if attempt == 0 && !self.reclaim_empty_slabs()? {
                break;
            }
        }
        Err(self.no_space(format!(
            "no {n} contiguous free chunk(s) of {} bytes",
            self.layout.chunk_size
        )))
    }

    fn no_space(&self, what: String) -> Error {
        Error::no_space(
            Tier::Pmem,
            format!("pmem allocator at {}: {what}", self.layout.region_start),
        )
    }
}

/// The first chunk of the lowest run of `n` consecutive chunks in `free`.
fn find_run(free: &BTreeSet<u32>, n: u32) -> Option<u32> {
    let mut start = None;
    let mut len = 0u32;
    let mut prev = None;
    for &k in free {
        if prev.is_some_and(|p: u32| p + 1 == k) {
            len += 1;
        } else {
            start = Some(k);
            len = 1;
        }
        if len == n {
            return start;
        }
        prev = Some(k);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::find_run;
    use std::collections::BTreeSet;

    #[test]
    fn find_run_finds_the_lowest_long_enough_run() {
        let free: BTreeSet<u32> = [1, 2, 4, 5, 6, 9, 10, 11, 12].into_iter().collect();
        assert_eq!(find_run(&free, 1), Some(1));
        assert_eq!(find_run(&free, 2), Some(1));
        assert_eq!(find_run(&free, 3), Some(4));
        assert_eq!(find_run(&free, 4), Some(9));
        assert_eq!(find_run(&free, 5), None);
        assert_eq!(find_run(&BTreeSet::new(), 1), None);
    }
}
