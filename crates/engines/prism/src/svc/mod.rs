//! The Scan-aware Value Cache, SVC (PRISM §4.4, Figure 3): a value-granular DRAM cache with
//! 2Q replacement, managed off the read path by a background thread, that co-locates on
//! flash the values one scan brought in.
//!
//! How the core uses it:
//! - on a read that had to go to flash (and only then: admission on a flash read, §4.4),
//!   [`ScanAwareValueCache::admit`] wraps the value in an `Arc<CachedValue>` that the core
//!   publishes in HSIT's parallel DRAM array; later readers find it there without any
//!   cache lookup and call [`ScanAwareValueCache::touch`];
//! - a scan takes a [`ScanChainId`] from [`ScanAwareValueCache::new_scan_chain`] and admits
//!   the values it read from flash with it; they are chained (doubly linked). The values it
//!   found in the cache join its chain too ([`ScanAwareValueCache::touch_in_scan`]), so that
//!   the whole range it read, not only its misses, is written back together;
//! - when the cache is over capacity the background thread evicts from the inactive list
//!   and calls the eviction callback with an [`EvictionBatch`]: the evicted entry, which the
//!   core disconnects from HSIT, and — if it is on a scan's chain — every member of its
//!   chain sorted by key, which the core writes back together into one chunk (⑤⑥);
//! - when the core itself disconnects an entry (the key was updated or deleted) it calls
//!   [`ScanAwareValueCache::remove`] so the entry stops counting against the capacity.
//!
//! Reclamation: an evicted entry is *logically* deleted when the core disconnects it; it is
//! *physically* freed when the last `Arc` goes, i.e. after every reader that loaded it has
//! dropped its clone — the role epoch-based reclamation plays in the paper (§5.4).
//!
//! Thread safety: every method takes `&self` and may be called from any thread. List
//! maintenance happens only on the background thread (`prism-svc`), fed by a bounded
//! queue: `admit` and `remove` wait for room in the queue (so the cache stays bounded),
//! touches never wait (a touch that finds the queue full is dropped and counted: it is a
//! hint). Hits do not go to the queue one by one (the paper's per-thread queues): a point
//! read's touch goes into the calling thread's shard of [`TOUCH_SHARDS`] buffers, handed
//! over as one message per [`TOUCH_BATCH`] touches or taken by the thread when its queue is
//! empty, and a scan's hits go as one message per scan ([`ScanAwareValueCache::touch_in_scan`]).
//! A touch applied after its value left the cache, or before its admission was applied, is
//! ignored. Senders do not wake the thread for each message: it drains the queue once per
//! tick while there is traffic (see `worker`), so a read that hits or admits costs one
//! queue push, not a futex wake-up and two context switches; only a full queue, a barrier,
//! `close`, or a message to a thread asleep after a quiet spell wakes it at once. The
//! eviction callback runs on the background thread; it must not call `admit` or `remove`
//! (the queue it would wait on is drained by that very thread). The thread is
//! started by [`ScanAwareValueCache::new`] and joined by [`ScanAwareValueCache::close`] or
//! on drop. A panic on the thread (in the callback, say) is caught, stops the thread and
//! is reported by [`ScanAwareValueCache::health`].

#![forbid(unsafe_code)]

mod lists;
pub mod policy;
mod worker;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread::JoinHandle;

use crossbeam::channel::{self, SendError, Sender, TrySendError};
use crossbeam::utils::CachePadded;
use parking_lot::Mutex;
use tierkv_core::{Counter, Error, Result};

pub use lists::ListSizes;
use worker::Msg;

/// "No slab node" in the lists and in [`CachedValue`]'s node index.
pub(crate) const NIL: usize = usize::MAX;

/// Bytes charged per entry on top of its key and value (the entry, two `Arc` headers and
/// the list node): an estimate, so that many tiny values cannot overrun the capacity.
pub const ENTRY_OVERHEAD: u64 = (std::mem::size_of::<CachedValue>() + 32 + 64) as u64;

/// Messages the queue holds before `admit` and `remove` wait.
pub const QUEUE_DEPTH: usize = 4096;

/// Buffers of point-read touches (a thread keeps to one, chosen round-robin at first use).
pub const TOUCH_SHARDS: usize = 16;

/// Touches a buffer holds before the thread that fills it queues them as one message.
pub const TOUCH_BATCH: usize = 64;

/// The touch buffer of the calling thread.
fn touch_shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed) % TOUCH_SHARDS;
    }
    SHARD.with(|s| *s)
}

/// Identifies the entries one scan brought into the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ScanChainId(pub(crate) u64);

/// One cached value. Immutable once made, except for the list bookkeeping that only the
/// cache's thread touches.
#[derive(Debug)]
pub struct CachedValue {
    slot: u64,
    key: Option<Box<[u8]>>,
    value: Arc<[u8]>,
    chain: Option<ScanChainId>,
    /// The slab node in the cache's lists, or [`NIL`]; written only by the cache thread.
    pub(crate) node: AtomicUsize,
    /// A touch of this value is in the queue and not yet applied: later touches until then
    /// add nothing to the 2Q order, so they are not queued (no `Arc` clone, no push).
    pub(crate) touch_queued: AtomicBool,
}

impl CachedValue {
    pub(crate) fn new(
        slot: u64,
        key: Option<&[u8]>,
        value: Arc<[u8]>,
        chain: Option<ScanChainId>,
    ) -> Self {
        CachedValue {
            slot,
            key: key.map(Box::from),
            value,
            chain,
            node: AtomicUsize::new(NIL),
            touch_queued: AtomicBool::new(false),
        }
    }
    /// The HSIT slot of the value's key.
    pub fn slot(&self) -> u64 {
        self.slot
    }
    /// The key, when the core gave it (scans always do: chains are sorted by it).
    pub fn key(&self) -> Option<&[u8]> {
        self.key.as_deref()
    }
    /// The value.
    pub fn value(&self) -> &Arc<[u8]> {
        &self.value
    }
    /// The scan that brought the value in, if any.
    pub fn scan_chain(&self) -> Option<ScanChainId> {
        self.chain
    }
    /// The bytes this entry counts against the capacity.
    pub fn charge(&self) -> u64 {
        (self.value.len() + self.key.as_ref().map_or(0, |k| k.len())) as u64 + ENTRY_OVERHEAD
    }
}

/// What the background thread hands to the eviction callback.
#[derive(Debug)]
pub struct EvictionBatch {
    /// The evicted entry: the core disconnects it from HSIT (if HSIT still holds it).
    pub evicted: Arc<CachedValue>,
    /// Empty, or every entry of the evicted entry's scan chain (the evicted one included),
    /// sorted by key: the core writes them back together into one chunk. The other
    /// members stay cached; the chain is dissolved, so it is written back once.
    pub chain: Vec<Arc<CachedValue>>,
}

/// The callback that receives evictions.
pub type EvictFn = Arc<dyn Fn(EvictionBatch) + Send + Sync>;

/// Counters and gauges of the cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SvcStats {
    /// The capacity in bytes.
    pub capacity: u64,
    /// Charged bytes cached now (as of the thread's last batch).
    pub bytes: u64,
    /// Entries cached now.
    pub entries: u64,
    /// The list sizes.
    pub lists: ListSizes,
    /// Accesses to cached values (`touch` calls).
    pub hits: u64,
    /// Flash reads the cache did not serve: values admitted after one (`admit` calls)
    /// and a scan's reads left out of the cache (`miss` calls).
    pub misses: u64,
    /// Entries evicted.
    pub evictions: u64,
    /// Charged bytes evicted.
    pub evicted_bytes: u64,
    /// Evictions that handed a scan chain to the callback.
    pub chain_writebacks: u64,
    /// Entries in those chains.
    pub chain_values: u64,
    /// Entries the core removed itself.
    pub removals: u64,
    /// Touches dropped because the queue was full.
    pub touches_dropped: u64,
    /// Touches not queued because one of the same value was waiting already.
    pub touches_coalesced: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Shared {
    hits: Counter,
    misses: Counter,
    touches_dropped: Counter,
    touches_coalesced: Counter,
    pub(crate) evictions: Counter,
    pub(crate) evicted_bytes: Counter,
    pub(crate) chain_writebacks: Counter,
    pub(crate) chain_values: Counter,
    pub(crate) removals: Counter,
    pub(crate) bytes: Counter,
    pub(crate) entries: Counter,
    pub(crate) lists: Mutex<ListSizes>,
    pub(crate) poisoned: Mutex<Option<String>>,
    /// The thread sleeps until woken (no traffic for a while): senders must unpark it.
    pub(crate) asleep: AtomicBool,
    /// Point-read touches not yet queued, per shard.
    touches: [CachePadded<Mutex<Vec<Arc<CachedValue>>>>; TOUCH_SHARDS],
}

impl Shared {
    /// Every buffered touch, emptying the buffers; `None` when there is none.
    pub(crate) fn take_touches(&self) -> Option<Vec<Arc<CachedValue>>> {
        let mut all = Vec::new();
        for shard in &self.touches {
            let mut buf = shard.lock();
            if all.is_empty() {
                all = std::mem::take(&mut *buf);
            } else {
                all.append(&mut buf);
            }
        }
        (!all.is_empty()).then_some(all)
    }
}

/// The Scan-aware Value Cache.
pub struct ScanAwareValueCache {
    capacity: u64,
    tx: Sender<Msg>,
    shared: Arc<Shared>,
    worker: Mutex<Option<JoinHandle<()>>>,
    worker_thread: std::thread::Thread,
    closed: AtomicBool,
    next_chain: AtomicU64,
}

impl ScanAwareValueCache {
    /// A cache of `capacity_bytes` whose evictions go to `evict`; starts its thread.
    /// Fails only if the thread cannot be spawned.
    pub fn new(capacity_bytes: u64, evict: EvictFn) -> Result<Self> {
        let (tx, rx) = channel::bounded(QUEUE_DEPTH);
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let handle = std::thread::Builder::new()
            .name("prism-svc".into())
            .spawn(move || worker::run(rx, capacity_bytes, evict, s))
            .map_err(|e| Error::io("spawn", "prism-svc thread", e))?;
        Ok(ScanAwareValueCache {
            capacity: capacity_bytes,
            tx,
            shared,
            worker_thread: handle.thread().clone(),
            worker: Mutex::new(Some(handle)),
            closed: AtomicBool::new(false),
            next_chain: AtomicU64::new(1),
        })
    }

    /// Counts a flash read of a value the cache does not take (a scan's value already in
    /// a run of key-order neighbours on flash): a miss, as for [`Self::admit`].
    pub fn miss(&self) {
        self.shared.misses.incr();
    }

    /// Wraps a value just read from flash (§4.4 ①) and queues its admission; returns the
    /// entry for the core to publish in HSIT's DRAM array. After `close` the entry is
    /// returned but not tracked.
    pub fn admit(
        &self,
        slot: u64,
        key: Option<&[u8]>,
        value: Arc<[u8]>,
        scan_chain: Option<ScanChainId>,
    ) -> Arc<CachedValue> {
        let v = Arc::new(CachedValue::new(slot, key, value, scan_chain));
        self.shared.misses.incr();
        if !self.closed.load(Ordering::Acquire) {
            // NOTE: a send fails only if the thread has stopped (closed or panicked); the
            // entry is then simply not tracked, and `health` reports the panic.
            let _ = self.send(Msg::Admit(v.clone()), true);
        }
        v
    }

    /// Records an access to a cached value (②), without waiting: into the calling
    /// thread's buffer, queued with the buffer once it is full.
    pub fn touch(&self, v: &Arc<CachedValue>) {
        self.shared.hits.incr();
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        // A touch already waiting stands for this one (the read of the flag first keeps a
        // hot value's cache line shared).
        if v.touch_queued.load(Ordering::Relaxed) || v.touch_queued.swap(true, Ordering::AcqRel) {
            self.shared.touches_coalesced.incr();
            return;
        }
        let full = {
            let mut buf = self.shared.touches[touch_shard()].lock();
            buf.push(v.clone());
            (buf.len() >= TOUCH_BATCH)
                .then(|| std::mem::replace(&mut *buf, Vec::with_capacity(TOUCH_BATCH)))
        };
        if let Some(batch) = full
            && let Err(Msg::Touches(lost)) = self.send(Msg::Touches(batch), false)
        {
            for v in &lost {
                v.touch_queued.store(false, Ordering::Release);
            }
            self.shared.touches_dropped.add(lost.len() as u64);
        }
    }

    /// Records the accesses of the scan `chain` to the cached values `hits` (②), which
    /// also moves them to that scan's chain (§4.4), without waiting: one message.
    pub fn touch_in_scan(&self, hits: Vec<Arc<CachedValue>>, chain: ScanChainId) {
        if hits.is_empty() {
            return;
        }
        let n = hits.len() as u64;
        self.shared.hits.add(n);
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        if self.send(Msg::TouchInScan(hits, chain), false).is_err() {
            self.shared.touches_dropped.add(n);
        }
    }

    /// Forgets an entry the core has disconnected itself (superseded or deleted).
    pub fn remove(&self, v: &Arc<CachedValue>) {
        if !self.closed.load(Ordering::Acquire) {
            let _ = self.send(Msg::Remove(v.clone()), true);
        }
    }

    /// Queues `m` for the thread. A full queue wakes the thread and, with `wait`, waits for
    /// room (else the message is dropped); a thread asleep after a quiet spell is woken.
    /// The message back if it was not queued.
    fn send(&self, m: Msg, wait: bool) -> std::result::Result<(), Msg> {
        match self.tx.try_send(m) {
            Ok(()) => {
                // IMPORTANT: pairs with the fence in `worker::run` between its `asleep`
                // store and its last look at the queue: either it sees this message or
                // this load sees it asleep.
                std::sync::atomic::fence(Ordering::SeqCst);
                if self.shared.asleep.load(Ordering::Relaxed) {
                    self.worker_thread.unpark();
                }
                Ok(())
            }
            Err(TrySendError::Full(m)) => {
                self.worker_thread.unpark();
                if wait {
                    self.tx.send(m).map_err(|SendError(m)| m)
                } else {
                    Err(m)
                }
            }
            Err(TrySendError::Disconnected(m)) => Err(m),
        }
    }

    /// A new scan chain id.
    pub fn new_scan_chain(&self) -> ScanChainId {
        ScanChainId(self.next_chain.fetch_add(1, Ordering::Relaxed))
    }

    /// Waits until the thread has handled everything queued or buffered before this call
    /// (and run the evictions it caused). Returns at once after `close` or a panic of the
    /// thread.
    pub fn quiesce(&self) {
        let (tx, rx) = channel::bounded(1);
        if let Some(touches) = self.shared.take_touches() {
            let _ = self.send(Msg::Touches(touches), true);
        }
        if !self.closed.load(Ordering::Acquire) && self.tx.send(Msg::Barrier(tx)).is_ok() {
            self.worker_thread.unpark();
            let _ = rx.recv();
        }
    }

    /// `Err(Poisoned)` if the background thread panicked.
    pub fn health(&self) -> Result<()> {
        match &*self.shared.poisoned.lock() {
            Some(why) => Err(Error::Poisoned(format!(
                "scan-aware value cache thread: {why}"
            ))),
            None => Ok(()),
        }
    }

    /// The counters.
    pub fn stats(&self) -> SvcStats {
        let s = &self.shared;
        SvcStats {
            capacity: self.capacity,
            bytes: s.bytes.get(),
            entries: s.entries.get(),
            lists: *s.lists.lock(),
            hits: s.hits.get(),
            misses: s.misses.get(),
            evictions: s.evictions.get(),
            evicted_bytes: s.evicted_bytes.get(),
            chain_writebacks: s.chain_writebacks.get(),
            chain_values: s.chain_values.get(),
            removals: s.removals.get(),
            touches_dropped: s.touches_dropped.get(),
            touches_coalesced: s.touches_coalesced.get(),
        }
    }

    /// Stops the thread after it has handled the queue, and joins it. Idempotent. Called
    /// from the eviction callback it only stops the thread (a thread cannot join itself).
    pub fn close(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        let _ = self.tx.send(Msg::Stop);
        self.worker_thread.unpark();
        if std::thread::current().id() == self.worker_thread.id() {
            return;
        }
        if let Some(h) = self.worker.lock().take() {
            // NOTE: the thread catches its own panics, so join only fails if catching
            // failed; there is nothing more to do then than what `health` reports.
            let _ = h.join();
        }
    }
}

impl Drop for ScanAwareValueCache {
    fn drop(&mut self) {
        self.close();
    }
}

impl std::fmt::Debug for ScanAwareValueCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScanAwareValueCache")
            .field("stats", &self.stats())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collector() -> (EvictFn, Arc<Mutex<Vec<EvictionBatch>>>) {
        let got = Arc::new(Mutex::new(Vec::new()));
        let g = got.clone();
        (Arc::new(move |b| g.lock().push(b)), got)
    }

    fn value(n: usize, byte: u8) -> Arc<[u8]> {
        Arc::from(vec![byte; n])
    }

    #[test]
    fn background_thread_keeps_the_cache_within_capacity() {
        let (cb, got) = collector();
        let per = 100 + ENTRY_OVERHEAD;
        let svc = ScanAwareValueCache::new(10 * per, cb).unwrap();
        let entries: Vec<_> = (0..30u64)
            .map(|i| svc.admit(i, None, value(100, i as u8), None))
            .collect();
        svc.touch(&entries[29]);
        svc.quiesce();
        let s = svc.stats();
        assert!(s.bytes <= 10 * per, "{s:?}");
        assert_eq!((s.misses, s.hits, s.evictions, s.entries), (30, 1, 20, 10));
        let evicted: Vec<u64> = got.lock().iter().map(|b| b.evicted.slot()).collect();
        assert_eq!(evicted, (0..20).collect::<Vec<_>>());
    }

    #[test]
    fn touches_of_a_value_with_one_queued_are_coalesced() {
        let (cb, _) = collector();
        let svc = ScanAwareValueCache::new(1 << 20, cb).unwrap();
        let v = svc.admit(1, None, value(10, 1), None);
        svc.quiesce();
        // A touch is applied by the thread, which lets the next one be queued again.
        svc.touch(&v);
        svc.quiesce();
        assert!(!v.touch_queued.load(Ordering::Acquire));
        assert_eq!(svc.stats().touches_coalesced, 0);
        // While one waits in the queue (held there by hand), touches only count.
        v.touch_queued.store(true, Ordering::Release);
        let refs = Arc::strong_count(&v);
        svc.touch(&v);
        svc.touch(&v);
        assert_eq!(Arc::strong_count(&v), refs, "nothing queued");
        let s = svc.stats();
        assert_eq!((s.hits, s.touches_coalesced), (3, 2));
    }

    #[test]
    fn a_full_touch_buffer_is_queued_by_the_toucher_and_applied() {
        let (cb, _) = collector();
        let svc = ScanAwareValueCache::new(1 << 20, cb).unwrap();
        let vs: Vec<_> = (0..TOUCH_BATCH as u64)
            .map(|i| svc.admit(i, None, value(10, 1), None))
            .collect();
        svc.quiesce();
        // All from this thread, so into one buffer: the last touch fills it and queues it.
        for v in &vs {
            svc.touch(v);
        }
        assert!(svc.shared.touches.iter().all(|b| b.lock().is_empty()));
        // The thread applies them without a barrier (it clears each flag as it goes).
        let t = std::time::Instant::now();
        while vs.iter().any(|v| v.touch_queued.load(Ordering::Acquire)) {
            assert!(
                t.elapsed() < std::time::Duration::from_secs(10),
                "touches not applied"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let s = svc.stats();
        assert_eq!((s.hits, s.touches_dropped), (TOUCH_BATCH as u64, 0));
        // A touch short of a full buffer waits in it until the thread or a barrier takes it.
        svc.touch(&vs[0]);
        svc.quiesce();
        assert!(!vs[0].touch_queued.load(Ordering::Acquire));
        assert!(svc.shared.touches.iter().all(|b| b.lock().is_empty()));
        assert_eq!(svc.stats().lists.active_len, TOUCH_BATCH);
    }

    #[test]
    fn a_scans_hits_join_its_chain_in_one_message() {
        let (cb, got) = collector();
        let svc = ScanAwareValueCache::new(4 * (10 + 1 + ENTRY_OVERHEAD), cb).unwrap();
        let hits: Vec<_> = [b"c", b"a", b"b"]
            .iter()
            .enumerate()
            .map(|(i, k)| svc.admit(i as u64, Some(&k[..]), value(10, i as u8), None))
            .collect();
        svc.quiesce();
        let chain = svc.new_scan_chain();
        svc.touch_in_scan(hits, chain);
        svc.touch_in_scan(Vec::new(), chain);
        assert_eq!(svc.stats().hits, 3);
        svc.quiesce();
        // Applied: all three accessed, so active, then the active list past its half of
        // the capacity demoted its tail.
        let lists = svc.stats().lists;
        assert_eq!((lists.active_len, lists.inactive_len), (2, 1));
        // More values push every chain member out; the first to go hands the whole chain,
        // sorted by key, and dissolves it.
        for i in 0..8u8 {
            svc.admit(10 + u64::from(i), Some(&[b'x', i]), value(10, i), None);
        }
        svc.quiesce();
        let g = got.lock();
        let with_chain: Vec<_> = g.iter().filter(|b| !b.chain.is_empty()).collect();
        assert_eq!(with_chain.len(), 1, "{g:?}");
        let keys: Vec<&[u8]> = with_chain[0].chain.iter().filter_map(|m| m.key()).collect();
        assert_eq!(keys, vec![&b"a"[..], b"b", b"c"]);
    }

    #[test]
    fn evicting_a_scanned_value_hands_its_chain_sorted_by_key() {
        let (cb, got) = collector();
        let svc = ScanAwareValueCache::new(4 * (10 + 1 + ENTRY_OVERHEAD), cb).unwrap();
        let chain = svc.new_scan_chain();
        for (i, k) in [b"c", b"a", b"d", b"b"].iter().enumerate() {
            svc.admit(i as u64, Some(&k[..]), value(10, i as u8), Some(chain));
        }
        svc.admit(9, Some(b"z"), value(10, 9), None);
        svc.quiesce();
        let g = got.lock();
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].evicted.slot(), 0);
        let keys: Vec<&[u8]> = g[0].chain.iter().filter_map(|m| m.key()).collect();
        assert_eq!(keys, vec![&b"a"[..], b"b", b"c", b"d"]);
        assert_eq!(svc.stats().chain_writebacks, 1);
    }

    #[test]
    fn removed_entries_stop_counting_against_the_capacity() {
        let (cb, got) = collector();
        let svc = ScanAwareValueCache::new(1 << 20, cb).unwrap();
        let v = svc.admit(1, None, value(1000, 1), None);
        svc.quiesce();
        assert_eq!(svc.stats().entries, 1);
        svc.remove(&v);
        svc.quiesce();
        let s = svc.stats();
        assert_eq!((s.entries, s.bytes, s.removals), (0, 0, 1));
        assert!(got.lock().is_empty());
    }

    #[test]
    fn close_joins_the_thread_and_later_calls_are_harmless() {
        let (cb, _) = collector();
        let svc = ScanAwareValueCache::new(1 << 20, cb).unwrap();
        svc.close();
        svc.close();
        let v = svc.admit(1, None, value(3, 3), None);
        svc.touch(&v);
        svc.remove(&v);
        svc.quiesce();
        assert_eq!(&v.value()[..], &[3, 3, 3]);
        assert!(svc.health().is_ok());
    }

    #[test]
    fn panic_in_the_eviction_callback_poisons_without_hanging_readers() {
        let svc = ScanAwareValueCache::new(0, Arc::new(|_| panic!("callback failed"))).unwrap();
        svc.admit(1, None, value(10, 1), None);
        svc.quiesce();
        let e = svc.health().unwrap_err();
        assert!(e.to_string().contains("callback failed"), "{e}");
        for i in 0..(2 * QUEUE_DEPTH as u64) {
            svc.admit(i, None, value(1, 1), None);
        }
    }

    #[test]
    fn concurrent_admits_and_touches_from_many_threads() {
        let (cb, got) = collector();
        let svc = ScanAwareValueCache::new(50 * (64 + ENTRY_OVERHEAD), cb).unwrap();
        std::thread::scope(|s| {
            for t in 0..8u64 {
                let svc = &svc;
                s.spawn(move || {
                    for i in 0..500 {
                        let v = svc.admit(t * 1000 + i, None, value(64, t as u8), None);
                        svc.touch(&v);
                    }
                });
            }
        });
        svc.quiesce();
        let s = svc.stats();
        assert_eq!(s.misses, 4000);
        assert_eq!(s.evictions + s.entries, 4000);
        assert_eq!(got.lock().len() as u64, s.evictions);
        assert!(s.bytes <= 50 * (64 + ENTRY_OVERHEAD));
    }
}
