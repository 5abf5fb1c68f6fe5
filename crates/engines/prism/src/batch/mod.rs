//! Crash-atomic write batches (issue 24): a redo log on pmem beside the PWBs, committed by
//! one persisted root word, then applied through the ordinary put and delete paths (PRISM
//! §4.3/§5.5 give single-key writes only; the argument is `FORMAT.md` § Write batches).
//!
//! # Commit (each step persisted before the next)
//! 0. B0 — *reserve* what B3 will need, so that B3 cannot run out of space: HSIT slots
//!    ([`crate::hsit::Hsit::reserve_slots`]) and key-index room
//!    ([`crate::key_index::PersistentKeyIndex::reserve_inserts`]) for the keys the batch
//!    adds, then room for all its records in the calling thread's PWB
//!    ([`crate::pwb::Pwb::reserve_run`], which waits for reclamation as a put does and holds
//!    that PWB's append lock until B3 ends). A batch that does not fit is refused here with
//!    `NoSpace`; records of more than half a PWB are refused with `InvalidArgument`.
//! 1. B1 — the batch's log ([`log_format`]) is written into freshly allocated chunks of
//!    tag [`BATCH_CHUNK_TAG`] and persisted.
//! 2. B2 — *commit*: pool root word [`ROOT_BATCH`] := the log's offset (one atomic 8-byte
//!    store, persisted). From here on the batch survives any crash.
//! 3. B3 — every operation is applied with `Core::put_in_run` (into the reserved run) /
//!    `Core::delete_committed` (each durable on return). Neither checks for poison: a
//!    background failure after B2 does not stop a batch that needs nothing of the
//!    background work (finishing it live is what the next open would do).
//! 4. B4 — root word := 0 (persisted), then the log's chunks are freed. *Acknowledged.*
//!
//! Recovery ([`BatchLog::recover`], after the engine's recovery and with its threads
//! running): a non-zero root word names a committed log; its operations are applied again
//! (a put or delete applied twice leaves the same state) and B4 is done. Every other log
//! chunk is garbage of a batch that never committed and is freed.
//!
//! # Isolation
//! The *batch gate* is taken shared by every single put and delete of the store and
//! exclusive by a batch from B1 to B4, so no other write lands on a batch's keys while its
//! log is committed (a replay could otherwise overwrite a later acknowledged write), and
//! batches commit one at a time. `multi_get` takes the gate shared: it sees none or all of
//! every batch. A lone `get` or a `scan` does not take it and may see a batch half applied
//! (documented in the README); after a crash nobody sees a half batch.
//!
//! # Failures
//! A failure before B2 leaves nothing visible (the log chunk is freed, or collected at the
//! next open; reserved room is released or, for formatted key-index chunks, reused or freed
//! at the next open). After B2 nothing can be refused for want of space (B0); a failure
//! after B2 — whatever its kind, e.g. a failed persist — poisons the engine: the committed
//! batch is finished by the next open. A commit checks, under the gate, that the engine is
//! writable and that root word [`ROOT_BATCH`] is 0: a batch that waited on the gate while
//! the one before it failed after B2 must not commit over that batch's root word (recovery
//! would then finish the later batch and leave the earlier one half applied).
//!
//! Thread safety: `BatchLog` is `Send + Sync`; any thread may commit.

pub mod log_format;

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{RwLock, RwLockReadGuard};
use tierkv_core::{BatchOp, Error, Result, Tier, WriteBatch};

use crate::engine::core::Core;
use crate::pwb::ReservedRun;

/// Pool root word holding the offset of the committed batch log (0: none).
pub const ROOT_BATCH: usize = 2;
/// Allocator tag of batch log chunks.
pub const BATCH_CHUNK_TAG: u32 = u32::from_le_bytes(*b"BTCH");

/// The batch gate and counters of one store.
#[derive(Debug, Default)]
pub struct BatchLog {
    gate: RwLock<()>,
    next_id: AtomicU64,
    committed: AtomicU64,
    replayed: AtomicU64,
}

impl BatchLog {
    /// The gate, shared: held by single writes and by `multi_get`.
    pub fn shared(&self) -> RwLockReadGuard<'_, ()> {
        self.gate.read()
    }

    /// Batches committed since open, and batches finished by recovery.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.committed.load(Ordering::Relaxed),
            self.replayed.load(Ordering::Relaxed),
        )
    }

    /// Applies `batch` crash-atomically (module doc); durable on return.
    pub fn commit(&self, core: &Core, batch: &WriteBatch) -> Result<()> {
        core.life.check_writable()?;
        batch.check(&core.limits)?;
        if batch.is_empty() {
            return Ok(());
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let bytes = log_format::encode(batch, id)?;
        let _exclusive = self.gate.write();
        // IMPORTANT: checked again under the gate. The batch that held it before may have
        // failed after its commit point (poisoning the engine) while this one waited; a
        // second B2 would overwrite the root word that names its log, so that nobody
        // finishes it — it would stay half applied for ever.
        self.check_no_batch_pending(core)?;
        // IMPORTANT: everything B3 needs is reserved before B2 (the gate keeps every other
        // writer out meanwhile), so that B3 cannot be refused for want of space: a batch
        // that does not fit is refused here with `NoSpace`, nothing of it applied.
        let mut run = reserve(core, batch)?;
        let chunks = (bytes.len() as u64).div_ceil(core.alloc.chunk_size());
        let off = core.alloc.alloc_chunks(BATCH_CHUNK_TAG, chunks)?;
        // B1. A failure here leaves an uncommitted log: free it (or the next open does).
        if let Err(e) = core.pool.write_persist(off, &bytes) {
            let _ = core.alloc.free_chunk(off);
            return Err(e);
        }
        core.pool.crash_point("prism.batch.logged");
        // IMPORTANT: B2, the commit point. From here on a failure poisons the engine, and
        // the next open finishes the batch.
        let done = (|| {
            core.pool.set_root(ROOT_BATCH, off)?;
            core.pool.crash_point("prism.batch.committed");
            apply_reserved(core, batch, &mut run)?;
            drop(run);
            core.pool.crash_point("prism.batch.applied");
            finish(core, off)
        })();
        if let Err(e) = done {
            // IMPORTANT: every failure after B2 poisons the engine, `NoSpace` and `Closed`
            // included: the batch is committed and maybe half applied, so no other write
            // may land on its keys before the next open finishes it (a replay would
            // overwrite them), and no other batch may commit over its root word.
            core.fail(&e);
            return Err(e);
        }
        self.committed.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// `Err` unless the engine is writable and no committed batch is waiting to be finished
    /// (root word [`ROOT_BATCH`] is 0). The caller holds the gate exclusively.
    fn check_no_batch_pending(&self, core: &Core) -> Result<()> {
        core.life.check_writable()?;
        let pending = core.pool.root(ROOT_BATCH)?;
        if pending == 0 {
            return Ok(());
        }
        let e = Error::Poisoned(format!(
            "the batch logged at pool offset {pending:#x} is committed but unfinished; \
             reopen the store to finish it"
        ));
        core.fail(&e);
        Err(e)
    }

    /// Finishes the batch a crash left committed, and frees the logs of batches that never
    /// committed. Runs at open, before the store is shared, with the engine's threads
    /// running (applying may need PWB reclamation).
    pub fn recover(&self, core: &Core) -> Result<()> {
        let committed = core.pool.root(ROOT_BATCH)?;
        let mut found = None;
        for chunk in core.alloc.iter_chunks(BATCH_CHUNK_TAG) {
            if chunk.offset == committed {
                found = Some(chunk.size);
            } else {
                core.alloc.free_chunk(chunk.offset)?;
            }
        }
        if committed == 0 {
            return Ok(());
        }
        let run = found.ok_or_else(|| {
            Error::corruption(
                Tier::Pmem,
                committed,
                "the committed batch log is not an allocated batch chunk",
            )
        })?;
        let (h, batch) = read_log(core, committed, run)?;
        self.next_id.fetch_max(h.id, Ordering::Relaxed);
        apply(core, &batch)?;
        finish(core, committed)?;
        self.replayed.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// Reads and decodes the log at `off`, within its chunk run of `run` bytes.
fn read_log(core: &Core, off: u64, run: u64) -> Result<(log_format::LogHeader, WriteBatch)> {
    let head = core.pool.read(off, log_format::HEADER_LEN)?;
    let h = log_format::decode_header(head, off)?;
    if h.total_len() > run {
        return Err(Error::corruption(
            Tier::Pmem,
            off,
            format!("batch log of {} bytes in a run of {run}", h.total_len()),
        ));
    }
    let len = usize::try_from(h.total_len())
        .map_err(|_| Error::corruption(Tier::Pmem, off, "batch log length"))?;
    log_format::decode(core.pool.read(off, len)?, off)
}

/// Reserves what B3 of `batch` needs (module doc): HSIT slots and key-index room for its
/// new keys, then room in the calling thread's PWB for its records, in order (waiting for
/// reclamation as a put does). The returned run holds that PWB's append lock.
fn reserve<'a>(core: &'a Core, batch: &WriteBatch) -> Result<ReservedRun<'a>> {
    let mut lens = Vec::new();
    let mut new_keys = Vec::new();
    for (key, op) in batch.iter() {
        if let BatchOp::Put(value) = op {
            lens.push(value.len());
            if core.index.get(key)?.is_none() {
                new_keys.push(key);
            }
        }
    }
    core.hsit.reserve_slots(new_keys.len() as u64)?;
    core.index.reserve_inserts(new_keys.iter().copied())?;
    let pwb = core.pwbs.for_current_thread()?;
    let wake = || core.reclaim_signal.raise();
    let seen = core.space.refusals();
    let check = || core.writer_may_wait(seen);
    pwb.reserve_run(&lens, &wake, &check)
}

/// B3 of a live commit: every operation, the puts into the reserved `run`.
fn apply_reserved(core: &Core, batch: &WriteBatch, run: &mut ReservedRun<'_>) -> Result<()> {
    apply_with(
        core,
        batch,
        |key, value| core.put_in_run(run, key, value),
        |key| core.delete_committed(key),
    )
}

/// B3 at recovery: applies every operation through the ordinary write paths.
fn apply(core: &Core, batch: &WriteBatch) -> Result<()> {
    apply_with(
        core,
        batch,
        |key, value| core.put(key, value),
        |key| core.delete(key),
    )
}

/// B3: every operation in order, through `put` and `delete`.
fn apply_with(
    core: &Core,
    batch: &WriteBatch,
    mut put: impl FnMut(&[u8], &[u8]) -> Result<()>,
    delete: impl Fn(&[u8]) -> Result<()>,
) -> Result<()> {
    for (i, (key, op)) in batch.iter().enumerate() {
        match op {
            BatchOp::Put(value) => put(key, value)?,
            BatchOp::Delete => delete(key)?,
        }
        if i == batch.len() / 2 {
            core.pool.crash_point("prism.batch.half_applied");
        }
    }
    Ok(())
}

/// B4: un-commits (persisted) and frees the log.
fn finish(core: &Core, off: u64) -> Result<()> {
    core.pool.set_root(ROOT_BATCH, 0)?;
    core.alloc.free_chunk(off)
}

#[cfg(test)]
mod tests;
