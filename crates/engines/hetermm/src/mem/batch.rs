//! Crash-atomic write batches on a [`HeterMem`] (ours, issue 24; spec: `FORMAT.md` §
//! Write batches). The paper has no batches; this extends its operation log (§5.3.1) with
//! one entry per batch, whose timestamp word commits every operation of the batch at once.
//!
//! A batch runs in **one guard** and in three stages:
//! 1. **Reserve** (may wait, unpinned, holding nothing): the records of all its puts,
//!    reserved at once in the thread's DRAM page and as many fresh pages as they need
//!    (`alloc.rs` `alloc_batch_records`: it waits only while it holds none); then the log
//!    room — the thread's log page for one batch entry ([`LogTicket`]), or, for a batch
//!    whose entry does not fit one log page, the pages for its parts and its commit
//!    ([`SpanTicket`]) — so the commit cannot fail for want of space.
//! 2. **Apply** (never waits): per key, inside the index's per-key synchronization, seal
//!    the current record, take a timestamp, and write the new record into the key's slot
//!    reserved for it (a put) or remove the key (a delete). No per-key log entry.
//! 3. **Commit**: the batch entry, written whole and persisted (option `two_step_write`:
//!    everything with ts = 0, persisted; the ts word, persisted); or each part, whole and
//!    persisted, then the commit the same way.
//!    Durable when it returns.
//!
//! IMPORTANT: the guard stays pinned from the reservation of the records to the commit, and
//! nothing in between waits. The flusher copies a block only after moving off_ReadOnly
//! past it and synchronizing the epochs (`flush.rs` step 1), so no record of an
//! uncommitted batch reaches pmem, and the invalidations the batch causes are keyed at
//! blocks that cannot be flushed before it commits (`guard.rs`). A crash before the
//! commit leaves nothing of the batch on pmem but an uncommitted entry; after it, the
//! entry holds every operation.
//!
//! A lock-free index may run an operation again (a lost compare-and-swap): the put writes
//! its record again in the same slot (the record was installed nowhere) with a new
//! timestamp; only the last run's effect is recorded in the guard.
//!
//! Thread safety: a [`BatchWriter`] belongs to the thread of its guard.

use std::sync::atomic::Ordering;

use tierkv_core::{BatchOp as CoreOp, Error, Result, WriteBatch};

use super::guard::Outcome;
use super::{Guard, HeterMem, HookPoint};
use crate::dram::record as dram_record;
use crate::format::batch::{self, BatchOp};
use crate::format::log::{self, EntryKind, Place};
use crate::format::record::{self, record_len};
use crate::oplog::{LogTicket, NewEntry, SpanTicket, pack_parts};

/// An operation applied, waiting for the commit.
#[derive(Debug)]
struct Applied {
    /// Index of its key in the batch.
    at: usize,
    ts: u64,
    record: u64,
    kind: EntryKind,
}

/// The log room a batch holds: its thread's page for one batch entry, or pages for the
/// parts and the commit of a batch that spans pages.
enum Ticket<'a> {
    Entry(LogTicket<'a>),
    Span(SpanTicket<'a>),
}

/// A batch between its reservation and its commit ([`HeterMem::begin_batch`]).
pub struct BatchWriter<'a> {
    mem: &'a HeterMem,
    ticket: Option<Ticket<'a>>,
    /// The reserved records of the batch's puts (address, length), in order, and the next
    /// one unused.
    slots: Vec<(u64, u64)>,
    next: usize,
    applied: Vec<Applied>,
    /// The covered address of the batch entry so far.
    covered: u64,
}

/// What a batch needs: the bytes of its puts' records, of each operation in the log, and
/// of its payload as one entry.
struct Needs {
    records: Vec<u64>,
    ops: Vec<u64>,
    payload: u64,
}

fn needs(b: &WriteBatch) -> Needs {
    let mut records = Vec::new();
    let mut ops = Vec::with_capacity(b.len());
    for (k, op) in b.iter() {
        let v = op.value().map_or(0, <[u8]>::len) as u64;
        ops.push(batch::op_len(k.len() as u64, v));
        if let CoreOp::Put(_) = op {
            records.push(record_len(k.len() as u64, v));
        }
    }
    let payload = batch::payload_len(ops.iter().copied());
    Needs {
        records,
        ops,
        payload,
    }
}

/// Pages of `room` bytes that records of these lengths take when allocated in order, each
/// page from its start (next fit).
fn pages_for(lens: &[u64], room: u64) -> usize {
    let (mut pages, mut used) = (0, room);
    for &len in lens {
        if used + len > room {
            (pages, used) = (pages + 1, 0);
        }
        used += len;
    }
    pages
}

impl HeterMem {
    /// The largest payload of a single batch entry: what one log page holds (a larger
    /// batch spans pages).
    pub fn max_batch_payload(&self) -> Option<u64> {
        self.oplog.as_ref().map(|l| l.max_payload())
    }

    /// The most DRAM pages one write batch may take: `max(1, free_pages + overlap_blocks ×
    /// 2^(m-k))` (128 with the defaults). Its records are reserved at once from the free
    /// pages, and the flusher can always free more than that (`alloc.rs`
    /// `alloc_batch_records`).
    pub fn max_batch_dram_pages(&self) -> usize {
        let ppb = usize::try_from(self.geo.pages_per_block()).unwrap_or(usize::MAX);
        let overlap = usize::try_from(self.opts.overlap_blocks).unwrap_or(usize::MAX);
        self.free_pages
            .saturating_add(overlap.saturating_mul(ppb))
            .max(1)
    }

    /// The most log pages one write batch may take: `max(1, 2 × 2^(m-k))` (two blocks' worth:
    /// 128 with the defaults; FORMAT.md § Limits).
    pub fn max_batch_log_pages(&self) -> usize {
        let ppb = usize::try_from(self.geo.pages_per_block()).unwrap_or(usize::MAX);
        ppb.saturating_mul(2).max(1)
    }

    /// Refuses a batch this store cannot commit atomically: the log is off, an operation
    /// does not fit a page or a batch part, or the batch needs more than
    /// [`max_batch_log_pages`](Self::max_batch_log_pages) log pages or
    /// [`max_batch_dram_pages`](Self::max_batch_dram_pages) DRAM pages.
    pub fn check_batch(&self, b: &WriteBatch) -> Result<()> {
        let Some(max) = self.max_batch_payload() else {
            return Err(Error::Unsupported(
                "hetermm write batches need the operation log: this store was opened with \
                 `oplog=off`, where a write is durable only once its block is flushed and a \
                 batch cannot be made crash-atomic"
                    .into(),
            ));
        };
        for (k, op) in b.iter() {
            let v = op.value().map_or(0, <[u8]>::len);
            self.check_payload_len(k.len(), v)?;
            let part = batch::PAYLOAD_HEADER_LEN + batch::op_len(k.len() as u64, v as u64);
            if part > max {
                return Err(Error::invalid(format!(
                    "a hetermm write batch operation of a {}-byte key and a {v}-byte value \
                     takes {part} bytes in a batch part; at most {max} fit one log page \
                     (a key and value of at most {} bytes; raise page_bits)",
                    k.len(),
                    max - batch::PAYLOAD_HEADER_LEN - batch::OP_HEADER_LEN
                )));
            }
        }
        let n = needs(b);
        let (log_limit, dram_limit) = (self.max_batch_log_pages(), self.max_batch_dram_pages());
        let page = self.geo.page_size();
        let max_entry = max + log::ENTRY_HEADER_LEN;
        let log_fits = n.payload <= max
            || pack_parts(&vec![max_entry; log_limit], &n.ops, max_entry).is_some();
        let dram_pages = pages_for(&n.records, page - self.geo.prefix());
        if !log_fits || dram_pages > dram_limit {
            return Err(Error::invalid(format!(
                "a hetermm write batch of {} operations takes {} bytes in the log and {} \
                 bytes of records ({dram_pages} DRAM pages); at most {log_limit} log pages \
                 (two blocks) and {dram_limit} DRAM pages (free_pages + overlap_blocks × \
                 pages per block) of {page} bytes fit one batch: split the batch, or raise \
                 page_bits, block_bits or free_pages",
                b.len(),
                n.payload,
                n.records.iter().sum::<u64>()
            )));
        }
        Ok(())
    }

    /// Stage 1: reserves the batch's log room and DRAM records (may wait, unpinned, holding
    /// neither) and takes the thread's log page(s). Nothing is changed yet; dropping the
    /// writer (then the guard) gives everything back.
    pub fn begin_batch<'a>(&'a self, g: &Guard<'a>, b: &WriteBatch) -> Result<BatchWriter<'a>> {
        self.check_batch(b)?;
        self.health.check_writable()?;
        if self.replaying.load(Ordering::Acquire) {
            return Err(Error::Unsupported(
                "hetermm: no write batch while recovery replays the log".into(),
            ));
        }
        let n = needs(b);
        let log = self.oplog.as_ref().ok_or_else(|| {
            Error::Unsupported("hetermm write batches need the operation log".into())
        })?;
        let spans = n.payload > log.max_payload();
        let dram_pages = pages_for(&n.records, self.geo.page_size() - self.geo.prefix());
        // The defragmentation request of a wait for a log block (`alloc.rs`
        // `wait_for_log_block`): one for all of the batch's retries.
        let mut space = None;
        loop {
            // A batch of deletes only needs no record, so (like a delete) it is admitted
            // however full the pool is.
            if !n.records.is_empty() {
                self.admit_write(g)?;
            }
            if spans {
                self.wait_for_log_room(g, log);
            } else {
                self.reserve_log(g, 0, n.payload as usize)?;
            }
            self.release_reservation(g);
            let slots = if n.records.is_empty() {
                Vec::new()
            } else {
                self.alloc_batch_records(g, &n.records, dram_pages)?
            };
            // IMPORTANT: from here to the commit, nothing waits (module doc).
            let ticket = if spans {
                log.begin_span(&self.nvm, g.slot(), &n.ops, n.records.is_empty())
                    .map(Ticket::Span)
            } else {
                log.begin(&self.nvm, g.slot(), 0, n.payload as usize)
                    .map(Ticket::Entry)
            };
            let ticket = match ticket.and_then(|t| self.check_clock().map(|()| t)) {
                Ok(t) => t,
                Err(e) => {
                    self.give_back_all(g, slots);
                    match e {
                        e @ Error::NoSpace { .. } if spans && !n.records.is_empty() => {
                            self.counters.batch_log_waits.incr();
                            let request = self.space_request(&e, &mut space);
                            self.wait_for_log_block(g, log, e, request)?;
                            continue;
                        }
                        // Deletes only (log blocks from the reserve too): they hold no
                        // record, and wait like a delete's log page (`alloc.rs`
                        // `reserve_log`).
                        e @ Error::NoSpace { .. } if spans => {
                            let request = self.note_no_space(&e).unwrap_or_default();
                            self.wait_for_space(g, e, request)?;
                            continue;
                        }
                        e => {
                            self.note_no_space(&e);
                            return Err(e);
                        }
                    }
                }
            };
            return Ok(BatchWriter {
                mem: self,
                ticket: Some(ticket),
                slots,
                next: 0,
                applied: Vec::with_capacity(b.len()),
                covered: 0,
            });
        }
    }
}

impl BatchWriter<'_> {
    /// The reserved record for a put of this key and value (the batch's next put).
    pub fn slot(&mut self, key: &[u8], value: &[u8]) -> Result<u64> {
        let len = record_len(key.len() as u64, value.len() as u64);
        match self.slots.get(self.next) {
            Some(&(a, l)) if l == len => {
                self.next += 1;
                Ok(a)
            }
            _ => Err(Error::invalid(
                "hetermm batch: more records than it reserved",
            )),
        }
    }

    /// Stage 2, a put (the body of the index's per-key compute; may run again for a
    /// lock-free retry): seals `cur`, writes the record into `slot` with a new timestamp;
    /// returns the timestamp.
    pub fn write_put(&self, cur: Option<u64>, slot: u64, key: &[u8], value: &[u8]) -> Result<u64> {
        let mem = self.mem;
        if let Some(a) = cur {
            mem.seal(a)?;
        }
        let len = record_len(key.len() as u64, value.len() as u64);
        let cap = (len - record::HEADER_LEN - key.len() as u64) as u32;
        let ts = mem.next_ts();
        let page = mem.dram_page(slot)?;
        dram_record::write_new(page, mem.geo.page_offset(slot), ts, key, value, cap)?;
        Ok(ts)
    }

    /// Stage 2, a delete (the body of the index's per-key compute): seals `cur`; returns
    /// the delete's timestamp and the frontier it read.
    pub fn write_delete(&self, cur: u64) -> Result<(u64, u64)> {
        let mem = self.mem;
        mem.seal(cur)?;
        let ts = mem.next_ts();
        Ok((ts, mem.off_read_only()))
    }

    /// A put of the batch's key number `at` was installed at `slot` (replacing `old`).
    pub fn put_done(
        &mut self,
        g: &Guard<'_>,
        at: usize,
        key: &[u8],
        old: Option<u64>,
        slot: u64,
        ts: u64,
    ) {
        g.record(key, old, Outcome::Installed(slot));
        self.covered = self.covered.max(slot).max(old.unwrap_or(0));
        self.applied.push(Applied {
            at,
            ts,
            record: slot,
            kind: EntryKind::Put,
        });
    }

    /// A delete of the batch's key number `at` removed `old`.
    pub fn delete_done(
        &mut self,
        g: &Guard<'_>,
        at: usize,
        key: &[u8],
        old: u64,
        (ts, frontier): (u64, u64),
    ) {
        g.record(key, Some(old), Outcome::Removed(frontier));
        self.covered = self.covered.max(old).max(frontier);
        self.applied.push(Applied {
            at,
            ts,
            record: old,
            kind: EntryKind::Delete,
        });
    }

    /// Stage 3: writes and commits the batch entry (nothing if every operation was a
    /// delete of an absent key). A failure here leaves applied operations in DRAM that the
    /// log does not hold: the store is poisoned.
    pub fn commit(mut self, g: &Guard<'_>, b: &WriteBatch) -> Result<()> {
        let mem = self.mem;
        let Some(ticket) = self.ticket.take() else {
            return Ok(());
        };
        if self.applied.is_empty() {
            return Ok(());
        }
        let keys: Vec<(&[u8], &CoreOp)> = b.iter().collect();
        let ops: Vec<BatchOp<'_>> = self
            .applied
            .iter()
            .filter_map(|a| {
                let (key, op) = keys.get(a.at)?;
                Some(BatchOp {
                    ts: a.ts,
                    record: a.record,
                    kind: a.kind,
                    key,
                    value: op.value().unwrap_or_default(),
                })
            })
            .collect();
        let ts = mem.next_ts();
        mem.pool().crash_point("hetermm.batch.applied");
        let committed = mem
            .run_hook(HookPoint::BatchApplied, &[])
            .and_then(|()| match ticket {
                Ticket::Entry(ticket) => {
                    let payload = batch::encode(&ops);
                    let e = NewEntry {
                        ts,
                        kind: EntryKind::Batch,
                        key: &[],
                        value: &payload,
                        at: Place {
                            address: self.covered,
                            record: 0,
                        },
                    };
                    ticket.commit(&mem.nvm, &e)
                }
                Ticket::Span(ticket) => ticket.commit(&mem.nvm, ts, self.covered, &ops),
            });
        if let Err(err) = committed {
            return Err(self.fail(g, err));
        }
        mem.pool().crash_point("hetermm.batch.committed");
        if let Some(log) = &mem.oplog {
            log.settle(g.slot());
        }
        // Readers that found the batch's records wait for this (`access.rs`).
        for a in self.applied.iter().filter(|a| a.kind == EntryKind::Put) {
            if a.record >= mem.off_dram() {
                let page = mem.dram_page(a.record)?;
                crate::dram::record::set_logged(page, mem.geo.page_offset(a.record), a.ts);
            }
        }
        let c = &mem.counters;
        c.batches.incr();
        // The read cache's policy weighs reads against writes per thread (`policy.rs`).
        mem.threads
            .slot(g.slot())
            .writes
            .fetch_add(ops.len() as u64, Ordering::Relaxed);
        for (a, op) in self.applied.iter().zip(&ops) {
            match a.kind {
                EntryKind::Put => {
                    c.out_of_place.incr();
                    c.ops
                        .user_bytes_written
                        .add((op.key.len() + op.value.len()) as u64);
                }
                _ => c.deletes.incr(),
            }
        }
        Ok(())
    }

    /// A failure after the first operation was applied: the unused records become padding
    /// (their pages stay walkable) and the store is poisoned — DRAM holds operations that
    /// the log does not.
    pub fn fail(&mut self, g: &Guard<'_>, e: Error) -> Error {
        let mem = self.mem;
        let unused = self.slots.split_off(self.next.min(self.slots.len()));
        mem.give_back_all(g, unused);
        mem.health
            .poison(format!("hetermm: a write batch failed half applied: {e}"));
        e
    }
}
