//! Crash-atomic write batches on a [`HeterMem`] (ours, issue 24; spec: `FORMAT.md` §
//! Write batches). The paper has no batches; this extends its operation log (§5.3.1) with
//! one entry per batch, whose timestamp word commits every operation of the batch at once.
//!
//! A batch runs in **one guard** and in three stages:
//! 1. **Reserve** (may wait, unpinned, like `reserve`): room in the thread's log page for
//!    the batch entry, and one *span* of DRAM — a single reservation, in one page — for
//!    the records of all its puts. Then the log page is taken ([`LogTicket`]), so the
//!    commit cannot fail for want of space.
//! 2. **Apply** (never waits): per key, inside the index's per-key synchronization, seal
//!    the current record, take a timestamp, and write the new record into the key's slot
//!    of the span (a put) or remove the key (a delete). No per-key log entry.
//! 3. **Commit**: the batch entry (two-step write: everything with ts = 0, persisted; the
//!    ts word, persisted). Durable when it returns.
//!
//! IMPORTANT: the guard stays pinned from the reservation of the span to the commit, and
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
use crate::format::log::{EntryKind, Place};
use crate::format::record::{self, record_len};
use crate::oplog::{LogTicket, NewEntry};

/// An operation applied, waiting for the commit.
#[derive(Debug)]
struct Applied {
    /// Index of its key in the batch.
    at: usize,
    ts: u64,
    record: u64,
    kind: EntryKind,
}

/// A batch between its reservation and its commit ([`HeterMem::begin_batch`]).
pub struct BatchWriter<'a> {
    mem: &'a HeterMem,
    ticket: Option<LogTicket<'a>>,
    /// The next free address of the span, and its end.
    next: u64,
    end: u64,
    applied: Vec<Applied>,
    /// The covered address of the batch entry so far.
    covered: u64,
}

/// What a batch needs: the bytes of its records (the span) and of its entry's payload.
fn sizes(batch: &WriteBatch) -> (u64, u64) {
    let mut span = 0;
    let mut payload = batch::PAYLOAD_HEADER_LEN;
    for (k, op) in batch.iter() {
        let v = op.value().map_or(0, <[u8]>::len) as u64;
        payload += batch::op_len(k.len() as u64, v);
        if let CoreOp::Put(_) = op {
            span += record_len(k.len() as u64, v);
        }
    }
    (span, payload)
}

impl HeterMem {
    /// The largest payload of a batch entry: what one log page holds.
    pub fn max_batch_payload(&self) -> Option<u64> {
        self.oplog.as_ref().map(|l| l.max_payload())
    }

    /// Refuses a batch this store cannot commit atomically: the log is off, an operation
    /// does not fit a page, or the batch entry does not fit one log page.
    pub fn check_batch(&self, batch: &WriteBatch) -> Result<()> {
        let Some(max) = self.max_batch_payload() else {
            return Err(Error::Unsupported(
                "hetermm write batches need the operation log: this store was opened with \
                 `oplog=off`, where a write is durable only once its block is flushed and a \
                 batch cannot be made crash-atomic"
                    .into(),
            ));
        };
        for (k, op) in batch.iter() {
            self.check_payload_len(k.len(), op.value().map_or(0, <[u8]>::len))?;
        }
        let (_, payload) = sizes(batch);
        if payload > max {
            return Err(Error::invalid(format!(
                "a hetermm write batch of {} operations takes {payload} bytes in its log \
                 entry; at most {max} fit one log page (24 bytes per operation besides its \
                 key and value, rounded to 8; raise page_bits for larger batches)",
                batch.len()
            )));
        }
        Ok(())
    }

    /// Stage 1: reserves the batch's log room and DRAM span (may wait, unpinned) and takes
    /// the thread's log page. Nothing is changed yet; dropping the writer (then the guard)
    /// gives everything back.
    pub fn begin_batch<'a>(&'a self, g: &Guard<'a>, b: &WriteBatch) -> Result<BatchWriter<'a>> {
        self.check_batch(b)?;
        self.health.check_writable()?;
        if self.replaying.load(Ordering::Acquire) {
            return Err(Error::Unsupported(
                "hetermm: no write batch while recovery replays the log".into(),
            ));
        }
        let (span, payload) = sizes(b);
        let log = self.oplog.as_ref().ok_or_else(|| {
            Error::Unsupported("hetermm write batches need the operation log".into())
        })?;
        // A batch of deletes only needs no record, so (like a delete) it is admitted however
        // full the pool is.
        if span > 0 {
            self.admit_write(g)?;
        }
        self.reserve_log(g, 0, payload as usize)?;
        self.release_reservation(g);
        let start = if span > 0 {
            let a = self.alloc_record(g, span)?;
            g.set_reserved(Some((a, span)));
            a
        } else {
            0
        };
        // IMPORTANT: from here to the commit, nothing waits (module doc).
        let ticket = log
            .begin(&self.nvm, g.slot(), 0, payload as usize)
            .inspect_err(|e| {
                self.note_no_space(e);
            })?;
        self.check_clock()?;
        // The span leaves the guard's reservation: from here on the batch fills it (a
        // failure pads what is left, `BatchWriter::fail`).
        g.take_reserved();
        Ok(BatchWriter {
            mem: self,
            ticket: Some(ticket),
            next: start,
            end: start + span,
            applied: Vec::with_capacity(b.len()),
            covered: 0,
        })
    }
}

impl BatchWriter<'_> {
    /// The slot of the span for the record of a put of this key and value.
    pub fn slot(&mut self, key: &[u8], value: &[u8]) -> Result<u64> {
        let len = record_len(key.len() as u64, value.len() as u64);
        if self.next + len > self.end {
            return Err(Error::invalid(
                "hetermm batch: more records than its reserved span",
            ));
        }
        let a = self.next;
        self.next += len;
        Ok(a)
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
        let payload = batch::encode(&ops);
        let e = NewEntry {
            ts: mem.next_ts(),
            kind: EntryKind::Batch,
            key: &[],
            value: &payload,
            at: Place {
                address: self.covered,
                record: 0,
            },
        };
        mem.pool().crash_point("hetermm.batch.applied");
        if let Err(err) = mem
            .run_hook(HookPoint::BatchApplied, &[])
            .and_then(|()| ticket.commit(&mem.nvm, &e))
        {
            return Err(self.fail(g, err));
        }
        mem.pool().crash_point("hetermm.batch.committed");
        if let Some(log) = &mem.oplog {
            log.settle(g.slot());
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

    /// A failure after the first operation was applied: the rest of the span becomes
    /// padding (its page stays walkable) and the store is poisoned — DRAM holds operations
    /// that the log does not.
    pub fn fail(&mut self, g: &Guard<'_>, e: Error) -> Error {
        let mem = self.mem;
        if self.next < self.end {
            let (at, len) = (self.next, self.end - self.next);
            self.next = self.end;
            if mem
                .dram_page(at)
                .and_then(|p| dram_record::write_padding(p, mem.geo.page_offset(at), len))
                .is_ok()
            {
                g.invalidate(at, at);
            }
        }
        mem.health
            .poison(format!("hetermm: a write batch failed half applied: {e}"));
        e
    }
}
