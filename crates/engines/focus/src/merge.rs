//! The cacheline-aware in-place merge (FOCUS §V-B, Algorithm 1; FORMAT.md § Merge): the
//! fixed-field values of a row's deltas are written into its complete record in the CLog,
//! each dirty cache line is persisted once and the record's body checksum is renewed. The
//! chain itself stays as it is on pmem ("the index records the new version in the
//! subsequent chain", §V-B), so recovery never depends on a merge; in DRAM the index entry
//! remembers the newest merged delta, and a read that reaches it jumps straight to the
//! complete record: after a merge a read takes one step plus one per newer delta.
//!
//! Why the chain stays: if the index left the merged deltas, GC could free some of them and
//! not others, and recovery, which takes the newest version per key by sequence number,
//! could then follow a surviving stale delta over the merged record.
//!
//! - **Which rows**: an update that appended a delta of fixed fields only queues its row
//!   (a bounded queue; a full queue drops the request, the restore point still bounds the
//!   chain). A chain with a variable-field delta is left to the restore point: its value
//!   cannot move into the record in place.
//! - **Order**: deltas are applied oldest first, so the newest value of each field wins.
//! - **Races**: a merge holds the row's stripe lock, so no update of the row runs during it
//!   and none is lost; readers that walk the chain meanwhile read merged fields from the
//!   deltas (newer entries first), and the entry's seqlock (`Entry::merging`) makes a
//!   reader that reads the record's bytes while they change try again.
//! - **Algorithm 1, as intended**: the fields' byte ranges are sorted; a pending span of
//!   cache lines grows while the next range starts within one line of its end and is
//!   persisted in one call otherwise, so every dirty line is persisted exactly once (read
//!   literally, Algorithm 1 would also flush the clean lines between two fields less than a
//!   line apart; we flush dirty lines only). `merge=naive` persists each field on its own
//!   (the comparison of §VI-C, Fig. 12b).
//!
//! Crash cases (FORMAT.md § Merge): until the new body checksum is persisted, the record's
//! `bcrc` may not match its body; recovery accepts such a record because a valid delta of
//! the same key points at it (a torn append never has one), and every field the merge
//! touched is still in those deltas, which a read finds first. After the checksum, the
//! record is valid on its own. The chain is unchanged, so GC treats it as any other.
//!
//! Thread safety: the thread `focus:merge` runs [`FocusStore::merge_row`]; tests call it
//! directly.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tierkv_core::format::checksum::masked_crc32c;
use tierkv_core::media::pmem::CACHE_LINE;
use tierkv_core::{Error, FieldKind, Result};

use crate::format::delta::Delta;
use crate::format::record::RecordKind;
use crate::gc::Signal;
use crate::store::{FocusStore, index_key};
use crate::swim;

/// How merges persist.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MergeMode {
    /// Algorithm 1: each dirty cache line once.
    Cacheline,
    /// One persist per merged field.
    Naive,
    /// No merge (chains are bounded by the restore point alone).
    Off,
}

/// Most rows waiting for a merge.
pub const QUEUE_CAP: usize = 4096;

/// Byte ranges (absolute offset, length) to persist, as spans of whole cache lines: each
/// line covered by some range appears in exactly one span.
pub fn line_spans(ranges: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let line = CACHE_LINE as u64;
    let mut r: Vec<(u64, u64)> = ranges.iter().filter(|(_, len)| *len > 0).copied().collect();
    r.sort_unstable();
    let mut spans: Vec<(u64, u64)> = Vec::new();
    for (off, len) in r {
        let (first, end) = (off / line * line, (off + len).div_ceil(line) * line);
        match spans.last_mut() {
            // NOTE: the flush point: extend the pending span while the next range starts
            // in a line it already covers or the very next one.
            Some((_, e)) if first <= *e => *e = (*e).max(end),
            _ => spans.push((first, end)),
        }
    }
    spans
}

/// The rows waiting for a merge.
#[derive(Default)]
pub struct MergeQueue {
    q: parking_lot::Mutex<VecDeque<(u32, Vec<u8>)>>,
    /// While set, the thread leaves the queue alone (tests step merges themselves).
    pub paused: std::sync::atomic::AtomicBool,
    /// Wakes the merge thread.
    pub signal: Arc<Signal>,
}

impl MergeQueue {
    /// Queues a row (dropped when the queue is full).
    pub fn push(&self, schema: u32, key: &[u8]) -> bool {
        let mut q = self.q.lock();
        if q.len() >= QUEUE_CAP {
            return false;
        }
        q.push_back((schema, key.to_vec()));
        drop(q);
        self.signal.notify();
        true
    }

    fn pop(&self) -> Option<(u32, Vec<u8>)> {
        if self.paused.load(Ordering::Acquire) {
            return None;
        }
        self.q.lock().pop_front()
    }

    /// Rows waiting.
    pub fn len(&self) -> usize {
        self.q.lock().len()
    }

    /// True when no row waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl FocusStore {
    /// Pauses (or resumes) the merge thread; queued rows wait (tests).
    pub fn pause_merges(&self, paused: bool) {
        self.merge_queue.paused.store(paused, Ordering::Release);
        self.merge_queue.signal.notify();
    }

    /// Rows waiting for a merge.
    pub fn merges_pending(&self) -> usize {
        self.merge_queue.len()
    }

    /// Merges the deltas of a row into its complete record; false when there was nothing to
    /// merge (no deltas, a variable-field delta, no row).
    pub fn merge_row(&self, schema: u32, key: &[u8]) -> Result<bool> {
        let ikey = index_key(schema, key);
        let _s = self.stripes.lock(&ikey);
        let Some(e) = self.index_get(&ikey) else {
            return Ok(false);
        };
        let info = self.info(schema)?;
        let pool = self.plog.pool().clone();
        let tail = e.tail.load(Ordering::Acquire);
        let merged = e.merged.load(Ordering::Acquire);
        // The unmerged deltas, newest first: (offset, body) ... down to the record.
        let mut deltas: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut at = tail;
        let (row, row_h) = loop {
            if merged != 0 && at == merged {
                at = e.base.load(Ordering::Acquire);
            }
            let h = swim::header(&pool, at)?;
            match h.kind {
                RecordKind::Delta => {
                    deltas.push((at, swim::body(&pool, at, &h)?.to_vec()));
                    at = h.prev;
                }
                RecordKind::Row => break (at, h),
                _ => {
                    return Err(Error::corruption(
                        tierkv_core::Tier::Pmem,
                        at,
                        "a chain entry that is no row or delta",
                    ));
                }
            }
            if deltas.len() > swim::MAX_CHAIN {
                return Err(Error::corruption(
                    tierkv_core::Tier::Pmem,
                    tail,
                    "an endless chain",
                ));
            }
        };
        if deltas.is_empty() {
            return Ok(false);
        }
        // Newest value per field, oldest delta first.
        let mut values: BTreeMap<u16, Vec<u8>> = BTreeMap::new();
        for (_, body) in deltas.iter().rev() {
            let d = Delta::decode(&info.layout, body)?;
            for (id, off, len) in &d.fields {
                if !matches!(info.layout.kind(*id)?, FieldKind::Fixed { .. }) {
                    self.counters.merges_skipped.incr();
                    return Ok(false);
                }
                values.insert(*id, body.get(*off..off + len).unwrap_or_default().to_vec());
            }
        }
        let body_at = row + row_h.body_off();
        let ranges: Vec<(u64, u64)> = values
            .iter()
            .map(|(id, v)| {
                (
                    body_at + u64::from(info.layout.offset(*id).unwrap_or_default()),
                    v.len() as u64,
                )
            })
            .collect();
        e.merging.fetch_add(1, Ordering::AcqRel);
        let written = (|| -> Result<()> {
            for ((abs, _), v) in ranges.iter().zip(values.values()) {
                pool.write(*abs, v)?;
            }
            pool.crash_point("focus.merge.fields_written");
            // IMPORTANT: the fields are durable before the body checksum says so.
            self.persist_ranges(&ranges)
        })();
        e.merging.fetch_add(1, Ordering::AcqRel);
        written?;
        pool.crash_point("focus.merge.lines_persisted");
        let bcrc = masked_crc32c(pool.read(body_at, row_h.body_len as usize)?);
        let hcrc = u64::from(crate::format::le_u32(pool.read(row + 32, 4)?, 0));
        pool.store_u64(row + 32, hcrc | u64::from(bcrc) << 32)?;
        self.plog.point(crate::plog::PersistPoint::Record);
        pool.persist(row + 32, 8)?;
        pool.crash_point("focus.merge.checksum_persisted");
        // Reads may jump to the record once it holds the merged fields durably.
        e.base.store(row, Ordering::Release);
        e.merged.store(tail, Ordering::Release);
        self.counters.merges.incr();
        self.counters.merged_deltas.add(deltas.len() as u64);
        Ok(true)
    }

    /// Persists the merged ranges as the merge mode says; counts lines.
    fn persist_ranges(&self, ranges: &[(u64, u64)]) -> Result<()> {
        let pool = self.plog.pool();
        let line = CACHE_LINE as u64;
        let spans: Vec<(u64, u64)> = match self.opts.merge {
            MergeMode::Naive => ranges
                .iter()
                .map(|(o, l)| (o / line * line, (o + l).div_ceil(line) * line))
                .collect(),
            _ => line_spans(ranges),
        };
        for (s, e) in spans {
            self.plog.point(crate::plog::PersistPoint::Record);
            pool.persist(s, (e - s) as usize)?;
            self.counters.merge_lines_persisted.add((e - s) / line);
        }
        Ok(())
    }
}

/// The merge thread's loop.
pub fn run(store: Weak<FocusStore>, queue: Arc<MergeQueue>) {
    while !queue.signal.stopped() {
        while let Some((schema, key)) = queue.pop() {
            let Some(s) = store.upgrade() else { return };
            if let Err(e) = s.merge_row(schema, &key) {
                s.poison(format!("merge failed: {e}"));
                return;
            }
            if queue.signal.stopped() {
                return;
            }
        }
        queue.signal.wait(Duration::from_millis(50));
    }
}

/// Spawns the merge thread.
pub fn spawn(store: &Arc<FocusStore>) -> Result<std::thread::JoinHandle<()>> {
    let weak = Arc::downgrade(store);
    let queue = store.merge_queue.clone();
    std::thread::Builder::new()
        .name("focus:merge".into())
        .spawn(move || run(weak, queue))
        .map_err(|e| Error::io("spawn", "focus:merge", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_dirty_line_is_in_exactly_one_span() {
        // Eight 32-byte fields of a 256-byte record at 1000: fields 0, 1, 3 and 7.
        let base = 1000;
        let r = [
            (base, 32),
            (base + 32, 32),
            (base + 96, 32),
            (base + 224, 32),
        ];
        let spans = line_spans(&r);
        let mut lines: Vec<u64> = spans
            .iter()
            .flat_map(|(s, e)| (*s..*e).step_by(64))
            .collect();
        let n = lines.len();
        lines.dedup();
        assert_eq!(lines.len(), n, "no line twice");
        for (o, l) in r {
            for b in [o, o + l - 1] {
                assert!(lines.contains(&(b / 64 * 64)), "byte {b} not persisted");
            }
        }
        // Lines 960, 1024, 1088 (fields 0-1, 3), then 1216 (field 7): two spans.
        assert_eq!(spans, vec![(960, 1152), (1216, 1280)]);
        assert!(line_spans(&[]).is_empty());
    }
}
