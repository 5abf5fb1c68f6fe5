//! # The `dram` engine
//!
//! Everything in DRAM, nothing persistent. It is the **test oracle** of the model-based
//! tests of every other engine and the **upper bound** ("everything fits in DRAM") in
//! benchmarks. It takes the same index choice as HeterMM, so a HeterMM index can be compared
//! with itself holding everything in DRAM:
//!
//! - `dram:btree` (default): ordered, scans supported (despite the name, a lock-free hash
//!   map plus a lock-free skip list with a writer lock per key,
//!   `tierkv_core::common::skipindex`);
//! - `dram:hash`: dashmap (a reader-writer lock per shard), scans return [`Error::Unsupported`];
//! - `dram:lockfree`: papaya's lock-free map, scans return [`Error::Unsupported`].
//!
//! **Volatile by definition**: a put is "acknowledged" when it is in the index, and nothing
//! survives the process. The CLI and every report say so.
//!
//! **Write batches** are applied under key-hash *stripes* ([`STRIPES`] reader-writer
//! locks): a batch holds the stripes of its keys exclusively (taken in ascending order, so
//! batches cannot deadlock), a single operation and a `get` hold their key's stripe
//! shared, `multi_get` the stripes of its keys shared, and `scan` every stripe shared. So
//! every reader sees either none or all of a batch, batches on disjoint stripes run in
//! parallel, and a batch holds off only the operations on its own stripes (a single global
//! lock, taken exclusively by every batch, held off every operation of the store: the
//! server, which writes every collection command as a batch, ran `RPOP` at 0.28x Redis).
//!
//! Thread safety: every method takes `&self`; the index is concurrent and linearizable.

#![forbid(unsafe_code)]

use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use parking_lot::{RwLock, RwLockReadGuard};
use tierkv_core::common::index::{ConcurrentIndex, INDEX_VARIANTS, new_index};
use tierkv_core::{
    BatchOp, EngineContext, EngineDescriptor, Error, KvPair, KvStore, Limits, OpCounters, Result,
    Stats, WriteBatch,
};

/// The engine's descriptor, for the facade's registry.
pub const DESCRIPTOR: EngineDescriptor = EngineDescriptor {
    name: "dram",
    variants: INDEX_VARIANTS,
    summary: "everything in DRAM, volatile: the test oracle and the upper bound",
    tiers: &[],
    volatile: true,
    min_pmem_size: 0,
    max_value_len: None,
    open,
};

/// Key-hash stripes that order batches against other operations (module doc).
pub const STRIPES: usize = 64;

/// Bytes of bookkeeping charged per entry on top of key and value (index node share,
/// `Arc` header, allocation rounding): an estimate, documented as such in `stats`.
const ENTRY_OVERHEAD: i64 = 64;

fn open(ctx: EngineContext) -> Result<Arc<dyn KvStore>> {
    let variant = DESCRIPTOR.variant(&ctx.spec)?;
    ctx.spec.params().finish()?;
    Ok(Arc::new(DramStore::new(variant, ctx.options.limits)?))
}

/// The in-DRAM store.
pub struct DramStore {
    index: Box<dyn ConcurrentIndex<Arc<[u8]>>>,
    limits: Limits,
    closed: AtomicBool,
    ops: OpCounters,
    dram_bytes: AtomicI64,
    /// Shared by single operations and readers of their keys, exclusive for a batch of
    /// their keys (module doc).
    stripes: Box<[RwLock<()>]>,
}

impl DramStore {
    /// A store over the index `variant` names (`btree`, `hash`, `lockfree`).
    pub fn new(variant: &str, limits: Limits) -> Result<Self> {
        Ok(DramStore {
            index: new_index(variant)?,
            limits,
            closed: AtomicBool::new(false),
            ops: OpCounters::default(),
            dram_bytes: AtomicI64::new(0),
            stripes: (0..STRIPES).map(|_| RwLock::new(())).collect(),
        })
    }

    /// The stripe of `key`.
    fn stripe_of(key: &[u8]) -> usize {
        BuildHasherDefault::<DefaultHasher>::default().hash_one(key) as usize % STRIPES
    }

    /// The stripes of `keys`, ascending, each once.
    fn stripe_ids<'k>(keys: impl Iterator<Item = &'k [u8]>) -> Vec<usize> {
        let mut ids: Vec<usize> = keys.map(Self::stripe_of).collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// `key`'s stripe, shared.
    fn shared(&self, key: &[u8]) -> Option<RwLockReadGuard<'_, ()>> {
        self.stripes.get(Self::stripe_of(key)).map(RwLock::read)
    }

    /// The stripes `ids` (ascending), shared.
    fn shared_all(&self, ids: &[usize]) -> Vec<RwLockReadGuard<'_, ()>> {
        ids.iter()
            .filter_map(|i| self.stripes.get(*i).map(RwLock::read))
            .collect()
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }

    /// Inserts with the key's stripe held (shared or exclusive).
    fn put_locked(&self, key: &[u8], value: &[u8]) {
        let old = self.index.insert(key, Arc::from(value));
        self.charge(key, old.as_ref(), Some(value));
        self.ops
            .user_bytes_written
            .add((key.len() + value.len()) as u64);
    }

    fn charge(&self, key: &[u8], old: Option<&Arc<[u8]>>, new: Option<&[u8]>) {
        let size = |v: &[u8]| key.len() as i64 + v.len() as i64 + ENTRY_OVERHEAD;
        let delta = new.map_or(0, size) - old.map_or(0, |v| size(v));
        self.dram_bytes.fetch_add(delta, Ordering::Relaxed);
    }
}

impl KvStore for DramStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.check_open()?;
        self.limits.check_key(key)?;
        let v = {
            let _shared = self.shared(key);
            self.index.get(key).map(|v| v.to_vec())
        };
        if let Some(v) = &v {
            self.ops.reads_from_dram.incr();
            self.ops.user_bytes_read.add(v.len() as u64);
        }
        Ok(v)
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.check_open()?;
        self.limits.check_key(key)?;
        self.limits.check_value(value)?;
        let _shared = self.shared(key);
        self.put_locked(key, value);
        Ok(())
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        self.check_open()?;
        self.limits.check_key(key)?;
        let _shared = self.shared(key);
        let old = self.index.remove(key);
        self.charge(key, old.as_ref(), None);
        Ok(())
    }

    fn scan(&self, start: &[u8], limit: usize) -> Result<Vec<KvPair>> {
        self.check_open()?;
        let rows = {
            // Every stripe: a scan may read any key.
            let _shared: Vec<_> = self.stripes.iter().map(RwLock::read).collect();
            self.index.scan(start, limit)?
        };
        let out: Vec<KvPair> = rows.into_iter().map(|(k, v)| (k, v.to_vec())).collect();
        self.ops
            .user_bytes_read
            .add(out.iter().map(|(_, v)| v.len() as u64).sum());
        Ok(out)
    }

    fn flush(&self) -> Result<()> {
        self.check_open()
    }

    /// Applies the batch holding its keys' stripes exclusively (module doc): atomic to
    /// readers; "durable" means in the index, as for a put (the engine is volatile).
    fn write_batch(&self, batch: &WriteBatch) -> Result<()> {
        self.check_open()?;
        batch.check(&self.limits)?;
        let ids = Self::stripe_ids(batch.iter().map(|(k, _)| k));
        let _exclusive: Vec<_> = ids
            .iter()
            .filter_map(|i| self.stripes.get(*i).map(RwLock::write))
            .collect();
        for (key, op) in batch.iter() {
            match op {
                BatchOp::Put(value) => self.put_locked(key, value),
                BatchOp::Delete => {
                    let old = self.index.remove(key);
                    self.charge(key, old.as_ref(), None);
                }
            }
        }
        Ok(())
    }

    fn atomic_batches(&self) -> bool {
        true
    }

    fn multi_get(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        self.check_open()?;
        for k in keys {
            self.limits.check_key(k)?;
        }
        let out: Vec<Option<Vec<u8>>> = {
            let _shared = self.shared_all(&Self::stripe_ids(keys.iter().copied()));
            keys.iter()
                .map(|k| self.index.get(k).map(|v| v.to_vec()))
                .collect()
        };
        for v in out.iter().flatten() {
            self.ops.reads_from_dram.incr();
            self.ops.user_bytes_read.add(v.len() as u64);
        }
        Ok(out)
    }

    fn stats(&self) -> Stats {
        let mut s = Stats::default();
        self.ops.fill(&mut s);
        s.dram_bytes = self.dram_bytes.load(Ordering::Relaxed).max(0) as u64;
        s.counters.insert("keys".into(), self.index.len() as u64);
        s
    }

    fn close(&self) -> Result<()> {
        self.closed.store(true, Ordering::Release);
        Ok(())
    }

    fn check(&self) -> Result<Vec<String>> {
        self.check_open()?;
        Ok(vec![format!(
            "dram: {} keys in memory (volatile: nothing is stored on disk)",
            self.index.len()
        )])
    }
}

#[cfg(test)]
mod tests;
