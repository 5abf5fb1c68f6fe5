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
//! - `dram:hash`: dashmap (a reader-writer lock per shard), scans return
//!   [`Error::Unsupported`]; keys are enumerated by cursor instead (`scan_cursor`, whole
//!   index shards per call, `tierkv_core::common::index`, "Cursor iteration");
//! - `dram:lockfree`: papaya's lock-free maps, the same.
//!
//! **Volatile by definition**: a put is "acknowledged" when it is in the index, and nothing
//! survives the process. The CLI and every report say so.
//!
//! **Write batches** are applied under key-hash *stripes* ([`STRIPES`] reader-writer
//! locks, each with a sequence number, one stripe per cache line): a batch holds the
//! stripes of its keys exclusively (taken in ascending order, so batches cannot deadlock),
//! a single put or delete holds its key's stripe shared, `multi_get` the stripes of its
//! keys shared, and `scan` every stripe shared. So every reader sees either none or all of
//! a batch, batches on disjoint stripes run in parallel, and a batch holds off only the
//! operations on its own stripes (a single global lock, taken exclusively by every batch,
//! held off every operation of the store: the server, which writes every collection
//! command as a batch, ran `RPOP` at 0.28x Redis).
//!
//! A point read (`get`, `get_with`) takes no lock: it reads its stripe's sequence number
//! before and after the index lookup, like a seqlock reader (`Stripe` argues why that
//! sees none or all of each batch), and only when a batch is applying on its stripe does
//! it wait on the stripe's lock. A shared lock taken by every read wrote its lock word on
//! every read, and under `tierkv serve`'s LRANGE (both cores reading the same elements)
//! that word and its neighbours bounced between the cores. `get_many_with` reads each of
//! its keys the same way and pays the open check and the counters once per call (under
//! LRANGE, two atomic counter increments per element were a tenth of the server's CPU).
//!
//! The `hash` variant hashes keys with foldhash, keyed per store from a process-random
//! seed (std's SipHash cost 13% of the server's CPU under LRANGE). Keys come from clients;
//! foldhash is "minimally DoS-resistant": without the seed a client cannot aim keys at one
//! bucket, and the seed is never shown (no reply depends on the index's hash order except
//! a SCAN cursor's page order on this unordered index, from which recovering the 384-bit
//! seed is not a practical attack; a worst case degrades one shard to a linear probe run,
//! not a crash). The same hasher picks a key's stripe.
//!
//! Thread safety: every method takes `&self`; the index is concurrent and linearizable.

#![forbid(unsafe_code)]

use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering, fence};

use parking_lot::{RwLock, RwLockReadGuard};
use tierkv_core::common::index::{ConcurrentIndex, HashIndex, INDEX_VARIANTS, new_index};
use tierkv_core::{
    BatchOp, EngineContext, EngineDescriptor, Error, KvCursorPage, KvPair, KvStore, Limits,
    OpCounters, Result, Stats, WriteBatch,
};

/// The engine's descriptor, for the facade's registry.
pub const DESCRIPTOR: EngineDescriptor = EngineDescriptor {
    name: "dram",
    variants: INDEX_VARIANTS,
    summary: "everything in DRAM, volatile: the test oracle and the upper bound",
    tiers: &[],
    variant_tiers: &[],
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

/// The hasher of the `hash` variant's index and of the stripes (module doc).
type KeyHasher = foldhash::fast::RandomState;

/// One stripe: the lock that orders batches against writes, and the sequence number
/// that lock-free point reads check, alone on a cache line.
///
/// # Why a point read sees none or all of a batch
/// A batch, holding its stripes exclusively, makes each stripe's sequence odd, applies
/// its operations, then makes each even again. A reader loads the sequence (`s1`, acquire);
/// when odd it takes the stripe's lock instead (waiting out the batch). Otherwise it looks
/// its key up and loads the sequence again (`s2`, after an acquire fence); it keeps the
/// value only when `s2 == s1`, else it reads again under the lock.
/// - If the value it read was written by a batch, that write happens after the batch's
///   odd store (program order) and before the reader's lookup returned (the index
///   synchronizes a write with a read that sees it), so `s2` sees the odd store or a
///   later one: `s2 != s1` unless `s1` already was the batch's final even store, which
///   happens after all of the batch's writes — the reader then sees all of them.
/// - If the value is older than a batch on the stripe, the read is ordered before that
///   batch's writes; any later read by the same thread that sees one of them has loaded
///   a sequence published after all of them.
#[repr(align(64))]
struct Stripe {
    lock: RwLock<()>,
    seq: AtomicU64,
}

/// The in-DRAM store.
pub struct DramStore {
    index: Box<dyn ConcurrentIndex<Arc<[u8]>>>,
    limits: Limits,
    closed: AtomicBool,
    ops: OpCounters,
    dram_bytes: AtomicI64,
    /// Shared by single writes, exclusive for a batch of their keys; their sequence
    /// numbers order point reads (module doc).
    stripes: Box<[Stripe]>,
    /// Picks a key's stripe.
    hasher: KeyHasher,
}

impl DramStore {
    /// A store over the index `variant` names (`btree`, `hash`, `lockfree`).
    pub fn new(variant: &str, limits: Limits) -> Result<Self> {
        let index: Box<dyn ConcurrentIndex<Arc<[u8]>>> = match variant {
            "hash" => Box::new(HashIndex::<Arc<[u8]>, KeyHasher>::default()),
            other => new_index(other)?,
        };
        Ok(DramStore {
            index,
            limits,
            closed: AtomicBool::new(false),
            ops: OpCounters::default(),
            dram_bytes: AtomicI64::new(0),
            stripes: (0..STRIPES)
                .map(|_| Stripe {
                    lock: RwLock::new(()),
                    seq: AtomicU64::new(0),
                })
                .collect(),
            hasher: KeyHasher::default(),
        })
    }

    /// The stripe of `key`.
    fn stripe_of(&self, key: &[u8]) -> usize {
        self.hasher.hash_one(key) as usize % STRIPES
    }

    /// The stripes of `keys`, ascending, each once.
    fn stripe_ids<'k>(&self, keys: impl Iterator<Item = &'k [u8]>) -> Vec<usize> {
        let mut ids: Vec<usize> = keys.map(|k| self.stripe_of(k)).collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// `key`'s stripe, shared.
    fn shared(&self, key: &[u8]) -> Option<RwLockReadGuard<'_, ()>> {
        self.stripes.get(self.stripe_of(key)).map(|s| s.lock.read())
    }

    /// The stripes `ids` (ascending), shared.
    fn shared_all(&self, ids: &[usize]) -> Vec<RwLockReadGuard<'_, ()>> {
        ids.iter()
            .filter_map(|i| self.stripes.get(*i).map(|s| s.lock.read()))
            .collect()
    }

    /// Calls `f` with the value under `key` (borrowed from the index), seeing none or all
    /// of each batch ([`Stripe`]); returns the number of bytes lent, `None` when absent.
    fn read_with(&self, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Option<usize> {
        let mut len = None;
        let mut lend = |v: &Arc<[u8]>| {
            len = Some(v.len());
            f(v);
        };
        if let Some(stripe) = self.stripes.get(self.stripe_of(key)) {
            let s1 = stripe.seq.load(Ordering::Acquire);
            if s1.is_multiple_of(2) {
                // The second look at the sequence is taken while the index still lends
                // the value (after the lookup synchronized with its writer), so a value
                // seen mid-batch never reaches `f`.
                let mut torn = false;
                let found = self.index.get_with(key, &mut |v| {
                    fence(Ordering::Acquire);
                    if stripe.seq.load(Ordering::Relaxed) == s1 {
                        lend(v);
                    } else {
                        torn = true;
                    }
                });
                fence(Ordering::Acquire);
                if !torn && (found || stripe.seq.load(Ordering::Relaxed) == s1) {
                    return len;
                }
            }
            let _shared = stripe.lock.read();
            self.index.get_with(key, &mut lend);
        }
        len
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

/// Makes the sequences of a batch's stripes even again (after its last operation, before
/// its locks are released, also if an operation panicked).
struct EvenOnDrop<'a, G>(&'a [(&'a Stripe, G)]);

impl<G> Drop for EvenOnDrop<'_, G> {
    fn drop(&mut self) {
        for (s, _) in self.0 {
            s.seq.fetch_add(1, Ordering::Release);
        }
    }
}

impl KvStore for DramStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut out = None;
        self.get_with(key, &mut |v| out = Some(v.to_vec()))?;
        Ok(out)
    }

    fn get_with(&self, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        self.check_open()?;
        self.limits.check_key(key)?;
        let len = self.read_with(key, f);
        if let Some(n) = len {
            self.ops.reads_from_dram.incr();
            self.ops.user_bytes_read.add(n as u64);
        }
        Ok(len.is_some())
    }

    /// Each key as [`DramStore::get_with`] reads it (lock-free, none or all of each batch
    /// per key), the open check and the counters once per call.
    fn get_many_with(&self, keys: &[&[u8]], f: &mut dyn FnMut(usize, &[u8])) -> Result<usize> {
        self.check_open()?;
        let (mut found, mut bytes) = (0usize, 0usize);
        for (i, key) in keys.iter().enumerate() {
            self.limits.check_key(key)?;
            if let Some(n) = self.read_with(key, &mut |v| f(i, v)) {
                found += 1;
                bytes += n;
            }
        }
        if found > 0 {
            self.ops.reads_from_dram.add(found as u64);
            self.ops.user_bytes_read.add(bytes as u64);
        }
        Ok(found)
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
            let _shared: Vec<_> = self.stripes.iter().map(|s| s.lock.read()).collect();
            self.index.scan(start, limit)?
        };
        let out: Vec<KvPair> = rows.into_iter().map(|(k, v)| (k, v.to_vec())).collect();
        self.ops
            .user_bytes_read
            .add(out.iter().map(|(_, v)| v.len() as u64).sum());
        Ok(out)
    }

    /// Whole index shards (`tierkv_core::common::index`), every stripe held shared as by
    /// `scan`: a page sees none or all of each batch.
    fn scan_cursor(&self, cursor: u64, count: usize) -> Result<KvCursorPage> {
        self.check_open()?;
        let page = {
            let _shared: Vec<_> = self.stripes.iter().map(|s| s.lock.read()).collect();
            self.index.scan_cursor(cursor, count)?
        };
        let entries: Vec<KvPair> = page
            .entries
            .into_iter()
            .map(|(k, v)| (k, v.to_vec()))
            .collect();
        self.ops
            .user_bytes_read
            .add(entries.iter().map(|(_, v)| v.len() as u64).sum());
        Ok(KvCursorPage {
            entries,
            next: page.next,
        })
    }

    fn flush(&self) -> Result<()> {
        self.check_open()
    }

    /// Applies the batch holding its keys' stripes exclusively (module doc): atomic to
    /// readers; "durable" means in the index, as for a put (the engine is volatile).
    fn write_batch(&self, batch: &WriteBatch) -> Result<()> {
        self.check_open()?;
        batch.check(&self.limits)?;
        let ids = self.stripe_ids(batch.iter().map(|(k, _)| k));
        let held: Vec<_> = ids
            .iter()
            .filter_map(|i| self.stripes.get(*i).map(|s| (s, s.lock.write())))
            .collect();
        // Odd sequences: point readers of these stripes wait for the lock ([`Stripe`]).
        for (s, _) in &held {
            s.seq.fetch_add(1, Ordering::Relaxed);
        }
        fence(Ordering::Release);
        let _even = EvenOnDrop(&held);
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
            let _shared = self.shared_all(&self.stripe_ids(keys.iter().copied()));
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
