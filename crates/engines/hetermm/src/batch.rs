//! Crash-atomic write batches (ours, issue 24; spec: `FORMAT.md` § Write batches): the
//! store's side — one guard, the index's per-key compute for every key, the commit — over
//! the memory's side in `mem/batch.rs`, which argues the protocol.
//!
//! **Readers.** A batch's operations enter the index one key at a time, before its entry
//! is committed, so a plain `get` may see some of a batch in progress (and a value that a
//! crash then takes away, as for a single put whose entry is not yet durable). `multi_get`
//! sees none or all of every batch: batches apply and commit holding the *batch gate*
//! shared, and `multi_get` reads holding it exclusively. Racing single-key writes are not
//! gated: they are ordered against each of the batch's keys by that key's
//! synchronization and timestamps, as against any put.
//!
//! Thread safety: any number of threads; each batch runs in its caller's thread.

use parking_lot::RwLock;
use tierkv_core::{BatchOp, Error, Result, WriteBatch};

use crate::LogicalAddress;
use crate::mem::Guard;
use crate::mem::HeterMem;
use crate::mem::batch::BatchWriter;
use crate::plugin::PluggedIndex;

/// Applies and commits `b` (already checked against the store's limits); durable when it
/// returns.
pub(crate) fn write_batch(
    mem: &HeterMem,
    index: &dyn PluggedIndex<HeterMem>,
    gate: &RwLock<()>,
    b: &WriteBatch,
) -> Result<()> {
    mem.check_batch(b)?;
    if b.is_empty() {
        return Ok(());
    }
    let g = mem.pin()?;
    let mut w = mem.begin_batch(&g, b)?;
    let gate = gate.read();
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
    drop(gate);
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
    gate: &RwLock<()>,
    keys: &[&[u8]],
) -> Result<Vec<Option<Vec<u8>>>> {
    let _gate = gate.write();
    keys.iter().map(|k| index.get(mem, k)).collect()
}
