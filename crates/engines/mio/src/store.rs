//! [`MioStore`]: the engine as a tierkv [`KvStore`] — the write path (P1: log, then
//! MemTable), the read path (§4.6: MemTable, immutable MemTable, levels newest first, then
//! the repository), scans, the directory publish every structural change goes through,
//! and close.
//!
//! Locks, always taken in this order: `writer` (the log tail, the MemTable, the next
//! seq), `dir` (the directory mirror and its publish), `version` (the readers' view).
//! Background threads take `dir` then `version`, never `writer`.
//!
//! Thread safety: `Send + Sync`; every method takes `&self`.

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};
use tierkv_core::{Error, KvPair, KvStore, Limits, Result, Stats, Tier};

use crate::arena::Arena;
use crate::dir::{self, Directory, LogMeta, Run};
use crate::merge::Merge;
use crate::node::{self, Kind};
use crate::options::MioOptions;
use crate::skiplist::Source;
use crate::table::{Shared, TAG_WAL, TableShape};
use crate::version::{MemTable, Version};
use crate::wal::{self, LogWriter};

/// Root word holding [`ROOT_MAGIC`] once the store is formatted.
pub const ROOT_FORMATTED: usize = 0;
/// Root word holding the offset of the current directory object.
pub const ROOT_DIR: usize = 1;
/// `"MIODB\0\0\x01"`.
pub const ROOT_MAGIC: u64 = u64::from_le_bytes(*b"MIODB\0\0\x01");

/// The writer's state (under `Inner::writer`).
pub(crate) struct WriterState {
    pub mem: Arc<MemTable>,
    pub log: LogWriter,
    pub next_seq: u64,
}

/// The directory mirror (under `Inner::dir`).
pub(crate) struct DirState {
    pub cur: Directory,
    pub off: u64,
}

/// Everything the store and its threads share.
pub(crate) struct Inner {
    pub shared: Arc<Shared>,
    pub opts: MioOptions,
    pub limits: Limits,
    pub memtable_size: u64,
    pub arena_cap: usize,
    pub log_cap: u64,
    pub shape: TableShape,
    pub version: RwLock<Arc<Version>>,
    /// One per buffer level: a zero-copy node move holds its level's exclusively, readers
    /// hold all of them shared (`zerocopy.rs`).
    pub level_locks: Vec<RwLock<()>>,
    pub writer: Mutex<WriterState>,
    pub dir: Mutex<DirState>,
    /// Bumped and notified on every change background threads or stalled writers wait on.
    pub signal: Mutex<u64>,
    pub wake: Condvar,
    pub stop: AtomicBool,
    pub poisoned: OnceLock<String>,
}

/// A MioDB store.
pub struct MioStore {
    pub(crate) inner: Arc<Inner>,
    pub(crate) threads: Mutex<Vec<JoinHandle<()>>>,
    closed: AtomicBool,
}

impl Inner {
    pub fn version(&self) -> Arc<Version> {
        self.version.read().clone()
    }

    /// A fresh table or log id (made durable by the next publish; an id lost in a crash
    /// belonged to an unpublished table, which recovery frees).
    pub fn take_id(&self) -> u64 {
        let mut st = self.dir.lock();
        let id = st.cur.next_id;
        st.cur.next_id += 1;
        id
    }

    pub fn notify(&self) {
        let mut g = self.signal.lock();
        *g = g.wrapping_add(1);
        self.wake.notify_all();
    }

    /// Waits for a notification or `timeout`.
    pub fn wait(&self, seen: u64, timeout: Duration) {
        let mut g = self.signal.lock();
        if *g == seen && !self.stop.load(Ordering::Acquire) {
            self.wake.wait_for(&mut g, timeout);
        }
    }

    pub fn signal_now(&self) -> u64 {
        *self.signal.lock()
    }

    pub fn check_writable(&self) -> Result<()> {
        match self.poisoned.get() {
            Some(why) => Err(Error::Poisoned(why.clone())),
            None => Ok(()),
        }
    }

    pub fn poison(&self, e: &Error) {
        let _ = self
            .poisoned
            .set(format!("mio background work failed: {e}"));
        self.notify();
    }

    /// Writes `d` to a fresh object, persists it and points root 1 at it; frees the old
    /// object (the "one atomic root update" every structural change ends with).
    pub fn publish(&self, st: &mut DirState, mut d: Directory) -> Result<()> {
        d.generation = st.cur.generation + 1;
        let bytes = dir::encode(&d);
        let pool = &self.shared.pool;
        let off = self.shared.alloc.alloc(bytes.len() as u64)?;
        let written = pool
            .write(off, &bytes)
            .and_then(|()| self.shared.persist("dir-object", off, bytes.len()))
            .and_then(|()| {
                if let Some(h) = &self.shared.hook {
                    h("dir-root");
                }
                pool.set_root(ROOT_DIR, off)
            });
        if let Err(e) = written {
            let _ = self.shared.alloc.free(off);
            return Err(e);
        }
        let old = std::mem::replace(&mut st.off, off);
        st.cur = d;
        self.shared.counters.dir_publishes.incr();
        if old != 0 {
            self.shared.alloc.free(old)?;
        }
        Ok(())
    }

    /// A new MemTable with a fresh log, listed in the directory before it takes a write.
    /// `need`: bytes of the record that must fit the new log.
    pub fn new_memtable(&self, need: u64) -> Result<(Arc<MemTable>, LogWriter)> {
        let cs = self.shared.alloc.chunk_size();
        let chunks = self.log_cap.max(need).div_ceil(cs);
        let off = self.shared.alloc.alloc_chunks(TAG_WAL, chunks)?;
        let run = Run { off, chunks };
        let id = {
            let mut st = self.dir.lock();
            let mut d = st.cur.clone();
            let id = d.next_id;
            d.next_id += 1;
            st.cur.next_id = d.next_id;
            d.logs.push(LogMeta { id, run });
            if let Err(e) = self.publish(&mut st, d) {
                let _ = self.shared.alloc.free_chunk(off);
                return Err(e);
            }
            id
        };
        let mem = Arc::new(MemTable {
            arena: Arena::new(self.arena_cap, id.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            log: LogMeta { id, run },
        });
        let log = LogWriter {
            id,
            off,
            cap: chunks * cs,
            tail: 0,
        };
        Ok((mem, log))
    }

    /// Makes the MemTable immutable and starts a new one, waiting (a stall) while the
    /// previous immutable MemTable is still being flushed.
    pub fn switch_memtable(&self, w: &mut WriterState, need: u64) -> Result<()> {
        let started = Instant::now();
        let deadline = started + Duration::from_millis(self.opts.stall_timeout_ms);
        let mut stalled = false;
        while self.version.read().imm.is_some() {
            self.check_writable()?;
            if self.stop.load(Ordering::Acquire) {
                return Err(Error::Closed);
            }
            if Instant::now() >= deadline {
                self.shared.counters.writes_refused.incr();
                self.shared
                    .counters
                    .stall_micros
                    .add(started.elapsed().as_micros() as u64);
                return Err(Error::no_space(
                    Tier::Pmem,
                    "mio: the MemTable is full and the previous one could not be flushed in time (pmem buffer full)",
                ));
            }
            stalled = true;
            let seen = self.signal_now();
            if self.version.read().imm.is_none() {
                break;
            }
            self.wait(seen, Duration::from_millis(20));
        }
        // Back-pressure: without room for the new log, wait for the compactions to drain
        // the buffer (they do under pressure), up to the stall timeout.
        let (mem, log) = loop {
            match self.new_memtable(need) {
                Ok(x) => break x,
                Err(Error::NoSpace { .. }) if Instant::now() < deadline => {
                    self.check_writable()?;
                    if self.stop.load(Ordering::Acquire) {
                        return Err(Error::Closed);
                    }
                    stalled = true;
                    let seen = self.signal_now();
                    self.wait(seen, Duration::from_millis(20));
                }
                Err(e) => {
                    self.shared.counters.writes_refused.incr();
                    return Err(e);
                }
            }
        };
        if stalled {
            self.shared
                .counters
                .stall_micros
                .add(started.elapsed().as_micros() as u64);
        }
        {
            let mut v = self.version.write();
            let mut nv = (**v).clone();
            nv.imm = Some(std::mem::replace(&mut nv.mem, mem.clone()));
            *v = Arc::new(nv);
        }
        w.mem = mem;
        w.log = log;
        self.notify();
        Ok(())
    }

    fn write(&self, kind: Kind, key: &[u8], value: &[u8]) -> Result<()> {
        self.check_writable()?;
        let mut w = self.writer.lock();
        let full = w.mem.arena.used() as u64 >= self.memtable_size
            || !w.mem.arena.fits(key.len(), value.len())
            || !w.log.fits(key.len(), value.len());
        if full {
            self.switch_memtable(&mut w, wal::record_len(key.len(), value.len()) as u64)?;
        }
        let seq = w.next_seq;
        if seq > node::MAX_SEQ {
            return Err(Error::invalid("mio: sequence numbers exhausted"));
        }
        w.log.append(&self.shared, seq, kind, key, value)?;
        w.next_seq += 1;
        w.mem.arena.insert(seq, kind, key, value)?;
        let c = &self.shared.counters;
        c.wal_bytes
            .add(wal::record_len(key.len(), value.len()) as u64);
        if kind == Kind::Put {
            c.ops
                .user_bytes_written
                .add((key.len() + value.len()) as u64);
        }
        Ok(())
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let v = self.version();
        self.get_in(&v, key)
    }

    /// A get through the version `v` (which the caller cloned, perhaps long ago: every
    /// table it lists stays readable while it is held, `table.rs`).
    pub(crate) fn get_in(&self, v: &Version, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let _frozen: Vec<_> = self.level_locks.iter().map(|l| l.read()).collect();
        let c = &self.shared.counters.ops;
        for m in std::iter::once(&v.mem).chain(v.imm.iter()) {
            if let Some(e) = m.arena.get(key)? {
                c.reads_from_dram.incr();
                return Ok(self.found(e.value));
            }
        }
        for level in &v.levels {
            for t in level.iter().rev() {
                if let Some(e) = t.get(key)? {
                    c.reads_from_pmem.incr();
                    return Ok(self.found(e.value));
                }
            }
        }
        Ok(None)
    }

    fn found(&self, v: Option<Vec<u8>>) -> Option<Vec<u8>> {
        if let Some(v) = &v {
            self.shared.counters.ops.user_bytes_read.add(v.len() as u64);
        }
        v
    }

    fn scan(&self, start: &[u8], limit: usize) -> Result<Vec<KvPair>> {
        let v = self.version();
        let _frozen: Vec<_> = self.level_locks.iter().map(|l| l.read()).collect();
        let pools: Vec<_> = v
            .levels
            .iter()
            .flatten()
            .map(|t| (t.source(), t.meta.head))
            .collect();
        let mut lists: Vec<(&dyn Source, u64)> = vec![(&v.mem.arena, 0)];
        if let Some(imm) = &v.imm {
            lists.push((&imm.arena, 0));
        }
        for (s, head) in &pools {
            lists.push((s as &dyn Source, *head));
        }
        let mut m = Merge::new(&lists, start)?;
        let mut out = Vec::new();
        while out.len() < limit {
            let Some(e) = m.next_entry()? else { break };
            if let Some(val) = e.value {
                self.shared
                    .counters
                    .ops
                    .user_bytes_read
                    .add(val.len() as u64);
                out.push((e.key, val));
            }
        }
        Ok(out)
    }
}

impl MioStore {
    pub(crate) fn new(inner: Arc<Inner>, threads: Vec<JoinHandle<()>>) -> MioStore {
        MioStore {
            inner,
            threads: Mutex::new(threads),
            closed: AtomicBool::new(false),
        }
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// Tables per level now (L0 first, the repository last).
    pub fn tables_per_level(&self) -> Vec<usize> {
        self.inner.version().tables_per_level()
    }

    /// The pool offsets and sizes of every run of every table now (tests).
    pub fn table_runs(&self) -> Vec<Vec<(u64, u64)>> {
        let cs = self.inner.shared.alloc.chunk_size();
        self.inner
            .version()
            .levels
            .iter()
            .flatten()
            .map(|t| {
                t.meta
                    .allocs
                    .iter()
                    .map(|r| (r.off, r.chunks * cs))
                    .collect()
            })
            .collect()
    }

    /// Waits until no flush is pending and no buffer level holds `trigger` tables or more
    /// (tests and `flush`), or `timeout` passes; returns whether it settled.
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        let until = Instant::now() + timeout;
        loop {
            let v = self.inner.version();
            let busy = v.imm.is_some()
                || v.levels
                    .iter()
                    .take(v.levels.len() - 1)
                    .any(|l| l.len() >= self.inner.opts.trigger);
            if !busy {
                return true;
            }
            if Instant::now() >= until || self.inner.poisoned.get().is_some() {
                return false;
            }
            let seen = self.inner.signal_now();
            self.inner.wait(seen, Duration::from_millis(10));
        }
    }
}

impl KvStore for MioStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.check_open()?;
        self.inner.limits.check_key(key)?;
        self.inner.get(key)
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.check_open()?;
        self.inner.limits.check_key(key)?;
        self.inner.limits.check_value(value)?;
        self.inner.write(Kind::Put, key, value)
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        self.check_open()?;
        self.inner.limits.check_key(key)?;
        self.inner.write(Kind::Delete, key, &[])
    }

    fn scan(&self, start: &[u8], limit: usize) -> Result<Vec<KvPair>> {
        self.check_open()?;
        self.inner.scan(start, limit)
    }

    /// Flushes the MemTable to a PMTable now (its writes were durable already, in the log)
    /// and waits for the flush.
    fn flush(&self) -> Result<()> {
        self.check_open()?;
        self.inner.check_writable()?;
        {
            let mut w = self.inner.writer.lock();
            if w.mem.arena.entries() > 0 {
                self.inner.switch_memtable(&mut w, 0)?;
            }
        }
        let until = Instant::now() + Duration::from_millis(self.inner.opts.stall_timeout_ms);
        while self.inner.version().imm.is_some() {
            self.inner.check_writable()?;
            if Instant::now() >= until {
                return Err(Error::no_space(
                    Tier::Pmem,
                    "mio: flush did not finish in time",
                ));
            }
            let seen = self.inner.signal_now();
            self.inner.wait(seen, Duration::from_millis(10));
        }
        Ok(())
    }

    fn stats(&self) -> Stats {
        crate::report::stats(&self.inner)
    }

    fn close(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // Writers finish under the writer lock; then the threads stop after their step.
        drop(self.inner.writer.lock());
        self.inner.stop.store(true, Ordering::Release);
        self.inner.notify();
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
        match self.inner.poisoned.get() {
            Some(why) => Err(Error::Poisoned(why.clone())),
            None => Ok(()),
        }
    }

    fn check(&self) -> Result<Vec<String>> {
        self.check_open()?;
        crate::check::check(&self.inner)
    }
}

impl Drop for MioStore {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

/// The arena capacity for a MemTable of `memtable` bytes: room for the largest record on
/// top, so a MemTable that is not yet full always takes one more write.
pub(crate) fn arena_capacity(memtable: u64, limits: &Limits) -> usize {
    memtable as usize + node::node_len(limits.max_key_len, limits.max_value_len, node::MAX_HEIGHT)
}

/// The log capacity for a MemTable of `memtable` bytes: a record (24-byte header + key +
/// value, padded) is never longer than its node (16 + 8 x height + key + value, padded), so
/// such a log fills no earlier than its MemTable, except for the one record that makes the
/// MemTable full (a write that does not fit either switches MemTables; a new log is made
/// large enough for the write that asked for it).
pub(crate) fn log_capacity(memtable: u64) -> u64 {
    memtable.next_multiple_of(8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, HashSet};
    use tierkv_core::media::pmem::DurabilityMode;
    use tierkv_core::{EngineSpec, KvStore};
    use tierkv_testkit::rig::{create_pool, scratch_dir};

    fn value(key: u32, ver: u32) -> Vec<u8> {
        let mut v = format!("k{key}|{ver}|").into_bytes();
        v.resize(40 + (key as usize * 7 + ver as usize) % 90, b'.');
        v
    }

    fn version_of(key: u32, v: &[u8]) -> u32 {
        let s = String::from_utf8_lossy(v);
        let mut parts = s.split('|');
        assert_eq!(
            parts.next(),
            Some(format!("k{key}").as_str()),
            "foreign value {s}"
        );
        parts
            .next()
            .and_then(|x| x.parse().ok())
            .unwrap_or_else(|| panic!("torn value {s}"))
    }

    /// Bug 2 (release stress: gets older than acknowledged, scans below their start): a
    /// reader's version is its epoch, so every run of every table it lists — including the
    /// runs a zero-copy merge later gives to another handle of the table, which a lazy
    /// copy then retires — must stay allocated while the reader holds it. A reader that
    /// pinned a version before a merge, its move to the next level and its lazy copy into
    /// the repository reads through that version afterwards, after the freed space could
    /// have been reused by many new tables: it must read whole values, each at least as
    /// new as what it read when it pinned.
    #[test]
    fn a_pinned_version_keeps_every_table_it_lists_readable_through_merges_and_lazy_copies() {
        let d = scratch_dir();
        let pool = create_pool(&d.path().join("pool"), 2 << 20, DurabilityMode::Volatile);
        let spec: EngineSpec = "mio@memtable=4KiB,levels=3,stall_timeout_ms=60000"
            .parse()
            .unwrap();
        let opts = MioOptions::from_params(spec.params()).unwrap();
        let limits = Limits {
            max_key_len: 64,
            max_value_len: 4096,
        };
        let store = crate::open_store(pool, opts, limits, true).unwrap();
        let keys = 40u32;
        let key = |k: u32| format!("key{k:03}").into_bytes();
        let mut ver = 0u32;
        let round = |store: &MioStore, ver: &mut u32| {
            *ver += 1;
            for k in 0..keys {
                store.put(&key(k), &value(k, *ver)).unwrap();
            }
        };
        for _ in 0..6 {
            round(&store, &mut ver);
        }
        assert!(store.wait_idle(Duration::from_secs(30)));
        let inner = &store.inner;
        let pinned = inner.version();
        let ids: HashSet<u64> = pinned.levels.iter().flatten().map(|t| t.meta.id).collect();
        let buffer_ids: Vec<u64> = pinned.levels[..pinned.levels.len() - 1]
            .iter()
            .flatten()
            .map(|t| t.meta.id)
            .collect();
        assert!(
            !buffer_ids.is_empty(),
            "the pinned version lists buffer tables"
        );
        let at_pin: BTreeMap<u32, u32> = (0..keys)
            .map(|k| {
                let v = inner.get_in(&pinned, &key(k)).unwrap().unwrap();
                (k, version_of(k, &v))
            })
            .collect();
        // Churn until every buffer table the pinned version lists has left the store
        // (merged, moved down, copied into the repository and retired), then more, so
        // that the space freed meanwhile is reused by new tables.
        let mut rounds = 0;
        loop {
            round(&store, &mut ver);
            rounds += 1;
            assert!(store.wait_idle(Duration::from_secs(30)));
            let now = inner.version();
            let live: HashSet<u64> = now.levels.iter().flatten().map(|t| t.meta.id).collect();
            if buffer_ids.iter().all(|id| !live.contains(id)) {
                break;
            }
            assert!(rounds < 400, "the pinned tables never left the buffer");
        }
        for _ in 0..30 {
            round(&store, &mut ver);
        }
        assert!(store.wait_idle(Duration::from_secs(30)));
        for k in 0..keys {
            let got = inner
                .get_in(&pinned, &key(k))
                .unwrap_or_else(|e| panic!("key {k} through the pinned version: {e}"))
                .unwrap_or_else(|| panic!("key {k} vanished from the pinned version"));
            let v = version_of(k, &got);
            assert!(
                v >= at_pin[&k],
                "key {k}: version {v} is older than {} read at the pin",
                at_pin[&k]
            );
        }
        println!(
            "pinned {} tables, churned {rounds} + 30 rounds; reads through the pin are whole and not older",
            ids.len()
        );
        drop(pinned);
        store.close().unwrap();
    }
}
