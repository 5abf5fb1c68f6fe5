//! What the two reference engines share: the DRAM index every read is served from, the
//! closed and poisoned latches, the limits and the counters. Each engine keeps its own log
//! (pmem or flash) and its own writer; this is the part that does not depend on the tier.
//!
//! Poisoning (STYLE §5): the first failed mutation of the media latches the reason; every
//! later write returns [`Error::Poisoned`] until the store is reopened. Reads keep working.
//!
//! Thread safety: `Send + Sync`; the index is behind a read-write lock (writers take it
//! while holding their engine's writer lock, so the index changes in log order).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use parking_lot::{Mutex, RwLock};
use tierkv_core::{Counter, Error, KvPair, Limits, OpCounters, Result, Stats};

use super::record::Kind;

/// The index: every live pair.
pub(super) type Index = BTreeMap<Vec<u8>, Vec<u8>>;

/// Applies one logged operation to an index (recovery and the live path alike).
pub(super) fn apply(index: &mut Index, kind: Kind, key: &[u8], value: &[u8]) {
    match kind {
        Kind::Put => index.insert(key.to_vec(), value.to_vec()),
        Kind::Delete => index.remove(key),
    };
}

/// The tier-independent state of a reference engine.
pub(super) struct LogCore {
    index: RwLock<Index>,
    limits: Limits,
    closed: AtomicBool,
    poisoned: Mutex<Option<String>>,
    ops: OpCounters,
    compactions: Counter,
    recovery_micros: u64,
}

impl LogCore {
    /// The state after a recovery (or a format) that started at `started`.
    pub(super) fn new(index: Index, limits: Limits, started: Instant) -> Self {
        LogCore {
            index: RwLock::new(index),
            limits,
            closed: AtomicBool::new(false),
            poisoned: Mutex::new(None),
            ops: OpCounters::default(),
            compactions: Counter::default(),
            recovery_micros: u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
        }
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }

    /// Refuses to change a closed or poisoned store.
    pub(super) fn check_writable(&self) -> Result<()> {
        self.check_open()?;
        match &*self.poisoned.lock() {
            Some(why) => Err(Error::Poisoned(why.clone())),
            None => Ok(()),
        }
    }

    /// Refuses a write to a closed or poisoned store, or with arguments over the limits.
    pub(super) fn check_write(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.check_writable()?;
        self.limits.check_key(key)?;
        self.limits.check_value(value)
    }

    /// Latches the first error of a media mutation (see the module doc).
    pub(super) fn poison_on_error<T>(&self, r: Result<T>) -> Result<T> {
        if let Err(e) = &r {
            let mut p = self.poisoned.lock();
            if p.is_none() {
                *p = Some(e.to_string());
            }
        }
        r
    }

    /// True once a media mutation failed.
    pub(super) fn is_poisoned(&self) -> bool {
        self.poisoned.lock().is_some()
    }

    /// Marks the store closed; true if it already was.
    pub(super) fn close(&self) -> bool {
        self.closed.swap(true, Ordering::AcqRel)
    }

    /// Applies an acknowledged-to-be operation to the index (call with the writer lock).
    pub(super) fn applied(&self, kind: Kind, key: &[u8], value: &[u8]) {
        apply(&mut self.index.write(), kind, key, value);
        if kind == Kind::Put {
            self.ops
                .user_bytes_written
                .add((key.len() + value.len()) as u64);
        }
    }

    /// Counts a compaction.
    pub(super) fn compacted(&self) {
        self.compactions.incr();
    }

    /// The live index, for compaction and checks.
    pub(super) fn index(&self) -> parking_lot::RwLockReadGuard<'_, Index> {
        self.index.read()
    }

    /// The value of `key`.
    pub(super) fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.check_open()?;
        let v = self.index.read().get(key).cloned();
        self.ops.reads_from_dram.incr();
        if let Some(v) = &v {
            self.ops.user_bytes_read.add(v.len() as u64);
        }
        Ok(v)
    }

    /// Up to `limit` pairs from `start` on.
    pub(super) fn scan(&self, start: &[u8], limit: usize) -> Result<Vec<KvPair>> {
        self.check_open()?;
        Ok(self
            .index
            .read()
            .range(start.to_vec()..)
            .take(limit)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }

    /// The counters.
    pub(super) fn stats(&self) -> Stats {
        let mut s = Stats::default();
        self.ops.fill(&mut s);
        s.recovery_micros = self.recovery_micros;
        s.counters
            .insert("reflog_compactions".into(), self.compactions.get());
        s
    }
}
