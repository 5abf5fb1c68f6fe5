//! [`HeterStore`]: a [`PluggedIndex`] over a [`HeterMem`], as a tierkv [`KvStore`]; its
//! background threads; open (with recovery), close and check.
//!
//! Durability (what "acknowledged" means for this engine):
//! - `oplog=on` (default): a put or delete returns after its log entry is durable; every
//!   acknowledged write survives a crash.
//! - `oplog=off`: a write is durable only once the block it is keyed to has been flushed
//!   to pmem — for a put, the block of its record; for a delete, that of the region
//!   boundary off_ReadOnly at the time (see `invalid.rs`). So a crash may lose
//!   acknowledged writes still in DRAM, and only those: after recovery every key holds the
//!   value of its newest write that had reached pmem (or is absent if that write was a
//!   delete, or none did). [`KvStore::flush`] makes every earlier write durable, and so
//!   does a clean `close`.
//!
//! Thread safety: `Send + Sync`; every method takes `&self`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use tierkv_core::media::pmem::PmemPool;
use tierkv_core::{Error, KvCursorPage, KvPair, KvStore, Limits, Result, Stats, WriteBatch};

use crate::background::Background;
use crate::mem::HeterMem;
use crate::options::HeterOptions;
use crate::plugin::PluggedIndex;
use crate::recovery;

/// A HeterMM store.
pub struct HeterStore {
    mem: Arc<HeterMem>,
    index: Arc<dyn PluggedIndex<HeterMem>>,
    bg: Background,
    limits: Limits,
    closed: AtomicBool,
    /// Set once `open` has completed. Until then `close` (and so the drop of a store whose
    /// open failed) only stops the threads: it must not flush (see `close`).
    opened: AtomicBool,
    /// The gate (shared by write batches, exclusive for `multi_get`) and the key stripes
    /// that order overlapping batches (`batch.rs`).
    batch_locks: crate::batch::BatchLocks,
}

impl HeterStore {
    /// Opens the store in `pool` (formatting it when `created`) with `index` plugged in,
    /// recovering it (Algorithm 1) when it already exists.
    pub fn open(
        pool: Arc<PmemPool>,
        opts: HeterOptions,
        limits: Limits,
        index: Arc<dyn PluggedIndex<HeterMem>>,
        created: bool,
    ) -> Result<Arc<HeterStore>> {
        let started = Instant::now();
        let (mem, plan) = recovery::open_memory(pool, opts, created)?;
        let mem = Arc::new(mem);
        recovery::open_hook(recovery::OpenPoint::Memory, &mem)?;
        let found = recovery::find(&mem, &plan)?;
        mem.flusher.lock().old_logs = plan.logs.iter().map(|(off, _)| *off).collect();
        let replayed = found.replays();
        // The background threads run while the log is replayed: the replayed records need
        // not fit in DRAM at once, nor in the pmem that reorganisation has not freed yet.
        let store = HeterStore {
            bg: Background::start(mem.clone())?,
            mem: mem.clone(),
            index,
            limits,
            closed: AtomicBool::new(false),
            opened: AtomicBool::new(false),
            batch_locks: crate::batch::BatchLocks::new(),
        };
        // IMPORTANT: if any step from here fails, `store` is dropped half open, and its
        // `close` does nothing but stop the threads (`opened` is still false).
        recovery::replay_and_build(&store.mem, &*store.index, found)?;
        recovery::open_hook(recovery::OpenPoint::Opened, &store.mem)?;
        store.opened.store(true, Ordering::Release);
        // The replayed records are durable in the old log blocks until a forced flush has
        // persisted them; the flusher does it while the store already serves (the flush
        // frontier and the log stay where they are until then: `flush.rs`).
        store.mem.serving.store(true, Ordering::Release);
        if replayed || !plan.logs.is_empty() {
            store.bg.request_flush_soon();
        }
        if !created {
            store
                .mem
                .counters
                .recovery_micros
                .set(started.elapsed().as_micros() as u64);
        }
        Ok(Arc::new(store))
    }

    /// The memory under the index (for tests and harnesses).
    pub fn memory(&self) -> &Arc<HeterMem> {
        &self.mem
    }

    /// The logical address the index holds for `key`.
    pub fn address(&self, key: &[u8]) -> Option<crate::LogicalAddress> {
        self.index.address(key)
    }

    /// The pool offset of the record at `addr` if it is in the persisted region.
    pub fn pmem_offset(&self, addr: crate::LogicalAddress) -> Result<Option<u64>> {
        if addr.0 >= self.mem.off_dram() {
            return Ok(None);
        }
        let mem = &self.mem;
        crate::nvm::read::locate(mem.pool(), &mem.blocks, &mem.geo, addr.0).map(|l| Some(l.off))
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// Runs one reorganisation step now (tests; the reclaimer thread does this itself).
    pub fn reorganise_now(&self) -> Result<bool> {
        self.mem.reclaimer_step()
    }
}

impl KvStore for HeterStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.check_open()?;
        self.limits.check_key(key)?;
        self.index.get(&self.mem, key)
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.check_open()?;
        self.limits.check_key(key)?;
        self.limits.check_value(value)?;
        self.index.put(&self.mem, key, value)
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        self.check_open()?;
        self.limits.check_key(key)?;
        self.index.delete(&self.mem, key)?;
        // IMPORTANT: a delete that found the key absent because a write batch removed it
        // and has not committed yet must not be acknowledged before that batch's entry is
        // durable (`batch.rs` § Racing single deletes). If that batch failed instead, the
        // store is poisoned and the delete is not acknowledged either.
        self.batch_locks.settle_key(key);
        self.mem.health.check_writable()
    }

    /// Crash-atomic with the operation log on (`batch.rs`, FORMAT.md § Write batches);
    /// `Unsupported` with `oplog=off`.
    fn write_batch(&self, batch: &WriteBatch) -> Result<()> {
        self.check_open()?;
        batch.check(&self.limits)?;
        crate::batch::write_batch(&self.mem, &*self.index, &self.batch_locks, batch)
    }

    fn atomic_batches(&self) -> bool {
        self.mem.oplog.is_some()
    }

    /// Sees none or all of every write batch (it holds the batch gate exclusively).
    fn multi_get(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        self.check_open()?;
        for k in keys {
            self.limits.check_key(k)?;
        }
        crate::batch::multi_get(&self.mem, &*self.index, &self.batch_locks, keys)
    }

    fn scan(&self, start: &[u8], limit: usize) -> Result<Vec<KvPair>> {
        self.check_open()?;
        self.index.scan(&self.mem, start, limit)
    }

    fn scan_cursor(&self, cursor: u64, count: usize) -> Result<KvCursorPage> {
        self.check_open()?;
        self.index.scan_cursor(&self.mem, cursor, count)
    }

    fn flush(&self) -> Result<()> {
        self.check_open()?;
        self.mem.health.check_writable()?;
        self.bg.request_flush()
    }

    fn stats(&self) -> Stats {
        let mut s = self.mem.stats();
        s.counters.insert("keys".into(), self.index.len() as u64);
        let index_bytes = self.index.dram_bytes();
        s.dram_bytes += index_bytes;
        s.counters.insert("hetermm_index_bytes".into(), index_bytes);
        s
    }

    fn close(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.mem.health.closed.store(true, Ordering::Release);
        self.mem.pages.wake_all();
        // IMPORTANT: a store whose open failed (this is its drop) writes nothing more. Its
        // replay may have stopped part-way: a forced flush would persist the records
        // replayed so far, move the flush frontier and retire the old log blocks — with the
        // entries not replayed yet in them. Stopping the threads leaves the pool as a crash
        // during the replay would (what they did meanwhile is crash-consistent), and the
        // next open replays the whole log again.
        if !self.opened.load(Ordering::Acquire) {
            self.bg.stop();
            return Ok(());
        }
        // In-flight operations finish before the threads stop and the last flush runs.
        self.mem.threads.synchronize();
        self.bg.stop();
        if let Some(why) = self.mem.health.poisoned.get() {
            return Err(Error::Poisoned(why.clone()));
        }
        let mut st = self.mem.flusher.lock();
        self.mem.flush_all(&mut st)?;
        self.mem.release_prepared(&mut st)
    }

    fn check(&self) -> Result<Vec<String>> {
        self.check_open()?;
        crate::check::check(&self.mem, &*self.index)
    }
}

impl Drop for HeterStore {
    fn drop(&mut self) {
        let _ = self.close();
    }
}
