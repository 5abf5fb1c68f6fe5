//! Space reclamation, reorganising stage (HeterMM §5.2, Fig. 7b): a published block more
//! than `reorg_threshold` invalid is replaced by a compact block holding only its valid
//! records, found through a coalesced hash table keyed by their offsets — so their logical
//! addresses, and the index, stay as they are. A block with no valid record left is freed
//! outright.
//!
//! Steps: note which records are marked, synchronize the epochs (a reader pinned before a
//! record was superseded may still hold its address — a scan holds one guard over many —
//! and must still find it: only marks older than the synchronization let a record go);
//! then, under the block's lock (so the flusher's marks wait and land on the new copy, or,
//! on a block dropped for want of a valid record, are skipped: `flush.rs` `apply_marks`):
//! 1. collect the records that were not marked before the synchronization (those marked
//!    since are kept, with their invalid bit set in the copy);
//! 2. build the compact block, write it to a new run, persist it;
//! 3. publish it: its directory word (generation + 1, compact), persisted; then clear the
//!    old block's word, persisted (a crash between leaves both words; recovery keeps the
//!    newer generation and frees the other);
//! 4. swap the base address in the `blocks` array (one atomic store).
//!
//! Then, with the lock released, synchronize the epochs — no reader can still be using the
//! old base — and free the old run. The paper waits a fixed 5 seconds here instead.
//!
//! **Defragmentation** (ours): blocks are runs of chunks and compact blocks are shorter runs,
//! so free chunks can end up in holes too short for a new block while plenty are free. When
//! a run cannot be allocated, the reclaimer relocates the block placed highest in the pool
//! — rewriting it compact, by the same steps — into the lowest hole that fits it (the
//! allocator is first-fit from the bottom), until a run is free again or nothing moves down.
//!
//! Thread safety: one reclaimer thread; it shares blocks with the flusher through each
//! block's lock.

use std::collections::HashSet;
use std::time::Instant;

use tierkv_core::{Error, Result};

use crate::format::compact;
use crate::format::dir::{DirEntry, next_generation};
use crate::mem::HeterMem;
use crate::nvm::blocks::{BlockInfo, Layout};
use crate::nvm::walk::records;
use crate::policy;

/// Blocks tried (highest first) before defragmentation gives up for now.
const RELOCATION_TRIES: usize = 8;

/// Why a block is reorganised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// It is more invalid than the threshold (§5.2).
    Sparse,
    /// Defragmentation: its copy must land lower in the pool than it is, so that the free
    /// chunks at the top join into runs long enough for new blocks.
    Relocate,
}

impl HeterMem {
    /// One step of the reclaimer: defragment if a run could not be allocated, else
    /// reorganise the most invalid block over the threshold; returns whether it did work.
    pub fn reclaimer_step(&self) -> Result<bool> {
        self.health.check_not_poisoned()?;
        if self.defrag.pending() {
            let request = self.defrag.begin();
            if self.relocate_one()? {
                return Ok(true);
            }
            self.defrag.gave_up(request);
        }
        let Some(b) = policy::choose_reorg(&self.blocks.snapshot(), self.opts.reorg_threshold)
        else {
            return Ok(false);
        };
        self.reorganise(b, Reason::Sparse)
    }

    /// Moves one of the blocks placed highest in the pool down, if one fits lower; returns
    /// whether one moved.
    pub fn relocate_one(&self) -> Result<bool> {
        for b in policy::choose_relocation(&self.blocks.snapshot(), RELOCATION_TRIES) {
            match self.reorganise(b, Reason::Relocate) {
                Ok(true) => {
                    self.counters.relocations.incr();
                    return Ok(true);
                }
                // No run for its copy: this block cannot move (a pass that ended on this
                // error without giving up left writers waiting for it forever).
                Ok(false) | Err(Error::NoSpace { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(false)
    }

    /// Reorganises every block over the threshold (the flusher's room pass); stops at the
    /// first that finds no run for its copy. Returns how many it reorganised.
    pub fn reorganise_all(&self) -> Result<usize> {
        let mut tried = HashSet::new();
        let mut done = 0;
        loop {
            let blocks: Vec<(u64, BlockInfo)> = self
                .blocks
                .snapshot()
                .into_iter()
                .filter(|(b, _)| !tried.contains(b))
                .collect();
            let Some(b) = policy::choose_reorg(&blocks, self.opts.reorg_threshold) else {
                return Ok(done);
            };
            tried.insert(b);
            match self.reorganise(b, Reason::Sparse) {
                Ok(true) => done += 1,
                Ok(false) => {}
                Err(Error::NoSpace { .. }) => return Ok(done),
                Err(e) => return Err(e),
            }
        }
    }

    /// Reorganises block `b` (see the module doc); returns whether it did.
    pub fn reorganise(&self, b: u64, reason: Reason) -> Result<bool> {
        // One reorganisation at a time: two of one block would both free its old run.
        let _one = self.reorg_lock.lock();
        // IMPORTANT: never on a poisoned store. A reorganisation that failed after its copy
        // was published left the block's cell naming the old copy (still sparse, its word
        // maybe still set): a second one would publish another copy under the same
        // generation, which recovery refuses.
        self.health.check_not_poisoned()?;
        let started = Instant::now();
        let Some(cell) = self.blocks.info(b) else {
            return Ok(false);
        };
        // IMPORTANT: only records marked before an epoch synchronization are dropped. A
        // reader pinned before the update or delete that superseded a record may still hold
        // its address (a scan holds one guard over many): the mark comes after the
        // supersession, so once every operation pinned before the mark has finished, no one
        // holds the address any more. Records marked since are copied, marked.
        let (snapshot, settled) = {
            let info = cell.lock();
            if reason == Reason::Sparse && info.invalid_fraction() <= self.opts.reorg_threshold {
                return Ok(false);
            }
            let settled: HashSet<u64> = records(self.pool(), &self.geo, b, &info)?
                .into_iter()
                .filter(|r| r.marked)
                .map(|r| r.rel)
                .collect();
            (*info, settled)
        };
        self.threads.synchronize();
        let mut info = cell.lock();
        if info.off != snapshot.off {
            return Ok(false);
        }
        let old = *info;
        // The cell must name the run the directory says is this block's current copy; a
        // cell handed an older run would publish a second copy of one generation and free
        // that run twice (a check: the one known way, a publish that stored the cell again
        // after a reorganisation had swapped it, is gone: `nvm/blocks.rs` `publish`).
        let named = self.nvm.dir_entry(old.off)?;
        let expected = DirEntry::Data {
            block_no: b,
            compact: matches!(old.layout, Layout::Compact { .. }),
            generation: old.generation,
        };
        if named != expected {
            return Err(Error::corruption(
                tierkv_core::Tier::Pmem,
                old.off,
                format!(
                    "reorganising block {b}: its copy at {} (generation {}) is not what the \
                     block directory names there ({named:?})",
                    old.off, old.generation
                ),
            ));
        }
        let mut kept = Vec::new();
        let mut late = Vec::new();
        for r in records(self.pool(), &self.geo, b, &old)? {
            if r.marked && settled.contains(&r.rel) {
                continue;
            }
            if r.marked {
                late.push(r.rel as u32);
            }
            kept.push((r.rel as u32, r.bytes));
        }
        let new_len = if kept.is_empty() {
            self.nvm.set_dir_entry(old.off, DirEntry::None)?;
            self.pool().crash_point("hetermm.reorg.block_dropped");
            self.blocks.remove(b);
            drop(info);
            self.counters.blocks_freed.incr();
            0
        } else {
            let mut image = compact::build(b, self.geo.block_bits, &kept);
            compact::mark_in_image(&mut image, b, self.geo.block_bits, &late)?;
            if reason == Reason::Relocate
                && self.nvm.chunks_for(image.len() as u64) * self.nvm.sb.chunk_size > old.run_len
            {
                return Ok(false);
            }
            let off = self
                .nvm
                .alloc_compact(image.len() as u64, reason == Reason::Sparse)?;
            if reason == Reason::Relocate && off > old.off {
                self.nvm
                    .free_run(off)
                    .map_err(|e| freeing(e, b, "a copy that would not move it down"))?;
                return Ok(false);
            }
            let pool = self.pool();
            let written = pool
                .write(off, &image)
                .and_then(|()| pool.persist(off, image.len()));
            pool.crash_point("hetermm.reorg.copy_written");
            let generation = next_generation(old.generation);
            // IMPORTANT: the compact copy is durable and published before the old word goes.
            let published = written.and_then(|()| {
                self.nvm.set_dir_entry(
                    off,
                    DirEntry::Data {
                        block_no: b,
                        compact: true,
                        generation,
                    },
                )
            });
            if let Err(e) = published {
                return Err(self.nvm.free_after(off, e));
            }
            pool.crash_point("hetermm.reorg.copy_published");
            self.run_hook(crate::mem::HookPoint::Unpublishing, &b.to_le_bytes())?;
            self.nvm.set_dir_entry(old.off, DirEntry::None)?;
            pool.crash_point("hetermm.reorg.old_unpublished");
            let live: u64 = kept
                .iter()
                .filter(|(rel, _)| !late.contains(rel))
                .map(|(_, r)| r.len() as u64)
                .sum();
            let total: u64 = kept.iter().map(|(_, r)| r.len() as u64).sum();
            *info = BlockInfo {
                off,
                run_len: self.nvm.chunks_for(image.len() as u64) * self.nvm.sb.chunk_size,
                layout: Layout::Compact {
                    slots: kept.len() as u32,
                },
                live,
                capacity: total,
                generation,
            };
            self.blocks.swap_base(b, off, true);
            let new_len = info.run_len;
            drop(info);
            self.counters.reorganisations.incr();
            new_len
        };
        self.counters
            .reclaimed_bytes
            .add(old.run_len.saturating_sub(new_len));
        // IMPORTANT: no reader can still hold the old base after this.
        self.threads.synchronize();
        self.nvm
            .free_run(old.off)
            .map_err(|e| freeing(e, b, "its old run"))?;
        self.counters
            .reorg_micros
            .add(started.elapsed().as_micros() as u64);
        Ok(true)
    }
}

/// A failed free of a run during the reorganisation of block `b`, saying which run.
fn freeing(e: Error, b: u64, what: &str) -> Error {
    match e {
        Error::Corruption {
            tier,
            offset,
            what: why,
        } => Error::corruption(
            tier,
            offset,
            format!("reorganising block {b}, freeing {what}: {why}"),
        ),
        e => e,
    }
}
