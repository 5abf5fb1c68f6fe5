//! [`PrismStore`]: PRISM behind tierkv's [`KvStore`] trait, and its [`DESCRIPTOR`].
//!
//! The store is a thin shell around [`Core`] (the components and the read/write paths,
//! `engine/*.rs`) plus the background threads it owns (`Background`): opening formats
//! or recovers the media (`engine/open.rs`, `recovery.rs`) and starts the threads; closing
//! (or dropping) stops and joins them, then stops the SVC's thread.
//!
//! Limits: keys up to the configured limit; values up to the configured limit, one Value
//! Storage chunk's payload and half a PWB, whichever is smallest (larger values are an
//! `InvalidArgument`).
//!
//! Thread safety: `Send + Sync`; every method may be called from any thread.

mod background;
pub mod core;
mod lifecycle;
pub(crate) mod open;
mod read;
mod reclaim;
#[cfg(test)]
mod tests;
mod write;

use std::sync::Arc;
use std::time::Instant;

use tierkv_core::{
    EngineContext, EngineDescriptor, KvPair, KvStore, Result, Stats, Tier, WriteBatch,
};

use self::core::Core;
use crate::batch::BatchLog;
use background::Background;

/// The engine's descriptor, for the facade's registry.
pub const DESCRIPTOR: EngineDescriptor = EngineDescriptor {
    name: "prism",
    variants: &[],
    summary: "PRISM (ASPLOS '23): key index + HSIT on pmem, per-thread persistent write \
              buffers, log-structured value storage on flash, scan-aware DRAM cache, \
              opportunistic thread combining",
    tiers: &[Tier::Pmem, Tier::Flash],
    variant_tiers: &[],
    volatile: false,
    min_pmem_size: 4 << 20,
    max_value_len: Some(524_208), // = chunk_format::max_value_len(DEFAULT_CHUNK_SIZE): one 512 KiB chunk
    open: open_store,
};

fn open_store(ctx: EngineContext) -> Result<Arc<dyn KvStore>> {
    Ok(PrismStore::open(&ctx)?)
}

/// An open PRISM store.
#[derive(Debug)]
pub struct PrismStore {
    core: Arc<Core>,
    background: Background,
    /// Write batches: the batch gate every single write takes shared (`batch/mod.rs`).
    batches: BatchLog,
}

impl PrismStore {
    /// Opens (or, when `ctx.created`, creates) the store: formats or recovers the media
    /// and starts the background threads.
    pub fn open(ctx: &EngineContext) -> Result<Arc<PrismStore>> {
        DESCRIPTOR.variant(&ctx.spec)?;
        let started = Instant::now();
        let core = open::open_core(ctx)?;
        if !ctx.created {
            crate::recovery::recover(&core)?;
        }
        let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        core.counters.recovery_micros.set(micros);
        let background = Background::start(&core)?;
        let store = PrismStore {
            core,
            background,
            batches: BatchLog::default(),
        };
        if !ctx.created {
            // After the threads started: finishing a batch may need PWB reclamation.
            store.batches.recover(&store.core)?;
        }
        Ok(Arc::new(store))
    }

    /// The shared core (tests drive background steps through it).
    pub fn core(&self) -> &Core {
        &self.core
    }

    /// Runs one PWB reclamation pass over every PWB now (whatever their use when `force`).
    pub fn reclaim_now(&self, force: bool) -> Result<bool> {
        self.core.life.check_writable()?;
        let done = self.core.reclaim_pass(force, 0, 1);
        self.core.poison_on_failure(done)
    }

    /// Runs garbage collection on every Value Storage that wants it, now.
    pub fn gc_now(&self) -> Result<bool> {
        self.core.life.check_writable()?;
        let done = self.core.gc_pass();
        self.core.poison_on_failure(done)
    }

    /// Waits until the SVC's thread has handled everything queued so far.
    pub fn quiesce_cache(&self) {
        self.core.svc.quiesce();
    }
}

impl KvStore for PrismStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.core.get(key)
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let _gate = self.batches.shared();
        self.core.put(key, value)
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        let _gate = self.batches.shared();
        self.core.delete(key)
    }

    /// Crash-atomic (`batch/mod.rs`): redo log, commit word, apply.
    fn write_batch(&self, batch: &WriteBatch) -> Result<()> {
        self.batches.commit(&self.core, batch)
    }

    fn atomic_batches(&self) -> bool {
        true
    }

    /// Sees none or all of every batch (it holds the batch gate shared).
    fn multi_get(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        let _gate = self.batches.shared();
        keys.iter().map(|k| self.core.get(k)).collect()
    }

    fn scan(&self, start: &[u8], limit: usize) -> Result<Vec<KvPair>> {
        self.core.scan(start, limit)
    }

    /// Moves everything in the PWBs to Value Storage (acknowledged writes are durable
    /// without it).
    fn flush(&self) -> Result<()> {
        self.reclaim_now(true).map(|_| ())
    }

    fn stats(&self) -> Stats {
        let mut s = self.core.counters.snapshot(&self.core.component_stats());
        s.counters
            .insert("keys".into(), self.core.index.len() as u64);
        let (committed, replayed) = self.batches.counts();
        s.counters.insert("batches_committed".into(), committed);
        s.counters.insert("batches_replayed".into(), replayed);
        s
    }

    fn close(&self) -> Result<()> {
        if self.core.life.close() {
            self.core.reclaim_signal.raise();
            self.core.gc_signal.raise();
            for p in self.core.pwbs.iter() {
                p.wake_writers();
            }
            self.background.stop();
            self.core.svc.close();
        }
        Ok(())
    }

    fn check(&self) -> Result<Vec<String>> {
        self.core.life.check_open()?;
        crate::check::run(&self.core)
    }
}

impl Drop for PrismStore {
    fn drop(&mut self) {
        // Errors at drop have nowhere to go; `close` reports none today.
        let _ = self.close();
    }
}
