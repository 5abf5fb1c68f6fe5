//! SeaCache, the schema-aware cache (FOCUS §V-C): hot rows in DRAM, found through the index
//! entry's pointer (`Entry::cached`), so a miss costs no probe.
//!
//! # Organisation (§V-C1, Fig. 8)
//! A pool of pages (`seacache_size / cache_page_size`; a page's buffer is allocated when
//! it is first used and kept). A schema has its own page list; a page holds fixed slots
//! of one schema, one row per slot, in the layout of `format/row.rs` (slot size = the
//! schema's largest body), with per-slot metadata: the row's index key (the paper's
//! IndexPtr), the chain tail it was read at (PLogAddr), a CRC-32C of the row and the last
//! access time, plus the page's occupancy bitmap. A slot is taken from the first page
//! with a zero bit, looking from the page the schema's last fill used, else from a new
//! page from the pool.
//!
//! # Coherence
//! A cached row is valid only while its recorded tail equals the entry's tail. Writers
//! hold the row's stripe lock: an update or put writes the row through to its slot after
//! the index moved (readers in between see a different tail and read pmem); a delete, a
//! GC rewrite or a restore point re-tags or frees the slot. Readers hold the page's read
//! lock while they check key and tail and copy fields out.
//!
//! # Policy (§V-C2; the conversion lost both formulas, so these are ours, as options)
//! - **Hit ratio** per schema: a moving average over windows of at least 256 reads,
//!   `ratio = (ratio + window_hits / window_reads) / 2`; unknown until the first window.
//!   Readers only count (sharded counters, no shared cache line); the cache thread closes
//!   the windows ([`SchemaStats::roll`]) before it decides an admission or an eviction.
//! - **Admission** ([`admit`]): everything while the ratio is unknown (as LRU); then a row
//!   of a schema whose ratio exceeds `hit_threshold` (0.5, §VI-A) always, else with
//!   probability `ratio / hit_threshold`, at least [`MIN_ADMISSION`] (5%) — a schema whose
//!   rows are rarely read again is rarely admitted, but never shut out, so its ratio can
//!   recover (a ratio of 0 admits 5% of the requests, not none).
//! - **Doorkeeper** (ours, option `cache_doorkeeper`, on by default): before the policy, a
//!   request passes only if the key was asked for `cache_sightings` times (default 2)
//!   before within a recent window ([`Doorkeeper`]); off, every request goes to the policy
//!   as the paper describes. An insert counts as all the sightings of its key
//!   ([`SeaCache::sight`]): the paper admits "the latest rows" as LRU does, and under a
//!   read-latest load (YCSB D) a new row's first read would otherwise be turned away just
//!   when the row is hottest. Two sightings, not one (2026-11-29, issue 20's C with
//!   `--pmem-latency 300,100`, three runs): one sighting admitted 312k rows in 10 s into a
//!   cache of 42k (every row replaced seven times, the cache thread filling rows that were
//!   evicted unread) for a 42% hit ratio; two admitted 81k for 44%, and C ran 1.39-1.47x
//!   the cache-less variant instead of 1.16-1.36x.
//! - **Eviction** ([`lifetime`], [`SeaCache::evict_round`]): when use (rows, in pages'
//!   worth) passes 90% of the pool, schemas are visited from the lowest hit ratio up and
//!   rows idle longer than the schema's lifetime are evicted, until use falls to
//!   `evict_target` (80%, §V-C3). The lifetime is
//!   `cache_lifetime_ms * R_W(ratio) * (1.5 - occupancy)`: `R_W` from a table over the hit
//!   ratio that is small at both ends and large in the middle (the shape of Fig. 16b),
//!   `occupancy` the schema's share of the pages. When that is not enough, every schema's
//!   lifetime is shortened in one proportion, just enough to reach the target (the rows
//!   oldest relative to their lifetime go first). An earlier draft halved the lifetimes
//!   round after round: its cuts overshot to 55-70% use, leaving up to a third of the
//!   cache empty after each pass.
//!
//! # Workflow (§V-C3)
//! Readers never fill the cache: a miss that passes the doorkeeper queues a [`Task`]
//! (schema, key and, when the read took the whole row, the row as read and its version)
//! for the thread `focus:cache`, which decides admission, fills a slot (from the reader's
//! copy if the row is still at that version, else reading pmem) and runs the eviction;
//! the queue is bounded and drops requests when full (counted, without taking its lock).
//! A fill finds a free slot from the schema's page-list cursor, skipping full pages by a
//! per-page flag, so admission costs the same with 10 pages or 10,000.
//!
//! Under YCSB's scrambled zipfian (θ 0.99 over 10^10 items folded onto the records) the
//! hottest 2% of 1M rows draw about 40% of the reads, and that bounds the hit ratio of a
//! cache of that size whatever its policy; the policy above reaches 38-41% there.
//!
//! # What a hit costs
//! A hit takes the page's read lock, compares the slot's key and tail, and copies the
//! fields out; its access time is a coarse clock the cache thread advances (a store only
//! when the millisecond changed). The row checksum is computed on every fill and
//! write-through and verified by the cache thread when an eviction pass visits the slot
//! (a damaged row is dropped there), not on every hit: verifying 1 KB per read made a hit
//! dearer than the pmem read it replaces on DRAM-speed media.
//!
//! Thread safety: pages behind their own reader-writer locks; the pool's free list, the
//! schemas' page lists and the queue behind mutexes; the doorkeeper, the full-page flags,
//! the use count and the clock are atomics. Lock order: the page lists, then one
//! page, then the free list (the queue is taken alone); a page lock is never held while the
//! page lists are taken.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use parking_lot::{Mutex, RwLock};
use tierkv_core::common::doorkeeper::Doorkeeper;
pub use tierkv_core::common::doorkeeper::MAX_SIGHTINGS;
use tierkv_core::format::checksum::crc32c;
use tierkv_core::{Counter, FieldId, SchemaId};

use crate::format::row::Layout;
use crate::gc::Signal;

/// Reads per hit-ratio window.
pub const WINDOW: u64 = 256;
/// Most queued admission requests.
pub const QUEUE_CAP: usize = 4096;
/// An eviction pass verifies the row checksums of one page in this many.
pub const VERIFY_EVERY: u64 = 8;
/// Use ([`SeaCache::usage`]) above which eviction starts.
pub const EVICT_TRIGGER: f64 = 0.9;
/// R_W by hit-ratio decile (ours: the shape of Fig. 16b).
pub const R_W: [f64; 10] = [0.5, 0.75, 1.0, 1.5, 2.0, 2.0, 1.5, 1.0, 0.75, 0.5];

/// The least admission probability of a schema below the hit threshold: a schema is never
/// shut out, so that its hit ratio can recover.
pub const MIN_ADMISSION: f64 = 0.05;

/// SeaCache's configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct CacheConfig {
    /// Bytes of pages.
    pub size: u64,
    /// Bytes per page.
    pub page_size: u64,
    /// hit_threshold (§V-C2).
    pub hit_threshold: f64,
    /// Base lifetime of a row, milliseconds.
    pub lifetime_ms: u64,
    /// Use ([`SeaCache::usage`]) eviction brings the pool down to.
    pub evict_target: f64,
    /// Admit a row only when it was asked for before in the doorkeeper's window (see
    /// [`Doorkeeper`]).
    pub doorkeeper: bool,
    /// How many times before (1..=[`MAX_SIGHTINGS`]).
    pub sightings: u8,
}

/// Sightings before a row passes SeaCache's doorkeeper, by default (module doc).
pub const DEFAULT_SIGHTINGS: u8 = 2;

/// The doorkeeper's hash of `key` of `schema`.
fn doorkeeper_hash(schema: SchemaId, key: &[u8]) -> u64 {
    let k = crc32c(key);
    u64::from(k) << 32 | u64::from(k ^ crc32c(&schema.to_le_bytes()).rotate_left(7))
}

/// The admission decision: `ratio` is the schema's hit ratio (None while unknown), `draw`
/// a uniform number in [0, 1).
pub fn admit(ratio: Option<f64>, hit_threshold: f64, draw: f64) -> bool {
    match ratio {
        None => true,
        Some(r) if r > hit_threshold => true,
        // NOTE: the floor: at ratio 0 (a first window read before the cache thread had
        // admitted anything) `r / threshold` is 0, nothing was ever admitted again, and the
        // ratio stayed 0 for good — a dead cache (0 of 5.0M reads from DRAM in a C run).
        Some(r) => draw < (r / hit_threshold.max(f64::MIN_POSITIVE)).max(MIN_ADMISSION),
    }
}

/// A schema's row lifetime (ms): see the module doc.
pub fn lifetime(base_ms: u64, ratio: f64, occupancy: f64) -> u64 {
    let decile = ((ratio * 10.0) as usize).min(R_W.len() - 1);
    let rw = R_W.get(decile).copied().unwrap_or(1.0);
    (base_ms as f64 * rw * (1.5 - occupancy.clamp(0.0, 1.0))) as u64
}

/// Per-schema hit statistics.
#[derive(Debug, Default)]
pub struct SchemaStats {
    /// `reads` and `hits` when the last window closed (the cache thread's).
    window_start: Mutex<(u64, u64)>,
    /// The moving average as f64 bits; `u64::MAX` while unknown.
    ratio: AtomicU64,
    /// Hits and reads in all.
    pub hits: Counter,
    /// Reads in all.
    pub reads: Counter,
}

impl SchemaStats {
    fn new() -> Self {
        SchemaStats {
            ratio: AtomicU64::new(u64::MAX),
            ..SchemaStats::default()
        }
    }

    /// The hit ratio, if known.
    pub fn ratio(&self) -> Option<f64> {
        match self.ratio.load(Ordering::Relaxed) {
            u64::MAX => None,
            b => Some(f64::from_bits(b)),
        }
    }

    /// Counts one read (a reader's whole share of the bookkeeping).
    #[inline]
    pub fn record(&self, hit: bool) {
        self.reads.incr();
        if hit {
            self.hits.incr();
        }
    }

    /// Closes the current window if it holds at least [`WINDOW`] reads, folding its hit
    /// ratio into the moving average (the cache thread's, before it uses the ratio).
    pub fn roll(&self) {
        let mut start = self.window_start.lock();
        let (reads, hits) = (self.reads.get(), self.hits.get());
        let n = reads.saturating_sub(start.0);
        if n < WINDOW {
            return;
        }
        let h = hits.saturating_sub(start.1).min(n) as f64 / n as f64;
        *start = (reads, hits);
        let r = self.ratio().map_or(h, |old| (old + h) / 2.0);
        self.ratio.store(r.to_bits(), Ordering::Relaxed);
    }
}

struct SlotMeta {
    ikey: Vec<u8>,
    tail: u64,
    body_len: u32,
    crc: u32,
    last_access: AtomicU64,
}

struct Page {
    schema: SchemaId,
    slot_size: usize,
    bitmap: Vec<u64>,
    rows: usize,
    /// `rows` as last counted into `SeaCache::units`.
    accounted: usize,
    data: Vec<u8>,
    slots: Vec<Option<SlotMeta>>,
}

impl Page {
    fn capacity(&self) -> usize {
        self.slots.len()
    }

    fn body(&self, slot: usize) -> Option<&[u8]> {
        let m = self.slots.get(slot)?.as_ref()?;
        let at = slot * self.slot_size;
        self.data.get(at..at + m.body_len as usize)
    }
}

/// Cache counters.
#[derive(Debug, Default)]
pub struct CacheCounters {
    /// Reads answered from the cache.
    pub hits: Counter,
    /// Reads that went to pmem.
    pub misses: Counter,
    /// Rows admitted.
    pub admissions: Counter,
    /// Admission requests the policy refused.
    pub rejections: Counter,
    /// Admission requests dropped because the queue was busy (readers never wait for it).
    pub requests_dropped: Counter,
    /// Admission requests the doorkeeper turned away (the key asked for fewer than
    /// `cache_sightings` times before).
    pub first_sightings: Counter,
    /// Rows evicted.
    pub evictions: Counter,
    /// Eviction rounds.
    pub eviction_rounds: Counter,
    /// Cached rows an eviction pass found not matching their checksum (dropped).
    pub damaged_rows: Counter,
}

/// A schema's pages, and where the last fill found a free slot.
#[derive(Default)]
struct PageList {
    pages: Vec<u32>,
    cursor: usize,
}

/// An admission request.
pub struct Task {
    /// The row's schema.
    pub schema: SchemaId,
    /// Its key.
    pub key: Vec<u8>,
    /// The whole row as the reader that missed read it, when the read asked for every
    /// field: the version it read (tail and that record's sequence number, as
    /// `swim::Walk::tail`) and its body in `format/row.rs`'s layout. The cache thread
    /// caches it without reading the row from pmem if the row is still at that version.
    pub row: Option<((u64, u64), Vec<u8>)>,
}

/// The cache.
pub struct SeaCache {
    cfg: CacheConfig,
    pages: Box<[RwLock<Page>]>,
    /// Per page: every slot taken (a hint for `fill`, written under the page's lock).
    full: Box<[AtomicBool]>,
    /// Rows cached, in pages' worth: a row of a page of c slots counts 2^32 / c.
    units: AtomicU64,
    /// A fill found neither a free slot nor a free page since the last eviction.
    starved: AtomicBool,
    free: Mutex<Vec<u32>>,
    lists: Mutex<HashMap<SchemaId, PageList>>,
    stats: RwLock<HashMap<SchemaId, Arc<SchemaStats>>>,
    queue: Mutex<VecDeque<Task>>,
    /// The doorkeeper, when on.
    doorkeeper: Option<Doorkeeper>,
    /// Requests in the queue (read without its lock).
    queued: AtomicUsize,
    /// Wakes the cache thread.
    pub signal: Arc<Signal>,
    clock: Instant,
    /// Milliseconds since `clock` as of the cache thread's last look (the coarse clock
    /// readers stamp their hits with).
    tick: AtomicU64,
    /// Counters.
    pub counters: CacheCounters,
}

/// A slot handle as stored in `Entry::cached`: `page << 16 | slot`, plus one (0 = none).
pub fn handle(page: u32, slot: usize) -> u64 {
    (u64::from(page) << 16 | slot as u64) + 1
}

fn unhandle(h: u64) -> Option<(usize, usize)> {
    let h = h.checked_sub(1)?;
    Some(((h >> 16) as usize, (h & 0xFFFF) as usize))
}

impl SeaCache {
    /// A cache of `cfg.size` bytes of pages.
    pub fn new(cfg: CacheConfig) -> SeaCache {
        let n = (cfg.size / cfg.page_size.max(1)).clamp(1, 1 << 20) as u32;
        let pages = (0..n)
            .map(|_| {
                RwLock::new(Page {
                    schema: 0,
                    slot_size: 0,
                    bitmap: Vec::new(),
                    rows: 0,
                    accounted: 0,
                    data: Vec::new(),
                    slots: Vec::new(),
                })
            })
            .collect();
        SeaCache {
            pages,
            full: (0..n).map(|_| AtomicBool::new(false)).collect(),
            units: AtomicU64::new(0),
            starved: AtomicBool::new(false),
            free: Mutex::new((0..n).rev().collect()),
            lists: Mutex::default(),
            stats: RwLock::default(),
            queue: Mutex::default(),
            // A window of about one cache-full of 1 KiB rows.
            doorkeeper: cfg
                .doorkeeper
                .then(|| Doorkeeper::new((cfg.size >> 10).max(1), cfg.sightings)),
            queued: AtomicUsize::new(0),
            signal: Arc::default(),
            clock: Instant::now(),
            tick: AtomicU64::new(0),
            counters: CacheCounters::default(),
            cfg,
        }
    }

    /// The coarse clock (milliseconds), as readers see it.
    fn now(&self) -> u64 {
        self.tick.load(Ordering::Relaxed)
    }

    /// Moves the coarse clock to the present and returns it (the cache thread's, each
    /// time it wakes, and before a fill or an eviction pass).
    pub fn advance_clock(&self) -> u64 {
        let t = self.clock.elapsed().as_millis() as u64;
        self.tick.fetch_max(t, Ordering::Relaxed).max(t)
    }

    /// Accounts for page `p` after its rows changed (under the page's write lock): its
    /// "full" hint and its share of [`SeaCache::usage`].
    fn mark(&self, p: usize, page: &mut Page) {
        if let Some(f) = self.full.get(p) {
            f.store(page.rows >= page.capacity(), Ordering::Relaxed);
        }
        if page.rows != page.accounted {
            let unit = (1u64 << 32) / page.capacity().max(1) as u64;
            let (now, was) = (page.rows as u64 * unit, page.accounted as u64 * unit);
            if now > was {
                self.units.fetch_add(now - was, Ordering::Relaxed);
            } else {
                self.units.fetch_sub(was - now, Ordering::Relaxed);
            }
            page.accounted = page.rows;
        }
    }

    /// Closes every schema's hit-ratio window that is due (see [`SchemaStats::roll`]).
    pub fn roll_windows(&self) {
        for (_, st) in self.all_stats() {
            st.roll();
        }
    }

    /// The configuration.
    pub fn config(&self) -> &CacheConfig {
        &self.cfg
    }

    /// The hit statistics of `schema`.
    pub fn schema_stats(&self, schema: SchemaId) -> Arc<SchemaStats> {
        if let Some(s) = self.stats.read().get(&schema) {
            return s.clone();
        }
        self.stats
            .write()
            .entry(schema)
            .or_insert_with(|| Arc::new(SchemaStats::new()))
            .clone()
    }

    /// Every schema's statistics.
    pub fn all_stats(&self) -> Vec<(SchemaId, Arc<SchemaStats>)> {
        self.stats
            .read()
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect()
    }

    /// Use of the cache: rows cached, in pages' worth, over pages (1.0 = every slot of
    /// every page holds a row). What eviction brings down to `evict_target`: pages stay
    /// with their schema while they hold any row, so page use alone would make eviction
    /// empty whole pages, i.e. nearly the whole cache.
    pub fn usage(&self) -> f64 {
        self.units.load(Ordering::Relaxed) as f64 / (self.pages.len() as f64 * (1u64 << 32) as f64)
    }

    /// Pages taken from the pool / pages.
    pub fn page_use(&self) -> f64 {
        let free = self.free.lock().len();
        1.0 - free as f64 / self.pages.len() as f64
    }

    /// Pages in the pool.
    pub fn page_count(&self) -> usize {
        self.pages.len()
    }

    /// True when a row of a schema whose bodies reach `max_body` bytes can be cached.
    pub fn fits(&self, max_body: usize) -> bool {
        max_body > 0 && (max_body as u64) * 2 <= self.cfg.page_size
    }

    /// Counts a read of the schema whose statistics are `stats` (from
    /// [`SeaCache::schema_stats`], which the store keeps with the schema) as a hit or a
    /// miss.
    #[inline]
    pub fn record(&self, stats: &SchemaStats, hit: bool) {
        stats.record(hit);
        let c = if hit {
            &self.counters.hits
        } else {
            &self.counters.misses
        };
        c.incr();
    }

    /// Fields `ids` of the row in slot `h`, if it still holds `ikey` at `tail`. A page the
    /// cache thread holds (filling or evicting it) is a miss: the caller reads pmem, which
    /// always has the row, rather than wait for a thread that a loaded machine may have
    /// preempted (readers waited up to a 4 ms scheduler tick for it: YCSB C's p99.9 was
    /// 16 ms with the cache on, 4 ms with it off).
    pub fn lookup(
        &self,
        h: u64,
        ikey: &[u8],
        tail: u64,
        layout: &Layout,
        ids: &[FieldId],
    ) -> Option<Vec<Vec<u8>>> {
        let (p, s) = unhandle(h)?;
        let page = self.pages.get(p)?.try_read()?;
        let m = page.slots.get(s)?.as_ref()?;
        if m.ikey != ikey || m.tail != tail {
            return None;
        }
        let body = page.body(s)?;
        // (A store only when the clock moved: hot rows' slots stay shared in the CPUs'
        // caches instead of bouncing between them on every hit.)
        let now = self.now();
        if m.last_access.load(Ordering::Relaxed) != now {
            m.last_access.store(now, Ordering::Relaxed);
        }
        ids.iter()
            .map(|id| layout.read_field(body, m.body_len, *id).ok())
            .collect()
    }

    /// The whole body in slot `h` if it holds `ikey` at `tail`.
    pub fn body(&self, h: u64, ikey: &[u8], tail: u64) -> Option<Vec<u8>> {
        let (p, s) = unhandle(h)?;
        let page = self.pages.get(p)?.read();
        let m = page.slots.get(s)?.as_ref()?;
        (m.ikey == ikey && m.tail == tail)
            .then(|| page.body(s).map(<[u8]>::to_vec))
            .flatten()
    }

    /// Queues an admission request for a row that missed, unless the queue is full or
    /// busy (counted as dropped) or the doorkeeper sees the key for the first time
    /// (counted as a first sighting). `row` gives the row as the reader read it, if it can;
    /// it is called only for a request that is queued.
    pub fn request(
        &self,
        schema: SchemaId,
        key: &[u8],
        row: impl FnOnce() -> Option<((u64, u64), Vec<u8>)>,
    ) {
        // A reader never waits to ask: while another reader or the cache thread holds the
        // queue, the request is dropped, as when the queue is full (admission is a draw
        // anyway, and a row read again is asked for again).
        if self.queued.load(Ordering::Relaxed) >= QUEUE_CAP {
            self.counters.requests_dropped.incr();
            return;
        }
        if !self.past_doorkeeper(schema, key) {
            self.counters.first_sightings.incr();
            return;
        }
        let row = row();
        let Some(mut q) = self.queue.try_lock() else {
            self.counters.requests_dropped.incr();
            return;
        };
        if q.len() < QUEUE_CAP {
            q.push_back(Task {
                schema,
                key: key.to_vec(),
                row,
            });
            self.queued.store(q.len(), Ordering::Relaxed);
        } else {
            self.counters.requests_dropped.incr();
        }
    }

    /// Marks `key` of `schema` as seen by the doorkeeper as often as it asks (an insert:
    /// the row's first read then goes to the admission policy). Nothing with the
    /// doorkeeper off.
    pub fn sight(&self, schema: SchemaId, key: &[u8]) {
        if let Some(d) = &self.doorkeeper {
            d.pass_next(doorkeeper_hash(schema, key));
        }
    }

    /// True when the doorkeeper lets a request for `key` of `schema` through to the
    /// admission policy (always, with the doorkeeper off).
    pub fn past_doorkeeper(&self, schema: SchemaId, key: &[u8]) -> bool {
        let Some(d) = &self.doorkeeper else {
            return true;
        };
        d.seen_before(doorkeeper_hash(schema, key))
    }

    /// The next admission request.
    pub fn next_task(&self) -> Option<Task> {
        let mut q = self.queue.lock();
        let t = q.pop_front();
        self.queued.store(q.len(), Ordering::Relaxed);
        t
    }

    /// Puts `body` (a row of `schema` whose slots are `slot_size` bytes) read at `tail`
    /// in a free slot; its handle, or None when the pool is full.
    pub fn fill(
        &self,
        schema: SchemaId,
        slot_size: usize,
        ikey: &[u8],
        tail: u64,
        body: &[u8],
    ) -> Option<u64> {
        if body.len() > slot_size {
            return None;
        }
        let now = self.advance_clock();
        let meta = || SlotMeta {
            ikey: ikey.to_vec(),
            tail,
            body_len: body.len() as u32,
            crc: crc32c(body),
            last_access: AtomicU64::new(now),
        };
        let mut lists = self.lists.lock();
        let list = lists.entry(schema).or_default();
        // From the page the last fill used, skipping pages flagged full (a flag set
        // or cleared under the page's lock; a stale one costs a lock or a page, never a
        // wrong slot: the bitmap decides).
        let n = list.pages.len();
        for i in 0..n {
            let at = (list.cursor + i) % n;
            let p = *list.pages.get(at)?;
            if self
                .full
                .get(p as usize)
                .is_some_and(|f| f.load(Ordering::Relaxed))
            {
                continue;
            }
            let mut page = self.pages.get(p as usize)?.write();
            let taken = take_slot(&mut page);
            if let Some(s) = taken {
                put(&mut page, s, meta(), body);
            }
            self.mark(p as usize, &mut page);
            if let Some(s) = taken {
                list.cursor = at;
                return Some(handle(p, s));
            }
        }
        let Some(p) = self.free.lock().pop() else {
            self.starved.store(true, Ordering::Relaxed);
            return None;
        };
        let mut page = self.pages.get(p as usize)?.write();
        let n = ((self.cfg.page_size as usize) / slot_size).clamp(1, 1 << 16);
        page.schema = schema;
        page.slot_size = slot_size;
        page.bitmap = vec![0; n.div_ceil(64)];
        page.rows = 0;
        page.accounted = 0;
        page.data.resize(n * slot_size, 0);
        page.slots = (0..n).map(|_| None).collect();
        list.pages.push(p);
        list.cursor = list.pages.len() - 1;
        let s = take_slot(&mut page)?;
        put(&mut page, s, meta(), body);
        self.mark(p as usize, &mut page);
        Some(handle(p, s))
    }

    /// Writes a new body for the row in slot `h` (it must hold `ikey` at `old_tail`) and
    /// tags it with `new_tail`; frees the slot if the body does not fit. True when the slot
    /// still caches the row.
    pub fn write_through(
        &self,
        h: u64,
        ikey: &[u8],
        old_tail: u64,
        new_tail: u64,
        body: Option<&[u8]>,
    ) -> bool {
        let Some((p, s)) = unhandle(h) else {
            return false;
        };
        let Some(lock) = self.pages.get(p) else {
            return false;
        };
        let mut page = lock.write();
        let slot_size = page.slot_size;
        let Some(Some(m)) = page.slots.get_mut(s) else {
            return false;
        };
        if m.ikey != ikey || m.tail != old_tail {
            return false;
        }
        m.tail = new_tail;
        let Some(body) = body else { return true };
        if body.len() > slot_size {
            drop(page);
            self.free_slot(h, ikey);
            return false;
        }
        m.body_len = body.len() as u32;
        m.crc = crc32c(body);
        let at = s * slot_size;
        if let Some(dst) = page.data.get_mut(at..at + body.len()) {
            dst.copy_from_slice(body);
        }
        true
    }

    /// Writes the fixed-length fields `set` of the row in slot `h` in place (it must hold
    /// `ikey` at `old_tail`) and tags it with `new_tail`. None when a field of `set` is not
    /// a fixed field of that length (the caller then rewrites the whole body); else
    /// whether the slot still caches the row.
    pub fn write_fields(
        &self,
        h: u64,
        ikey: &[u8],
        (old_tail, new_tail): (u64, u64),
        layout: &Layout,
        set: &[(FieldId, &[u8])],
    ) -> Option<bool> {
        let mut at = Vec::with_capacity(set.len());
        for (id, v) in set {
            match layout.kind(*id).ok()? {
                tierkv_core::FieldKind::Fixed { len } if usize::from(len) == v.len() => {
                    at.push(layout.offset(*id)? as usize);
                }
                _ => return None,
            }
        }
        let (p, s) = unhandle(h)?;
        let lock = self.pages.get(p)?;
        let mut page = lock.write();
        let slot_size = page.slot_size;
        let Some(Some(m)) = page.slots.get(s) else {
            return Some(false);
        };
        if m.ikey != ikey || m.tail != old_tail {
            return Some(false);
        }
        let body_len = m.body_len as usize;
        let start = s * slot_size;
        let Some(body) = page.data.get_mut(start..start + body_len) else {
            return Some(false);
        };
        for (off, (_, v)) in at.iter().zip(set) {
            let Some(dst) = body.get_mut(*off..*off + v.len()) else {
                return Some(false);
            };
            dst.copy_from_slice(v);
        }
        let crc = crc32c(body);
        if let Some(Some(m)) = page.slots.get_mut(s) {
            m.tail = new_tail;
            m.crc = crc;
        }
        Some(true)
    }

    /// Frees slot `h` if it holds `ikey`.
    pub fn free_slot(&self, h: u64, ikey: &[u8]) {
        let Some((p, s)) = unhandle(h) else { return };
        let Some(lock) = self.pages.get(p) else {
            return;
        };
        let mut page = lock.write();
        if page
            .slots
            .get(s)
            .and_then(Option::as_ref)
            .is_some_and(|m| m.ikey == ikey)
        {
            clear(&mut page, s);
            self.mark(p, &mut page);
            self.counters.evictions.incr();
            if page.rows == 0 {
                let schema = page.schema;
                drop(page);
                self.release_if_empty(p as u32, schema);
            }
        }
    }

    /// Gives page `p` back to the free list if it still belongs to `schema` and holds no
    /// row.
    // IMPORTANT: lock order is `lists`, then a page, then `free` (as `fill` takes them); a
    // page lock is never held while `lists` is taken, or the cache thread's `fill` and a
    // writer freeing the last slot of a page deadlock.
    fn release_if_empty(&self, p: u32, schema: SchemaId) {
        let mut lists = self.lists.lock();
        let Some(lock) = self.pages.get(p as usize) else {
            return;
        };
        let mut page = lock.write();
        if page.schema != schema || page.rows != 0 || page.slots.is_empty() {
            return;
        }
        if let Some(list) = lists.get_mut(&schema) {
            list.pages.retain(|x| *x != p);
        }
        page.slots.clear();
        page.bitmap.clear();
        self.mark(p as usize, &mut page);
        self.free.lock().push(p);
    }

    /// One eviction pass (§V-C3), returning the evicted rows (index key, handle) so the
    /// caller clears their index pointers:
    /// 1. schemas from the lowest hit ratio up: rows idle beyond their schema's lifetime,
    ///    until use is at most the target;
    /// 2. if use is still above it, lifetimes are shortened just enough: every row's idle
    ///    time in units of its schema's lifetime is its *age*, and rows go oldest age first
    ///    until the target is reached (one cut-off age for all schemas, so each schema's
    ///    lifetime shrinks in the same proportion);
    /// 3. if a fill found no room and no page is free, the page whose newest row is the
    ///    oldest (lowest hit ratio first) is emptied and goes back to the pool.
    pub fn evict_round(&self) -> Vec<(Vec<u8>, u64)> {
        self.counters.eviction_rounds.incr();
        let round = self.counters.eviction_rounds.get();
        let now = self.advance_clock();
        self.roll_windows();
        let total = self.pages.len() as f64;
        let mut schemas: Vec<(SchemaId, f64, Vec<u32>)> = {
            let lists = self.lists.lock();
            lists
                .iter()
                .map(|(s, l)| {
                    (
                        *s,
                        self.schema_stats(*s).ratio().unwrap_or(0.0),
                        l.pages.clone(),
                    )
                })
                .collect()
        };
        schemas.sort_by(|a, b| a.1.total_cmp(&b.1));
        let lives: Vec<u64> = schemas
            .iter()
            .map(|(_, ratio, pages)| {
                lifetime(self.cfg.lifetime_ms, *ratio, pages.len() as f64 / total)
            })
            .collect();
        let mut out = Vec::new();
        for ((schema, _, pages), life) in schemas.iter().zip(&lives) {
            if !self.over_target() {
                break;
            }
            self.evict_pages(*schema, pages, now, round, &mut out, |idle| idle >= *life);
        }
        if self.usage() > self.cfg.evict_target {
            let cut = self.cutoff_age(&schemas, &lives, now);
            for ((schema, _, pages), life) in schemas.iter().zip(&lives) {
                let life = (*life).max(1) as f64;
                self.evict_pages(*schema, pages, now, round, &mut out, |idle| {
                    idle as f64 / life >= cut
                });
            }
        }
        if self.starved.load(Ordering::Relaxed) && self.free.lock().is_empty() {
            self.evict_stalest_page(&schemas, now, &mut out);
        }
        if !self.over_target() {
            self.starved.store(false, Ordering::Relaxed);
        }
        out
    }

    /// The age (idle time / lifetime) at and above which rows must go for use to fall to
    /// the target (read locks only; rows touched meanwhile only make the cut generous).
    fn cutoff_age(&self, schemas: &[(SchemaId, f64, Vec<u32>)], lives: &[u64], now: u64) -> f64 {
        let mut rows: Vec<(f64, u64)> = Vec::new();
        for ((schema, _, pages), life) in schemas.iter().zip(lives) {
            let life = (*life).max(1) as f64;
            for &p in pages {
                let Some(page) = self.pages.get(p as usize).map(RwLock::read) else {
                    continue;
                };
                if page.schema != *schema {
                    continue;
                }
                let unit = (1u64 << 32) / page.capacity().max(1) as u64;
                for m in page.slots.iter().flatten() {
                    let idle = now.saturating_sub(m.last_access.load(Ordering::Relaxed));
                    rows.push((idle as f64 / life, unit));
                }
            }
        }
        let target = (self.cfg.evict_target * self.pages.len() as f64 * (1u64 << 32) as f64) as u64;
        let mut shed = self.units.load(Ordering::Relaxed).saturating_sub(target);
        rows.sort_unstable_by(|a, b| b.0.total_cmp(&a.0));
        let mut cut = f64::INFINITY;
        for (age, unit) in rows {
            if shed == 0 {
                break;
            }
            cut = age;
            shed = shed.saturating_sub(unit);
        }
        cut
    }

    /// Empties the page of the lowest-ratio schema whose newest row is the oldest, so a
    /// starved fill finds a free page.
    fn evict_stalest_page(
        &self,
        schemas: &[(SchemaId, f64, Vec<u32>)],
        now: u64,
        out: &mut Vec<(Vec<u8>, u64)>,
    ) {
        let Some((schema, _, pages)) = schemas.iter().find(|s| !s.2.is_empty()) else {
            return;
        };
        let newest = |p: u32| {
            self.pages.get(p as usize).map_or(u64::MAX, |l| {
                let page = l.read();
                page.slots
                    .iter()
                    .flatten()
                    .map(|m| m.last_access.load(Ordering::Relaxed))
                    .max()
                    .unwrap_or(0)
            })
        };
        if let Some(p) = pages.iter().copied().min_by_key(|p| newest(*p)) {
            self.evict_pages(*schema, &[p], now, 0, out, |_| true);
        }
    }

    /// Evicts the rows of `pages` (of `schema`) whose idle time `evict` accepts, and any
    /// row whose checksum fails (§V-C1's row checksum, verified here rather than on every
    /// hit: on one page in [`VERIFY_EVERY`] per pass, in turn by `round`); pages left empty
    /// go back to the pool.
    fn evict_pages(
        &self,
        schema: SchemaId,
        pages: &[u32],
        now: u64,
        round: u64,
        out: &mut Vec<(Vec<u8>, u64)>,
        evict: impl Fn(u64) -> bool,
    ) {
        let mut emptied = Vec::new();
        for &p in pages {
            let Some(lock) = self.pages.get(p as usize) else {
                continue;
            };
            let mut page = lock.write();
            if page.schema != schema {
                continue;
            }
            let verify = (u64::from(p) + round).is_multiple_of(VERIFY_EVERY);
            for s in 0..page.capacity() {
                let old = page.slots.get(s).and_then(Option::as_ref).and_then(|m| {
                    let idle = now.saturating_sub(m.last_access.load(Ordering::Relaxed));
                    let gone = evict(idle);
                    let damaged =
                        verify && !gone && page.body(s).is_some_and(|b| crc32c(b) != m.crc);
                    if damaged {
                        self.counters.damaged_rows.incr();
                    }
                    (gone || damaged).then(|| m.ikey.clone())
                });
                if let Some(ikey) = old {
                    clear(&mut page, s);
                    self.counters.evictions.incr();
                    out.push((ikey, handle(p, s)));
                }
            }
            self.mark(p as usize, &mut page);
            if page.rows == 0 && !page.slots.is_empty() {
                emptied.push(p);
            }
        }
        for p in emptied {
            self.release_if_empty(p, schema);
        }
    }

    /// True when use calls for eviction, or a fill found no room.
    pub fn needs_eviction(&self) -> bool {
        self.usage() > EVICT_TRIGGER || self.starved.load(Ordering::Relaxed)
    }

    /// True while an eviction pass should go on: use above the target, or a fill found no
    /// room and no page is free yet.
    pub fn over_target(&self) -> bool {
        self.usage() > self.cfg.evict_target
            || (self.starved.load(Ordering::Relaxed) && self.free.lock().is_empty())
    }

    /// Rows cached (for stats).
    pub fn rows(&self) -> usize {
        self.pages.iter().map(|p| p.read().rows).sum()
    }

    /// DRAM held by page buffers and the doorkeeper.
    pub fn dram_bytes(&self) -> u64 {
        self.pages
            .iter()
            .map(|p| p.read().data.capacity() as u64)
            .sum::<u64>()
            + self.doorkeeper.as_ref().map_or(0, Doorkeeper::bytes)
    }
}

fn take_slot(page: &mut Page) -> Option<usize> {
    let n = page.capacity();
    for (wi, w) in page.bitmap.iter_mut().enumerate() {
        if *w != u64::MAX {
            let bit = (!*w).trailing_zeros() as usize;
            let s = wi * 64 + bit;
            if s < n {
                *w |= 1 << bit;
                page.rows += 1;
                return Some(s);
            }
        }
    }
    None
}

fn put(page: &mut Page, s: usize, meta: SlotMeta, body: &[u8]) {
    let at = s * page.slot_size;
    if let Some(dst) = page.data.get_mut(at..at + body.len()) {
        dst.copy_from_slice(body);
    }
    if let Some(slot) = page.slots.get_mut(s) {
        *slot = Some(meta);
    }
}

fn clear(page: &mut Page, s: usize) {
    if let Some(slot) = page.slots.get_mut(s)
        && slot.take().is_some()
    {
        if let Some(w) = page.bitmap.get_mut(s / 64) {
            *w &= !(1u64 << (s % 64));
        }
        page.rows -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small_cache() -> SeaCache {
        SeaCache::new(CacheConfig {
            size: 4 * 256,
            page_size: 256,
            hit_threshold: 0.5,
            lifetime_ms: 1000,
            evict_target: 0.8,
            doorkeeper: false,
            sightings: DEFAULT_SIGHTINGS,
        })
    }

    /// Readers only count; the hit ratio moves when the cache thread closes a window, over
    /// every read counted since the last one, from however many threads.
    #[test]
    fn readers_count_and_the_cache_thread_closes_the_window() {
        let cache = Arc::new(small_cache());
        let st = cache.schema_stats(7);
        let readers: Vec<_> = (0..4)
            .map(|_| {
                let (c, st) = (cache.clone(), st.clone());
                std::thread::spawn(move || {
                    for i in 0..10_000 {
                        c.record(&st, i % 4 == 0);
                    }
                })
            })
            .collect();
        for r in readers {
            r.join().expect("reader");
        }
        assert_eq!((st.reads.get(), st.hits.get()), (40_000, 10_000));
        assert_eq!(st.ratio(), None, "no window closed by the readers");
        cache.roll_windows();
        assert_eq!(st.ratio(), Some(0.25));
        assert_eq!(cache.counters.hits.get(), 10_000);
        assert_eq!(cache.counters.misses.get(), 30_000);
        // Fewer than a window's reads since: the ratio stays.
        for _ in 0..WINDOW - 1 {
            c_record(&cache, &st, true);
        }
        cache.roll_windows();
        assert_eq!(st.ratio(), Some(0.25));
    }

    fn c_record(c: &SeaCache, st: &SchemaStats, hit: bool) {
        c.record(st, hit);
    }

    /// A reader never waits for the cache thread: a page it holds is a miss, and a busy
    /// admission queue drops the request.
    #[test]
    fn readers_do_not_wait_for_a_page_or_the_queue_the_cache_thread_holds() {
        let cache = small_cache();
        let layout = Layout::new(&tierkv_core::Schema {
            id: 1,
            name: "s".into(),
            fields: vec![tierkv_core::FieldDef::fixed("a", 3)],
        });
        let h = cache.fill(1, 256, b"k", 5, b"row").expect("a free slot");
        let got = cache.lookup(h, b"k", 5, &layout, &[0]);
        assert_eq!(got, Some(vec![b"row".to_vec()]));
        let (p, _) = unhandle(h).expect("a handle");
        {
            let _held = cache.pages[p].write();
            assert_eq!(cache.lookup(h, b"k", 5, &layout, &[0]), None);
        }
        {
            let _held = cache.queue.lock();
            cache.request(1, b"k", || None);
        }
        assert_eq!(cache.counters.requests_dropped.get(), 1);
        assert!(cache.next_task().is_none());
        cache.request(1, b"k", || None);
        assert!(cache.next_task().is_some());
    }

    /// The cache thread's `fill` (page lists, then a page) raced a writer freeing the last
    /// slot of a page (that page, then the page lists): both waited forever (seen once as a
    /// hung `schema_conformance` in CI). Here every slot is a whole page, so each free
    /// empties its page while a fill walks the schema's page list.
    #[test]
    fn fill_racing_the_release_of_an_emptied_page_does_not_deadlock() {
        let cache = Arc::new(SeaCache::new(CacheConfig {
            size: 4 * 256,
            page_size: 256,
            hit_threshold: 0.5,
            lifetime_ms: 1000,
            evict_target: 0.8,
            doorkeeper: false,
            sightings: DEFAULT_SIGHTINGS,
        }));
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let workers: Vec<_> = [&b"fill"[..], &b"free"[..]]
            .into_iter()
            .map(|key| {
                let (cache, done_tx) = (cache.clone(), done_tx.clone());
                std::thread::spawn(move || {
                    for _ in 0..200_000 {
                        if let Some(h) = cache.fill(1, 256, key, 0, b"row") {
                            cache.free_slot(h, key);
                        }
                    }
                    let _ = done_tx.send(());
                })
            })
            .collect();
        for _ in 0..2 {
            let finished = done_rx.recv_timeout(std::time::Duration::from_secs(60));
            assert!(finished.is_ok(), "fill and free_slot deadlocked");
        }
        for w in workers {
            w.join().expect("worker");
        }
    }

    /// A small cache whose doorkeeper passes keys asked for `sightings` times before.
    fn doorkept(sightings: u8) -> SeaCache {
        SeaCache::new(CacheConfig {
            doorkeeper: true,
            sightings,
            ..small_cache().cfg.clone()
        })
    }

    #[test]
    fn the_doorkeeper_queues_a_key_seen_before_and_an_inserted_key_at_its_first_read() {
        let cache = doorkept(1);
        cache.request(1, b"k", || None);
        assert!(
            cache.next_task().is_none(),
            "a first sighting is not queued"
        );
        assert_eq!(cache.counters.first_sightings.get(), 1);
        cache.request(1, b"k", || Some(((5, 9), b"row".to_vec())));
        let t = cache.next_task().expect("asked for before: queued");
        assert_eq!(
            (t.schema, t.key, t.row),
            (1, b"k".to_vec(), Some(((5, 9), b"row".to_vec())))
        );
        cache.request(2, b"k", || None);
        assert!(cache.next_task().is_none(), "another schema's key");
        cache.sight(3, b"new");
        cache.request(3, b"new", || None);
        assert!(
            cache.next_task().is_some(),
            "an inserted key's first read is queued"
        );
        assert_eq!(cache.counters.first_sightings.get(), 2);
        let off = SeaCache::new(small_cache().cfg.clone());
        off.request(1, b"x", || None);
        assert!(off.next_task().is_some(), "off: every request is queued");
    }

    #[test]
    fn with_two_sightings_a_key_is_queued_at_its_third_request() {
        let cache = doorkept(2);
        for _ in 0..2 {
            cache.request(1, b"k", || None);
            assert!(cache.next_task().is_none(), "turned away");
        }
        cache.request(1, b"k", || None);
        assert!(cache.next_task().is_some(), "third request queued");
        assert_eq!(cache.counters.first_sightings.get(), 2);
        cache.sight(1, b"new");
        cache.request(1, b"new", || None);
        assert!(
            cache.next_task().is_some(),
            "an inserted key's first read is queued"
        );
    }

    #[test]
    fn admission_threshold() {
        assert!(
            admit(None, 0.5, 0.99),
            "unknown ratio: admit everything (as LRU)"
        );
        assert!(admit(Some(0.51), 0.5, 0.99));
        assert!(!admit(Some(0.1), 0.5, 0.5), "ratio 0.1: probability 0.2");
        // Below the threshold: probability ratio / threshold.
        let draws = 10_000;
        let admitted = (0..draws)
            .filter(|i| admit(Some(0.25), 0.5, *i as f64 / draws as f64))
            .count();
        assert_eq!(admitted, 5_000);
    }

    #[test]
    fn a_schema_whose_first_window_had_no_hits_is_still_admitted() {
        // A first window read before the cache thread admitted anything leaves ratio 0;
        // its rows must still be admitted sometimes, or no hit can ever raise it again.
        let draws = 10_000;
        let admitted = (0..draws)
            .filter(|i| admit(Some(0.0), 0.5, *i as f64 / draws as f64))
            .count();
        assert_eq!(admitted, (MIN_ADMISSION * draws as f64) as usize);
        let stats = SchemaStats::new();
        for _ in 0..WINDOW {
            stats.record(false);
        }
        stats.roll();
        assert_eq!(stats.ratio(), Some(0.0));
        assert!(
            admit(stats.ratio(), 0.5, 0.01),
            "ratio 0 shuts the schema out"
        );
    }

    /// One schema holds every page with a row or two each: use is low, but another
    /// schema's fill finds no page. The next pass empties the stalest page for it.
    #[test]
    fn a_starved_fill_gets_the_stalest_page() {
        // 4 pages of 4 slots.
        let cache = SeaCache::new(CacheConfig {
            size: 4 * 256,
            page_size: 256,
            hit_threshold: 0.5,
            lifetime_ms: 1 << 40,
            evict_target: 0.8,
            doorkeeper: false,
            sightings: DEFAULT_SIGHTINGS,
        });
        let handles: Vec<u64> = (0..16u32)
            .map(|i| {
                cache
                    .fill(1, 64, &i.to_le_bytes(), 0, b"row")
                    .expect("a slot")
            })
            .collect();
        for (i, h) in handles.iter().enumerate() {
            if i % 4 != 0 {
                cache.free_slot(*h, &(i as u32).to_le_bytes());
            }
        }
        assert!((cache.usage() - 0.25).abs() < 1e-6);
        assert_eq!(cache.page_use(), 1.0);
        assert!(!cache.needs_eviction());
        assert_eq!(cache.fill(2, 64, b"other", 0, b"row"), None);
        assert!(cache.needs_eviction(), "a starved fill calls for eviction");
        let out = cache.evict_round();
        assert_eq!(out.len(), 1, "one page's last row");
        assert_eq!(cache.page_use(), 0.75);
        assert!(!cache.needs_eviction());
        assert!(cache.fill(2, 64, b"other", 0, b"row").is_some());
    }

    /// A cached row whose bytes no longer match its checksum is dropped by the eviction
    /// pass that verifies its page (one in `VERIFY_EVERY` passes), however recently read.
    #[test]
    fn an_eviction_pass_drops_a_damaged_row() {
        let cache = small_cache();
        let h = cache.fill(1, 64, b"k", 0, b"row").expect("a free slot");
        let keep = cache.fill(1, 64, b"j", 0, b"row").expect("a free slot");
        let (p, s) = unhandle(h).expect("a handle");
        if let Some(b) = cache.pages[p].write().data.get_mut(s * 64) {
            *b ^= 1;
        }
        let mut out = Vec::new();
        let now = cache.advance_clock();
        for round in 0..VERIFY_EVERY {
            cache.evict_pages(1, &[p as u32], now, round, &mut out, |_| false);
        }
        assert_eq!(out, vec![(b"k".to_vec(), h)]);
        assert_eq!(cache.counters.damaged_rows.get(), 1);
        assert!(cache.body(keep, b"j", 0).is_some(), "the sound row stays");
    }

    /// A fixed field is written into the cached row in place (checksum and tail updated);
    /// a variable one is left to the caller, which rebuilds the body.
    #[test]
    fn fixed_fields_are_written_through_in_place() {
        let cache = small_cache();
        let layout = Layout::new(&tierkv_core::Schema {
            id: 1,
            name: "s".into(),
            fields: vec![
                tierkv_core::FieldDef::fixed("a", 3),
                tierkv_core::FieldDef::var("v", 20),
            ],
        });
        let body = layout.encode(&[b"abc", b"0123456789"]);
        let h = cache.fill(1, 64, b"k", 5, &body).expect("a free slot");
        assert_eq!(
            cache.write_fields(h, b"k", (5, 6), &layout, &[(0, b"xyz")]),
            Some(true)
        );
        let got = cache.body(h, b"k", 6).expect("re-tagged");
        assert_eq!(
            layout.decode_all(&got).ok(),
            Some(vec![b"xyz".to_vec(), b"0123456789".to_vec()])
        );
        let (p, s) = unhandle(h).expect("a handle");
        let crc = cache.pages[p].read().slots[s].as_ref().map(|m| m.crc);
        assert_eq!(crc, Some(crc32c(&got)));
        assert_eq!(
            cache.write_fields(h, b"k", (6, 7), &layout, &[(1, b"short")]),
            None
        );
        assert_eq!(
            cache.write_fields(h, b"k", (6, 7), &layout, &[(0, b"too long")]),
            None
        );
        assert_eq!(
            cache.write_fields(h, b"k", (5, 7), &layout, &[(0, b"old")]),
            Some(false),
            "the slot holds another version"
        );
    }

    #[test]
    fn lifetime_is_longest_for_middling_ratios() {
        let mid = lifetime(1000, 0.45, 0.2);
        assert!(mid > lifetime(1000, 0.05, 0.2));
        assert!(mid > lifetime(1000, 0.95, 0.2));
        assert!(
            lifetime(1000, 0.45, 0.9) < mid,
            "a schema holding most pages lives shorter"
        );
    }

    /// No row is past its lifetime, so eviction shortens it: exactly the least recently
    /// read rows go, and use lands on the target, not below it.
    #[test]
    fn eviction_past_the_lifetime_sheds_the_least_recently_read_rows_to_the_target() {
        // 10 pages of 4 slots.
        let cache = SeaCache::new(CacheConfig {
            size: 10 * 256,
            page_size: 256,
            hit_threshold: 0.5,
            lifetime_ms: 1 << 40,
            evict_target: 0.8,
            doorkeeper: false,
            sightings: DEFAULT_SIGHTINGS,
        });
        let layout = Layout::new(&tierkv_core::Schema {
            id: 1,
            name: "s".into(),
            fields: vec![tierkv_core::FieldDef::fixed("a", 3)],
        });
        let mut handles = Vec::new();
        for i in 0..40u32 {
            let key = i.to_le_bytes();
            handles.push(cache.fill(1, 64, &key, 0, b"row").expect("a free slot"));
            // Distinct fill times (the clock counts milliseconds).
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        assert!((cache.usage() - 1.0).abs() < 1e-6);
        // Rows 0..4 are read again now: they are no longer the oldest.
        cache.advance_clock();
        for (i, h) in handles.iter().enumerate().take(4) {
            let key = (i as u32).to_le_bytes();
            assert!(cache.lookup(*h, &key, 0, &layout, &[0]).is_some());
        }
        let gone: Vec<u32> = cache
            .evict_round()
            .iter()
            .map(|(k, _)| u32::from_le_bytes(k[..4].try_into().expect("4 bytes")))
            .collect();
        assert!((cache.usage() - 0.8).abs() < 1e-6, "use {}", cache.usage());
        let mut gone = gone;
        gone.sort_unstable();
        assert_eq!(
            gone,
            (4..12).collect::<Vec<u32>>(),
            "the 8 least recently read"
        );
    }

    #[test]
    fn hit_ratio_is_a_moving_average_over_windows() {
        let s = SchemaStats::new();
        assert_eq!(s.ratio(), None);
        for i in 0..WINDOW {
            s.record(i % 4 == 0);
        }
        s.roll();
        assert_eq!(s.ratio(), Some(0.25));
        for _ in 0..WINDOW {
            s.record(true);
        }
        s.roll();
        assert_eq!(s.ratio(), Some(0.625));
        // A window is every read since the last one closed, however many.
        for i in 0..3 * WINDOW {
            s.record(i % 3 == 0);
        }
        s.roll();
        assert_eq!(s.ratio(), Some((0.625 + 1.0 / 3.0) / 2.0));
    }
}
