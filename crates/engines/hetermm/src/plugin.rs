//! The plug-in programming model (HeterMM §3.2, Fig. 3 and Fig. 4): the boundary between an
//! in-DRAM index and the heterogeneous memory that holds its values.
//!
//! An index plugged into HeterMM stores a [`LogicalAddress`] where it used to store a
//! value, and replaces its value reads and writes with two calls of [`HeterMemory`]:
//! `get_value(addr)` and `set_value(addr, key, value) -> addr`. Everything else — the
//! index's structure, its locking, its scans — is unchanged. Additions to the paper's C API
//! make it safe (and fast) in Rust:
//!
//! - **A guard.** [`HeterMemory::pin`] starts an operation; every address read from the
//!   index must be used under the guard it was read under (the guard keeps the page or
//!   block it points to from being recycled; the paper waits 5 seconds instead).
//! - **A reservation.** Call [`HeterMemory::reserve`] before taking the index's lock: it may
//!   wait for the flusher to free DRAM, and `set_value` under the lock then never waits.
//!   (A thread waiting for your lock is pinned, and the flusher waits for pinned threads.)
//! - **Retries.** Call `set_value` under the index's own per-key synchronization (a bucket
//!   lock, a node lock, or the compare-and-swap loop of a lock-free index) and install the
//!   address it returns. A lock-free index that loses a race calls `set_value` again in
//!   the same guard; only the address of the *last* call for a key may be installed (the
//!   earlier records are reclaimed).
//! - **Completion.** `set_value` prepares the write's log entry; call
//!   [`HeterMemory::complete`] once the index's lock is released, before the put returns:
//!   it persists the entry (grouped with concurrent writers'), so no reader or writer of
//!   another key waits behind the persist under your lock. The guard's drop completes a
//!   write you did not.
//! - **An optional hint.** An index that reads many values at once (a scan) may call
//!   [`HeterMemory::prefetch_value`] for each address first: the values lie scattered over
//!   DRAM pages and pmem blocks, and prefetching lets their cache misses overlap (YCSB's
//!   scan-heavy mix went from 46k to 81k scans/s on `hetermm:btree`).
//!
//! Deletes call [`HeterMemory::remove_value`] with the address being removed, and recovery
//! rebuilds the index through [`PluggedIndex::recover`], which calls
//! [`HeterMemory::recover_value`] (Algorithm 1's `setAddr`: the newer of two versions wins).
//!
//! # Plugging in an index of your own
//!
//! ```
//! use std::collections::HashMap;
//! use std::sync::Mutex;
//! use tierkv_core::{Error, KvPair, Result};
//! use tierkv_hetermm::{HeterMemory, LogicalAddress, PluggedIndex};
//!
//! /// A plain hash map behind a mutex, holding logical addresses instead of values.
//! #[derive(Default)]
//! struct MyIndex(Mutex<HashMap<Vec<u8>, LogicalAddress>>);
//!
//! impl MyIndex {
//!     fn map(&self) -> Result<std::sync::MutexGuard<'_, HashMap<Vec<u8>, LogicalAddress>>> {
//!         self.0.lock().map_err(|_| Error::Poisoned("index lock".into()))
//!     }
//! }
//!
//! impl<M: HeterMemory> PluggedIndex<M> for MyIndex {
//!     fn get(&self, hm: &M, key: &[u8]) -> Result<Option<Vec<u8>>> {
//!         let g = hm.pin()?;
//!         let addr = self.map()?.get(key).copied();
//!         // Was: `Ok(map.get(key).cloned())`.
//!         addr.map(|a| hm.get_value(&g, a, key)).transpose()
//!     }
//!     fn put(&self, hm: &M, key: &[u8], value: &[u8]) -> Result<()> {
//!         let g = hm.pin()?;
//!         hm.reserve(&g, key.len(), value.len())?; // may wait: before the lock
//!         let mut map = self.map()?; // the index's own lock orders writers of a key
//!         let old = map.get(key).copied();
//!         // Was: `map.insert(key.to_vec(), value.to_vec())`.
//!         let addr = hm.set_value(&g, old, key, value)?;
//!         map.insert(key.to_vec(), addr);
//!         drop(map);
//!         hm.complete(&g) // the log's persist, after the lock
//!     }
//!     fn delete(&self, hm: &M, key: &[u8]) -> Result<()> {
//!         let g = hm.pin()?;
//!         hm.reserve_remove(&g, key.len())?; // room for the delete's log entry only
//!         let mut map = self.map()?;
//!         if let Some(&old) = map.get(key) {
//!             hm.remove_value(&g, old, key)?;
//!             map.remove(key);
//!         }
//!         Ok(())
//!     }
//!     fn scan(&self, _hm: &M, _start: &[u8], _limit: usize) -> Result<Vec<KvPair>> {
//!         Err(Error::Unsupported("scan on a hash index".into()))
//!     }
//!     fn recover(&self, hm: &M, key: &[u8], addr: LogicalAddress) -> Result<()> {
//!         let g = hm.pin()?;
//!         let mut map = self.map()?;
//!         let current = map.get(key).copied();
//!         let winner = hm.recover_value(&g, current, key, addr)?;
//!         map.insert(key.to_vec(), winner);
//!         Ok(())
//!     }
//!     fn address(&self, key: &[u8]) -> Option<LogicalAddress> {
//!         self.0.lock().ok()?.get(key).copied()
//!     }
//!     fn for_each(&self, f: &mut dyn FnMut(&[u8], LogicalAddress)) {
//!         if let Ok(map) = self.0.lock() {
//!             map.iter().for_each(|(k, a)| f(k, *a));
//!         }
//!     }
//!     fn len(&self) -> usize {
//!         self.0.lock().map_or(0, |m| m.len())
//!     }
//! }
//!
//! # fn main() -> Result<()> {
//! // Open a store over a pmem pool with this index.
//! use std::sync::Arc;
//! use tierkv_core::media::pmem::{DurabilityMode, EmulatedLatency, PmemConfig, PmemPool};
//! use tierkv_core::{KvStore, Limits};
//! use tierkv_hetermm::{HeterOptions, HeterStore};
//!
//! let dir = tempfile::tempdir().map_err(|e| Error::io("tempdir", "/tmp", e))?;
//! let pool = PmemPool::create(&PmemConfig {
//!     path: dir.path().join("pool"),
//!     size: 64 << 20,
//!     mode: DurabilityMode::Volatile,
//!     latency: EmulatedLatency::default(),
//! })?;
//! let options = HeterOptions { dram_budget: 16 << 20, ..HeterOptions::default() };
//! let store = HeterStore::open(pool, options, Limits::default(), Arc::new(MyIndex::default()), true)?;
//! store.put(b"hello", b"world")?;
//! assert_eq!(store.get(b"hello")?.as_deref(), Some(&b"world"[..]));
//! store.close()?;
//! # Ok(())
//! # }
//! ```
//!
//! Thread safety: both traits are `Send + Sync`; every method may be called from any
//! thread.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use tierkv_core::common::index::{ConcurrentIndex, new_word_index};
use tierkv_core::{KvCursorPage, KvPair, Result};

pub use crate::geometry::LogicalAddress;
use crate::mem::{Guard, HeterMem};

/// The HeterMM API of Fig. 3: what a plugged-in index calls instead of reading and writing
/// its values.
pub trait HeterMemory: Send + Sync {
    /// An operation in progress (see the module doc).
    type Guard<'a>
    where
        Self: 'a;

    /// Starts an operation of the calling thread. Do not nest operations on one memory in
    /// one thread.
    fn pin(&self) -> Result<Self::Guard<'_>>;

    /// Reserves room for the record and the log entry of a `set_value` with these
    /// lengths. Call it *before* taking the index's lock: it may wait for DRAM to be
    /// flushed or pmem to be defragmented, while a write under a reservation never waits
    /// (one without may, which can deadlock with operations blocked on your lock). Fails
    /// with `NoSpace` when the memory is full (deletes still work).
    fn reserve(&self, g: &Self::Guard<'_>, key_len: usize, value_len: usize) -> Result<()>;

    /// Reserves room for the log entry of a `remove_value` (no record: deletes are possible
    /// however full the memory is). Call it before taking the index's lock.
    fn reserve_remove(&self, g: &Self::Guard<'_>, key_len: usize) -> Result<()> {
        self.reserve(g, key_len, 0)
    }

    /// `get_value`: the value stored at `addr`, which the index holds for `key`.
    fn get_value(&self, g: &Self::Guard<'_>, addr: LogicalAddress, key: &[u8]) -> Result<Vec<u8>>;

    /// A hint that `get_value(addr)` follows soon in this operation: an index that reads
    /// many values at once (a scan) calls it for all of them first, so that their memory
    /// loads overlap instead of waiting for one another. Changes nothing; does nothing by
    /// default.
    fn prefetch_value(&self, _g: &Self::Guard<'_>, _addr: LogicalAddress) {}

    /// `set_value`: stores `value` for `key`, whose current address is `addr` (`None` for a
    /// new key); returns the address the index must now hold (the same one when the value
    /// was updated in place). Durable (under the memory's durability settings) when it
    /// returns.
    fn set_value(
        &self,
        g: &Self::Guard<'_>,
        addr: Option<LogicalAddress>,
        key: &[u8],
        value: &[u8],
    ) -> Result<LogicalAddress>;

    /// Makes the operation's `set_value` durable: call it once the index's lock is released,
    /// before the put returns (the paper's writer releases the bucket lock before it
    /// persists). `set_value` only prepares its log entry; this writes and persists it,
    /// grouped with concurrent writers' persists. The guard's drop does it too, so an index
    /// that never calls it is correct but persists under its lock. A reader that finds the
    /// new version meanwhile waits for this persist. Does nothing by default.
    fn complete(&self, _g: &Self::Guard<'_>) -> Result<()> {
        Ok(())
    }

    /// Removes the value at `addr` (the key's current address): call it, then remove the
    /// key from the index.
    fn remove_value(&self, g: &Self::Guard<'_>, addr: LogicalAddress, key: &[u8]) -> Result<()>;

    /// Recovery's `setAddr`: of the key's `current` address and a `candidate` found in
    /// pmem, returns the one the index must hold (the newer version). With no `current` it
    /// must return `candidate` and do nothing else (so that a key's first version can be
    /// installed without a call).
    fn recover_value(
        &self,
        g: &Self::Guard<'_>,
        current: Option<LogicalAddress>,
        key: &[u8],
        candidate: LogicalAddress,
    ) -> Result<LogicalAddress>;
}

impl HeterMemory for HeterMem {
    type Guard<'a> = Guard<'a>;

    fn pin(&self) -> Result<Guard<'_>> {
        HeterMem::pin(self)
    }

    fn reserve(&self, g: &Guard<'_>, key_len: usize, value_len: usize) -> Result<()> {
        HeterMem::reserve(self, g, key_len, value_len)
    }

    fn reserve_remove(&self, g: &Guard<'_>, key_len: usize) -> Result<()> {
        self.reserve_delete(g, key_len)
    }

    fn get_value(&self, g: &Guard<'_>, addr: LogicalAddress, key: &[u8]) -> Result<Vec<u8>> {
        self.read_value(g, addr.0, key)
    }

    fn prefetch_value(&self, g: &Guard<'_>, addr: LogicalAddress) {
        self.prefetch_record(g, addr.0);
    }

    fn set_value(
        &self,
        g: &Guard<'_>,
        addr: Option<LogicalAddress>,
        key: &[u8],
        value: &[u8],
    ) -> Result<LogicalAddress> {
        self.write_value(g, addr.map(|a| a.0), key, value)
            .map(LogicalAddress)
    }

    fn complete(&self, g: &Guard<'_>) -> Result<()> {
        HeterMem::complete(self, g)
    }

    fn remove_value(&self, g: &Guard<'_>, addr: LogicalAddress, key: &[u8]) -> Result<()> {
        self.delete_value(g, addr.0, key)
    }

    fn recover_value(
        &self,
        g: &Guard<'_>,
        current: Option<LogicalAddress>,
        key: &[u8],
        candidate: LogicalAddress,
    ) -> Result<LogicalAddress> {
        HeterMem::recover_value(self, g, current.map(|a| a.0), key, candidate.0).map(LogicalAddress)
    }
}

/// An in-DRAM index plugged into a [`HeterMemory`] (Fig. 4): the index's get/set/delete/
/// scan with its value accesses replaced by the memory's calls.
pub trait PluggedIndex<M: HeterMemory>: Send + Sync {
    /// The value of `key`.
    fn get(&self, hm: &M, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Sets `key` to `value`.
    fn put(&self, hm: &M, key: &[u8], value: &[u8]) -> Result<()>;
    /// Removes `key` (nothing if absent).
    fn delete(&self, hm: &M, key: &[u8]) -> Result<()>;
    /// Up to `limit` pairs with keys `>= start` in key order, or `Error::Unsupported`.
    fn scan(&self, hm: &M, start: &[u8], limit: usize) -> Result<Vec<KvPair>>;
    /// One step of a cursor iteration of an unordered index (`KvStore::scan_cursor`'s
    /// contract), or `Error::Unsupported` (this default: an index that scans in order).
    fn scan_cursor(&self, hm: &M, cursor: u64, count: usize) -> Result<KvCursorPage> {
        let _ = (hm, cursor, count);
        Err(tierkv_core::Error::Unsupported(
            "this plugged-in index has no cursor iteration".into(),
        ))
    }
    /// Offers a record found in pmem at recovery (Algorithm 1, line 24).
    fn recover(&self, hm: &M, key: &[u8], addr: LogicalAddress) -> Result<()>;
    /// Offers every record found in pmem at recovery, in ascending key order (a key offered
    /// once per version found). The same as [`PluggedIndex::recover`] on each, which is what
    /// this default does; an index may build itself faster from sorted input.
    fn recover_sorted(
        &self,
        hm: &M,
        offers: &mut dyn Iterator<Item = (&[u8], LogicalAddress)>,
    ) -> Result<()> {
        for (key, addr) in offers {
            self.recover(hm, key, addr)?;
        }
        Ok(())
    }
    /// Sets `key` to what `make(current address)` returns (`None`: removes it, or leaves
    /// it absent) inside the index's atomic per-key synchronization, as `put` runs
    /// `set_value`; on an error the entry is left as it was. `make` must not wait (it runs
    /// under the key's lock); a lock-free index may run it more than once, and the last run
    /// counts. Write batches (`batch.rs`) are built on it; an index without it returns
    /// `Unsupported`, which is what this default does.
    fn compute(
        &self,
        hm: &M,
        key: &[u8],
        make: &mut dyn FnMut(Option<LogicalAddress>) -> Result<Option<LogicalAddress>>,
    ) -> Result<()> {
        let _ = (hm, key, make);
        Err(tierkv_core::Error::Unsupported(
            "this plugged-in index has no per-key compute, so no write batches".into(),
        ))
    }
    /// The address the index holds for `key` (no value read).
    fn address(&self, key: &[u8]) -> Option<LogicalAddress>;
    /// Every (key, address) pair (for `check`).
    fn for_each(&self, f: &mut dyn FnMut(&[u8], LogicalAddress));
    /// Keys in the index.
    fn len(&self) -> usize;
    /// An estimate of the DRAM the index itself takes (keys, addresses, structure), for
    /// `Stats::dram_bytes`; 0 if the index does not know.
    fn dram_bytes(&self) -> u64 {
        0
    }
    /// True when there are no keys.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One of tierkv's concurrent indexes (`btree`, `hash`, `lockfree`) plugged in through the
/// API: `set_value` runs inside the index's atomic per-key `compute`, as Fig. 4 runs it
/// under the bucket lock. The `btree` variant holds the addresses in atomic words
/// (`new_word_index`).
pub struct CoreIndex {
    inner: Box<dyn ConcurrentIndex<LogicalAddress>>,
    /// Bytes of the keys it holds.
    key_bytes: AtomicI64,
}

/// DRAM an index entry takes besides its key: the address and the structure around it
/// (the `dram` engine charges the same per entry).
const ENTRY_OVERHEAD: u64 = 64;

impl CoreIndex {
    /// The index a variant names.
    pub fn new(variant: &str) -> Result<Arc<CoreIndex>> {
        Ok(Arc::new(CoreIndex {
            inner: new_word_index(variant)?,
            key_bytes: AtomicI64::new(0),
        }))
    }

    /// Installs what `make(current address)` returns for `key`, inside the index's atomic
    /// per-key compute. The closure may run more than once on a lock-free index; the last
    /// run counts (its error, or its address). On an error the entry is left as it was.
    fn install(
        &self,
        key: &[u8],
        mut make: impl FnMut(Option<LogicalAddress>) -> Result<LogicalAddress>,
    ) -> Result<()> {
        let mut failed = None;
        let mut added = false;
        self.inner.compute(key, &mut |cur| {
            added = cur.is_none();
            match make(cur.copied()) {
                Ok(a) => {
                    failed = None;
                    Some(a)
                }
                Err(e) => {
                    failed = Some(e);
                    added = false;
                    cur.copied()
                }
            }
        });
        if added {
            self.charge(key, 1);
        }
        failed.map_or(Ok(()), Err)
    }

    /// Counts a key in (`sign` 1) or out (-1).
    fn charge(&self, key: &[u8], sign: i64) {
        self.key_bytes
            .fetch_add(sign * key.len() as i64, Ordering::Relaxed);
    }
}

impl<M: HeterMemory> PluggedIndex<M> for CoreIndex {
    fn get(&self, hm: &M, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let g = hm.pin()?;
        match self.inner.get(key) {
            None => Ok(None),
            Some(a) => hm.get_value(&g, a, key).map(Some),
        }
    }

    fn put(&self, hm: &M, key: &[u8], value: &[u8]) -> Result<()> {
        let g = hm.pin()?;
        hm.reserve(&g, key.len(), value.len())?;
        self.install(key, |cur| hm.set_value(&g, cur, key, value))?;
        // IMPORTANT: the log entry is persisted here, after the index's per-key lock (the
        // `hash` variant's shard lock) is released, and before the put returns.
        hm.complete(&g)
    }

    fn delete(&self, hm: &M, key: &[u8]) -> Result<()> {
        let g = hm.pin()?;
        hm.reserve_remove(&g, key.len())?;
        let mut failed = None;
        let mut removed = false;
        self.inner.compute(key, &mut |cur| {
            failed = None;
            removed = false;
            let a = *cur?;
            match hm.remove_value(&g, a, key) {
                Ok(()) => {
                    removed = true;
                    None
                }
                Err(e) => {
                    failed = Some(e);
                    Some(a)
                }
            }
        });
        if removed {
            self.charge(key, -1);
        }
        failed.map_or(Ok(()), Err)
    }

    fn scan(&self, hm: &M, start: &[u8], limit: usize) -> Result<Vec<KvPair>> {
        let g = hm.pin()?;
        let rows = self.inner.scan(start, limit)?;
        for (_, a) in &rows {
            hm.prefetch_value(&g, *a);
        }
        rows.into_iter()
            .map(|(k, a)| hm.get_value(&g, a, &k).map(|v| (k, v)))
            .collect()
    }

    /// The index's shards' (key, address) pairs, each value then read through the memory's
    /// read path (`get_value`, as `get` reads) under one guard pinned before the index is
    /// read, as `scan` does: a page or block an address names is not recycled while the
    /// guard is held, so a record flushed or reorganised meanwhile is still read whole.
    fn scan_cursor(&self, hm: &M, cursor: u64, count: usize) -> Result<KvCursorPage> {
        let g = hm.pin()?;
        let page = self.inner.scan_cursor(cursor, count)?;
        for (_, a) in &page.entries {
            hm.prefetch_value(&g, *a);
        }
        let entries = page
            .entries
            .into_iter()
            .map(|(k, a)| hm.get_value(&g, a, &k).map(|v| (k, v)))
            .collect::<Result<Vec<KvPair>>>()?;
        Ok(KvCursorPage {
            entries,
            next: page.next,
        })
    }

    fn recover(&self, hm: &M, key: &[u8], addr: LogicalAddress) -> Result<()> {
        let g = hm.pin()?;
        self.install(key, |cur| hm.recover_value(&g, cur, key, addr))
    }

    fn recover_sorted(
        &self,
        hm: &M,
        offers: &mut dyn Iterator<Item = (&[u8], LogicalAddress)>,
    ) -> Result<()> {
        if !self.inner.is_empty() {
            for (key, addr) in offers {
                self.recover(hm, key, addr)?;
            }
            return Ok(());
        }
        // The versions of a key arrive together: settle each key's winner exactly as
        // `recover` would (one pinned operation per later version), and build the index
        // from the winners in one pass as they come. A key's first version needs no
        // operation: `recover_value` with no current address installs the candidate and
        // leaves nothing to invalidate.
        let mut failed = None;
        let mut offers = offers.peekable();
        let mut winners = std::iter::from_fn(|| {
            let (key, mut addr) = offers.next()?;
            while let Some((_, later)) = offers.next_if(|(k, _)| *k == key) {
                match hm
                    .pin()
                    .and_then(|g| hm.recover_value(&g, Some(addr), key, later))
                {
                    Ok(a) => addr = a,
                    Err(e) => {
                        failed = Some(e);
                        return None;
                    }
                }
            }
            self.charge(key, 1);
            Some((key, addr))
        });
        self.inner.insert_sorted(&mut winners);
        match failed {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn compute(
        &self,
        _hm: &M,
        key: &[u8],
        make: &mut dyn FnMut(Option<LogicalAddress>) -> Result<Option<LogicalAddress>>,
    ) -> Result<()> {
        let mut failed = None;
        let mut change = 0;
        self.inner.compute(key, &mut |cur| {
            failed = None;
            match make(cur.copied()) {
                Ok(next) => {
                    change = i64::from(next.is_some()) - i64::from(cur.is_some());
                    next
                }
                Err(e) => {
                    failed = Some(e);
                    change = 0;
                    cur.copied()
                }
            }
        });
        if change != 0 {
            self.charge(key, change);
        }
        failed.map_or(Ok(()), Err)
    }

    fn address(&self, key: &[u8]) -> Option<LogicalAddress> {
        self.inner.get(key)
    }

    fn for_each(&self, f: &mut dyn FnMut(&[u8], LogicalAddress)) {
        self.inner.for_each(&mut |k, a| f(k, *a));
    }

    fn len(&self) -> usize {
        self.inner.len()
    }

    fn dram_bytes(&self) -> u64 {
        self.key_bytes.load(Ordering::Relaxed).max(0) as u64
            + self.inner.len() as u64 * ENTRY_OVERHEAD
    }
}
