//! `reflog`: the reference engine on pmem, an append-only record log with a DRAM index.
//!
//! Layout in the pool (root word 0 holds the offset of the log header, `data_start()`):
//!
//! ```text
//! header line (64 bytes at data_start):
//!   0   8  magic     b"TKREFLOG"
//!   8   8  commit    bit 63: the active half; bits 0..63: the committed tail (bytes)
//!   16  8  half_len  bytes per half
//! half 0: [data_start + 64, + half_len)      half 1: [data_start + 64 + half_len, + half_len)
//! ```
//! Records ([`super::record`]) are appended to the active half; the commit word is the only
//! thing that makes them part of the store.
//!
//! # Commit protocol (correct variant)
//! put/delete, under the writer lock: (1) write the record after the committed tail,
//! (2) persist it, (3) store the new commit word (one aligned 8-byte store: never torn),
//! (4) persist the commit word, (5) update the DRAM index, (6) return (acknowledged).
//! Crash cases: before (3) persisted, the commit word still holds the old tail and the
//! record is ignored (an unacknowledged write, absent); after (4) the record is persisted
//! and committed. Recovery scans `[0, tail)` of the active half: every record there must
//! decode with a valid checksum and consecutive sequence numbers, else the pool is
//! corrupt ([`Error::Corruption`]) — a correct writer never commits a torn record.
//!
//! Space: a put must leave room for the record of a delete of the longest key (checked
//! after a compaction, and refused with `NoSpace` otherwise); a delete may use that room,
//! and a delete of an absent key writes nothing. So a delete always succeeds on a full
//! log: after one delete used the reserve, the next one compacts first, and the
//! compaction drops the deleted pair, whose record is at least as long as a delete's.
//!
//! Compaction (when the active half is full): write every live pair as a record into the
//! other half, persist it, then switch halves and tail with one commit-word store + persist.
//! A crash before the switch leaves the old half active and intact.
//!
//! # Broken variants (to prove the stress harness catches bugs)
//! - `ack-before-persist`: steps (2) and (4) are deferred and done for 16 writes at once
//!   (a group commit that acknowledges before the group is durable);
//! - `skip-persist`: step (4) is skipped: the commit word is stored but never persisted.
//! - `lose-race-winner`: a write that started while another write to the same key was in
//!   flight is logged with its sequence number raised by 2^32, and recovery keeps, per
//!   key, the record with the highest sequence number (instead of the last one in the
//!   log). The live index is right; after a crash the racing write comes back over every
//!   later write to its key, acknowledged or not.
//! - `ack-before-move-persist`: compaction stores and persists the commit word that
//!   switches halves *before* persisting the moved records (and never persists them), so
//!   a crash after the switch loses or tears live pairs that were acknowledged long ago.
//! - `free-while-read`: gets read the value from the log through an offset looked up in
//!   DRAM and then dropped the lock (no epoch, no reference), and compaction zeroes the
//!   old half at once: a get that looked up its offset before a compaction reads freed
//!   (zeroed, or rewritten) bytes.
//!
//! - `lose-on-refusal`: a put refused with `NoSpace` drops the key's old value from the
//!   live index first (an acknowledged value lost on a refusal).
//! - `refuse-deletes-when-full`: after the first refused put, every delete is refused
//!   with `NoSpace` until the store is reopened.
//! - `hang-when-full`: the first put that does not fit sleeps forever, holding the writer
//!   lock (a write that never returns).
//! - `lose-field-updates`: its schema store updates a row's fields without the row lock
//!   (`racy_rows.rs`), so one of two concurrent updates of different fields is lost.
//!
//! # Batches
//! A write batch appends the records of all its operations (deletes of absent keys
//! skipped) as one run after the tail, under the writer lock, with consecutive sequence
//! numbers; steps (2)-(4) then persist the run and store and persist one commit word that
//! covers all of it. Crash cases as for one record: before the commit word is persisted,
//! none of the run is part of the store; after, all of it. A batch must leave the delete
//! reserve free, like a put. The broken variant `loop-batches` applies a batch as a loop
//! of puts and deletes, one commit each (what a crash inside the loop tears).
//!
//! Named crash points (`PmemPool::crash_point`): `reflog.compact.after_copy` (moved
//! records written, not yet persisted) and `reflog.compact.after_switch` (the commit word
//! naming the new half stored and persisted).
//!
//! Thread safety: writers serialise on `writer`; readers only take the index's read lock
//! (values are served from DRAM; pmem is read only at recovery).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use std::collections::HashMap;

use parking_lot::Mutex;
use tierkv_core::media::pmem::PmemPool;
use tierkv_core::{
    BatchOp, EngineContext, Error, KvPair, KvStore, Result, Stats, Tier, WriteBatch,
};

use super::Fault;
use super::log_core::{Index, LogCore, apply};
use super::record::{self, Kind};

/// The log header's magic, as a little-endian word.
const MAGIC: u64 = u64::from_le_bytes(*b"TKREFLOG");
const MAGIC_OFF: u64 = 0;
const COMMIT_OFF: u64 = MAGIC_OFF + 8;
const HALF_LEN_OFF: u64 = COMMIT_OFF + 8;
/// The header takes one cache line; the halves start after it.
const HEADER_LEN: u64 = 64;
const HALF_BIT: u64 = 1 << 63;
/// The root word that points at the log header.
const ROOT_LOG: usize = 0;
/// Writes per deferred group in the `ack-before-persist` variant.
const DEFERRED_GROUP: u32 = 16;

fn corrupt(off: u64, what: impl Into<String>) -> Error {
    Error::corruption(Tier::Pmem, off, what)
}

/// Where things are in the pool.
#[derive(Clone, Copy, Debug)]
struct Layout {
    header: u64,
    half_len: u64,
}

impl Layout {
    fn for_pool(pool: &PmemPool) -> Result<Layout> {
        let header = pool.data_start();
        let room = pool.len().saturating_sub(header + HEADER_LEN);
        let half_len = room / 2 / 64 * 64;
        if half_len < 4096 {
            return Err(Error::invalid(format!(
                "reflog needs a pmem pool of at least {} bytes",
                header + HEADER_LEN + 2 * 4096
            )));
        }
        Ok(Layout { header, half_len })
    }
    fn commit_off(&self) -> u64 {
        self.header + COMMIT_OFF
    }
    fn half_start(&self, half: usize) -> u64 {
        self.header + HEADER_LEN + half as u64 * self.half_len
    }
}

/// The writer's view of the log (guarded by `PmemLog::writer`).
#[derive(Debug)]
struct Writer {
    half: usize,
    tail: u64,
    next_seq: u64,
    /// `ack-before-persist`: the start of the record bytes not yet persisted, and how many
    /// writes wait.
    deferred_from: Option<u64>,
    deferred: u32,
}

/// The engine.
pub struct PmemLog {
    pool: Arc<PmemPool>,
    layout: Layout,
    fault: Fault,
    writer: Mutex<Writer>,
    core: LogCore,
    /// `lose-race-winner`: writes in flight per key.
    in_flight: Mutex<HashMap<Vec<u8>, u32>>,
    /// `free-while-read`: where each live value is in the log (offset, length).
    locs: parking_lot::RwLock<HashMap<Vec<u8>, (u64, usize)>>,
    /// Room a put must leave free: the record of a delete of the longest key (so that a
    /// delete always fits after a compaction, see "Space" in the module doc).
    delete_reserve: u64,
    /// `refuse-deletes-when-full`: a put was refused since the store was opened.
    refused: std::sync::atomic::AtomicBool,
}

/// `lose-race-winner`: how far a racing write's sequence number is raised.
const RACE_BOOST: u64 = 1 << 32;

/// Opens (formats or recovers) the log on the context's pool.
pub(super) fn open(ctx: EngineContext, fault: Fault) -> Result<Arc<dyn KvStore>> {
    let pool = ctx.media.require_pmem()?.clone();
    let layout = Layout::for_pool(&pool)?;
    let started = Instant::now();
    let (writer, index) = if ctx.created {
        format(&pool, layout)?
    } else {
        recover(&pool, layout, fault)?
    };
    Ok(Arc::new(PmemLog {
        pool,
        layout,
        fault,
        writer: Mutex::new(writer),
        core: LogCore::new(index, ctx.options.limits, started),
        in_flight: Mutex::new(HashMap::new()),
        locs: parking_lot::RwLock::new(HashMap::new()),
        delete_reserve: record::encoded_len(ctx.options.limits.max_key_len, 0) as u64,
        refused: std::sync::atomic::AtomicBool::new(false),
    }))
}

type Opened = (Writer, Index);

fn fresh_writer(half: usize, tail: u64, next_seq: u64) -> Writer {
    Writer {
        half,
        tail,
        next_seq,
        deferred_from: None,
        deferred: 0,
    }
}

fn format(pool: &PmemPool, l: Layout) -> Result<Opened> {
    let mut header = [0u8; 24];
    header[..8].copy_from_slice(&MAGIC.to_le_bytes());
    header[16..24].copy_from_slice(&l.half_len.to_le_bytes());
    pool.write_persist(l.header, &header)?;
    // IMPORTANT: the root word is set (and persisted) last: a pool whose root is 0 holds no
    // log, whatever the header line says.
    pool.set_root(ROOT_LOG, l.header)?;
    Ok((fresh_writer(0, 0, 1), Index::new()))
}

fn recover(pool: &PmemPool, l: Layout, fault: Fault) -> Result<Opened> {
    // BUG (deliberate, `lose-race-winner`): rank records by sequence number.
    let by_rank = fault == Fault::LoseRaceWinner;
    let mut ranks: HashMap<Vec<u8>, u64> = HashMap::new();
    if pool.root(ROOT_LOG)? != l.header {
        return Err(corrupt(0, "root word 0 does not point at a reflog header"));
    }
    if pool.load_u64(l.header + MAGIC_OFF)? != MAGIC {
        return Err(corrupt(l.header, "bad reflog magic"));
    }
    let half_len = pool.load_u64(l.header + HALF_LEN_OFF)?;
    if half_len != l.half_len {
        return Err(corrupt(
            l.header + HALF_LEN_OFF,
            format!("half length {half_len}, expected {}", l.half_len),
        ));
    }
    let commit = pool.load_u64(l.commit_off())?;
    let half = usize::from(commit & HALF_BIT != 0);
    let tail = commit & !HALF_BIT;
    if tail > l.half_len {
        return Err(corrupt(
            l.commit_off(),
            format!("committed tail {tail} beyond the half ({})", l.half_len),
        ));
    }
    let start = l.half_start(half);
    let bytes = pool.read(
        start,
        usize::try_from(tail).map_err(|_| corrupt(start, "tail"))?,
    )?;
    let mut index = Index::new();
    let mut off = 0usize;
    let mut last_seq: Option<u64> = None;
    while off < bytes.len() {
        let at = start + off as u64;
        let rest = bytes.get(off..).unwrap_or_default();
        let (rec, n) = record::decode(rest).map_err(|e| corrupt(at, e.to_string()))?;
        if let Some(prev) = last_seq
            && rec.seq != prev.wrapping_add(1)
            && !by_rank
        {
            return Err(corrupt(
                at,
                format!("record seq {} after {prev}: not consecutive", rec.seq),
            ));
        }
        let rank = rec.seq;
        let seq = if by_rank { rank % RACE_BOOST } else { rank };
        last_seq = Some(seq);
        if by_rank {
            let best = ranks.entry(rec.key.to_vec()).or_insert(0);
            if rank >= *best {
                *best = rank;
                apply(&mut index, rec.kind, rec.key, rec.value);
            }
        } else {
            apply(&mut index, rec.kind, rec.key, rec.value);
        }
        off += n;
    }
    let next_seq = last_seq.map_or(1, |s| s.wrapping_add(1));
    Ok((fresh_writer(half, tail, next_seq), index))
}

fn commit_word(half: usize, tail: u64) -> u64 {
    if half == 1 { tail | HALF_BIT } else { tail }
}

impl PmemLog {
    fn append(&self, kind: Kind, key: &[u8], value: &[u8]) -> Result<()> {
        self.core.check_write(key, value)?;
        if self.fault != Fault::LoseRaceWinner {
            return self.append_ranked(kind, key, value, 0);
        }
        let racing = {
            let mut f = self.in_flight.lock();
            let n = f.entry(key.to_vec()).or_insert(0);
            *n += 1;
            *n > 1
        };
        // Give the other writers of the key a chance to overlap (the bug needs a race).
        std::thread::yield_now();
        let r = self.append_ranked(kind, key, value, if racing { RACE_BOOST } else { 0 });
        let mut f = self.in_flight.lock();
        if let Some(n) = f.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                f.remove(key);
            }
        }
        r
    }

    /// Appends one record whose sequence number is raised by `boost`.
    fn append_ranked(&self, kind: Kind, key: &[u8], value: &[u8], boost: u64) -> Result<()> {
        let mut w = self.writer.lock();
        if kind == Kind::Delete {
            if self.fault == Fault::RefuseDeletesWhenFull && self.refused.load(Ordering::Relaxed) {
                // BUG (deliberate): a latched "full" state refuses the deletes that would
                // free space.
                return Err(Error::no_space(Tier::Pmem, "the reflog pool is full"));
            }
            if !self.core.index().contains_key(key) {
                // A delete of an absent key changes nothing (and needs no room).
                return Ok(());
            }
        }
        let len = record::encoded_len(key.len(), value.len()) as u64;
        let need = match kind {
            Kind::Put => len + self.delete_reserve,
            Kind::Delete => len,
        };
        if w.tail + need > self.layout.half_len {
            self.compact(&mut w)?;
            if w.tail + need > self.layout.half_len {
                self.refused.store(true, Ordering::Relaxed);
                if self.fault == Fault::LoseOnRefusal {
                    // BUG (deliberate): the old value is dropped before room is found.
                    self.core.applied(Kind::Delete, key, &[]);
                }
                if self.fault == Fault::HangWhenFull {
                    // BUG (deliberate): the refusal never comes, and the lock is kept.
                    loop {
                        std::thread::sleep(std::time::Duration::from_secs(1));
                    }
                }
                return Err(Error::no_space(
                    Tier::Pmem,
                    "the live data fills half of the reflog pool",
                ));
            }
        }
        // NOTE: encoded after a compaction, which moves the sequence numbers on.
        let rec = record::encode(w.next_seq + boost, kind, key, value)
            .ok_or_else(|| Error::invalid("key or value too long for a reflog record"))?;
        let at = self.layout.half_start(w.half) + w.tail;
        let r = self.write_record(&mut w, &rec);
        self.core.poison_on_error(r)?;
        self.core.applied(kind, key, value);
        if self.fault == Fault::FreeWhileRead {
            self.track(kind, key, at, value.len());
        }
        w.next_seq += 1;
        Ok(())
    }

    /// Steps (1)-(4) of the commit protocol, as the variant does them.
    fn write_record(&self, w: &mut Writer, rec: &[u8]) -> Result<()> {
        let off = self.layout.half_start(w.half) + w.tail;
        self.pool.write(off, rec)?;
        let new_tail = w.tail + rec.len() as u64;
        match self.fault {
            Fault::None
            | Fault::LoseRaceWinner
            | Fault::AckBeforeMovePersist
            | Fault::FreeWhileRead
            | Fault::LoseOnRefusal
            | Fault::RefuseDeletesWhenFull
            | Fault::HangWhenFull
            | Fault::LoopBatches
            | Fault::LoseFieldUpdates => {
                self.pool.persist(off, rec.len())?;
                self.publish(w.half, new_tail, true)?;
            }
            Fault::SkipPersist => {
                self.pool.persist(off, rec.len())?;
                // BUG (deliberate): the commit word is never persisted.
                self.publish(w.half, new_tail, false)?;
            }
            Fault::AckBeforePersist => {
                // BUG (deliberate): acknowledged before the group is persisted.
                w.deferred_from.get_or_insert(off);
                w.deferred += 1;
                self.publish(w.half, new_tail, false)?;
                if w.deferred >= DEFERRED_GROUP {
                    self.persist_deferred(w, new_tail)?;
                }
            }
        }
        w.tail = new_tail;
        Ok(())
    }

    fn persist_deferred(&self, w: &mut Writer, tail: u64) -> Result<()> {
        if let Some(from) = w.deferred_from.take() {
            let end = self.layout.half_start(w.half) + tail;
            let len = usize::try_from(end - from).map_err(|_| corrupt(from, "range"))?;
            self.pool.persist(from, len)?;
            self.pool.persist(self.layout.commit_off(), 8)?;
        }
        w.deferred = 0;
        Ok(())
    }

    fn publish(&self, half: usize, tail: u64, persist: bool) -> Result<()> {
        let off = self.layout.commit_off();
        // IMPORTANT: one aligned 8-byte store: the commit word is never torn.
        self.pool.store_u64(off, commit_word(half, tail))?;
        if persist {
            self.pool.persist(off, 8)?;
        }
        Ok(())
    }

    /// `free-while-read`: remembers where the value of `key` is (the record at `at`).
    fn track(&self, kind: Kind, key: &[u8], at: u64, value_len: usize) {
        let mut locs = self.locs.write();
        match kind {
            Kind::Put => {
                let off = at + (record::HEADER_LEN + key.len()) as u64;
                locs.insert(key.to_vec(), (off, value_len));
            }
            Kind::Delete => {
                locs.remove(key);
            }
        }
    }

    /// `free-while-read`: the value read from the log through its remembered offset.
    fn get_from_log(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let Some((off, len)) = self.locs.read().get(key).copied() else {
            // Not written since this open: served from the index rebuilt at recovery.
            return self.core.get(key);
        };
        // BUG (deliberate): nothing keeps the record alive once the lock is dropped (the
        // pause widens the window, so that a CI-sized run hits it).
        std::thread::sleep(std::time::Duration::from_micros(200));
        Ok(Some(self.pool.read(off, len)?.to_vec()))
    }

    /// A write batch: every record appended after the tail as one run, persisted, then one
    /// commit-word store makes them all part of the store (see "Batches" in the module
    /// doc). `loop-batches` appends them one by one instead.
    fn append_batch(&self, batch: &WriteBatch) -> Result<()> {
        self.core.check_writable()?;
        if self.fault == Fault::LoopBatches {
            // BUG (deliberate): one commit per operation; a crash inside the loop leaves
            // part of the batch.
            for (k, op) in batch.iter() {
                match op {
                    BatchOp::Put(v) => self.append(Kind::Put, k, v)?,
                    BatchOp::Delete => self.append(Kind::Delete, k, &[])?,
                }
            }
            return Ok(());
        }
        for (k, op) in batch.iter() {
            self.core.check_write(k, op.value().unwrap_or_default())?;
        }
        let mut w = self.writer.lock();
        let ops: Vec<(Kind, &[u8], &[u8])> = {
            let index = self.core.index();
            batch
                .iter()
                .filter_map(|(k, op)| match op {
                    BatchOp::Put(v) => Some((Kind::Put, k, v.as_slice())),
                    // A delete of an absent key changes nothing.
                    BatchOp::Delete => index.contains_key(k).then_some((Kind::Delete, k, &[][..])),
                })
                .collect()
        };
        if ops.is_empty() {
            return Ok(());
        }
        let len: u64 = ops
            .iter()
            .map(|(_, k, v)| record::encoded_len(k.len(), v.len()) as u64)
            .sum();
        if w.tail + len + self.delete_reserve > self.layout.half_len {
            self.compact(&mut w)?;
            if w.tail + len + self.delete_reserve > self.layout.half_len {
                self.refused.store(true, Ordering::Relaxed);
                return Err(Error::no_space(
                    Tier::Pmem,
                    "the write batch does not fit the reflog pool's half",
                ));
            }
        }
        let mut run = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
        let mut starts = Vec::with_capacity(ops.len());
        for (i, (kind, k, v)) in ops.iter().enumerate() {
            starts.push(run.len() as u64);
            let rec = record::encode(w.next_seq + i as u64, *kind, k, v)
                .ok_or_else(|| Error::invalid("key or value too long for a reflog record"))?;
            run.extend_from_slice(&rec);
        }
        let at = self.layout.half_start(w.half) + w.tail;
        let r = self.write_record(&mut w, &run);
        self.core.poison_on_error(r)?;
        for ((kind, k, v), start) in ops.iter().zip(starts) {
            self.core.applied(*kind, k, v);
            if self.fault == Fault::FreeWhileRead {
                self.track(*kind, k, at + start, v.len());
            }
        }
        w.next_seq += ops.len() as u64;
        Ok(())
    }

    /// Copies the live pairs into the other half and switches to it.
    fn compact(&self, w: &mut Writer) -> Result<()> {
        let other = 1 - w.half;
        let start = self.layout.half_start(other);
        let mut tail = 0u64;
        let mut seq = w.next_seq;
        let mut moved = Vec::new();
        {
            let index = self.core.index();
            for (k, v) in index.iter() {
                let rec = record::encode(seq, Kind::Put, k, v)
                    .ok_or_else(|| Error::invalid("pair too long for a reflog record"))?;
                if tail + rec.len() as u64 > self.layout.half_len {
                    return Err(Error::no_space(
                        Tier::Pmem,
                        "the live data does not fit half of the reflog pool",
                    ));
                }
                let r = self.pool.write(start + tail, &rec);
                self.core.poison_on_error(r)?;
                if self.fault == Fault::FreeWhileRead {
                    moved.push((k.clone(), start + tail, v.len()));
                }
                tail += rec.len() as u64;
                seq += 1;
            }
        }
        self.pool.crash_point("reflog.compact.after_copy");
        let len = usize::try_from(tail).map_err(|_| corrupt(start, "tail"))?;
        let r = if self.fault == Fault::AckBeforeMovePersist {
            // BUG (deliberate): the switch is made durable, the moved records are not.
            self.publish(other, tail, true)
        } else {
            self.pool
                .persist(start, len)
                .and_then(|()| self.publish(other, tail, true))
        };
        self.core.poison_on_error(r)?;
        self.pool.crash_point("reflog.compact.after_switch");
        let old = self.layout.half_start(w.half);
        *w = fresh_writer(other, tail, seq);
        if self.fault == Fault::FreeWhileRead {
            for (k, at, n) in moved {
                self.track(Kind::Put, &k, at, n);
            }
            // BUG (deliberate): the old half is freed at once, readers or not.
            let half = usize::try_from(self.layout.half_len).map_err(|_| corrupt(old, "half"))?;
            self.core.poison_on_error(self.pool.fill(old, half, 0))?;
        }
        self.core.compacted();
        Ok(())
    }
}

impl KvStore for PmemLog {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if self.fault == Fault::FreeWhileRead {
            return self.get_from_log(key);
        }
        self.core.get(key)
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.append(Kind::Put, key, value)
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        self.append(Kind::Delete, key, &[])
    }

    fn scan(&self, start: &[u8], limit: usize) -> Result<Vec<KvPair>> {
        self.core.scan(start, limit)
    }

    fn write_batch(&self, batch: &WriteBatch) -> Result<()> {
        self.append_batch(batch)
    }

    fn atomic_batches(&self) -> bool {
        // NOTE: `loop-batches` claims it too: that is its bug.
        true
    }

    fn native_schema_store(self: Arc<Self>) -> Option<Arc<dyn tierkv_core::SchemaStore>> {
        // Only the broken variant has one (the others get the facade's consolidated
        // adapter); a store that cannot load its catalog gets the adapter too, which
        // reports the error.
        if self.fault != Fault::LoseFieldUpdates {
            return None;
        }
        let rows = super::racy_rows::RacyRows::open(self).ok()?;
        Some(Arc::new(rows))
    }

    fn flush(&self) -> Result<()> {
        self.core.check_writable()?;
        let mut w = self.writer.lock();
        let tail = w.tail;
        let r = self.persist_deferred(&mut w, tail);
        self.core.poison_on_error(r)
    }

    fn stats(&self) -> Stats {
        self.core.stats()
    }

    fn close(&self) -> Result<()> {
        if self.core.close() || self.core.is_poisoned() {
            return Ok(());
        }
        let mut w = self.writer.lock();
        let tail = w.tail;
        self.persist_deferred(&mut w, tail)
    }

    fn check(&self) -> Result<Vec<String>> {
        let w = self.writer.lock();
        let (again, index) = recover(&self.pool, self.layout, self.fault)?;
        if again.tail != w.tail || index != *self.core.index() {
            return Err(corrupt(
                self.layout.commit_off(),
                "the committed log does not replay to the live index",
            ));
        }
        Ok(vec![format!(
            "reflog: half {}, {} of {} bytes committed, {} keys; replay matches",
            w.half,
            w.tail,
            self.layout.half_len,
            index.len()
        )])
    }
}

impl Drop for PmemLog {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;

    use tierkv::{ByteSize, Db, DurabilityMode, Options};
    use tierkv_core::media::pmem::DATA_START;

    use super::super::REFLOG;
    use super::HEADER_LEN;

    fn open(dir: &Path, variant: &str) -> tierkv::Result<Db> {
        let o = Options::default()
            .engine(&format!("reflog:{variant}"))
            .pmem_mode(DurabilityMode::Volatile)
            .pmem_size(ByteSize::kib(256));
        Db::open_with_engine(dir, o, &REFLOG)
    }

    #[test]
    fn reopen_replays_puts_deletes_and_compactions() {
        let d = tempfile::tempdir().unwrap();
        let db = open(d.path(), "correct").unwrap();
        let mut model = BTreeMap::new();
        for i in 0..3000u32 {
            let key = format!("key{:03}", i % 40).into_bytes();
            if i % 7 == 3 {
                db.delete(&key).unwrap();
                model.remove(&key);
            } else {
                let value = vec![(i % 251) as u8; (i as usize * 13) % 900];
                db.put(&key, &value).unwrap();
                model.insert(key, value);
            }
        }
        assert!(db.stats().counters["reflog_compactions"] > 0);
        let lines = db.check().unwrap();
        assert!(
            lines.iter().any(|l| l.contains("replay matches")),
            "{lines:?}"
        );
        drop(db);
        let db = open(d.path(), "correct").unwrap();
        let all = db.scan::<Vec<u8>, _>(.., 1000).unwrap();
        assert_eq!(all, model.into_iter().collect::<Vec<_>>());
    }

    #[test]
    fn a_torn_committed_record_is_corruption_not_silent_loss() {
        let d = tempfile::tempdir().unwrap();
        let db = open(d.path(), "correct").unwrap();
        db.put(b"a", &[1; 100]).unwrap();
        db.put(b"b", &[2; 100]).unwrap();
        drop(db);
        let pool = d.path().join("pmem.pool");
        let mut bytes = std::fs::read(&pool).unwrap();
        // Inside the value of the first record of half 0.
        let off = (DATA_START + HEADER_LEN) as usize + 60;
        bytes[off] ^= 0x40;
        std::fs::write(&pool, &bytes).unwrap();
        let e = open(d.path(), "correct").unwrap_err();
        assert!(e.is_corruption(), "{e}");
        assert!(e.to_string().contains("checksum"), "{e}");
    }

    #[test]
    fn a_full_pool_is_no_space_and_the_store_stays_usable() {
        let d = tempfile::tempdir().unwrap();
        let db = open(d.path(), "correct").unwrap();
        let big = vec![9u8; 40 << 10];
        let mut stored = 0;
        let err = loop {
            match db.put(format!("k{stored}").as_bytes(), &big) {
                Ok(()) => stored += 1,
                Err(e) => break e,
            }
        };
        assert!(matches!(err, tierkv::Error::NoSpace { .. }), "{err}");
        assert!(stored > 0);
        db.delete(b"k0").unwrap();
        db.put(b"k0", b"small").unwrap();
        drop(db);
        let db = open(d.path(), "correct").unwrap();
        assert_eq!(db.get(b"k0").unwrap().as_deref(), Some(&b"small"[..]));
        assert_eq!(db.get(b"k1").unwrap().map(|v| v.len()), Some(big.len()));
    }
}
