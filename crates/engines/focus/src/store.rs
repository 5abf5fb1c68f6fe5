//! [`FocusStore`]: the schema API ([`SchemaStore`]) and the plain [`KvStore`] over the
//! PLog, with the DRAM global index (FOCUS §IV, Fig. 5) and swim's write side (§V-B).
//!
//! # Index (§III-C, §IV)
//! An ordered map from `schema_id:u32le ++ key` to an [`Entry`] whose `tail` word holds the
//! pool offset of the row's newest chain entry: tierkv's `btree` index
//! (`tierkv_core::common::skipindex::SkipIndex`, a lock-free hash map for point lookups
//! beside a lock-free skip list for order; reads take no lock). Ordered, so scans of one
//! schema are one range (weakly consistent across rows, like every engine's scan); the
//! plain key-value namespace is schema 0 (a value is the body of a record of schema 0, with
//! no field layout). It was a `BTreeMap` behind one `RwLock` until 2026-11-27: with keys
//! sharing a prefix (`schema_id ++ "user"`), about half of a one-field read's CPU went to
//! that tree's key comparisons and its lock.
//!
//! # Writes
//! Every write of a row takes the row's stripe lock (`tierkv_core::schema::Stripes`), takes
//! a sequence number, appends and persists its record, then moves `tail` by CAS and
//! returns. Deviation from §V-B: the paper's writers are lock-free (append with PrevAddr =
//! the tail read, CAS, on failure rewrite PrevAddr and retry). With that protocol a delta
//! whose CAS failed may stay durable with a sequence number above the winner's, and
//! recovery, which takes the newest version per key by sequence number, would then follow
//! the loser and lose the winner's acknowledged fields. Under the stripe lock sequence
//! order equals chain order per row, so "newest sequence number" is exactly the chain
//! tail; writers of different rows never wait for each other, and readers take no lock.
//! The CAS stays: it is what a background merge or cache thread would race with.
//!
//! - `put_row`: a complete record in the CLog (layout-aware body), `tail` := it.
//! - `update_fields` (swim on): a delta in the DLog with `prev` = the old tail; after
//!   `restore_point` deltas on the chain the next update writes the whole row instead (a
//!   restore point, §V-B), read through the chain and merged with the update. Swim off: every
//!   update writes the whole row.
//! - `delete_row`: a tombstone in the CLog, then the entry leaves the index.
//!
//! Thread safety: `Send + Sync`; every method takes `&self`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use parking_lot::{Mutex, RwLock};
use tierkv_core::common::index::ConcurrentIndex;
use tierkv_core::common::skipindex::{EpochCell, SkipIndex};
use tierkv_core::schema::{Catalog, Stripes, codec};
use tierkv_core::{
    Error, FieldDef, FieldId, FieldSelection, KvPair, KvStore, Limits, Result, Row, RowPair,
    Schema, SchemaId, SchemaStore, Stats, Tier,
};

use crate::format::chunk::ChunkKind;
use crate::format::delta;
use crate::format::record::{RecordHeader, RecordKind};
use crate::format::row::Layout;
use crate::options::FocusOptions;
use crate::plog::PLog;
use crate::stats::FocusCounters;
use crate::swim::{self, Walk};

/// The schema id of the plain key-value namespace.
pub const PLAIN_SCHEMA: SchemaId = 0;

/// An index entry: the row's newest chain entry and the deltas on its chain.
#[derive(Debug)]
pub struct Entry {
    /// Pool offset of the newest chain entry.
    pub tail: AtomicU64,
    /// Deltas between the tail and the chain's complete record.
    pub deltas: AtomicU32,
    /// A seqlock: odd while a merge writes the chain's complete record in place.
    pub merging: AtomicU64,
    /// The newest delta the in-place merge folded into the complete record (0: none): a
    /// read that reaches it jumps to [`Entry::base`], which holds its fields and every
    /// older delta's.
    pub merged: AtomicU64,
    /// The chain's complete record (valid while `merged` is not 0).
    pub base: AtomicU64,
    /// The SeaCache slot holding the row (0: none): the paper's index pointer to a cached
    /// row (§V-C1).
    pub cached: AtomicU64,
}

impl Entry {
    /// An entry pointing at `tail` with `deltas` deltas.
    pub fn new(tail: u64, deltas: u32) -> Arc<Entry> {
        Arc::new(Entry {
            tail: AtomicU64::new(tail),
            deltas: AtomicU32::new(deltas),
            merging: AtomicU64::new(0),
            merged: AtomicU64::new(0),
            base: AtomicU64::new(0),
            cached: AtomicU64::new(0),
        })
    }
}

/// A schema with its layout.
pub struct SchemaInfo {
    /// The schema.
    pub schema: Arc<Schema>,
    /// Its precomputed offsets.
    pub layout: Layout,
    /// The SeaCache slot size of its rows, if they can be cached.
    pub slot: Option<usize>,
    /// Its SeaCache hit statistics, when its rows can be cached (kept here so that a read
    /// counts itself without a lookup).
    pub cache_stats: Option<Arc<crate::seacache::SchemaStats>>,
}

impl SchemaInfo {
    fn new(schema: Arc<Schema>, cache: Option<&crate::seacache::SeaCache>) -> SchemaInfo {
        let layout = Layout::new(&schema);
        let max_body = layout.fixed_len() as usize
            + schema
                .fields
                .iter()
                .filter_map(|f| match f.kind {
                    tierkv_core::FieldKind::Var { max_len } if usize::from(max_len) > 8 => {
                        Some(usize::from(max_len))
                    }
                    _ => None,
                })
                .sum::<usize>();
        let cache = cache.filter(|c| c.fits(max_body));
        let slot = cache.map(|_| max_body.div_ceil(8) * 8);
        let cache_stats = cache.map(|c| c.schema_stats(schema.id));
        SchemaInfo {
            schema,
            layout,
            slot,
            cache_stats,
        }
    }
}

/// The index key of `key` in `schema`.
pub fn index_key(schema: SchemaId, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(4 + key.len());
    k.extend_from_slice(&schema.to_le_bytes());
    k.extend_from_slice(key);
    k
}

/// The longest a write waits for GC to make room (a backstop: a writer is refused as soon
/// as a GC pass that began after it started waiting gave up, which takes one pass).
const ADMIT_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(4);

/// What kind of write [`FocusStore::admit_write`] admits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admit {
    /// A put or an update: adds data.
    Data,
    /// A delete: a tombstone.
    Delete,
}

/// A FOCUS store.
pub struct FocusStore {
    pub(crate) plog: PLog,
    pub(crate) catalog: Catalog,
    /// Every schema's derived state. Schemas are only ever added; readers find theirs
    /// without a lock or a reference count ([`FocusStore::with_info`]).
    pub(crate) schemas: papaya::HashMap<SchemaId, Arc<SchemaInfo>>,
    pub(crate) index: SkipIndex<Arc<Entry>, EpochCell<Arc<Entry>>>,
    pub(crate) stripes: Stripes,
    pub(crate) seq: AtomicU64,
    pub(crate) opts: FocusOptions,
    limits: Limits,
    pub(crate) counters: FocusCounters,
    closed: AtomicBool,
    /// Serializes GC steps.
    pub(crate) gc_lock: Mutex<()>,
    /// Readers of records hold it shared; GC holds it exclusively to free a chunk.
    pub(crate) reclaim: RwLock<()>,
    /// GC's wake-ups (writers waiting for room, the thread waiting for work).
    pub(crate) signal: Arc<crate::gc::Signal>,
    /// GC passes as writers waiting for room see them.
    pub(crate) passes: crate::gc::Passes,
    poisoned: std::sync::OnceLock<String>,
    bg: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Rows waiting for an in-place merge, and the merge thread's signal.
    pub(crate) merge_queue: Arc<crate::merge::MergeQueue>,
    merger: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// SeaCache, when on.
    pub(crate) cache: Option<Arc<crate::seacache::SeaCache>>,
    cacher: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The chunks holding members of each committed write batch (`batch.rs`).
    pub(crate) batches: crate::batch::BatchChunks,
    /// Held exclusively while a write batch moves the index, shared by `multi_get`, which
    /// therefore sees none or all of each batch. Taken after the stripe locks; nothing is
    /// waited for while it is held.
    pub(crate) batch_gate: RwLock<()>,
}

impl FocusStore {
    /// Assembles a store from recovered (or fresh) parts.
    pub(crate) fn assemble(
        plog: PLog,
        schemas: Vec<Schema>,
        opts: FocusOptions,
        limits: Limits,
        next_seq: u64,
    ) -> Result<FocusStore> {
        let cache = opts
            .seacache
            .then(|| Arc::new(crate::seacache::SeaCache::new(opts.cache.clone())));
        let infos: papaya::HashMap<SchemaId, Arc<SchemaInfo>> = schemas
            .iter()
            .map(|s| {
                (
                    s.id,
                    Arc::new(SchemaInfo::new(Arc::new(s.clone()), cache.as_deref())),
                )
            })
            .collect();
        let max_value = limits
            .max_value_len
            .min((plog.max_record() as usize).saturating_sub(limits.max_key_len + 64));
        Ok(FocusStore {
            catalog: Catalog::from_schemas(schemas)?,
            schemas: infos,
            plog,
            index: SkipIndex::default(),
            stripes: Stripes::default(),
            seq: AtomicU64::new(next_seq),
            opts,
            limits: Limits {
                max_value_len: max_value,
                ..limits
            },
            counters: FocusCounters::default(),
            closed: AtomicBool::new(false),
            gc_lock: Mutex::new(()),
            reclaim: RwLock::new(()),
            signal: Arc::default(),
            passes: crate::gc::Passes::default(),
            poisoned: std::sync::OnceLock::new(),
            bg: Mutex::new(None),
            merge_queue: Arc::default(),
            merger: Mutex::new(None),
            cache,
            cacher: Mutex::new(None),
            batches: crate::batch::BatchChunks::default(),
            batch_gate: RwLock::new(()),
        })
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// The schema `id` with its layout, or `InvalidArgument`.
    pub fn info(&self, id: SchemaId) -> Result<Arc<SchemaInfo>> {
        self.with_info(id, |info| Ok(info.clone()))
    }

    /// Runs `f` on the state of schema `id`, borrowed: the hot paths take no lock and
    /// touch no reference count that other threads write (4 clients on 2 cores: the
    /// shared lock word and the `Arc`'s count bounced between the cores on every call).
    pub(crate) fn with_info<R>(
        &self,
        id: SchemaId,
        f: impl FnOnce(&Arc<SchemaInfo>) -> Result<R>,
    ) -> Result<R> {
        let schemas = self.schemas.pin();
        match schemas.get(&id) {
            Some(info) => f(info),
            None => Err(Error::invalid(format!("no schema with id {id}"))),
        }
    }

    /// The index entry of `key` in `schema` (tests and tools).
    pub fn entry(&self, schema: SchemaId, key: &[u8]) -> Option<Arc<Entry>> {
        self.index.get(&index_key(schema, key))
    }

    /// The persistent log (tests and tools).
    pub fn plog(&self) -> &PLog {
        &self.plog
    }

    pub(crate) fn index_len(&self) -> usize {
        self.index.len()
    }

    pub(crate) fn dram_bytes(&self) -> u64 {
        // Index entries (key, Arc'd entry and tree overhead, roughly) and cache pages.
        (self.index.len() * 128) as u64 + self.cache.as_ref().map_or(0, |c| c.dram_bytes())
    }

    /// The limits every call is checked against (the value limit lowered to what a chunk
    /// holds).
    pub fn limits(&self) -> Limits {
        self.limits
    }

    fn check_key(&self, key: &[u8]) -> Result<()> {
        self.check_open()?;
        self.limits.check_key(key)
    }

    /// Checks a write: open, not poisoned, a valid key. While free chunks are below GC's
    /// hard floor (its reserve) and GC runs, a write that adds data waits (holding no
    /// lock) for GC to make room, and is refused with `NoSpace` (a pool full of live data)
    /// rather than eating the reserve as soon as a GC pass that began after it started
    /// waiting ended without room (`gc::Passes`; at most `ADMIT_WAIT_MAX`); a delete
    /// (`Admit::Delete`: a small tombstone, and the only way to make room in a full pool)
    /// may use the reserve at once.
    fn admit_write(&self, key: &[u8], admit: Admit) -> Result<()> {
        self.check_key(key)?;
        self.admit(admit, 0)
    }

    /// [`FocusStore::admit_write`] without the key check, for a write that needs `extra`
    /// chunks beyond one record (a write batch).
    pub(crate) fn admit(&self, admit: Admit, extra: u64) -> Result<()> {
        if let Some(why) = self.poisoned.get() {
            return Err(Error::Poisoned(why.clone()));
        }
        if admit == Admit::Delete {
            return Ok(());
        }
        let floor = crate::gc::hard_floor(self.opts.log_shards) + extra;
        let mut waiting = None;
        while self.plog.free_chunks() < floor && self.bg.lock().is_some() {
            let now = std::time::Instant::now();
            let (seen, since) = *waiting.get_or_insert_with(|| {
                self.counters.write_stalls.incr();
                (self.passes.begun.load(Ordering::SeqCst), now)
            });
            // IMPORTANT: only a pass that began after this writer started waiting (its
            // number is above `seen`) may refuse it: an older one may have missed the
            // room that deletes made since.
            if self.passes.gave_up.load(Ordering::SeqCst) > seen {
                return Err(Error::no_space(
                    Tier::Pmem,
                    "focus: the pool is full of live data (a GC pass found no room)",
                ));
            }
            if now.duration_since(since) >= ADMIT_WAIT_MAX {
                return Err(Error::no_space(
                    Tier::Pmem,
                    format!("focus: GC made no room in {ADMIT_WAIT_MAX:?}"),
                ));
            }
            self.signal.notify();
            self.signal.wait(std::time::Duration::from_millis(10));
        }
        Ok(())
    }

    /// Counts a write that superseded or removed a record (new work for GC).
    pub(crate) fn superseded(&self) {
        self.passes.garbage.fetch_add(1, Ordering::SeqCst);
    }

    /// Refuses writes from now on (a background failure).
    pub(crate) fn poison(&self, why: String) {
        let _ = self.poisoned.set(why);
    }

    /// Starts the background threads (at open).
    pub(crate) fn start(self: &Arc<Self>) -> Result<()> {
        *self.bg.lock() = Some(crate::gc::spawn(self)?);
        if self.opts.merge != crate::merge::MergeMode::Off {
            *self.merger.lock() = Some(crate::merge::spawn(self)?);
        }
        if let Some(c) = &self.cache {
            *self.cacher.lock() = Some(crate::cache_ops::spawn(self, c.clone())?);
        }
        Ok(())
    }

    /// The index entry under an index key.
    pub(crate) fn index_get(&self, ikey: &[u8]) -> Option<Arc<Entry>> {
        self.index.get(ikey)
    }

    /// Appends a complete record or tombstone to GC's own chunks with the next sequence
    /// number.
    pub(crate) fn append_gc_record(
        &self,
        log: ChunkKind,
        kind: RecordKind,
        schema: SchemaId,
        key: &[u8],
        body: &[u8],
    ) -> Result<u64> {
        self.plog
            .append_gc(log, self.next_header(kind, schema, key, 0, body), key, body)
    }

    /// A record header with the next sequence number (its epoch is the chunk's, set by
    /// the PLog).
    fn next_header(
        &self,
        kind: RecordKind,
        schema: SchemaId,
        key: &[u8],
        prev: u64,
        body: &[u8],
    ) -> RecordHeader {
        RecordHeader {
            kind,
            key_len: key.len() as u16,
            body_len: body.len() as u32,
            seq: self.seq.fetch_add(1, Ordering::Relaxed),
            schema,
            epoch: 0,
            prev,
            batch: 0,
        }
    }

    /// Moves a row's tail from `cur` to a complete record at `new` (stripe lock held).
    pub(crate) fn replace_tail(&self, e: &Entry, cur: u64, new: u64) -> Result<()> {
        e.merged.store(0, Ordering::Release);
        self.cas_tail(e, cur, new)?;
        e.deltas.store(0, Ordering::Release);
        Ok(())
    }

    /// Appends a record for `key` in `schema` with the next sequence number.
    fn append(
        &self,
        log: ChunkKind,
        kind: RecordKind,
        schema: SchemaId,
        key: &[u8],
        prev: u64,
        body: &[u8],
    ) -> Result<u64> {
        self.plog.append(
            log,
            self.next_header(kind, schema, key, prev, body),
            key,
            body,
        )
    }

    /// Installs a complete record at `off` as the row's chain (stripe lock held).
    pub(crate) fn install(&self, ikey: &[u8], old: Option<&Entry>, off: u64) -> Result<()> {
        match old {
            Some(e) => {
                let cur = e.tail.load(Ordering::Acquire);
                self.replace_tail(e, cur, off)?;
                self.superseded();
            }
            None => {
                self.index.insert(ikey, Entry::new(off, 0));
            }
        }
        Ok(())
    }

    fn cas_tail(&self, e: &Entry, cur: u64, new: u64) -> Result<()> {
        e.tail
            .compare_exchange(cur, new, Ordering::AcqRel, Ordering::Acquire)
            .map(|_| ())
            .map_err(|_| {
                Error::corruption(Tier::Dram, new, "an index tail moved under its row lock")
            })
    }

    /// Writes a complete row (stripe lock held).
    fn write_row(
        &self,
        info: &SchemaInfo,
        key: &[u8],
        ikey: &[u8],
        values: &[&[u8]],
    ) -> Result<()> {
        let body = info.layout.encode(values);
        let old = self.index.get(ikey);
        let old_tail = old.as_ref().map(|e| e.tail.load(Ordering::Acquire));
        let off = self.append(
            ChunkKind::CLog,
            RecordKind::Row,
            info.schema.id,
            key,
            0,
            &body,
        )?;
        self.install(ikey, old.as_deref(), off)?;
        if let (Some(e), Some(t)) = (&old, old_tail) {
            self.cache_after_write(
                info,
                ikey,
                e,
                t,
                off,
                crate::cache_ops::CacheWrite::Row(&body),
            );
        } else if let (Some(c), Some(_)) = (&self.cache, info.slot) {
            // An insert is the row's first sighting (see `seacache.rs`, Doorkeeper).
            c.sight(info.schema.id, key);
        }
        self.counters.rows_put.incr();
        self.counters
            .ops
            .user_bytes_written
            .add((key.len() + body.len()) as u64);
        Ok(())
    }

    /// Reads fields `ids` of the chain ending at `e`'s tail.
    pub(crate) fn walk(&self, info: &SchemaInfo, e: &Entry, ids: &[FieldId]) -> Result<Walk> {
        let _r = self.reclaim.read();
        let w = loop {
            // NOTE: the seqlock: a read that overlapped an in-place merge is done again.
            let v = e.merging.load(Ordering::Acquire);
            if v % 2 == 1 {
                std::thread::yield_now();
                continue;
            }
            let tail = e.tail.load(Ordering::Acquire);
            let shortcut = (
                e.merged.load(Ordering::Acquire),
                e.base.load(Ordering::Acquire),
            );
            let w = swim::read_fields(self.plog.pool(), &info.layout, tail, ids, shortcut);
            if e.merging.load(Ordering::Acquire) == v {
                break w?;
            }
        };
        self.counters.reads.incr();
        self.counters.chain_steps.add(w.steps as u64);
        self.counters.ops.reads_from_pmem.incr();
        self.counters
            .ops
            .user_bytes_read
            .add(w.values.iter().map(|v| v.len() as u64).sum());
        Ok(w)
    }

    /// The fields `ids` of a row and the chain entries read (tests of the early stop).
    pub fn get_fields_traced(
        &self,
        schema: SchemaId,
        key: &[u8],
        ids: &[FieldId],
    ) -> Result<Option<Walk>> {
        let info = self.info(schema)?;
        match self.index.get(&index_key(schema, key)) {
            None => Ok(None),
            Some(e) => self.walk(&info, &e, ids).map(Some),
        }
    }

    /// The value of a plain key (schema 0).
    pub(crate) fn get_plain(&self, e: &Entry) -> Result<Vec<u8>> {
        let _r = self.reclaim.read();
        let pool = self.plog.pool();
        let off = e.tail.load(Ordering::Acquire);
        let h = swim::header(pool, off)?;
        if h.kind != RecordKind::Row || h.schema != PLAIN_SCHEMA {
            return Err(Error::corruption(
                Tier::Pmem,
                off,
                "a plain key's tail is no plain record",
            ));
        }
        let v = swim::body(pool, off, &h)?.to_vec();
        self.counters.ops.reads_from_pmem.incr();
        self.counters.ops.user_bytes_read.add(v.len() as u64);
        Ok(v)
    }

    /// Removes a row (stripe lock held): tombstone first, then the index entry.
    fn remove(&self, schema: SchemaId, key: &[u8], ikey: &[u8]) -> Result<()> {
        let Some(e) = self.index.get(ikey) else {
            return Ok(());
        };
        // IMPORTANT: the tombstone is durable before the row leaves the index.
        self.append(ChunkKind::CLog, RecordKind::Tombstone, schema, key, 0, b"")?;
        self.unindex(ikey, &e);
        Ok(())
    }

    /// Takes a row out of the index after its tombstone is durable (stripe lock held).
    pub(crate) fn unindex(&self, ikey: &[u8], e: &Entry) {
        self.cache_forget(ikey, e);
        self.index.remove(ikey);
        self.superseded();
        self.counters.tombstones.incr();
    }

    fn ids_of(&self, info: &SchemaInfo, sel: &FieldSelection) -> Result<Vec<FieldId>> {
        info.schema.resolve(sel)
    }

    /// Marks the store closed.
    pub fn shut(&self) {
        self.closed.store(true, Ordering::Release);
    }
}

impl SchemaStore for FocusStore {
    fn create_schema(&self, name: &str, fields: &[FieldDef]) -> Result<Arc<Schema>> {
        self.check_open()?;
        let s = self.catalog.create(name, fields, |s, _| {
            let mut body = Vec::new();
            codec::encode_schema_into(s, &mut body);
            let h = RecordHeader {
                kind: RecordKind::Schema,
                key_len: 0,
                body_len: body.len() as u32,
                seq: 0,
                schema: s.id,
                epoch: 0,
                prev: 0,
                batch: 0,
            };
            // IMPORTANT: the schema record is durable before the schema is visible.
            self.plog.append_catalog(h, &body).map(|_| ())
        })?;
        let info = SchemaInfo::new(s.clone(), self.cache.as_deref());
        self.schemas
            .pin()
            .get_or_insert_with(s.id, || Arc::new(info));
        self.counters.schemas_created.incr();
        Ok(s)
    }

    fn schema(&self, name: &str) -> Result<Option<Arc<Schema>>> {
        self.check_open()?;
        Ok(self.catalog.by_name(name))
    }

    fn schemas(&self) -> Result<Vec<Arc<Schema>>> {
        self.check_open()?;
        Ok(self.catalog.all())
    }

    fn put_row(&self, schema: SchemaId, key: &[u8], values: &[&[u8]]) -> Result<()> {
        self.admit_write(key, Admit::Data)?;
        let info = self.info(schema)?;
        info.schema.check_row(values)?;
        let ikey = index_key(schema, key);
        let _g = self.stripes.lock(&ikey);
        self.write_row(&info, key, &ikey, values)
    }

    fn update_fields(
        &self,
        schema: SchemaId,
        key: &[u8],
        set: &[(FieldId, &[u8])],
    ) -> Result<bool> {
        self.admit_write(key, Admit::Data)?;
        let info = self.info(schema)?;
        info.schema.check_update(set)?;
        let ikey = index_key(schema, key);
        let _g = self.stripes.lock(&ikey);
        let Some(e) = self.index.get(&ikey) else {
            return Ok(false);
        };
        let deltas = e.deltas.load(Ordering::Acquire);
        if !self.opts.swim || deltas >= self.opts.restore_point {
            // A restore point (or swim off): the whole row, as the chain has it plus this
            // update, in one complete record.
            let all: Vec<FieldId> = (0..info.schema.len() as FieldId).collect();
            let mut row = self.walk(&info, &e, &all)?.values;
            for (id, v) in set {
                if let Some(slot) = row.get_mut(usize::from(*id)) {
                    *slot = v.to_vec();
                }
            }
            let refs: Vec<&[u8]> = row.iter().map(Vec::as_slice).collect();
            self.write_row(&info, key, &ikey, &refs)?;
            self.plog
                .pool()
                .crash_point("focus.swim.restore_point_published");
            let c = if self.opts.swim {
                &self.counters.restore_points
            } else {
                &self.counters.full_updates
            };
            c.incr();
            return Ok(true);
        }
        let body = delta::encode(&info.layout, set);
        let prev = e.tail.load(Ordering::Acquire);
        let off = self.append(ChunkKind::DLog, RecordKind::Delta, schema, key, prev, &body)?;
        self.plog.pool().crash_point("focus.swim.delta_persisted");
        // IMPORTANT: the delta is durable (append persisted it) before the index moves.
        self.cas_tail(&e, prev, off)?;
        self.superseded();
        self.plog.pool().crash_point("focus.swim.delta_published");
        self.cache_after_write(
            &info,
            &ikey,
            &e,
            prev,
            off,
            crate::cache_ops::CacheWrite::Update(set),
        );
        e.deltas.store(deltas + 1, Ordering::Release);
        if self.opts.merge != crate::merge::MergeMode::Off
            && set.iter().all(|(id, _)| {
                matches!(
                    info.layout.kind(*id),
                    Ok(tierkv_core::FieldKind::Fixed { .. })
                )
            })
        {
            self.merge_queue.push(schema, key);
        }
        self.counters.deltas_appended.incr();
        self.counters
            .ops
            .user_bytes_written
            .add((key.len() + body.len()) as u64);
        Ok(true)
    }

    fn get_fields(
        &self,
        schema: SchemaId,
        key: &[u8],
        selection: &FieldSelection,
    ) -> Result<Option<Row>> {
        self.check_key(key)?;
        self.with_info(schema, |info| {
            let ids = self.ids_of(info, selection)?;
            let ikey = index_key(schema, key);
            // The entry borrowed under the index's epoch, not cloned (see `with_info`).
            let mut row = None;
            self.index.get_with(&ikey, &mut |e| {
                row = Some(self.read_row(info, &ikey, key, e, &ids));
            });
            row.transpose()
        })
    }

    fn scan_fields(
        &self,
        schema: SchemaId,
        start: &[u8],
        selection: &FieldSelection,
        limit: usize,
    ) -> Result<Vec<RowPair>> {
        self.check_open()?;
        let info = self.info(schema)?;
        let ids = self.ids_of(&info, selection)?;
        let prefix = schema.to_le_bytes();
        let mut out = Vec::new();
        for (k, e) in self.index.scan(&index_key(schema, start), limit)? {
            let Some(user) = k.strip_prefix(&prefix[..]) else {
                break;
            };
            let row = self.read_row(&info, &k, user, &e, &ids)?;
            out.push((user.to_vec(), row));
        }
        Ok(out)
    }

    fn delete_row(&self, schema: SchemaId, key: &[u8]) -> Result<()> {
        self.admit_write(key, Admit::Delete)?;
        self.info(schema)?;
        let ikey = index_key(schema, key);
        let _g = self.stripes.lock(&ikey);
        self.remove(schema, key, &ikey)
    }
}

impl KvStore for FocusStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.check_key(key)?;
        match self.index.get(&index_key(PLAIN_SCHEMA, key)) {
            None => Ok(None),
            Some(e) => self.get_plain(&e).map(Some),
        }
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.admit_write(key, Admit::Data)?;
        self.limits.check_value(value)?;
        let ikey = index_key(PLAIN_SCHEMA, key);
        let _g = self.stripes.lock(&ikey);
        let old = self.index.get(&ikey);
        let off = self.append(
            ChunkKind::CLog,
            RecordKind::Row,
            PLAIN_SCHEMA,
            key,
            0,
            value,
        )?;
        self.install(&ikey, old.as_deref(), off)?;
        self.counters.rows_put.incr();
        self.counters
            .ops
            .user_bytes_written
            .add((key.len() + value.len()) as u64);
        Ok(())
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        self.admit_write(key, Admit::Delete)?;
        let ikey = index_key(PLAIN_SCHEMA, key);
        let _g = self.stripes.lock(&ikey);
        self.remove(PLAIN_SCHEMA, key, &ikey)
    }

    fn write_batch(&self, batch: &tierkv_core::WriteBatch) -> Result<()> {
        self.check_open()?;
        batch.check(&self.limits)?;
        self.commit_batch(batch)
    }

    fn atomic_batches(&self) -> bool {
        true
    }

    fn multi_get(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        for k in keys {
            self.check_key(k)?;
        }
        self.multi_get_plain(keys)
    }

    fn scan(&self, start: &[u8], limit: usize) -> Result<Vec<KvPair>> {
        self.check_open()?;
        let prefix = PLAIN_SCHEMA.to_le_bytes();
        let mut out = Vec::new();
        for (k, e) in self.index.scan(&index_key(PLAIN_SCHEMA, start), limit)? {
            let Some(user) = k.strip_prefix(&prefix[..]) else {
                break;
            };
            out.push((user.to_vec(), self.get_plain(&e)?));
        }
        Ok(out)
    }

    fn flush(&self) -> Result<()> {
        // Every acknowledged write is already persisted; nothing is buffered.
        self.check_open()
    }

    fn stats(&self) -> Stats {
        self.stats_snapshot()
    }

    fn close(&self) -> Result<()> {
        self.shut();
        self.signal.stop();
        self.merge_queue.signal.stop();
        if let Some(c) = &self.cache {
            c.signal.stop();
        }
        let handles = [
            self.bg.lock().take(),
            self.merger.lock().take(),
            self.cacher.lock().take(),
        ];
        for h in handles.into_iter().flatten() {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
        match self.poisoned.get() {
            Some(why) => Err(Error::Poisoned(why.clone())),
            None => Ok(()),
        }
    }

    fn check(&self) -> Result<Vec<String>> {
        self.check_open()?;
        crate::check::check(self)
    }

    fn native_schema_store(self: Arc<Self>) -> Option<Arc<dyn SchemaStore>> {
        Some(self)
    }
}

impl Drop for FocusStore {
    fn drop(&mut self) {
        let _ = KvStore::close(self);
    }
}
