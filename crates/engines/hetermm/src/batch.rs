//! Crash-atomic write batches (ours, issue 24; spec: `FORMAT.md` § Write batches): the
//! store's side — one guard, the index's per-key compute for every key, the commit — over
//! the memory's side in `mem/batch.rs`, which argues the protocol.
//!
//! **Overlapping batches.** Each key's synchronization orders a batch against single
//! writes of that key, but two batches on common keys could interleave key by key (A's
//! first key after B's, B's second after A's): no order of the two wholes. So a batch takes
//! the *stripes* of its keys — one of [`STRIPES`] mutexes per key hash — in ascending order
//! (no deadlock), after its reservation (pinned: the holder never waits for the flusher)
//! and before it applies anything; it releases them after its commit. Batches on disjoint
//! stripes run in parallel.
//!
//! **Readers.** A batch's operations enter the index one key at a time, before its entry
//! is committed, so a plain `get` may see some of a batch in progress (and a value that a
//! crash then takes away, as for a single put whose entry is not yet durable). `multi_get`
//! sees none or all of every batch: batches apply and commit holding the *batch gate*
//! shared, and `multi_get` reads holding it exclusively. Racing single-key writes are not
//! gated: they are ordered against each of the batch's keys by that key's
//! synchronization and timestamps, as against any put.
//!
//! **Racing single deletes** (issue 24, stress with four writers per key). A batch removes
//! its deleted keys from the index when it applies them and makes that durable only at its
//! commit. A single delete that comes in between finds the key absent and changes nothing —
//! and was acknowledged with nothing durable behind it: a crash before the batch's commit
//! brought the key's older value back (a lost acknowledged delete). Single puts and deletes
//! that change something log their own entry (durable before the change is visible), so
//! only a delete that did nothing is exposed. So a single delete, after its index
//! operation, waits for its key's stripe ([`BatchLocks::settle_key`]): a batch holds the
//! stripes of its keys from before it applies until after its commit, so a batch that
//! removed the key first has committed when the delete returns (or it failed, and the
//! store is poisoned). The wait is outside every index lock and unpinned; a batch holding
//! the stripe never waits.
//!
//! Thread safety: any number of threads; each batch runs in its caller's thread.

use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};

use parking_lot::{Mutex, MutexGuard, RwLock};
use tierkv_core::{BatchOp, Error, Result, WriteBatch};

use crate::LogicalAddress;
use crate::mem::Guard;
use crate::mem::HeterMem;
use crate::mem::batch::BatchWriter;
use crate::plugin::PluggedIndex;

/// Key-hash stripes that order overlapping batches.
pub const STRIPES: usize = 256;

/// The store's batch synchronization: the gate `multi_get` closes and the stripes.
pub(crate) struct BatchLocks {
    gate: RwLock<()>,
    stripes: Box<[Mutex<()>]>,
}

impl BatchLocks {
    pub(crate) fn new() -> BatchLocks {
        BatchLocks {
            gate: RwLock::new(()),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
        }
    }

    /// The stripe of `key`.
    fn stripe(key: &[u8]) -> usize {
        BuildHasherDefault::<DefaultHasher>::default().hash_one(key) as usize % STRIPES
    }

    /// Waits until no write batch holds the stripe of `key` (module doc: racing single
    /// deletes; `regressions::a_delete_that_finds_a_key_an_uncommitted_batch_removed_waits_for_its_commit`).
    pub(crate) fn settle_key(&self, key: &[u8]) {
        if let Some(s) = self.stripes.get(Self::stripe(key)) {
            drop(s.lock());
        }
    }

    /// The stripes of `b`'s keys, locked in ascending order.
    fn lock_stripes(&self, b: &WriteBatch) -> Vec<MutexGuard<'_, ()>> {
        let mut ids: Vec<usize> = b.iter().map(|(k, _)| Self::stripe(k)).collect();
        ids.sort_unstable();
        ids.dedup();
        ids.into_iter()
            .filter_map(|i| self.stripes.get(i).map(Mutex::lock))
            .collect()
    }
}

/// Applies and commits `b` (already checked against the store's limits); durable when it
/// returns.
pub(crate) fn write_batch(
    mem: &HeterMem,
    index: &dyn PluggedIndex<HeterMem>,
    locks: &BatchLocks,
    b: &WriteBatch,
) -> Result<()> {
    mem.check_batch(b)?;
    if b.is_empty() {
        return Ok(());
    }
    let g = mem.pin()?;
    let mut w = mem.begin_batch(&g, b)?;
    let stripes = locks.lock_stripes(b);
    let gate = locks.gate.read();
    for (at, (key, op)) in b.iter().enumerate() {
        let applied = match op {
            BatchOp::Put(value) => apply_put(index, mem, &g, &mut w, at, key, value),
            BatchOp::Delete => apply_delete(index, mem, &g, &mut w, at, key),
        };
        if let Err(e) = applied {
            return Err(w.fail(&g, e));
        }
    }
    let committed = w.commit(&g, b);
    drop((gate, stripes));
    committed
}

fn apply_put(
    index: &dyn PluggedIndex<HeterMem>,
    mem: &HeterMem,
    g: &Guard<'_>,
    w: &mut BatchWriter<'_>,
    at: usize,
    key: &[u8],
    value: &[u8],
) -> Result<()> {
    let slot = w.slot(key, value)?;
    let mut last = None;
    index.compute(mem, key, &mut |cur| {
        let old = cur.map(|a| a.0);
        let ts = w.write_put(old, slot, key, value)?;
        last = Some((old, ts));
        Ok(Some(LogicalAddress(slot)))
    })?;
    let (old, ts) = last.ok_or_else(|| Error::invalid("hetermm batch: a put was not applied"))?;
    w.put_done(g, at, key, old, slot, ts);
    Ok(())
}

fn apply_delete(
    index: &dyn PluggedIndex<HeterMem>,
    mem: &HeterMem,
    g: &Guard<'_>,
    w: &mut BatchWriter<'_>,
    at: usize,
    key: &[u8],
) -> Result<()> {
    let mut last = None;
    index.compute(mem, key, &mut |cur| {
        last = None;
        if let Some(a) = cur {
            last = Some((a.0, w.write_delete(a.0)?));
        }
        Ok(None)
    })?;
    if let Some((old, done)) = last {
        w.delete_done(g, at, key, old, done);
    }
    Ok(())
}

/// `multi_get` under the batch gate: none or all of every batch.
pub(crate) fn multi_get(
    mem: &HeterMem,
    index: &dyn PluggedIndex<HeterMem>,
    locks: &BatchLocks,
    keys: &[&[u8]],
) -> Result<Vec<Option<Vec<u8>>>> {
    let _gate = locks.gate.write();
    keys.iter().map(|k| index.get(mem, k)).collect()
}
