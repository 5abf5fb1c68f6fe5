//! How the store uses SeaCache (`seacache.rs`, FOCUS §V-C3): reads through the index
//! entry's cache pointer, write-through of updates under the row's stripe lock, and the
//! thread `focus:cache` that admits missed rows and evicts idle ones.
//!
//! Thread safety: every write-side call runs under the row's stripe lock; reads take none.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tierkv_core::{Error, FieldId, Result};

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
        let (Some(c), Some(_)) = (&self.cache, info.slot) else {
            return Ok(self.walk(info, e, ids)?.values);
        };
        let schema = info.schema.id;
        let h = e.cached.load(Ordering::Acquire);
        if h != 0
            && let Some(v) = c.lookup(h, ikey, e.tail.load(Ordering::Acquire), &info.layout, ids)
        {
            c.record(schema, true);
            self.counters.ops.reads_from_dram.incr();
            self.counters
                .ops
                .user_bytes_read
                .add(v.iter().map(|x| x.len() as u64).sum());
            return Ok(v);
        }
        let w = self.walk(info, e, ids)?;
        c.record(schema, false);
        c.request(schema, key);
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
    /// uniform number in [0, 1)). True when the row was put in a slot.
    pub fn cache_admit(&self, schema: u32, key: &[u8], draw: f64) -> Result<bool> {
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
        let all: Vec<FieldId> = (0..info.schema.len() as FieldId).collect();
        let row = {
            let _r = self.reclaim.read();
            // The stripe lock keeps merges out: no seqlock needed here.
            swim::read_fields(
                self.plog.pool(),
                &info.layout,
                tail,
                &all,
                (
                    e.merged.load(Ordering::Acquire),
                    e.base.load(Ordering::Acquire),
                ),
            )?
            .values
        };
        let refs: Vec<&[u8]> = row.iter().map(Vec::as_slice).collect();
        let body = info.layout.encode(&refs);
        let Some(h) = c.fill(schema, slot, &ikey, tail, &body) else {
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
            if c.usage() <= c.config().evict_target {
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
        while let Some((schema, key)) = cache.next_task() {
            let Some(s) = store.upgrade() else { return };
            // xorshift64: a uniform draw for the admission probability.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let draw = (x >> 11) as f64 / (1u64 << 53) as f64;
            if let Err(e) = s.cache_admit(schema, &key, draw) {
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
