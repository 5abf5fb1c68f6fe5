//! The persistent log, PLog (FOCUS §V-A, Fig. 7): CLog chunks of complete records, DLog
//! chunks of deltas, and catalog chunks of schema records, each an allocator chunk with a
//! header (`format/chunk.rs`) and records appended back to back (`format/record.rs`).
//!
//! Appends go to one of `log_shards` pairs of open chunks (a CLog and a DLog chunk per
//! shard; a writer thread keeps one shard). A shard appends under its mutex and persists
//! each record before the next starts, so within a chunk every record before the last
//! valid one is durable and recovery stops at the first record that fails its checks.
//!
//! Deviation: the paper ties each DLog to one CLog chunk (deltas of the keys of that
//! chunk). Here a delta goes to the DLog of the writer's shard, so that appends never wait
//! for another shard; GC (FORMAT.md § Not yet implemented) then follows chains, not chunk
//! pairs.
//!
//! Thread safety: `Send + Sync`; each shard and the catalog tail behind their own mutex,
//! the epoch counter behind one more (taken only while a chunk is opened).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use tierkv_core::media::pmem::{PmemAllocator, PmemPool};
use tierkv_core::{Counter, Result};

use crate::format::chunk::{ChunkHeader, ChunkKind, HEADER_LEN, RECORDS_OFF};
use crate::format::record::RecordHeader;
use crate::format::superblock::NEXT_EPOCH_OFF;

/// An open chunk: where it is and where its next record goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Active {
    /// Pool offset of the chunk.
    pub off: u64,
    /// Its epoch.
    pub epoch: u32,
    /// Offset of the next record, from the chunk's start.
    pub used: u64,
}

#[derive(Default)]
struct Shard {
    clog: Option<Active>,
    dlog: Option<Active>,
}

/// Chunk counters.
#[derive(Debug, Default)]
pub struct PlogCounters {
    /// Chunks opened, per kind (CLog, DLog, catalog).
    pub chunks_opened: [Counter; 3],
    /// Record bytes appended.
    pub bytes_appended: Counter,
}

/// A function called at each persist point (tests: crash images at every point).
pub type PersistHook = Arc<dyn Fn(PersistPoint) + Send + Sync>;

/// The moments `PLog` calls its [`PersistHook`]: just before each persist (or allocation)
/// that the crash-consistency argument of FORMAT.md depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PersistPoint {
    /// Before the superblock's `next_epoch` is persisted.
    Epoch,
    /// Before a chunk is allocated.
    Alloc,
    /// Before a new chunk's header is persisted (it is written).
    ChunkHeader,
    /// Before a record is persisted (it is written).
    Record,
    /// Before a collected chunk's cleared magic is persisted (GC).
    Release,
}

/// The PLog.
pub struct PLog {
    pool: Arc<PmemPool>,
    alloc: PmemAllocator,
    sb_off: u64,
    chunk_size: u64,
    next_epoch: Mutex<u64>,
    shards: Box<[Mutex<Shard>]>,
    catalog: Mutex<Option<Active>>,
    /// The open chunks GC copies live rows into (never a writer's).
    gc_shard: Mutex<Shard>,
    /// Every chunk of the store: offset -> (kind, epoch).
    chunks: Mutex<std::collections::BTreeMap<u64, (ChunkKind, u32)>>,
    total_chunks: u64,
    hook: parking_lot::RwLock<Option<PersistHook>>,
    /// Chunk counters.
    pub counters: PlogCounters,
}

thread_local! {
    static SHARD: usize = NEXT_SHARD.fetch_add(1, Ordering::Relaxed);
}
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

impl PLog {
    /// A PLog over an opened allocator; `next_epoch` as read from the superblock.
    pub fn new(
        pool: Arc<PmemPool>,
        alloc: PmemAllocator,
        sb_off: u64,
        next_epoch: u64,
        shards: usize,
    ) -> PLog {
        PLog {
            chunk_size: alloc.chunk_size(),
            total_chunks: alloc.layout().chunk_count,
            pool,
            alloc,
            sb_off,
            next_epoch: Mutex::new(next_epoch),
            shards: (0..shards.max(1)).map(|_| Mutex::default()).collect(),
            catalog: Mutex::new(None),
            gc_shard: Mutex::default(),
            chunks: Mutex::default(),
            hook: parking_lot::RwLock::new(None),
            counters: PlogCounters::default(),
        }
    }

    /// Installs (or, with `None`, removes) the persist hook.
    pub fn set_persist_hook(&self, hook: Option<PersistHook>) {
        *self.hook.write() = hook;
    }

    pub(crate) fn point(&self, p: PersistPoint) {
        if let Some(h) = self.hook.read().as_ref() {
            h(p);
        }
    }

    /// The pool.
    pub fn pool(&self) -> &Arc<PmemPool> {
        &self.pool
    }

    /// The allocator.
    pub fn alloc(&self) -> &PmemAllocator {
        &self.alloc
    }

    /// Bytes per chunk.
    pub fn chunk_size(&self) -> u64 {
        self.chunk_size
    }

    /// The largest record a chunk holds.
    pub fn max_record(&self) -> u64 {
        self.chunk_size - RECORDS_OFF
    }

    /// Makes a recovered, not yet full chunk the open chunk of a shard (or of the catalog)
    /// that has none; returns false when every slot of its kind is taken.
    pub fn adopt(&self, kind: ChunkKind, a: Active) -> bool {
        if kind == ChunkKind::Catalog {
            let mut c = self.catalog.lock();
            return c.is_none() && c.replace(a).is_none();
        }
        for s in self.shards.iter() {
            let mut s = s.lock();
            let slot = if kind == ChunkKind::CLog {
                &mut s.clog
            } else {
                &mut s.dlog
            };
            if slot.is_none() {
                *slot = Some(a);
                return true;
            }
        }
        false
    }

    /// Opens a new chunk of `kind`: a fresh epoch (persisted in the superblock first), an
    /// allocator chunk, its header persisted.
    fn open_chunk(&self, kind: ChunkKind) -> Result<Active> {
        let epoch = {
            let mut next = self.next_epoch.lock();
            let e = *next;
            // IMPORTANT: the epoch is durable as used before any record carries it, so no
            // later life of any chunk reuses it (FORMAT.md § Chunks).
            self.pool.store_u64(self.sb_off + NEXT_EPOCH_OFF, e + 1)?;
            self.point(PersistPoint::Epoch);
            self.pool.persist(self.sb_off + NEXT_EPOCH_OFF, 8)?;
            *next = e + 1;
            e
        };
        self.point(PersistPoint::Alloc);
        let off = self.alloc.alloc_chunk(kind.tag())?;
        let h = ChunkHeader {
            kind,
            epoch: epoch as u32,
        };
        self.pool.write(off, &h.encode())?;
        self.point(PersistPoint::ChunkHeader);
        self.pool.persist(off, HEADER_LEN)?;
        if let Some(c) = self.counters.chunks_opened.get(kind as usize - 1) {
            c.incr();
        }
        self.register(off, kind, h.epoch);
        Ok(Active {
            off,
            epoch: h.epoch,
            used: HEADER_LEN as u64,
        })
    }

    /// Appends one record to `slot` (opening a chunk when it is full or absent) and
    /// persists it; returns its pool offset.
    fn append_in(
        &self,
        slot: &mut Option<Active>,
        kind: ChunkKind,
        mut h: RecordHeader,
        key: &[u8],
        body: &[u8],
    ) -> Result<u64> {
        let len = h.total_len();
        if len > self.max_record() {
            return Err(tierkv_core::Error::invalid(format!(
                "a record of {len} bytes does not fit a {}-byte chunk",
                self.chunk_size
            )));
        }
        let a = match slot {
            Some(a) if a.used + len <= self.chunk_size => a,
            _ => slot.insert(self.open_chunk(kind)?),
        };
        h.epoch = a.epoch;
        let at = a.off + a.used;
        // IMPORTANT: the record is durable before it is published (index) or acknowledged.
        self.pool.write(at, &h.encode(key, body))?;
        self.point(PersistPoint::Record);
        self.pool.persist(at, len as usize)?;
        a.used += len;
        self.counters.bytes_appended.add(len);
        Ok(at)
    }

    /// Appends a record to the calling thread's CLog or DLog chunk.
    pub fn append(&self, kind: ChunkKind, h: RecordHeader, key: &[u8], body: &[u8]) -> Result<u64> {
        let i = SHARD.with(|s| *s) % self.shards.len();
        let mut shard = match self.shards.get(i) {
            Some(s) => s.lock(),
            None => return Err(tierkv_core::Error::invalid("no log shard")),
        };
        let slot = if kind == ChunkKind::CLog {
            &mut shard.clog
        } else {
            &mut shard.dlog
        };
        self.append_in(slot, kind, h, key, body)
    }

    /// Appends a record to GC's own open chunk of `kind` (CLog or DLog).
    pub fn append_gc(
        &self,
        kind: ChunkKind,
        h: RecordHeader,
        key: &[u8],
        body: &[u8],
    ) -> Result<u64> {
        let mut shard = self.gc_shard.lock();
        let slot = if kind == ChunkKind::CLog {
            &mut shard.clog
        } else {
            &mut shard.dlog
        };
        self.append_in(slot, kind, h, key, body)
    }

    /// Records that the chunk at `off` belongs to the store (open and recovery).
    pub fn register(&self, off: u64, kind: ChunkKind, epoch: u32) {
        self.chunks.lock().insert(off, (kind, epoch));
    }

    /// Every chunk of the store: (offset, kind, epoch).
    pub fn chunks(&self) -> Vec<(u64, ChunkKind, u32)> {
        self.chunks
            .lock()
            .iter()
            .map(|(o, (k, e))| (*o, *k, *e))
            .collect()
    }

    /// Chunks of the region not in use.
    pub fn free_chunks(&self) -> u64 {
        self.total_chunks
            .saturating_sub(self.chunks.lock().len() as u64)
    }

    /// Chunks in the allocator region.
    pub fn total_chunks(&self) -> u64 {
        self.total_chunks
    }

    /// Frees a chunk nothing refers to any more: its header's magic is cleared and
    /// persisted first, so that a later life of the chunk never shows this header
    /// (FORMAT.md § Chunks), then it goes back to the allocator.
    pub fn release(&self, off: u64) -> Result<()> {
        self.pool.store_u64(off, 0)?;
        self.point(PersistPoint::Release);
        self.pool.persist(off, 8)?;
        self.pool.crash_point("focus.gc.magic_cleared");
        self.alloc.free_chunk(off)?;
        self.chunks.lock().remove(&off);
        Ok(())
    }

    /// Appends a schema record to the catalog chunk.
    pub fn append_catalog(&self, h: RecordHeader, body: &[u8]) -> Result<u64> {
        let mut slot = self.catalog.lock();
        self.append_in(&mut slot, ChunkKind::Catalog, h, b"", body)
    }

    /// The open chunks (for `check` and tests).
    pub fn open_chunks(&self) -> Vec<Active> {
        let mut v: Vec<Active> = self
            .shards
            .iter()
            .flat_map(|s| {
                let s = s.lock();
                [s.clog, s.dlog]
            })
            .flatten()
            .collect();
        v.extend(*self.catalog.lock());
        let g = self.gc_shard.lock();
        v.extend(g.clog);
        v.extend(g.dlog);
        v
    }
}
