//! [`MioStore`]: the engine as a tierkv [`KvStore`] — the write path (P1: log, then
//! MemTable), the read path (§4.6: MemTable, immutable MemTable, levels newest first, then
//! the repository), scans, the directory publish every structural change goes through,
//! and close.
//!
//! Room on a full pool (who may take pool space, and when a write is refused): `space.rs`;
//! the admission loop is [`Inner::admit`].
//!
//! Locks, always taken in this order: `writer` (the log tail, the MemTable, the next
//! seq, the put budget), `spare`, `dir` (the directory mirror and its publish), `version`
//! (the readers' view). Background threads take `dir` then `version`, never `writer`. A
//! writer waiting for room releases `writer` while it waits.
//!
//! Thread safety: `Send + Sync`; every method takes `&self`.

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard, RwLock};
use tierkv_core::{Error, KvPair, KvStore, Limits, Result, Stats, Tier, WriteBatch};

use crate::arena::{Arena, ArenaRecycler, Reservation};
use crate::background::Bursts;
use crate::dir::{self, Directory, LogMeta, Run};
use crate::flash::FlashRepo;
use crate::merge::Merge;
use crate::node::{self, Kind};
use crate::options::MioOptions;
use crate::skiplist::{Entry, Source};
use crate::space::{Debt, Footprint, Pair, PairShape, Sizes};
use crate::table::{Shared, TAG_TABLE, TAG_WAL, Table, TableShape};
use crate::version::{MemTable, Version};
use crate::wal::{self, LogKey, LogWriter};
use crate::zerocopy::{AroundMove, MovePause, newest_in, read_level, read_paused, read_unmoved};

/// Root word holding [`ROOT_MAGIC`] once the store is formatted.
pub const ROOT_FORMATTED: usize = 0;
/// Root word holding the offset of the current directory object.
pub const ROOT_DIR: usize = 1;
/// `"MIODB\0\0\x01"`.
pub const ROOT_MAGIC: u64 = u64::from_le_bytes(*b"MIODB\0\0\x01");

/// Lock-free tries of a get on one buffer level before it reads under the level locks.
const OPTIMISTIC_TRIES: usize = 2;

/// The longest a write waits for the previous MemTable's flush (`admit`): a flush needs
/// no pool space, so only a starved machine makes it this slow.
const FLUSH_WAIT_CAP: Duration = Duration::from_secs(60);

/// How long a writer spins and yields for the writer lock before it sleeps on it.
const WRITER_LOCK_PATIENCE: Duration = Duration::from_millis(1);

/// The longest a put sleeps before it is admitted when the room is low (`throttle`).
const MAX_THROTTLE: Duration = Duration::from_micros(500);

thread_local! {
    /// This writer thread's current burst ([`Inner::give_way`]).
    static WRITER_BURST: std::cell::Cell<Option<Bursts>> = const { std::cell::Cell::new(None) };
}

/// The writer's state (under `Inner::writer`).
pub(crate) struct WriterState {
    pub mem: Arc<MemTable>,
    pub log: LogWriter,
    pub next_seq: u64,
    /// Bytes of debt puts may still add before the room is measured again (`space.rs`).
    pub budget: u64,
}

/// What a write asks of the pool (`space.rs`): a put adds debt and may switch MemTables
/// only while the spare pair stays held; a delete (or `flush`) adds none and may take the
/// spare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Need {
    Put,
    Delete,
}

/// The directory mirror (under `Inner::dir`).
pub(crate) struct DirState {
    pub cur: Directory,
    pub off: u64,
}

/// Everything the store and its threads share.
pub(crate) struct Inner {
    pub shared: Arc<Shared>,
    /// `mio:flash`: the flash repository (`flash.rs`); `None` when the repository is the
    /// pmem skiplist.
    pub flash: Option<FlashRepo>,
    pub opts: MioOptions,
    pub limits: Limits,
    pub shape: TableShape,
    /// Allocation sizes for the room rule (`space.rs`).
    pub sizes: Sizes,
    /// The spare pair (`space.rs`); `None` while a delete's MemTable uses it.
    pub spare: Mutex<Option<Pair>>,
    /// The DRAM block of the last MemTable whose flush is done, for the next MemTable.
    pub arenas: ArenaRecycler,
    /// Debt the lazy copy in flight has paid already (its table is still listed); reset
    /// under the version lock when the table leaves the version.
    pub lazy_done: Mutex<Debt>,
    /// Bumped by every step of background work (a waiting writer's sign of progress).
    pub progress: AtomicU64,
    /// Bytes of the current directory object (the room's slack).
    pub dir_len: AtomicU64,
    /// The room the last time it was measured (the compactions' pressure).
    pub last_room: AtomicI64,
    pub version: RwLock<Arc<Version>>,
    /// Held by whoever changes the repository's structure: a lazy copy step or a
    /// defragmentation step (`defrag.rs`).
    pub repository: Mutex<()>,
    /// Slab chunks a defragmentation step found holding an object that is not a
    /// repository node (not picked again until the next lazy copy ends).
    pub defrag_skip: Mutex<std::collections::HashSet<u64>>,
    /// One per buffer level: a zero-copy node move holds its level's exclusively, readers
    /// hold all of them shared (`zerocopy.rs`).
    pub level_locks: Vec<RwLock<()>>,
    /// Readers whose lock-free read raced a node move pause the merges while they retry
    /// (`zerocopy.rs`).
    pub move_pause: MovePause,
    /// Held exclusively while a write batch's operations go into the MemTable, shared by
    /// `multi_get`, which therefore sees none or all of each batch (`FORMAT.md` § Write
    /// batches). Taken after `writer`; never held while waiting for anything else.
    pub batch_gate: RwLock<()>,
    pub writer: Mutex<WriterState>,
    pub dir: Mutex<DirState>,
    /// Bumped and notified on every change background threads or stalled writers wait on.
    pub signal: Mutex<u64>,
    pub wake: Condvar,
    pub stop: AtomicBool,
    /// True from a MemTable switch until that MemTable's flush is published (writers give
    /// way to the flush meanwhile: [`Inner::give_way`]).
    pub imm_pending: AtomicBool,
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
        self.progress.fetch_add(1, Ordering::AcqRel);
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
        self.dir_len.store(bytes.len() as u64, Ordering::Release);
        self.shared.counters.dir_publishes.incr();
        if old != 0 {
            self.shared.alloc.free(old)?;
        }
        Ok(())
    }

    /// The room (`space.rs`): whole free chunks − debt − slack, in bytes (negative when the
    /// store owes more than it has). The debt is read before the free chunks: a lazy copy
    /// allocates before it counts what it paid, so the two reads can only err low.
    pub fn room(&self) -> i128 {
        // mio:flash: the lazy copy writes to flash and only frees pmem; nothing is owed.
        let debt = if self.flash.is_some() {
            Debt::default()
        } else {
            let v = self.version.read();
            let mut d = v.debt();
            d.pay(&self.lazy_done.lock());
            d
        };
        let sz = &self.sizes;
        let free = sz.free(&self.shared.alloc);
        let slack = sz.slack(self.dir_len.load(Ordering::Acquire)) / sz.chunk;
        let need = sz.chunks_for(&debt, &free) + slack;
        let room = (i128::from(free.chunks) - i128::from(need)) * i128::from(sz.chunk);
        self.last_room
            .store(i64::try_from(room).unwrap_or(i64::MIN), Ordering::Release);
        room
    }

    /// The room below which puts slow down: an eighth of the pool's chunks.
    pub fn soft_room(&self) -> u64 {
        self.sizes.pool / 8
    }

    /// Writes slow before they stall (issue 18 item 9, "writes slow, then fail"): while
    /// the room last measured is under [`Inner::soft_room`] and background work can give
    /// room back, a put first sleeps, without any lock, up to [`MAX_THROTTLE`] as the
    /// room goes to zero. On few cores the writers would otherwise take the CPU the
    /// flushes and compactions need to drain the buffer, and writes would stall, then be
    /// refused, on a pool several times the data's size.
    pub(crate) fn throttle(&self) {
        let room = self.last_room.load(Ordering::Acquire).max(0) as u64;
        let soft = self.soft_room();
        if room >= soft || !self.draining() {
            return;
        }
        let delay = MAX_THROTTLE.mul_f64(1.0 - room as f64 / soft as f64);
        std::thread::sleep(delay);
        self.shared
            .counters
            .throttle_micros
            .add(delay.as_micros() as u64);
    }

    /// What puts may add to the debt now: the room, less the spare pair when it is not
    /// held, and at most a quarter of the soft room or `want` (the debt of the write
    /// asking), whichever is more (so that the room is measured again, and
    /// [`Inner::throttle`] sees it, before it can fall far).
    pub fn put_budget(&self, want: u64) -> u64 {
        let spare = match *self.spare.lock() {
            Some(_) => 0,
            None => self.sizes.shape_bytes(self.sizes.spare_shape()),
        };
        let pmem = u64::try_from(self.room() - i128::from(spare))
            .unwrap_or(0)
            .min((self.soft_room() / 4).max(want));
        match self.flash_room() {
            Some(flash) => pmem.min(flash),
            None => pmem,
        }
    }

    /// `mio:flash`: the flash bytes puts may still take (`flash.rs` § Space): free flash
    /// less what the buffer will write out (every MemTable and buffer table) and less the
    /// headroom of the largest compaction, so that the buffer can always drain to flash
    /// (deletes then always find a MemTable) and compactions can always run (deletes then
    /// give flash back). `None` without a flash repository.
    pub fn flash_room(&self) -> Option<u64> {
        let repo = self.flash.as_ref()?;
        let v = self.version();
        let mut pending: u64 = v.buffer().iter().flatten().map(|t| t.bytes).sum();
        pending += v.mem.arena.used() as u64;
        if let Some(imm) = &v.imm {
            pending += imm.arena.used() as u64;
        }
        // What the buffer holds will take more bytes as tables (measured, `expansion`).
        let pending = u64::try_from(u128::from(pending) * u128::from(repo.expansion()) / 1024)
            .unwrap_or(u64::MAX);
        let headroom = crate::flash::compaction_headroom(&repo.shape);
        let free = repo.dev.capacity().saturating_sub(repo.dev.used());
        Some(free.saturating_sub(pending.saturating_add(headroom)))
    }

    /// Allocates a pair of this shape (log run, then flush target).
    fn alloc_pair(&self, (log, table): PairShape) -> Result<Pair> {
        let alloc = &self.shared.alloc;
        let l = alloc.alloc_chunks(TAG_WAL, log)?;
        match alloc.alloc_chunks(TAG_TABLE, table) {
            Ok(t) => Ok(Pair {
                log: Run {
                    off: l,
                    chunks: log,
                },
                table: Run {
                    off: t,
                    chunks: table,
                },
            }),
            Err(e) => {
                let _ = alloc.free_chunk(l);
                Err(e)
            }
        }
    }

    fn free_pair(&self, p: Pair) {
        let _ = self.shared.alloc.free_chunk(p.log.off);
        let _ = self.shared.alloc.free_chunk(p.table.off);
    }

    /// Allocates the spare pair again if it is not held and the room allows it.
    pub fn restore_spare(&self) -> Result<()> {
        let mut spare = self.spare.lock();
        if spare.is_some() {
            return Ok(());
        }
        let shape = self.sizes.spare_shape();
        if self.room() < i128::from(self.sizes.shape_bytes(shape)) {
            return Ok(());
        }
        match self.alloc_pair(shape) {
            Ok(p) => *spare = Some(p),
            Err(Error::NoSpace { .. }) => {}
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// A pair for the MemTable that takes the write of `need` whose footprint is `fp`:
    /// a normal one if the room allows it, else a quarter, else the smallest that takes
    /// the write; for a delete, else the spare. `None`: no room now.
    fn take_pair(&self, need: Need, fp: Footprint) -> Result<Option<Pair>> {
        self.restore_spare()?;
        let sz = &self.sizes;
        let room = match need {
            Need::Put => self.room(),
            Need::Delete => self.room() + i128::from(sz.delete_margin()),
        };
        let (keep, cost) = match need {
            Need::Put => {
                let keep = match *self.spare.lock() {
                    Some(_) => 0,
                    None => sz.shape_bytes(sz.spare_shape()),
                };
                (keep, fp.cost)
            }
            Need::Delete => (0, 0),
        };
        let shapes = [sz.normal_shape(fp), sz.quarter_shape(fp), sz.min_shape(fp)];
        for shape in shapes {
            let want = i128::from(sz.shape_bytes(shape) + keep + cost);
            if room < want {
                continue;
            }
            match self.alloc_pair(shape) {
                Ok(p) => return Ok(Some(p)),
                Err(Error::NoSpace { .. }) => continue,
                Err(e) => return Err(e),
            }
        }
        if need == Need::Delete {
            let (l, t) = sz.min_shape(fp);
            let mut spare = self.spare.lock();
            if spare.is_some_and(|p| p.log.chunks >= l && p.table.chunks >= t) {
                return Ok(spare.take());
            }
        }
        Ok(None)
    }

    /// A new MemTable over `pair`, its log listed in the directory before it takes a
    /// write. The pair is freed if the publish fails.
    pub fn new_memtable(&self, pair: Pair) -> Result<(Arc<MemTable>, LogWriter)> {
        let cs = self.shared.alloc.chunk_size();
        let meta = {
            let mut st = self.dir.lock();
            let mut d = st.cur.clone();
            let id = d.next_id;
            d.next_id += 1;
            st.cur.next_id = d.next_id;
            let meta = LogMeta {
                id,
                run: pair.log,
                nonce: wal::new_nonce(id),
            };
            d.logs.push(meta);
            if let Err(e) = self.publish(&mut st, d) {
                self.free_pair(pair);
                return Err(e);
            }
            meta
        };
        let id = meta.id;
        let arena = Arena::recycled(
            (pair.table.chunks * cs) as usize,
            id.wrapping_mul(0x9e37_79b9_7f4a_7c15),
            &self.arenas,
        );
        let mem = Arc::new(MemTable::new(arena, meta, Some(pair.table)));
        let log = LogWriter {
            key: LogKey::of(&meta),
            off: pair.log.off,
            cap: pair.log.chunks * cs,
            tail: 0,
        };
        Ok((mem, log))
    }

    /// The first MemTable of an open: as a delete's switch would get it, or, when not
    /// even the spare's room is left, the smallest pair at all (the open must not fail:
    /// recovery has just freed the pairs of the MemTables it replayed).
    pub fn first_memtable(&self) -> Result<(Arc<MemTable>, LogWriter)> {
        let sz = &self.sizes;
        let pair = match self.take_pair(Need::Delete, sz.one(0, 0, false))? {
            Some(p) => p,
            None => self.alloc_pair(sz.min_shape(sz.one(sz.max_key, 0, false)))?,
        };
        self.new_memtable(pair)
    }

    /// Makes the MemTable immutable and starts a new one over a pair taken for `need`;
    /// returns false (nothing changed) when there is no room for a pair now. The caller
    /// checked that no flush is pending.
    fn switch_memtable(&self, w: &mut WriterState, need: Need, fp: Footprint) -> Result<bool> {
        let Some(pair) = self.take_pair(need, fp)? else {
            return Ok(false);
        };
        let (mem, log) = match self.new_memtable(pair) {
            Ok(x) => x,
            Err(Error::NoSpace { .. }) => return Ok(false),
            Err(e) => return Err(e),
        };
        {
            let mut v = self.version.write();
            let mut nv = (**v).clone();
            nv.imm = Some(std::mem::replace(&mut nv.mem, mem.clone()));
            *v = Arc::new(nv);
            self.imm_pending.store(true, Ordering::Release);
        }
        w.mem = mem;
        w.log = log;
        w.budget = self.put_budget(match need {
            Need::Put => fp.cost,
            Need::Delete => 0,
        });
        self.notify();
        Ok(true)
    }

    /// True while background work can still give room back: a flush pending, tables
    /// above the repository, or a sparse repository slab to evacuate (`defrag.rs`).
    fn draining(&self) -> bool {
        {
            let v = self.version.read();
            if v.imm.is_some() || v.buffer().iter().any(|l| !l.is_empty()) {
                return true;
            }
        }
        self.defrag_victim().is_some()
    }

    /// Wakes the background threads without counting as progress (a writer waiting for
    /// room that only a defragmentation step can give).
    fn nudge(&self) {
        let mut g = self.signal.lock();
        *g = g.wrapping_add(1);
        self.wake.notify_all();
    }

    /// Makes the MemTable take a write of `need` whose footprint is `fp` (one put or
    /// delete, or a whole batch: it goes into ONE MemTable and ONE log record), or, with
    /// `switch`, a new MemTable: waits
    /// (without the writer lock) for a pending flush and for room, only while the
    /// background makes progress (`space.rs`); then refuses with `NoSpace`.
    pub(crate) fn admit<'a>(
        &'a self,
        mut w: MutexGuard<'a, WriterState>,
        need: Need,
        fp: Footprint,
        mut switch: bool,
    ) -> Result<MutexGuard<'a, WriterState>> {
        let cost = match need {
            Need::Put => fp.cost,
            Need::Delete => 0,
        };
        let started = Instant::now();
        let cap = Duration::from_millis(self.opts.stall_timeout_ms);
        let quiet = Duration::from_millis(self.opts.progress_wait_ms);
        let mut seen = (self.progress.load(Ordering::Acquire), started);
        let mut stalled = false;
        loop {
            self.check_writable()?;
            if self.stop.load(Ordering::Acquire) {
                return Err(Error::Closed);
            }
            // Full: past the MemTable size (the flush target is rounded up to chunks), or
            // the next node could overflow the flush target, or the record the log.
            let full = switch
                || w.mem.arena.used() as u64 >= self.sizes.memtable
                || !w.mem.arena.fits_bytes(fp.nodes)
                || !w.log.fits(fp.log);
            let mut flush_wait = false;
            let admitted = if full {
                let pending = self.version.read().imm.is_some();
                flush_wait = pending;
                if pending {
                    // NOTE: a flush published since `pending` was read leaves the flag set
                    // until the next flush is published: merges then yield more than
                    // needed for one MemTable's time, nothing worse.
                    self.shared.flush_awaited.store(true, Ordering::Relaxed);
                }
                if !pending && self.switch_memtable(&mut w, need, fp)? {
                    switch = false;
                    // The new MemTable may still lack budget for the put: check again.
                    cost <= w.budget
                } else {
                    false
                }
            } else if cost > w.budget {
                w.budget = self.put_budget(cost);
                cost <= w.budget
            } else {
                true
            };
            if admitted {
                break;
            }
            // No room, and nothing above the repository that could give some back but the
            // MemTable's tombstones: send them down (a switch as for a delete, which may
            // take the spare pair), then wait for them like for any drain.
            if !self.draining()
                && w.mem.deletes.load(Ordering::Acquire) > 0
                && self.switch_memtable(&mut w, Need::Delete, self.sizes.one(0, 0, false))?
            {
                continue;
            }
            let now = Instant::now();
            let p = self.progress.load(Ordering::Acquire);
            if p != seen.0 {
                seen = (p, now);
            }
            let waited = now.duration_since(started);
            // A delete is not refused for a quiet spell: it gives room back, and a
            // refusal would leave the pool full. On a loaded machine one step of a
            // compaction (a lazy copy of a large entry, a merge's publish) can take longer
            // than `progress_wait_ms`; a delete waits for it up to `stall_timeout_ms`.
            let quiet_over = need == Need::Put && now.duration_since(seen.1) >= quiet;
            if flush_wait {
                // The previous MemTable's flush needs no pool space and always ends (a
                // failed one poisons the store, which `check_writable` reports): room
                // is not what is missing, so wait for it, however slow the machine, up
                // to a cap that is no hang.
                if waited >= FLUSH_WAIT_CAP {
                    let c = &self.shared.counters;
                    c.writes_refused.incr();
                    c.stall_micros.add(waited.as_micros() as u64);
                    return Err(Error::no_space(
                        Tier::Pmem,
                        format!(
                            "mio: the MemTable is full and the previous one's flush did not \
                             finish within {} s",
                            FLUSH_WAIT_CAP.as_secs()
                        ),
                    ));
                }
            } else if !self.draining() || quiet_over || waited >= cap {
                let c = &self.shared.counters;
                c.writes_refused.incr();
                c.stall_micros.add(waited.as_micros() as u64);
                if need == Need::Put && self.flash_room().is_some_and(|r| r < cost) {
                    return Err(Error::no_space(
                        Tier::Flash,
                        "mio:flash: no room for the write: flash is full (what is left is kept for writing the buffer out, for the compactions and for deletes)",
                    ));
                }
                return Err(Error::no_space(
                    Tier::Pmem,
                    match need {
                        Need::Put => {
                            "mio: no room for the write: pmem is full (what is left is kept for the compactions and for deletes)"
                        }
                        Need::Delete => {
                            "mio: no room for a new MemTable: the compactions could not free pmem in time"
                        }
                    },
                ));
            }
            if !stalled {
                self.nudge();
            }
            stalled = true;
            let sig = self.signal_now();
            MutexGuard::unlocked(&mut w, || self.wait(sig, Duration::from_millis(10)));
        }
        if stalled {
            self.shared
                .counters
                .stall_micros
                .add(started.elapsed().as_micros() as u64);
        }
        Ok(w)
    }

    /// While an immutable MemTable waits for its flush, a writer runs in [`Bursts`], each
    /// ended by a yield of the core (per thread). A
    /// writer takes no lock across its log record any more (P1), so writers no longer
    /// queue and sleep on one: on a machine with fewer cores than busy threads they would
    /// take the CPU the flush needs, and the next MemTable would fill before the flush
    /// ends (a 1M x 1 KiB load, 2 cores, 4 writers: 0.1-0.35 s of stalls, and the buffer
    /// left at 9 tables in L0 instead of 5). The yield costs nothing on idle cores.
    pub(crate) fn give_way(&self) {
        if !self.imm_pending.load(Ordering::Acquire) {
            return;
        }
        WRITER_BURST.with(|b| {
            let mut burst = b.get().unwrap_or_else(Bursts::start);
            burst.between();
            b.set(Some(burst));
        });
    }

    /// The writer lock for one put or delete, taken by spinning, then yielding the core,
    /// rather than sleeping at once.
    fn lock_writer(&self) -> MutexGuard<'_, WriterState> {
        let mut spins = 0u32;
        let mut since: Option<Instant> = None;
        loop {
            if let Some(g) = self.writer.try_lock() {
                return g;
            }
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                let start = *since.get_or_insert_with(Instant::now);
                if start.elapsed() >= WRITER_LOCK_PATIENCE {
                    return self.writer.lock();
                }
                std::thread::yield_now();
            }
            spins += 1;
        }
    }

    fn write(&self, kind: Kind, key: &[u8], value: &[u8]) -> Result<()> {
        self.check_writable()?;
        let need = match kind {
            Kind::Put => Need::Put,
            Kind::Delete => Need::Delete,
        };
        let fp = self.sizes.one(key.len(), value.len(), need == Need::Put);
        if need == Need::Put {
            self.throttle();
        }
        self.give_way();
        let mut w = self.admit(self.lock_writer(), need, fp, false)?;
        let seq = w.next_seq;
        if seq > node::MAX_SEQ {
            return Err(Error::invalid("mio: sequence numbers exhausted"));
        }
        // P1 step 1 (under the writer lock, DRAM only): the seq, the record's bytes in
        // the log and the node's room in the MemTable, taken together.
        let at = w.log.reserve(fp.log)?;
        w.next_seq += 1;
        self.shared.counters.wal_bytes.add(fp.log);
        let r = self.reserve(&mut w, (seq, kind), (key.len(), value.len()))?;
        let (mem, log) = (w.mem.clone(), w.log.key);
        drop(w);
        // P1 steps 2-3 outside the lock, beside the other writers': the record written
        // and persisted (a writer the scheduler takes off its core here delays only
        // itself), then the node written and linked (`arena.rs`, concurrent fills). The
        // write is acknowledged once its node is linked.
        self.shared.pool.crash_point("mio.put.after_reserve");
        if let Err(e) = wal::write_record(&self.shared, log, at, (seq, kind), key, value) {
            // The record may be torn and its node is not written: no flush may take this
            // MemTable's image, and nothing more may be acknowledged (the poison is set
            // before the node's room is given up, `flush.rs`).
            self.poison(&e);
            mem.arena.abandon(r);
            return Err(e);
        }
        mem.arena
            .fill(r, seq, kind, key, value)
            .inspect_err(|e| self.poison(e))
    }

    /// Inserts a logged write into the MemTable under the writer lock (a batch's
    /// operations, which `multi_get` must see all or none of).
    pub(crate) fn insert(
        &self,
        w: &mut WriterState,
        seq: u64,
        kind: Kind,
        key: &[u8],
        value: &[u8],
    ) -> Result<()> {
        let r = self.reserve(w, (seq, kind), (key.len(), value.len()))?;
        w.mem.arena.fill(r, seq, kind, key, value)
    }

    /// Takes a logged write's node room in the MemTable and counts it (P1 step 2, its
    /// first half; [`crate::arena::Arena::fill`] is the second).
    fn reserve(
        &self,
        w: &mut WriterState,
        (seq, kind): (u64, Kind),
        (key_len, value_len): (usize, usize),
    ) -> Result<Reservation> {
        let r = w.mem.arena.reserve(seq, key_len, value_len)?;
        let height = r.height();
        if kind == Kind::Delete {
            w.mem.deletes.fetch_add(1, Ordering::AcqRel);
        }
        let c = &self.shared.counters;
        if kind == Kind::Put {
            let cost = self.sizes.put_cost(key_len, value_len, height);
            w.mem.cost.lock().add(cost);
            w.budget = w.budget.saturating_sub(cost.1);
            c.ops.user_bytes_written.add((key_len + value_len) as u64);
        }
        Ok(r)
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let v = self.version();
        self.get_in(&v, key)
    }

    /// A get through the version `v` (which the caller cloned, perhaps long ago: every
    /// table it lists stays readable while it is held, `table.rs`).
    pub(crate) fn get_in(&self, v: &Version, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let c = &self.shared.counters.ops;
        // The MemTables are DRAM arenas no compaction relinks: no level lock for them (a
        // hot key's get takes no shared lock at all).
        for m in std::iter::once(&v.mem).chain(v.imm.iter()) {
            if let Some(e) = m.arena.get(key)? {
                c.reads_from_dram.incr();
                return Ok(self.found(e.value));
            }
        }
        let repo = v.levels.len() - 1;
        let h = crate::bloom::hash_key(key);
        for level in &v.levels[..repo] {
            if let Some(e) = self.get_in_level(level, key, h)? {
                c.reads_from_pmem.incr();
                return Ok(self.found(e.value));
            }
        }
        {
            // Lazy copies and defragmentation free repository nodes under its lock held
            // exclusively, once no reader holds it (`lazycopy.rs`).
            let _repository = self.level_locks[repo].read();
            for t in v.levels[repo].iter().rev() {
                if let Some(e) = t.get_hashed(key, h)? {
                    c.reads_from_pmem.incr();
                    return Ok(self.found(e.value));
                }
            }
        }
        // Flash tables never change: no level lock across their I/O.
        if let Some(repo) = &self.flash
            && let Some(e) = v.flash.get(key, &repo.cache)?
        {
            c.reads_from_flash.incr();
            return Ok(self.found(e.value));
        }
        Ok(None)
    }

    /// The newest version of `key` in one buffer level of a version, newest table first:
    /// read without locks (around a node move under way) and kept if no move began or
    /// ended in the level's tables meanwhile ([`read_level`]); else read again while the
    /// merges pause
    /// ([`read_paused`]); else under every buffer level's lock (the level's tables may
    /// sit one level further down by now).
    ///
    /// First, if every table's Bloom filter refuses the key (asked newest first), the
    /// key is absent without reading a node, and no move can spoil that: nodes only
    /// leave the newer table of a merging pair, so a key the newer table's filter refused
    /// is in neither table when the older one's refuses it too (filters only grow). Most
    /// gets of a level that does not hold their key thus never race its merge.
    /// `h`: the key's [`crate::bloom::hash_key`].
    fn get_in_level(&self, level: &[Arc<Table>], key: &[u8], h: u64) -> Result<Option<Entry>> {
        if level.iter().rev().all(|t| !t.admits_hash(h)) {
            let refused = level.len() as u64;
            self.shared.counters.bloom_negatives.add(refused);
            return Ok(None);
        }
        let search =
            |moving: AroundMove<'_>| newest_in(level.iter().rev().map(|t| &**t), key, h, &moving);
        let tables = level.iter().map(|t| &**t);
        let c = &self.shared.counters;
        if let Some(found) = read_level(
            tables.clone(),
            OPTIMISTIC_TRIES,
            &c.optimistic_retries,
            search,
        ) {
            return found;
        }
        if let Some(found) = self.read_paused(tables, true, &search) {
            return found;
        }
        c.locked_reads.incr();
        let _frozen: Vec<_> = self.level_locks.iter().map(|l| l.read()).collect();
        search(None)
    }

    /// [`read_paused`] with this store's pause and counters.
    fn read_paused<'t, T>(
        &self,
        tables: impl Iterator<Item = &'t Table> + Clone,
        around: bool,
        read: &dyn Fn(AroundMove<'t>) -> Result<T>,
    ) -> Option<Result<T>> {
        let c = &self.shared.counters;
        let started = std::time::Instant::now();
        let found = read_paused(
            &self.move_pause,
            tables,
            &c.optimistic_retries,
            around,
            read,
        );
        if found.is_some() {
            c.paused_reads.incr();
        }
        if started.elapsed() >= std::time::Duration::from_millis(1) {
            c.slow_paused_reads.incr();
        }
        found
    }

    /// A number that grows with every put, delete, get answered and scan row: a merge
    /// compares two readings to see whether the foreground was busy in between.
    pub(crate) fn foreground_ops(&self) -> u64 {
        let o = &self.shared.counters.ops;
        o.user_bytes_written.get()
            + o.user_bytes_read.get()
            + o.reads_from_dram.get()
            + o.reads_from_pmem.get()
    }

    fn found(&self, v: Option<Vec<u8>>) -> Option<Vec<u8>> {
        if let Some(v) = &v {
            self.shared.counters.ops.user_bytes_read.add(v.len() as u64);
        }
        v
    }

    /// A scan: read without the buffer levels' locks and kept if no node moved into or
    /// out of a buffer table meanwhile (as a get's level, `zerocopy.rs`), else read again
    /// while the merges pause, else under every level's lock. The repository's lock is held shared throughout (its
    /// nodes are freed under it).
    fn scan(&self, start: &[u8], limit: usize) -> Result<Vec<KvPair>> {
        let v = self.version();
        let repo = v.levels.len() - 1;
        let tables = v.levels[..repo].iter().flatten().map(|t| &**t);
        let c = &self.shared.counters;
        let read_once = || {
            let _repository = self.level_locks[repo].read();
            self.scan_in(&v, start, limit)
        };
        // A scan reads every buffer table for tens of microseconds, so while a merge moves
        // nodes its lock-free try nearly always races a move and is thrown away (YCSB E,
        // 1M records: 17,098 of 95,196 scans, a fifth of the phase's CPU): while a table
        // of its version is merging, it pauses the merges from the start.
        let merging = v.levels[..repo].iter().flatten().any(|t| t.merge.is_some());
        let tries = usize::from(!merging);
        let read = read_unmoved(tables.clone(), tries, &c.optimistic_retries, read_once)
            .or_else(|| self.read_paused(tables, false, &|_| read_once()));
        if let Some(read) = read {
            return self.scanned(read);
        }
        c.locked_reads.incr();
        let _frozen: Vec<_> = self.level_locks.iter().map(|l| l.read()).collect();
        self.scanned(self.scan_in(&v, start, limit))
    }

    /// Counts what a scan returns.
    fn scanned(&self, read: Result<Vec<KvPair>>) -> Result<Vec<KvPair>> {
        if let Ok(out) = &read {
            let bytes: usize = out.iter().map(|(_, v)| v.len()).sum();
            self.shared.counters.ops.user_bytes_read.add(bytes as u64);
        }
        read
    }

    /// The first `limit` live keys at or after `start` in the version `v` (the caller
    /// holds what keeps the tables still).
    fn scan_in(&self, v: &Version, start: &[u8], limit: usize) -> Result<Vec<KvPair>> {
        let pools: Vec<_> = v
            .levels
            .iter()
            .flatten()
            .map(|t| (t.source(), t.meta.head, t.seek_start(start)))
            .collect();
        let mut lists: Vec<(&dyn Source, u64, Option<u64>)> = vec![(&v.mem.arena, 0, None)];
        if let Some(imm) = &v.imm {
            lists.push((&imm.arena, 0, None));
        }
        for (s, head, from) in &pools {
            lists.push((s as &dyn Source, *head, *from));
        }
        let flash = match &self.flash {
            Some(repo) => v.flash.streams(start, &repo.cache, limit),
            None => Vec::new(),
        };
        let mut m = Merge::with_flash(&lists, flash, start)?;
        let mut out = Vec::new();
        while out.len() < limit {
            let Some(e) = m.next_entry()? else { break };
            if let Some(val) = e.value {
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

    fn write_batch(&self, batch: &WriteBatch) -> Result<()> {
        self.check_open()?;
        batch.check(&self.inner.limits)?;
        if batch.is_empty() {
            return Ok(());
        }
        self.inner.write_batch(batch)
    }

    fn atomic_batches(&self) -> bool {
        true
    }

    fn multi_get(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        self.check_open()?;
        for k in keys {
            self.inner.limits.check_key(k)?;
        }
        self.inner.multi_get(keys)
    }

    /// Flushes the MemTable to a PMTable now (its writes were durable already, in the log)
    /// and waits for the flush.
    fn flush(&self) -> Result<()> {
        self.check_open()?;
        self.inner.check_writable()?;
        {
            let w = self.inner.writer.lock();
            if w.mem.arena.entries() > 0 {
                let fp = self.inner.sizes.one(0, 0, false);
                drop(self.inner.admit(w, Need::Delete, fp, true)?);
            }
        }
        // A flush needs no pool space and always ends (or poisons the store).
        let until = Instant::now() + FLUSH_WAIT_CAP;
        while self.inner.version().imm.is_some() {
            self.inner.check_writable()?;
            if Instant::now() >= until {
                return Err(Error::no_space(
                    Tier::Pmem,
                    format!(
                        "mio: the flush did not finish within {} s",
                        FLUSH_WAIT_CAP.as_secs()
                    ),
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
        let spec: EngineSpec =
            "mio@memtable=4KiB,levels=3,stall_timeout_ms=60000,progress_wait_ms=60000"
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
