//! How the store uses SeaCache (`seacache.rs`, FOCUS §V-C3): reads through the index
//! entry's cache pointer, write-through of updates under the row's stripe lock, and the
//! thread `focus:cache` that admits missed rows and evicts idle ones.
//!
//! Thread safety: every write-side call runs under the row's stripe lock; reads take none.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tierkv_core::{Error, FieldId, Result};

use crate::format::record::RecordKind;
use crate::seacache::{SeaCache, admit};
use crate::store::{Entry, FocusStore, SchemaInfo, index_key};
use crate::swim;

/// What a write did to a row, for its cached copy.
pub(crate) enum CacheWrite<'a> {
    /// A new complete body.
    Row(&'a [u8]),
    /// These fields changed.
    Update(&'a [(FieldId, &'a [u8])]),
    /// Same values, new tail (a GC rewrite).
    Retag,
}

impl FocusStore {
    /// SeaCache, when on (tests and tools).
    pub fn seacache(&self) -> Option<&Arc<SeaCache>> {
        self.cache.as_ref()
    }

    /// Fields `ids` of the row at `e`: from SeaCache when the entry points at a slot that
    /// still holds this version, else from pmem (and a request to admit the row).
    pub(crate) fn read_row(
        &self,
        info: &SchemaInfo,
        ikey: &[u8],
        key: &[u8],
        e: &Entry,
        ids: &[FieldId],
    ) -> Result<Vec<Vec<u8>>> {
        let (Some(c), Some(_), Some(stats)) = (&self.cache, info.slot, &info.cache_stats) else {
            return Ok(self.walk(info, e, ids)?.values);
        };
        let schema = info.schema.id;
        let h = e.cached.load(Ordering::Acquire);
        if h != 0
            && let Some(v) = c.lookup(h, ikey, e.tail.load(Ordering::Acquire), &info.layout, ids)
        {
            c.record(stats, true);
            self.counters.ops.reads_from_dram.incr();
            self.counters
                .ops
                .user_bytes_read
                .add(v.iter().map(|x| x.len() as u64).sum());
            return Ok(v);
        }
        let w = self.walk(info, e, ids)?;
        c.record(stats, false);
        // A read of the whole row hands it to the cache thread, which then need not read
        // pmem again to admit it.
        let whole = ids.len() == info.schema.len()
            && ids.iter().enumerate().all(|(i, id)| usize::from(*id) == i);
        c.request(schema, key, || {
            whole.then(|| {
                let refs: Vec<&[u8]> = w.values.iter().map(Vec::as_slice).collect();
                (w.tail, info.layout.encode(&refs))
            })
        });
        Ok(w.values)
    }

    /// Keeps the cached copy of a row right after a write moved its tail from `old` to
    /// `new` (stripe lock held).
    pub(crate) fn cache_after_write(
        &self,
        info: &SchemaInfo,
        ikey: &[u8],
        e: &Entry,
        old: u64,
        new: u64,
        w: CacheWrite<'_>,
    ) {
        let Some(c) = &self.cache else { return };
        let h = e.cached.load(Ordering::Acquire);
        if h == 0 {
            return;
        }
        let kept = match w {
            CacheWrite::Row(body) => c.write_through(h, ikey, old, new, Some(body)),
            CacheWrite::Retag => c.write_through(h, ikey, old, new, None),
            CacheWrite::Update(set) => {
                // Fixed fields in place; a variable one may move the var area: rebuild.
                match c.write_fields(h, ikey, (old, new), &info.layout, set) {
                    Some(kept) => kept,
                    None => {
                        let body = c.body(h, ikey, old).and_then(|b| {
                            let mut row = info.layout.decode_all(&b).ok()?;
                            for (id, v) in set {
                                *row.get_mut(usize::from(*id))? = v.to_vec();
                            }
                            let refs: Vec<&[u8]> = row.iter().map(Vec::as_slice).collect();
                            Some(info.layout.encode(&refs))
                        });
                        body.is_some_and(|b| c.write_through(h, ikey, old, new, Some(&b)))
                    }
                }
            }
        };
        if !kept {
            c.free_slot(h, ikey);
            let _ = e
                .cached
                .compare_exchange(h, 0, Ordering::AcqRel, Ordering::Acquire);
        }
    }

    /// Drops the cached copy of a row that leaves the index (stripe lock held).
    pub(crate) fn cache_forget(&self, ikey: &[u8], e: &Entry) {
        if let Some(c) = &self.cache {
            let h = e.cached.swap(0, Ordering::AcqRel);
            if h != 0 {
                c.free_slot(h, ikey);
            }
        }
    }

    /// Admits one missed row if the policy says so (the cache thread's step; `draw` is a
    /// uniform number in [0, 1)), reading it from pmem. True when the row was put in a
    /// slot.
    pub fn cache_admit(&self, schema: u32, key: &[u8], draw: f64) -> Result<bool> {
        self.cache_admit_row(schema, key, None, draw)
    }

    /// [`FocusStore::cache_admit`], given the row as a reader read it (`((tail, seq),
    /// body)`, see [`crate::seacache::Task::row`]): cached as it is if the row is still at
    /// that tail and the record there has that sequence number, else read from pmem.
    pub fn cache_admit_row(
        &self,
        schema: u32,
        key: &[u8],
        row: Option<((u64, u64), Vec<u8>)>,
        draw: f64,
    ) -> Result<bool> {
        let Some(c) = &self.cache else {
            return Ok(false);
        };
        let info = self.info(schema)?;
        let Some(slot) = info.slot else {
            return Ok(false);
        };
        if !admit(
            c.schema_stats(schema).ratio(),
            c.config().hit_threshold,
            draw,
        ) {
            c.counters.rejections.incr();
            return Ok(false);
        }
        let ikey = index_key(schema, key);
        let _s = self.stripes.lock(&ikey);
        let Some(e) = self.index_get(&ikey) else {
            return Ok(false);
        };
        if e.cached.load(Ordering::Acquire) != 0 {
            return Ok(false);
        }
        let tail = e.tail.load(Ordering::Acquire);
        let h = {
            let _r = self.reclaim.read();
            // The stripe lock keeps merges out: no seqlock needed here, and the tail cannot
            // move before the slot is published.
            let pool = self.plog.pool();
            let head = swim::header(pool, tail)?;
            if let Some((_, body)) = row.as_ref().filter(|(v, _)| *v == (tail, head.seq)) {
                c.fill(schema, slot, &ikey, tail, body)
            } else if head.kind == RecordKind::Row {
                // A chain of one complete record: its body is the cached row's layout
                // (`format/row.rs`), copied as it is.
                c.fill(schema, slot, &ikey, tail, swim::body(pool, tail, &head)?)
            } else {
                let all: Vec<FieldId> = (0..info.schema.len() as FieldId).collect();
                let shortcut = (
                    e.merged.load(Ordering::Acquire),
                    e.base.load(Ordering::Acquire),
                );
                let row = swim::read_fields(pool, &info.layout, tail, &all, shortcut)?.values;
                let refs: Vec<&[u8]> = row.iter().map(Vec::as_slice).collect();
                c.fill(schema, slot, &ikey, tail, &info.layout.encode(&refs))
            }
        };
        let Some(h) = h else {
            return Ok(false);
        };
        e.cached.store(h, Ordering::Release);
        c.counters.admissions.incr();
        Ok(true)
    }

    /// Evicts until page use is at most the target (a few rounds at most); clears the
    /// index pointers of the evicted rows.
    pub fn cache_evict(&self) {
        let Some(c) = &self.cache else { return };
        for _ in 0..8 {
            for (ikey, h) in c.evict_round() {
                if let Some(e) = self.index_get(&ikey) {
                    let _ = e
                        .cached
                        .compare_exchange(h, 0, Ordering::AcqRel, Ordering::Acquire);
                }
            }
            if !c.over_target() {
                break;
            }
        }
    }
}

/// The cache thread: admissions from the queue, then eviction when the pool is nearly full.
pub fn run(store: Weak<FocusStore>, cache: Arc<SeaCache>) {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while !cache.signal.stopped() {
        let mut worked = false;
        cache.advance_clock();
        cache.roll_windows();
        let mut since_roll = 0u32;
        while let Some(task) = cache.next_task() {
            since_roll += 1;
            if since_roll == 64 {
                since_roll = 0;
                cache.advance_clock();
                cache.roll_windows();
            }
            let Some(s) = store.upgrade() else { return };
            // xorshift64: a uniform draw for the admission probability.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let draw = (x >> 11) as f64 / (1u64 << 53) as f64;
            if let Err(e) = s.cache_admit_row(task.schema, &task.key, task.row, draw) {
                // NOTE: a row deleted or rewritten meanwhile is no error; damage is.
                if e.is_corruption() {
                    s.poison(format!("cache admission failed: {e}"));
                    return;
                }
            }
            if cache.needs_eviction() {
                s.cache_evict();
            }
            worked = true;
            if cache.signal.stopped() {
                return;
            }
        }
        if !worked {
            cache.signal.wait(Duration::from_millis(2));
        }
    }
}

/// Spawns the cache thread.
pub fn spawn(store: &Arc<FocusStore>, cache: Arc<SeaCache>) -> Result<std::thread::JoinHandle<()>> {
    let weak = Arc::downgrade(store);
    std::thread::Builder::new()
        .name("focus:cache".into())
        .spawn(move || run(weak, cache))
        .map_err(|e| Error::io("spawn", "focus:cache", e))
}
