//! Garbage collection of CLog and DLog chunks (FORMAT.md § Garbage collection; the paper
//! only says that separating complete records from deltas "reduces data migration during
//! garbage collection", §I).
//!
//! - **Policy** ([`choose_victim`], pure): the sealed CLog or DLog chunk with the oldest
//!   epoch (a log-structured cleaner in log order), never an open chunk or a catalog chunk.
//!   [`needs_gc`] starts collection when free chunks fall below `gc_threshold` of the
//!   region (at least a floor that leaves room for every open chunk).
//! - **Mechanism** ([`FocusStore::gc_step`], synchronous, tests call it): read the victim's
//!   records; for each key found there, under the key's stripe lock, if the key's live
//!   chain has an entry in the victim, rewrite the row as one complete record (a restore
//!   point) in GC's own open CLog chunk; if a tombstone of the victim still shadows an
//!   absent key, append it again; if a write batch's commit record is there while members
//!   of the batch remain in other chunks, append it again (`batch.rs`). Then no chain, no
//!   index entry and no batch member elsewhere needs the victim:
//!   wait for readers that may still walk it (the reclaim lock), clear its header's
//!   magic, persist, free it.
//! - **Thread** `focus:gc` (started at open, joined at close): wakes every 20 ms or when a
//!   writer signals, and runs a *pass* (steps while [`needs_gc`] holds, at most one per
//!   chunk sealed when the pass began). Writers stall (without any lock held) while free
//!   chunks are below the hard floor, until GC has made room or a pass that began after
//!   they started waiting gave up ([`Passes`]).
//!
//! Crash safety: every rewrite is an ordinary restore point (newer sequence number than
//! the chain it replaces), so a crash at any moment of a step leaves the victim's records
//! superseded or still needed and still there; once its magic is cleared (persisted)
//! recovery frees it as an uninitialised chunk.
//!
//! Thread safety: steps are serialized by `gc_lock`.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tierkv_core::{Error, FieldId, Result};

use crate::format::chunk::{ChunkHeader, ChunkKind, HEADER_LEN as CHUNK_HEADER_LEN};
use crate::format::record::{HEADER_LEN, RecordKind};
use crate::store::{FocusStore, PLAIN_SCHEMA, index_key};
use crate::swim;

/// Picks the chunk to collect: the sealed CLog/DLog chunk with the lowest epoch.
pub fn choose_victim(chunks: &[(u64, ChunkKind, u32)], open: &BTreeSet<u64>) -> Option<u64> {
    chunks
        .iter()
        .filter(|(off, kind, _)| *kind != ChunkKind::Catalog && !open.contains(off))
        .min_by_key(|(_, _, epoch)| *epoch)
        .map(|(off, _, _)| *off)
}

/// The fewest free chunks writers wait for: room for GC's own output while every shard
/// opens a new pair.
pub fn hard_floor(shards: usize) -> u64 {
    2 * shards as u64 + 4
}

/// True when free chunks are below `threshold` of `total` (or the hard floor).
pub fn needs_gc(free: u64, total: u64, threshold: f64, shards: usize) -> bool {
    (free as f64) < threshold * total as f64 || free < hard_floor(shards) + 2
}

impl FocusStore {
    /// One step of GC: collects the victim the policy picks; false when there is none.
    pub fn gc_step(&self) -> Result<bool> {
        let _g = self.gc_lock.lock();
        let open: BTreeSet<u64> = self.plog.open_chunks().iter().map(|a| a.off).collect();
        let Some(victim) = choose_victim(&self.plog.chunks(), &open) else {
            return Ok(false);
        };
        let size = self.plog.chunk_size();
        let pool = self.plog.pool().clone();
        let header = ChunkHeader::decode(pool.read(victim, CHUNK_HEADER_LEN)?, victim)?
            .ok_or_else(|| {
                Error::corruption(
                    tierkv_core::Tier::Pmem,
                    victim,
                    "a live chunk without header",
                )
            })?;
        // The keys with a record in the victim (tombstones apart).
        let mut keys: BTreeSet<(u32, Vec<u8>)> = BTreeSet::new();
        let mut tombs: BTreeSet<(u32, Vec<u8>)> = BTreeSet::new();
        // Commit records of write batches: (batch id, members).
        let mut commits: Vec<(u64, u32)> = Vec::new();
        crate::recovery::scan_chunk(&pool, victim, size, header, |_, rh, rec, _| {
            if rh.kind == RecordKind::Commit {
                let body = rec.get(rh.body_off() as usize..).unwrap_or_default();
                let members = body
                    .get(..4)
                    .and_then(|b| b.try_into().ok())
                    .map_or(0, u32::from_le_bytes);
                commits.push((rh.seq, members));
                return Ok(());
            }
            let key = rec
                .get(HEADER_LEN..HEADER_LEN + usize::from(rh.key_len))
                .unwrap_or_default();
            let set = if rh.kind == RecordKind::Tombstone {
                &mut tombs
            } else {
                &mut keys
            };
            set.insert((rh.schema, key.to_vec()));
            Ok(())
        })?;
        let inside = |off: u64| off >= victim && off < victim + size;
        for (schema, key) in &keys {
            self.gc_rewrite(*schema, key, &inside)?;
        }
        for (schema, key) in &tombs {
            let ikey = index_key(*schema, key);
            let _s = self.stripes.lock(&ikey);
            if self.index_get(&ikey).is_none() {
                self.append_gc_record(ChunkKind::CLog, RecordKind::Tombstone, *schema, key, b"")?;
                self.counters.gc_tombstones.incr();
            }
        }
        // IMPORTANT: a commit record stays (appended again, persisted) while members of
        // its batch remain in other chunks: recovery reads them only with it.
        let mut dropped = Vec::new();
        for (id, members) in commits {
            if self.batches.members_beyond(id, victim) {
                self.append_commit(id, members, true)?;
                self.counters.gc_commits.incr();
            } else {
                dropped.push(id);
            }
        }
        pool.crash_point("focus.gc.rewrites_done");
        {
            // IMPORTANT: no reader may still walk the victim when it is freed.
            let _w = self.reclaim.write();
            self.plog.release(victim)?;
        }
        self.batches.chunk_freed(victim);
        for id in dropped {
            self.batches.forget(id);
        }
        pool.crash_point("focus.gc.chunk_freed");
        self.counters.gc_chunks.incr();
        Ok(true)
    }

    /// Rewrites the row of `key` whole when its live chain has an entry inside the victim.
    fn gc_rewrite(&self, schema: u32, key: &[u8], inside: &dyn Fn(u64) -> bool) -> Result<()> {
        let ikey = index_key(schema, key);
        let _s = self.stripes.lock(&ikey);
        let Some(e) = self.index_get(&ikey) else {
            return Ok(());
        };
        let pool = self.plog.pool();
        let tail = e.tail.load(Ordering::Acquire);
        let mut at = tail;
        let mut touches = false;
        for _ in 0..swim::MAX_CHAIN {
            touches |= inside(at);
            let h = swim::header(pool, at)?;
            if h.kind != RecordKind::Delta {
                break;
            }
            at = h.prev;
        }
        if !touches {
            return Ok(());
        }
        let off = if schema == PLAIN_SCHEMA {
            let h = swim::header(pool, tail)?;
            let v = swim::body(pool, tail, &h)?.to_vec();
            self.append_gc_record(ChunkKind::CLog, RecordKind::Row, schema, key, &v)?
        } else {
            let info = self.info(schema)?;
            let all: Vec<FieldId> = (0..info.schema.len() as FieldId).collect();
            let row = swim::read_fields(pool, &info.layout, tail, &all, (0, 0))?.values;
            let refs: Vec<&[u8]> = row.iter().map(Vec::as_slice).collect();
            let body = info.layout.encode(&refs);
            self.append_gc_record(ChunkKind::CLog, RecordKind::Row, schema, key, &body)?
        };
        self.replace_tail(&e, tail, off)?;
        pool.crash_point("focus.gc.row_rewritten");
        if schema != PLAIN_SCHEMA {
            let info = self.info(schema)?;
            self.cache_after_write(
                &info,
                &ikey,
                &e,
                tail,
                off,
                crate::cache_ops::CacheWrite::Retag,
            );
        }
        self.counters.gc_rewrites.incr();
        Ok(())
    }
}

/// How GC and writers wake each other, apart from the store (the thread holds it, and
/// holds the store only during a step, so that dropping the store is not delayed).
#[derive(Default)]
pub struct Signal {
    m: parking_lot::Mutex<()>,
    cv: parking_lot::Condvar,
    stop: std::sync::atomic::AtomicBool,
}

impl Signal {
    /// Wakes every waiter.
    pub fn notify(&self) {
        let _g = self.m.lock();
        self.cv.notify_all();
    }

    /// Waits for a notification or `timeout`.
    pub fn wait(&self, timeout: Duration) {
        let mut g = self.m.lock();
        if !self.stopped() {
            self.cv.wait_for(&mut g, timeout);
        }
    }

    /// Asks the thread to stop and wakes it.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.notify();
    }

    /// True once `stop` was called.
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }
}

/// The GC thread's loop: a pass whenever the policy asks for one, until stopped.
pub fn run(store: Weak<FocusStore>, signal: Arc<Signal>, threshold: f64) {
    while !signal.stopped() {
        {
            let Some(s) = store.upgrade() else { return };
            if needs_gc(
                s.plog.free_chunks(),
                s.plog.total_chunks(),
                threshold,
                s.opts.log_shards,
            ) && !s.gc_pass(&signal, threshold)
            {
                return;
            }
        }
        signal.wait(Duration::from_millis(20));
    }
}

/// What writers waiting for room learn from GC (FORMAT.md § Garbage collection, "A full
/// pool"): passes are numbered, and a pass that ended without bringing free chunks back
/// to the writers' floor publishes its number, so a writer refuses as soon as a pass that
/// began after it started waiting gave up, and not after a fixed time.
#[derive(Debug)]
pub struct Passes {
    /// Passes begun (the number of the latest).
    pub begun: AtomicU64,
    /// The latest pass that ended with free chunks below the writers' floor and nothing
    /// left to try (0: none).
    pub gave_up: AtomicU64,
    /// Writes that superseded or removed a record (new garbage for GC).
    pub garbage: AtomicU64,
    /// `garbage` at the start of the latest pass that collected every sealed chunk (or
    /// found no victim), `u64::MAX` if none: while it is unchanged, a new pass would find
    /// exactly what that one found.
    pub exhausted_at: AtomicU64,
}

impl Default for Passes {
    fn default() -> Passes {
        Passes {
            begun: AtomicU64::new(0),
            gave_up: AtomicU64::new(0),
            garbage: AtomicU64::new(0),
            exhausted_at: AtomicU64::new(u64::MAX),
        }
    }
}

impl FocusStore {
    /// One GC pass: steps while the policy asks for them, at most one per chunk that was
    /// sealed when the pass began (oldest first, so a pass that uses its budget has
    /// compacted everything that was there). False when GC failed and poisoned the store.
    fn gc_pass(&self, signal: &Signal, threshold: f64) -> bool {
        let p = &self.passes;
        let id = p.begun.fetch_add(1, Ordering::SeqCst) + 1;
        let garbage = p.garbage.load(Ordering::SeqCst);
        let exhausted = if p.exhausted_at.load(Ordering::SeqCst) == garbage {
            // Nothing was superseded since a pass collected everything: same outcome.
            true
        } else {
            let open: BTreeSet<u64> = self.plog.open_chunks().iter().map(|a| a.off).collect();
            let budget = self
                .plog
                .chunks()
                .iter()
                .filter(|(off, kind, _)| *kind != ChunkKind::Catalog && !open.contains(off))
                .count() as u64;
            let mut steps = 0u64;
            loop {
                if signal.stopped() {
                    return true;
                }
                if !needs_gc(
                    self.plog.free_chunks(),
                    self.plog.total_chunks(),
                    threshold,
                    self.opts.log_shards,
                ) {
                    break false;
                }
                if steps >= budget {
                    break true;
                }
                match self.gc_step() {
                    Ok(true) => {
                        steps += 1;
                        signal.notify();
                    }
                    Ok(false) => break true,
                    // A pool full of live data: no room for this step's rewrites. Nothing
                    // is lost (rows already rewritten supersede their old copies; the
                    // victim stays until a later step frees it), so the store stays
                    // usable: writers get `NoSpace` and deletes make room. Not recorded
                    // as exhausted: the next pass may find room the rewrites made.
                    Err(Error::NoSpace { .. }) => {
                        self.counters.gc_no_room.incr();
                        if self.plog.free_chunks() < hard_floor(self.opts.log_shards) {
                            p.gave_up.fetch_max(id, Ordering::SeqCst);
                        }
                        signal.notify();
                        return true;
                    }
                    Err(e) => {
                        self.poison(format!("gc failed: {e}"));
                        signal.notify();
                        return false;
                    }
                }
            }
        };
        if exhausted {
            p.exhausted_at.store(garbage, Ordering::SeqCst);
            if self.plog.free_chunks() < hard_floor(self.opts.log_shards) {
                p.gave_up.fetch_max(id, Ordering::SeqCst);
            }
        }
        signal.notify();
        true
    }
}

/// Spawns the GC thread.
pub fn spawn(store: &Arc<FocusStore>) -> Result<std::thread::JoinHandle<()>> {
    let weak = Arc::downgrade(store);
    let signal = store.signal.clone();
    let threshold = store.opts.gc_threshold;
    std::thread::Builder::new()
        .name("focus:gc".into())
        .spawn(move || run(weak, signal, threshold))
        .map_err(|e| Error::io("spawn", "focus:gc", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn victim_is_the_oldest_sealed_log_chunk() {
        let chunks = [
            (100, ChunkKind::Catalog, 1),
            (200, ChunkKind::CLog, 2),
            (300, ChunkKind::DLog, 3),
            (400, ChunkKind::CLog, 4),
        ];
        let open: BTreeSet<u64> = [200].into_iter().collect();
        assert_eq!(choose_victim(&chunks, &open), Some(300));
        let open: BTreeSet<u64> = [200, 300, 400].into_iter().collect();
        assert_eq!(choose_victim(&chunks, &open), None);
    }

    #[test]
    fn gc_starts_below_the_threshold_or_the_floor() {
        assert!(!needs_gc(50, 100, 0.25, 4));
        assert!(needs_gc(20, 100, 0.25, 4));
        assert!(needs_gc(hard_floor(4) + 1, 1000, 0.0, 4));
    }
}
