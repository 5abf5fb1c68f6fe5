//! Crash-atomic write batches in PrismDB's slab writes (issue 24; FORMAT.md §3 "Write
//! batches"). Not in the paper, whose interface has no multi-key write: a batch writes its
//! objects into slab slots exactly as puts and deletes do (§4.1, §6: one object per slot,
//! timestamp in its header, recovery keeps the highest timestamp per key), under an
//! *intent record* ([`record`]) that lists the slots and voids them at recovery until the
//! batch commits by voiding the record (two words, one persist).
//!
//! Steps of [`write_batch`] (each persist completes before the next step):
//! 1. *reserve*, under the state locks of every partition the batch touches (taken in
//!    partition order, so the batch takes its timestamps at one moment): a slot per
//!    operation (a tombstone for a delete), one timestamp per partition, the keys marked
//!    as reserved by a batch (promotions skip them); a record run of pool chunks;
//! 2. *intent*: the record listing the slots, persisted;
//! 3. *objects*: each object written and persisted (no lock held);
//! 4. *commit*, under the same locks, once every batch that took its timestamps earlier
//!    and shares a key with this one has committed or been abandoned: the record voided
//!    whole (`void_record`: magic, count and checksum zeroed, persisted; the commit
//!    point), then every object published as a put publishes it (the older version
//!    freed), and a tombstone that hides nothing on flash freed again;
//! 5. the record run goes back to the allocator.
//!
//! A failure before step 4 undoes the batch (objects zeroed, record voided, slots
//! released); one at or after step 4 poisons the store (the next open decides).
//!
//! Thread safety: any number of batches, puts, deletes, compactions and readers run
//! concurrently; a batch holds the state locks of its partitions only while it reserves
//! and while it commits.

pub mod record;
mod recovery;

pub use recovery::roll_back;

use std::collections::{BTreeSet, HashMap};

use parking_lot::RwLockWriteGuard;
use tierkv_core::{Error, Result, Tier, WriteBatch};

use crate::format::{encode_object, object_len};
use crate::partition::{Lookup, Pressure, SPACE_WAIT, State};
use crate::shared::Shared;
use crate::slab::Purpose;
use record::{RECORD_TAG, encode_record, record_len};

/// Most chunks a record run of a batch of deletes may take from the reserve for deletes.
const RESERVE_RUN: u64 = 2;

/// One operation of a batch and the slot it got.
struct Op<'a> {
    part: usize,
    key: &'a [u8],
    value: Option<&'a [u8]>,
    class: u8,
    off: u64,
    ts: u64,
}

/// A run of pool chunks holding a batch's intent record.
#[derive(Clone, Copy)]
struct Run {
    off: u64,
    chunks: u64,
}

/// Applies `batch` crash-atomically; durable when it returns.
pub fn write_batch(sh: &Shared, batch: &WriteBatch) -> Result<()> {
    batch.check(&sh.limits)?;
    if batch.is_empty() {
        return Ok(());
    }
    sh.check_writable()?;
    let mut ops = place(sh, batch)?;
    let parts: Vec<usize> = ops
        .iter()
        .map(|o| o.part)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let run = reserve(sh, &mut ops, &parts)?;
    if let Err(e) = write_objects(sh, &ops, run) {
        abandon(sh, &ops, &parts, run);
        return Err(e);
    }
    let committed = commit(sh, &ops, &parts, run);
    sh.batch_done();
    if let Err(e) = committed {
        sh.poison(format!("a write batch failed at its commit: {e}"));
        return Err(e);
    }
    sh.crash_point("prismdb.batch.published");
    if let Err(e) = free_run(sh, run) {
        sh.poison(format!(
            "a committed write batch's record was not freed: {e}"
        ));
        return Err(e);
    }
    sh.counters.batches.incr();
    sh.counters.batch_ops.add(ops.len() as u64);
    for op in &ops {
        if let (Some(v), Some(p)) = (op.value, sh.parts.get(op.part)) {
            sh.counters
                .ops
                .user_bytes_written
                .add((op.key.len() + v.len()) as u64);
            p.counters.writes.incr();
            p.touch(op.key);
        }
    }
    Ok(())
}

/// The values of `keys` as of one moment: the state locks of their partitions are held
/// together (read) while the fast tier is read and the table sets are taken, so a batch
/// (which publishes under all of its partitions' locks) is seen whole or not at all.
pub fn multi_get(sh: &Shared, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
    for k in keys {
        sh.limits.check_key(k)?;
    }
    let ids: Vec<usize> = keys.iter().map(|k| sh.map.partition_of(k)).collect();
    let parts: Vec<usize> = ids
        .iter()
        .copied()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let found = {
        let guards: Vec<_> = parts
            .iter()
            .filter_map(|&p| sh.parts.get(p).map(|x| x.state.read()))
            .collect();
        let mut found = Vec::with_capacity(keys.len());
        for (k, &p) in keys.iter().zip(&ids) {
            let (Some(part), Ok(g)) = (sh.parts.get(p), parts.binary_search(&p)) else {
                return Err(Error::invalid("prismdb: no partition"));
            };
            let st = guards
                .get(g)
                .ok_or_else(|| Error::invalid("prismdb: no partition"))?;
            found.push(part.lookup_locked(sh, k, st)?);
        }
        found
    };
    let mut out = Vec::with_capacity(keys.len());
    for ((k, &p), f) in keys.iter().zip(&ids).zip(found) {
        let v = match f {
            Lookup::Pmem(v) => {
                sh.counters.ops.reads_from_pmem.incr();
                v
            }
            Lookup::Flash(tables) => {
                let v = tables.get_traced(k, &sh.cache)?;
                if let Some((_, src)) = &v {
                    crate::partition::count_table_read(sh, *src);
                }
                v.map(|(v, _)| v)
            }
        };
        if let Some(v) = &v {
            sh.counters.ops.user_bytes_read.add(v.len() as u64);
        }
        if let Some(part) = sh.parts.get(p) {
            part.counters.reads.incr();
            part.touch(k);
        }
        out.push(v);
    }
    Ok(out)
}

/// The partition and size class of every operation; refuses (whole) a batch with an
/// object larger than the largest slot, or whose puts need more slots than the fast tier
/// has.
fn place<'a>(sh: &Shared, batch: &'a WriteBatch) -> Result<Vec<Op<'a>>> {
    let mut bytes = 0u64;
    let ops = batch
        .iter()
        .map(|(key, op)| {
            let value = op.value();
            let len = object_len(key.len(), value.map_or(0, <[u8]>::len));
            let class = sh
                .opts
                .classes
                .iter()
                .position(|&c| c as usize >= len)
                .and_then(|i| u8::try_from(i).ok())
                .ok_or_else(|| {
                    Error::invalid(format!(
                        "prismdb: object of {len} bytes in a write batch is larger than the \
                         largest slot"
                    ))
                })?;
            if value.is_some() {
                bytes += u64::from(
                    sh.opts
                        .classes
                        .get(usize::from(class))
                        .copied()
                        .unwrap_or(0),
                );
            }
            Ok(Op {
                part: sh.map.partition_of(key),
                key,
                value,
                class,
                off: 0,
                ts: 0,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    if bytes > sh.usage.capacity {
        return Err(Error::no_space(
            Tier::Pmem,
            format!(
                "prismdb: a write batch needs {bytes} bytes of slots, the fast tier holds {}",
                sh.usage.capacity
            ),
        ));
    }
    Ok(ops)
}

/// The state locks of `parts` (ascending), for writing.
fn lock_all<'a>(sh: &'a Shared, parts: &[usize]) -> Vec<RwLockWriteGuard<'a, State>> {
    parts
        .iter()
        .filter_map(|&p| sh.parts.get(p).map(|x| x.state.write()))
        .collect()
}

/// The guard of `part` among `guards` (locked for `parts`).
fn guard_of<'g, 'a>(
    guards: &'g mut [RwLockWriteGuard<'a, State>],
    parts: &[usize],
    part: usize,
) -> Result<&'g mut State> {
    parts
        .binary_search(&part)
        .ok()
        .and_then(|i| guards.get_mut(i))
        .map(|g| &mut **g)
        .ok_or_else(|| Error::invalid("prismdb: batch partition not locked"))
}

/// Step 1: a record run and a slot per operation, and the timestamps, waiting for
/// compactions while the fast tier is full (as a put does) and refusing the batch whole
/// when none frees room in time.
fn reserve(sh: &Shared, ops: &mut [Op<'_>], parts: &[usize]) -> Result<Run> {
    if sh.usage.ratio() >= sh.opts.high_watermark {
        sh.counters.throttled_writes.incr();
        sh.wake_compactors();
    }
    let deletes_only = ops.iter().all(|o| o.value.is_none());
    let mut run = None;
    let mut waiting: Option<(std::time::Instant, Vec<Pressure<'_>>)> = None;
    loop {
        let epoch = sh.space_epoch();
        let tried = match run {
            Some(r) => Ok(r),
            None => alloc_run(sh, ops.len(), deletes_only),
        }
        .and_then(|r| {
            run = Some(r);
            try_reserve(sh, ops, parts)
        });
        match tried {
            Ok(()) => return run.ok_or_else(|| Error::invalid("prismdb: no record run")),
            Err(Error::NoSpace { .. }) => {
                let deadline = waiting
                    .get_or_insert_with(|| {
                        sh.counters.space_waits.incr();
                        let raised = parts
                            .iter()
                            .filter_map(|&p| sh.parts.get(p))
                            .map(|p| {
                                *p.last_error.lock() = None;
                                Pressure::raise(&p.pressure)
                            })
                            .collect();
                        (std::time::Instant::now() + SPACE_WAIT, raised)
                    })
                    .0;
                let failed = parts
                    .iter()
                    .filter_map(|&p| sh.parts.get(p))
                    .find_map(|p| p.last_error.lock().clone());
                let refuse = match (sh.check_writable(), failed) {
                    (Err(e), _) => Some(e),
                    (Ok(()), Some(e)) => Some(Error::no_space(
                        Tier::Pmem,
                        format!("fast tier full and compaction failed: {e}"),
                    )),
                    (Ok(()), None) if std::time::Instant::now() >= deadline => {
                        Some(Error::no_space(
                            Tier::Pmem,
                            format!(
                                "fast tier full: no compaction freed room for a write batch \
                                 in {SPACE_WAIT:?}"
                            ),
                        ))
                    }
                    _ => None,
                };
                if let Some(e) = refuse {
                    if let Some(r) = run {
                        let _ = free_run(sh, r);
                    }
                    return Err(e);
                }
                sh.wake_compactors();
                sh.wait_for_space(epoch, std::time::Duration::from_millis(25));
            }
            Err(e) => {
                if let Some(r) = run {
                    let _ = free_run(sh, r);
                }
                return Err(e);
            }
        }
    }
}

/// One attempt at the slots and timestamps, all partitions locked; on failure every slot
/// taken is released (they were never written) and nothing else changed.
fn try_reserve(sh: &Shared, ops: &mut [Op<'_>], parts: &[usize]) -> Result<()> {
    let mut guards = lock_all(sh, parts);
    let mut taken = 0;
    let mut failed = None;
    for op in ops.iter_mut() {
        let purpose = if op.value.is_some() {
            Purpose::Put
        } else {
            Purpose::Delete
        };
        match guard_of(&mut guards, parts, op.part)
            .and_then(|st| st.slabs.alloc_for(op.class, purpose))
        {
            Ok(off) => {
                op.off = off;
                taken += 1;
            }
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    if let Some(e) = failed {
        for op in ops.iter().take(taken) {
            guard_of(&mut guards, parts, op.part)?
                .slabs
                .release_slot(op.off, op.class)?;
        }
        return Err(e);
    }
    let mut ts = HashMap::new();
    for &p in parts {
        let st = guard_of(&mut guards, parts, p)?;
        st.ts += 1;
        ts.insert(p, st.ts);
    }
    for op in ops.iter_mut() {
        op.ts = ts.get(&op.part).copied().unwrap_or(0);
        guard_of(&mut guards, parts, op.part)?
            .batch_keys
            .entry(op.key.to_vec())
            .or_default()
            .push(op.ts);
    }
    Ok(())
}

/// The chunks of `chunk_size` bytes the record of a batch of `MAX_BATCH_OPS` operations
/// takes: the store keeps that many out of every slab (FORMAT.md §3 "Room for batch
/// records").
pub(crate) fn record_chunks_for_largest_batch(chunk_size: u64) -> u64 {
    (record_len(tierkv_core::MAX_BATCH_OPS) as u64).div_ceil(chunk_size.max(1))
}

/// Takes a run of pool chunks for the record of `n` slots: any chunk but the reserve for
/// deletes, so also the chunks kept from the slabs for batch records (FORMAT.md §3 "Room
/// for batch records"): on a full store, where freeing slots never frees a whole chunk,
/// a batch finds its record there once the batches holding them are done. Only a batch of
/// deletes whose record fits in [`RESERVE_RUN`] chunks may take them from the chunks kept
/// for deletes (FORMAT.md §3 "Room for deletes": the two spare ones), so that deletes in a
/// batch succeed on a full store as single deletes do.
fn alloc_run(sh: &Shared, n: usize, deletes_only: bool) -> Result<Run> {
    let cs = sh.alloc.chunk_size();
    let chunks = (record_len(n) as u64).div_ceil(cs);
    let u = &sh.usage;
    let held = u
        .chunks
        .fetch_add(chunks, std::sync::atomic::Ordering::AcqRel)
        + chunks;
    let from_reserve = deletes_only && chunks <= RESERVE_RUN;
    if !from_reserve && held + u.reserve_chunks > u.chunk_limit {
        u.chunks
            .fetch_sub(chunks, std::sync::atomic::Ordering::AcqRel);
        return Err(Error::no_space(
            Tier::Pmem,
            "prismdb: no pool chunk for a write batch's record beyond the reserve for deletes",
        ));
    }
    match sh.alloc.alloc_chunks(RECORD_TAG, chunks) {
        Ok(off) => Ok(Run { off, chunks }),
        Err(e) => {
            u.chunks
                .fetch_sub(chunks, std::sync::atomic::Ordering::AcqRel);
            Err(e)
        }
    }
}

fn free_run(sh: &Shared, run: Run) -> Result<()> {
    sh.alloc.free_chunk(run.off)?;
    sh.usage
        .chunks
        .fetch_sub(run.chunks, std::sync::atomic::Ordering::AcqRel);
    Ok(())
}

/// Steps 2 and 3: the intent record, then the objects, each persisted.
fn write_objects(sh: &Shared, ops: &[Op<'_>], run: Run) -> Result<()> {
    let slots: Vec<u64> = ops.iter().map(|o| o.off).collect();
    let rec = encode_record(&slots);
    sh.pool.write(run.off, &rec)?;
    // IMPORTANT: the record is durable before any of its slots is written.
    sh.pool.persist(run.off, rec.len())?;
    sh.crash_point("prismdb.batch.intent_persisted");
    for op in ops {
        let enc = encode_object(op.ts, op.key, op.value);
        sh.pool.write(op.off, &enc)?;
        sh.pool.persist(op.off, enc.len())?;
    }
    sh.crash_point("prismdb.batch.objects_persisted");
    Ok(())
}

/// Voids the record at `off` for good: its magic word (the commit point of a batch: the
/// record stops being pending), then its count and checksum word, one persist for both
/// (FORMAT.md §3 "Write batches", "A record is voided whole"). With the checksum word left,
/// the next record written in the chunk, cut after its magic word landed, would put the
/// magic back in front of this record's count, checksum and slots, and recovery would void
/// the slots of a batch that committed long ago (CI: prismdb kill seed 2407, 12
/// acknowledged keys lost at once; test `tests/batch_record_reuse.rs`).
pub(crate) fn void_record(sh: &Shared, off: u64) -> Result<()> {
    sh.pool.store_u64(off, 0)?;
    sh.pool.store_u64(off + 8, 0)?;
    sh.pool.persist(off, 16)
}

/// Drops the mark of the batch with timestamp `ts` on `key`.
fn unmark(st: &mut State, key: &[u8], ts: u64) {
    if let Some(b) = st.batch_keys.get_mut(key) {
        if let Some(i) = b.iter().position(|&x| x == ts) {
            b.swap_remove(i);
        }
        if b.is_empty() {
            st.batch_keys.remove(key);
        }
    }
}

/// True while a batch with an earlier timestamp than `ops`' has one of their keys
/// reserved and has not committed or been abandoned.
fn earlier_batch_pending(
    guards: &mut [RwLockWriteGuard<'_, State>],
    parts: &[usize],
    ops: &[Op<'_>],
) -> Result<bool> {
    for op in ops {
        let st = guard_of(guards, parts, op.part)?;
        if st
            .batch_keys
            .get(op.key)
            .is_some_and(|b| b.iter().any(|&ts| ts < op.ts))
        {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Step 4: the commit word, then publication (FORMAT.md §3 "Write batches").
fn commit(sh: &Shared, ops: &[Op<'_>], parts: &[usize], run: Run) -> Result<()> {
    let mut guards = lock_all(sh, parts);
    // A batch that took its timestamps before this one and shares a key with it commits
    // first (FORMAT.md §3 "Write batches", "Batches on the same keys"): publication keeps
    // the higher timestamp only while both versions are on the fast tier, so a batch that
    // committed first and had part of its keys demoted in between would be overwritten on
    // those keys alone (CI: a `multi_get` saw two batches' values in one group).
    while earlier_batch_pending(&mut guards, parts, ops)? {
        let seen = sh.batches_seen();
        drop(guards);
        sh.wait_for_batches(seen);
        guards = lock_all(sh, parts);
    }
    for op in ops {
        unmark(guard_of(&mut guards, parts, op.part)?, op.key, op.ts);
    }
    // IMPORTANT: the commit point; every object of the batch is durable (step 3).
    void_record(sh, run.off)?;
    sh.crash_point("prismdb.batch.committed");
    for op in ops {
        let part = sh
            .parts
            .get(op.part)
            .ok_or_else(|| Error::invalid("prismdb: no partition"))?;
        let st = guard_of(&mut guards, parts, op.part)?;
        let tomb = op.value.is_none();
        let published = part.publish(st, op.key, op.off, op.ts, op.class, tomb, false, None)?;
        // A tombstone over nothing that flash could resurface is dropped, after the
        // version it deleted was freed (by `publish`), as a delete without tombstone does;
        // kept once the store is poisoned (flash may then hold a manifest the tables here
        // do not reflect: `Partition::reserve`).
        if published
            && tomb
            && sh.check_writable().is_ok()
            && !st.tables.may_contain(op.key)
            && !st.in_compaction(op.key)
            && let Some(loc) = st.index.remove(op.key)
        {
            part.unaccount(op.key, &loc);
            st.slabs.free(loc.off, loc.class)?;
        }
    }
    Ok(())
}

/// Undoes a batch that failed before its commit: its objects zeroed (the slots still
/// reserved), the record voided, then the slots released. A failure here poisons the
/// store (the next open voids the batch from its record).
fn abandon(sh: &Shared, ops: &[Op<'_>], parts: &[usize], run: Run) {
    let undone = (|| -> Result<()> {
        for op in ops {
            sh.pool.store_u64(op.off, 0)?;
            sh.pool.persist(op.off, 8)?;
        }
        // IMPORTANT: the slots are dead before the record stops voiding them, and the
        // record is void before a slot can be reused.
        void_record(sh, run.off)
    })();
    let ok = undone.is_ok();
    let mut released = undone;
    let mut guards = lock_all(sh, parts);
    for op in ops {
        if let Ok(st) = guard_of(&mut guards, parts, op.part) {
            unmark(st, op.key, op.ts);
            if ok && let Err(e) = st.slabs.release_slot(op.off, op.class) {
                released = Err(e);
            }
        }
    }
    drop(guards);
    sh.batch_done();
    match released.and_then(|()| free_run(sh, run)) {
        Ok(()) => {}
        Err(e) => sh.poison(format!("a failed write batch could not be undone: {e}")),
    }
}
