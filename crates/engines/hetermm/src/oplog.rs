//! The operation log (HeterMM §5.3): durability for the records that are still in DRAM.
//!
//! Log blocks (runs of 2^m bytes from the allocator, zeroed, then published in the block
//! directory with a sequence number) are cut into pages of 2^k bytes. Each thread appends to its own
//! page (Algorithm 2: a page is handed to a thread, which then appends without contention),
//! writing every entry whole and persisting it once — its checksum covers its ts, so a torn
//! entry is never replayed (`format::log`; option `two_step_write` writes it in the paper's
//! two steps instead: data with ts = 0, persist; ts, persist). A put prepares its entry
//! under the index's lock ([`LogTicket::prepare`]) and writes it after ([`PreparedEntry::write`]); persists of
//! concurrent writers are grouped (`groupsync.rs`). Each block keeps `max_address`, the highest
//! logical address its entries cover.
//!
//! **Reclamation** (§5.3.1): the oldest block is reclaimed once every page of it has been
//! handed out, no thread still appends to it (pages of idle threads are taken away — the
//! alarm), and `off_DRAM` has passed its `max_address`: everything it protects is in the
//! persisted region. **Compression** of the oldest block (when updates stay in the
//! mutable region, off_DRAM does not move and the log grows) copies only the entries that
//! may still be the newest durable version of their record and retires the block; the
//! policy and the copy are in `flush.rs`, which can see the DRAM records.
//!
//! Thread safety: `Send + Sync`. The block list is a mutex taken when a page or a block
//! is handed out, reclaimed or compressed; each thread's page is a mutex of its own, taken
//! by its owner on append and by the reclaimer when it freezes a block.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;
use tierkv_core::{Counter, Error, Result};

use crate::format::HEADER_LEN;
use crate::format::batch;
use crate::format::dir::{DirEntry, MAX_LOG_SEQ};
use crate::format::log::{self, EntryKind, LogHeader, Place};
use crate::geometry::Geometry;
use crate::groupsync::GroupSync;
use crate::nvm::Nvm;
use crate::threads::MAX_THREADS;

/// One log block.
#[derive(Debug)]
pub struct LogBlock {
    /// Its sequence number.
    pub seq: u64,
    /// Offset of its run.
    pub off: u64,
    /// The highest logical address its entries cover.
    pub max_address: AtomicU64,
    /// Global number of its first page.
    first_page: u64,
}

#[derive(Debug, Default)]
struct ThreadLog {
    block: Option<Arc<LogBlock>>,
    /// Global log page number, and the next free offset in it.
    page: u64,
    next: u64,
    /// The last entry written, while the write that made it may still be retracted.
    unsettled: Option<Unsettled>,
    /// The buffer the thread's entries are encoded in, kept from entry to entry.
    buf: Vec<u8>,
}

#[derive(Debug, Default)]
struct LogState {
    blocks: VecDeque<Arc<LogBlock>>,
    next_page: u64,
    next_seq: u64,
    /// A run allocated ahead of need.
    spare: Option<u64>,
}

/// Log counters.
#[derive(Debug, Default)]
pub struct LogCounters {
    /// Bytes of entries written.
    pub bytes: Counter,
    /// Entries written.
    pub entries: Counter,
    /// Blocks reclaimed.
    pub reclaimed: Counter,
    /// Blocks compressed.
    pub compressed: Counter,
    /// Entries copied by compression.
    pub copied: Counter,
    /// Entries withdrawn by writes that lost a race and then failed.
    pub retracted: Counter,
    /// Write batches that spanned log pages (parts and a commit).
    pub spanning_batches: Counter,
    /// Batch parts written by them.
    pub batch_parts: Counter,
}

/// The operation log.
pub struct OpLog {
    geo: Geometry,
    state: Mutex<LogState>,
    threads: Box<[Mutex<ThreadLog>]>,
    /// Group commit of the entries' persists.
    pub sync: GroupSync,
    /// `state.blocks.len()`, stored after every change under the state's lock, so that a
    /// writer checks the log's size without taking that lock ([`OpLog::block_count`]).
    live_blocks: AtomicUsize,
    /// The paper's two-step write (§5.3.2) instead of one persist per entry.
    two_step: bool,
    /// Counters.
    pub counters: LogCounters,
}

impl OpLog {
    /// An empty log whose blocks get sequence numbers from `next_seq` on.
    pub fn new(geo: Geometry, next_seq: u64) -> OpLog {
        OpLog {
            geo,
            state: Mutex::new(LogState {
                next_seq,
                ..LogState::default()
            }),
            threads: (0..MAX_THREADS)
                .map(|_| Mutex::new(ThreadLog::default()))
                .collect(),
            sync: GroupSync::default(),
            live_blocks: AtomicUsize::new(0),
            two_step: false,
            counters: LogCounters::default(),
        }
    }

    /// The log writing each entry in the paper's two steps (`on`; option `two_step_write`)
    /// or with one persist (`format::log` § Commit).
    pub fn two_step(mut self, on: bool) -> OpLog {
        self.two_step = on;
        self
    }

    /// The log with its persists grouped (`on`) or each writer's on its own.
    pub fn grouped(mut self, on: bool) -> OpLog {
        self.sync = GroupSync::new(on);
        self
    }

    fn pages_per_block(&self) -> u64 {
        self.geo.pages_per_block()
    }

    /// The largest key + value an entry can carry.
    pub fn max_payload(&self) -> u64 {
        self.geo.page_size() - HEADER_LEN as u64 - log::ENTRY_HEADER_LEN
    }

    /// Appends a committed entry for the thread of slot `slot`.
    pub fn append(&self, nvm: &Nvm, slot: usize, e: &NewEntry<'_>) -> Result<()> {
        self.begin(nvm, slot, e.key.len(), e.value.len())?
            .commit(nvm, e)
    }

    /// Takes the thread's log page, with room for an entry of this key and value length,
    /// for a [`LogTicket::commit`] that then cannot fail for lack of space: an in-place
    /// update takes the ticket *before* it changes the record, so a failed append never
    /// leaves a changed value behind. The page stays the thread's while the ticket lives
    /// (`frozen_oldest` waits for it). Never hold it while waiting for the flusher.
    pub fn begin(
        &self,
        nvm: &Nvm,
        slot: usize,
        key_len: usize,
        value_len: usize,
    ) -> Result<LogTicket<'_>> {
        let len = log::entry_len(key_len as u64, value_len as u64);
        if len > self.max_payload() + log::ENTRY_HEADER_LEN {
            return Err(Error::invalid(format!(
                "log entry of {len} bytes does not fit a log page"
            )));
        }
        let mut t = self.threads[slot % MAX_THREADS].lock();
        if t.block.is_none() || t.next + len > self.geo.page_size() {
            self.next_page(nvm, &mut t, true)?;
        }
        Ok(LogTicket { log: self, t, len })
    }

    /// Takes the log pages for a write batch that spans pages (ours, issue 24; FORMAT.md §
    /// Batches that span pages): the rest of the thread's page and as many fresh pages as
    /// [`pack_parts`] needs for batch parts holding operations of `op_lens` payload bytes
    /// (in order) and the commit after them. The pages stay the thread's while the ticket
    /// lives (`frozen_oldest` waits for it), so the commit cannot fail for want of space.
    /// On an error the pages taken so far are left empty (a reader stops at once). With
    /// `or_reserve` (a batch of deletes only, like a delete) a new log block may come from
    /// the pmem reserve; otherwise the batch gets `NoSpace` when the allocator has none, so
    /// that a batch never takes the log blocks the reserve keeps for deletes.
    pub fn begin_span(
        &self,
        nvm: &Nvm,
        slot: usize,
        op_lens: &[u64],
        or_reserve: bool,
    ) -> Result<SpanTicket<'_>> {
        let mut t = self.threads[slot % MAX_THREADS].lock();
        let mut pages = Vec::new();
        if let Some(block) = &t.block {
            pages.push(HeldPage {
                block: block.clone(),
                page: t.page,
                start: t.next,
            });
        }
        let page_size = self.geo.page_size();
        let max_entry = self.max_payload() + log::ENTRY_HEADER_LEN;
        let empty = log::ENTRY_HEADER_LEN + batch::PAYLOAD_HEADER_LEN;
        if op_lens.iter().any(|l| empty + l > max_entry) {
            return Err(Error::invalid(
                "hetermm batch: an operation larger than a log page",
            ));
        }
        loop {
            let rooms: Vec<u64> = pages.iter().map(|p| page_size - p.start).collect();
            if pack_parts(&rooms, op_lens, max_entry).is_some() {
                return Ok(SpanTicket {
                    log: self,
                    t,
                    pages,
                });
            }
            // Every fresh page takes at least one operation (checked above).
            if pages.len() > op_lens.len() + 2 {
                return Err(Error::invalid("hetermm batch: its log pages do not add up"));
            }
            self.next_page(nvm, &mut t, or_reserve)?;
            let block = t
                .block
                .clone()
                .ok_or_else(|| Error::invalid("hetermm log: a fresh log page without its block"))?;
            pages.push(HeldPage {
                block,
                page: t.page,
                start: t.next,
            });
        }
    }

    /// Makes sure the thread of slot `slot` can append an entry of this key and value
    /// length without starting a page (so the append, under an index lock, does not
    /// allocate pmem).
    pub fn ensure_room(
        &self,
        nvm: &Nvm,
        slot: usize,
        key_len: usize,
        value_len: usize,
    ) -> Result<()> {
        self.begin(nvm, slot, key_len, value_len).map(drop)
    }

    /// The thread's last entry is final: its write was installed (or the thread moves on).
    pub fn settle(&self, slot: usize) {
        self.threads[slot % MAX_THREADS].lock().unsettled = None;
    }

    /// Withdraws the thread's last entry, written by an attempt that lost its race (a
    /// lock-free index retries with the new current version; `mem/access.rs`): its
    /// timestamp word is zeroed and persisted, which a reader takes for the end of the
    /// page, and the thread leaves the page, so nothing is ever written after it. The entry
    /// is still the last of its page and its block is still live: a block with an
    /// unsettled entry is not frozen, so neither compressed nor retired.
    pub fn retract(&self, nvm: &Nvm, slot: usize) -> Result<()> {
        let mut t = self.threads[slot % MAX_THREADS].lock();
        let Some(u) = t.unsettled.take() else {
            return Ok(());
        };
        nvm.pool.store_u64(u.off, 0)?;
        nvm.pool.persist(u.off, 8)?;
        if t.block.as_ref().is_some_and(|b| Arc::ptr_eq(b, &u.block)) {
            t.block = None;
        }
        self.counters.retracted.incr();
        Ok(())
    }

    /// Hands the thread a fresh log page (and starts a new block when needed, from the pmem
    /// reserve too with `or_reserve`).
    fn next_page(&self, nvm: &Nvm, t: &mut ThreadLog, or_reserve: bool) -> Result<()> {
        let mut st = self.state.lock();
        let ppb = self.pages_per_block();
        let lp = st.next_page;
        let needs_block = st.blocks.back().is_none_or(|b| lp >= b.first_page + ppb);
        if needs_block {
            let first_page = lp.div_ceil(ppb) * ppb;
            let block = self.start_block(nvm, &mut st, first_page, or_reserve)?;
            st.next_page = block.first_page;
            st.blocks.push_back(block);
            self.live_blocks.store(st.blocks.len(), Ordering::Release);
        }
        let lp = st.next_page;
        st.next_page += 1;
        let block = st.blocks.back().cloned();
        drop(st);
        t.block = block;
        t.page = lp;
        t.next = if lp.is_multiple_of(ppb) {
            HEADER_LEN as u64
        } else {
            0
        };
        Ok(())
    }

    fn start_block(
        &self,
        nvm: &Nvm,
        st: &mut LogState,
        first_page: u64,
        or_reserve: bool,
    ) -> Result<Arc<LogBlock>> {
        if st.next_seq > MAX_LOG_SEQ {
            return Err(Error::no_space(
                tierkv_core::Tier::Pmem,
                "hetermm log sequence numbers are used up",
            ));
        }
        let off = match st.spare.take() {
            Some(off) => off,
            None => self.zeroed_run(nvm, or_reserve)?,
        };
        let seq = st.next_seq;
        let header = LogHeader {
            page_bits: self.geo.page_bits as u8,
            block_bits: self.geo.block_bits as u8,
            seq,
            version: log::VERSION,
        };
        let made = nvm
            .pool
            .write_persist(off, &header.encode())
            .and_then(|()| nvm.set_dir_entry(off, DirEntry::Log { seq }));
        if let Err(e) = made {
            return Err(nvm.free_after(off, e));
        }
        st.next_seq += 1;
        Ok(Arc::new(LogBlock {
            seq,
            off,
            max_address: AtomicU64::new(0),
            first_page,
        }))
    }

    /// Allocates a run ahead of need (the flusher calls this while idle).
    pub fn prepare(&self, nvm: &Nvm) -> Result<()> {
        if self.state.lock().spare.is_some() {
            return Ok(());
        }
        let off = self.zeroed_run(nvm, false)?;
        let mut st = self.state.lock();
        match st.spare {
            None => st.spare = Some(off),
            Some(_) => nvm.free_run(off)?,
        }
        Ok(())
    }

    /// A run for a log block, zeroed and persisted; with `or_reserve`, from the pmem
    /// reserve when the allocator has none (a block a write or delete needs now).
    ///
    /// IMPORTANT: until step 1 of an entry's write is persisted, a crash may keep any of its
    /// words as they were before it; zeroed pages make the timestamp word of an unfinished
    /// entry read 0 (not committed) and never bytes left by an earlier use of the chunks.
    fn zeroed_run(&self, nvm: &Nvm, or_reserve: bool) -> Result<u64> {
        let off = nvm.alloc_log_block(or_reserve)?;
        let len = self.geo.block_size() as usize;
        let zeroed = nvm
            .pool
            .fill(off, len, 0)
            .and_then(|()| nvm.pool.persist(off, len));
        if let Err(e) = zeroed {
            return Err(nvm.free_after(off, e));
        }
        Ok(off)
    }

    /// Live log blocks (read without the log's lock: every writer checks it).
    pub fn block_count(&self) -> usize {
        self.live_blocks.load(Ordering::Acquire)
    }

    /// The `max_address` of the oldest block, if there is one.
    pub fn oldest_max_address(&self) -> Option<u64> {
        let st = self.state.lock();
        st.blocks
            .front()
            .map(|b| b.max_address.load(Ordering::Acquire))
    }

    /// Hands out no more pages of the newest block (a forced flush is about to make all of
    /// it reclaimable); the next append starts a new block.
    pub fn close_current(&self) {
        let mut st = self.state.lock();
        let ppb = self.pages_per_block();
        if let Some(end) = st.blocks.back().map(|b| b.first_page + ppb) {
            st.next_page = st.next_page.max(end);
        }
    }

    /// The oldest block, frozen — every page handed out and none held by a thread — or
    /// `None` if the log has not moved past it yet.
    pub fn frozen_oldest(&self) -> Option<Arc<LogBlock>> {
        let st = self.state.lock();
        let front = st.blocks.front()?.clone();
        if st.next_page < front.first_page + self.pages_per_block() {
            return None;
        }
        drop(st);
        for t in self.threads.iter() {
            let mut t = t.lock();
            // A write whose entry may still be retracted keeps its block from freezing.
            if t.unsettled
                .as_ref()
                .is_some_and(|u| Arc::ptr_eq(&u.block, &front))
            {
                return None;
            }
            if t.block.as_ref().is_some_and(|b| Arc::ptr_eq(b, &front)) {
                // The alarm: an idle thread's page is taken away; the rest of it stays
                // unused (a reader stops at its first invalid entry).
                t.block = None;
            }
        }
        Some(front)
    }

    /// Retires the oldest block if it is `block`: unpublishes and frees it.
    pub fn retire(&self, nvm: &Nvm, block: &Arc<LogBlock>) -> Result<()> {
        let mut st = self.state.lock();
        if !st.blocks.front().is_some_and(|b| Arc::ptr_eq(b, block)) {
            return Ok(());
        }
        // IMPORTANT: unpublish first; a crash before the free leaves an unnamed run that
        // recovery frees.
        nvm.set_dir_entry(block.off, DirEntry::None)?;
        nvm.pool.crash_point("hetermm.log.unpublished");
        nvm.free_run(block.off)?;
        st.blocks.pop_front();
        self.live_blocks.store(st.blocks.len(), Ordering::Release);
        self.counters.reclaimed.incr();
        Ok(())
    }

    /// Reclaims every oldest block whose entries are all below `off_dram`; returns how many.
    pub fn reclaim(&self, nvm: &Nvm, off_dram: u64) -> Result<u64> {
        let mut n = 0;
        while let Some(front) = self.frozen_oldest() {
            if front.max_address.load(Ordering::Acquire) >= off_dram {
                break;
            }
            self.retire(nvm, &front)?;
            n += 1;
        }
        Ok(n)
    }

    /// The committed entries of `block`, with their bytes copied out.
    pub fn entries(&self, nvm: &Nvm, block: &LogBlock) -> Result<Vec<OwnedEntry>> {
        let bytes = nvm.pool.read(block.off, self.geo.block_size() as usize)?;
        let header = LogHeader::decode(bytes, block.off, block.seq, self.geo.block_bits)?;
        let mut out = Vec::new();
        log::walk(bytes, &header, |e| out.push(OwnedEntry::from(e)));
        Ok(out)
    }

    /// Releases the spare run (at close).
    pub fn release_spare(&self, nvm: &Nvm) -> Result<()> {
        if let Some(off) = self.state.lock().spare.take() {
            nvm.free_run(off)?;
        }
        Ok(())
    }
}

/// An entry to append.
#[derive(Clone, Copy, Debug)]
pub struct NewEntry<'a> {
    /// Its timestamp (the write's).
    pub ts: u64,
    /// Put or delete.
    pub kind: EntryKind,
    /// The key.
    pub key: &'a [u8],
    /// The value (empty for a delete).
    pub value: &'a [u8],
    /// The addresses it covers and names.
    pub at: Place,
}

/// A thread's log page, held with room for one entry ([`OpLog::begin`]).
pub struct LogTicket<'a> {
    log: &'a OpLog,
    t: parking_lot::MutexGuard<'a, ThreadLog>,
    len: u64,
}

impl<'a> LogTicket<'a> {
    /// Writes the entry ([`PreparedEntry::write`]). Fails only if the pool fails.
    pub fn commit(self, nvm: &Nvm, e: &NewEntry<'_>) -> Result<()> {
        self.prepare(e)?.write(nvm)
    }

    /// Places the entry in the ticket's page and encodes it, writing nothing yet: a put
    /// prepares its entry under the index's lock (its timestamp is taken there) and writes
    /// it with [`PreparedEntry::write`] once the lock is released (FORMAT.md § Writes).
    /// The page stays the thread's until then.
    pub fn prepare(mut self, e: &NewEntry<'_>) -> Result<PreparedEntry<'a>> {
        let len = log::entry_len(e.key.len() as u64, e.value.len() as u64);
        let block = match &self.t.block {
            Some(b) if len <= self.len => b.clone(),
            _ => {
                return Err(Error::invalid(
                    "a log entry larger than its ticket (or without a page)",
                ));
            }
        };
        let geo = self.log.geo;
        let off = block.off + ((self.t.page - block.first_page) << geo.page_bits) + self.t.next;
        let mut bytes = std::mem::take(&mut self.t.buf);
        log::encode_entry(&mut bytes, block.seq, e.ts, e.at, e.kind, e.key, e.value);
        Ok(PreparedEntry {
            log: self.log,
            t: self.t,
            block,
            off,
            len,
            ts: e.ts,
            kind: e.kind,
            address: e.at.address,
            bytes,
        })
    }
}

/// An entry placed in its thread's page and encoded, not yet written
/// ([`LogTicket::prepare`]); it holds the page.
pub struct PreparedEntry<'a> {
    log: &'a OpLog,
    t: parking_lot::MutexGuard<'a, ThreadLog>,
    block: Arc<LogBlock>,
    off: u64,
    len: u64,
    ts: u64,
    kind: EntryKind,
    address: u64,
    bytes: Vec<u8>,
}

impl PreparedEntry<'_> {
    /// The entry's timestamp.
    pub fn ts(&self) -> u64 {
        self.ts
    }

    /// Writes the entry whole and persists it (the persist commits it: `format::log` §
    /// Commit), or, with option `two_step_write`, in the paper's two steps — everything
    /// with ts = 0, persisted; then ts, persisted. Each persist is grouped with concurrent
    /// writers' (`GroupSync`). Fails only if the pool fails.
    pub fn write(mut self, nvm: &Nvm) -> Result<()> {
        let off = self.off;
        self.block
            .max_address
            .fetch_max(self.address, Ordering::AcqRel);
        let batch = self.kind == EntryKind::Batch;
        write_entry(
            nvm,
            Some(&self.log.sync),
            self.log.two_step,
            batch,
            off,
            &mut self.bytes,
        )?;
        let t = &mut *self.t;
        t.buf = std::mem::take(&mut self.bytes);
        t.next += self.len;
        t.unsettled = Some(Unsettled {
            block: self.block.clone(),
            off,
        });
        self.log.counters.bytes.add(self.len);
        self.log.counters.entries.incr();
        Ok(())
    }
}

/// Writes an encoded entry (`bytes`, its ts set) at `off` and commits it: one persist of
/// the whole entry, or (`two_step`) the paper's two steps — the entry with ts = 0,
/// persisted, then the ts, persisted. A batch's entry or commit reaches the named crash
/// point `hetermm.batch.entry_written` when its bytes are written but not yet committed
/// (FORMAT.md § Crash points).
/// `sync` groups the persists with concurrent writers' (`None`: the caller's own).
fn write_entry(
    nvm: &Nvm,
    sync: Option<&GroupSync>,
    two_step: bool,
    batch: bool,
    off: u64,
    bytes: &mut [u8],
) -> Result<()> {
    let persist = |off: u64, len: usize| match sync {
        Some(sync) => sync.persist(&nvm.pool, off, len),
        None => nvm.pool.persist(off, len),
    };
    if two_step {
        let ts: [u8; 8] = bytes
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| Error::invalid("a log entry shorter than its ts"))?;
        bytes[..8].fill(0);
        // IMPORTANT: step 1 — everything but the timestamp (which stays 0), persisted.
        nvm.pool.write(off, bytes)?;
        persist(off, bytes.len())?;
        bytes[..8].copy_from_slice(&ts);
        if batch {
            nvm.pool.crash_point("hetermm.batch.entry_written");
        }
        // IMPORTANT: step 2 — the timestamp commits the entry.
        nvm.pool.store_u64(off, u64::from_le_bytes(ts))?;
        persist(off, 8)
    } else {
        nvm.pool.write(off, bytes)?;
        if batch {
            // Written, not persisted: a crash image may hold any of its lines.
            nvm.pool.crash_point("hetermm.batch.entry_written");
        }
        // IMPORTANT: the one persist commits the entry (its checksum covers the ts).
        persist(off, bytes.len())
    }
}

/// A log page held for a batch that spans pages, from offset `start` to its end.
struct HeldPage {
    block: Arc<LogBlock>,
    page: u64,
    start: u64,
}

/// Where the parts of a batch that spans pages go ([`pack_parts`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartsLayout {
    /// Each part: the index of its page and how many operations (next in order) it holds.
    pub parts: Vec<(usize, usize)>,
    /// The page of the commit and its offset from the page's room start.
    pub commit: (usize, u64),
}

/// Packs operations of `op_lens` payload bytes, in order, into batch parts — at most one
/// per page, at the start of the page's room, each an entry of at most `max_entry` bytes
/// (so that log compression can copy it into any page) — and the commit after the last
/// part: into the first page with room, else the next (next fit). `rooms` are the bytes
/// each page offers. `None` if the pages do not suffice.
///
/// Next fit never needs more pages for a subsequence of the operations (its position
/// after each operation is never past the full sequence's): a batch whose deletes of
/// absent keys fall out at the commit still fits the pages its reservation planned.
pub fn pack_parts(rooms: &[u64], op_lens: &[u64], max_entry: u64) -> Option<PartsLayout> {
    let empty = log::ENTRY_HEADER_LEN + batch::PAYLOAD_HEADER_LEN;
    let mut parts = Vec::new();
    let (mut page, mut count, mut used) = (0usize, 0usize, empty);
    for &len in op_lens {
        loop {
            let cap = rooms.get(page)?.min(&max_entry);
            if used + len <= *cap {
                (count, used) = (count + 1, used + len);
                break;
            }
            if count > 0 {
                parts.push((page, count));
            }
            (page, count, used) = (page + 1, 0, empty);
        }
    }
    if count > 0 {
        parts.push((page, count));
    }
    let commit_len = log::entry_len(0, batch::COMMIT_LEN);
    let end = if count > 0 { used } else { 0 };
    let commit = if rooms.get(page)? - end >= commit_len {
        (page, end)
    } else if *rooms.get(page + 1)? >= commit_len {
        (page + 1, 0)
    } else {
        return None;
    };
    (!parts.is_empty()).then_some(PartsLayout { parts, commit })
}

/// A thread's log pages, held for the parts and the commit of a write batch
/// ([`OpLog::begin_span`]).
pub struct SpanTicket<'a> {
    log: &'a OpLog,
    t: parking_lot::MutexGuard<'a, ThreadLog>,
    pages: Vec<HeldPage>,
}

impl SpanTicket<'_> {
    /// Writes the batch's parts — each whole with its timestamp `ts`, persisted — and then
    /// its commit (`write_entry`). Every entry covers `covered`. Fails only if the pool fails (or `ops` needs more pages than were held).
    pub fn commit(
        mut self,
        nvm: &Nvm,
        ts: u64,
        covered: u64,
        ops: &[batch::BatchOp<'_>],
    ) -> Result<()> {
        let geo = self.log.geo;
        let page_size = geo.page_size();
        let max_entry = self.log.max_payload() + log::ENTRY_HEADER_LEN;
        let rooms: Vec<u64> = self.pages.iter().map(|p| page_size - p.start).collect();
        let lens: Vec<u64> = ops
            .iter()
            .map(|o| batch::op_len(o.key.len() as u64, o.value.len() as u64))
            .collect();
        let layout = pack_parts(&rooms, &lens, max_entry)
            .ok_or_else(|| Error::invalid("hetermm batch: more operations than its log pages"))?;
        let at = Place {
            address: covered,
            record: 0,
        };
        let pos = |i: usize, within: u64| -> Result<(Arc<LogBlock>, u64)> {
            let p = self
                .pages
                .get(i)
                .ok_or_else(|| Error::invalid("hetermm batch: a part past its log pages"))?;
            let off = p.block.off + ((p.page - p.block.first_page) << geo.page_bits) + p.start;
            Ok((p.block.clone(), off + within))
        };
        // A part or the commit: no key, this batch's ts and covered address.
        let batch_entry = |seq: u64, kind: EntryKind, value: &[u8]| {
            let mut bytes = Vec::new();
            log::encode_entry(&mut bytes, seq, ts, at, kind, &[], value);
            bytes
        };
        let mut rest = ops;
        let mut written = 0;
        for (n, &(page, count)) in layout.parts.iter().enumerate() {
            let (these, more) = rest.split_at(count.min(rest.len()));
            rest = more;
            let (block, off) = pos(page, 0)?;
            block.max_address.fetch_max(covered, Ordering::AcqRel);
            let value = batch::encode_part(these, n as u32);
            let bytes = batch_entry(block.seq, EntryKind::BatchPart, &value);
            // IMPORTANT: a part is written whole, timestamp included, and persisted before
            // the commit is started; without the commit it stands for nothing.
            nvm.pool.write(off, &bytes)?;
            nvm.pool.persist(off, bytes.len())?;
            nvm.pool.crash_point("hetermm.batch.part_written");
            written += bytes.len() as u64;
        }
        let (cpage, within) = layout.commit;
        let (block, off) = pos(cpage, within)?;
        block.max_address.fetch_max(covered, Ordering::AcqRel);
        let value = batch::encode_commit(layout.parts.len() as u32, ops.len() as u32);
        let mut bytes = batch_entry(block.seq, EntryKind::BatchCommit, &value);
        // IMPORTANT: the commit's persist commits the batch (after every part's).
        write_entry(nvm, None, self.log.two_step, true, off, &mut bytes)?;
        written += bytes.len() as u64;
        let held = self
            .pages
            .get(cpage)
            .ok_or_else(|| Error::invalid("hetermm batch: a commit past its log pages"))?;
        let t = &mut *self.t;
        t.block = Some(block.clone());
        t.page = held.page;
        t.next = held.start + within + bytes.len() as u64;
        t.unsettled = Some(Unsettled { block, off });
        self.log.counters.bytes.add(written);
        self.log.counters.entries.add(layout.parts.len() as u64 + 1);
        self.log.counters.spanning_batches.incr();
        self.log.counters.batch_parts.add(layout.parts.len() as u64);
        Ok(())
    }
}

/// The last entry a thread wrote, until its write is known to stand.
#[derive(Debug)]
struct Unsettled {
    block: Arc<LogBlock>,
    off: u64,
}

/// An entry copied out of pmem.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedEntry {
    /// Timestamp.
    pub ts: u64,
    /// Covered address.
    pub address: u64,
    /// The record's address.
    pub record: u64,
    /// Put or delete.
    pub kind: EntryKind,
    /// Key.
    pub key: Vec<u8>,
    /// Value.
    pub value: Vec<u8>,
}

impl From<log::Entry<'_>> for OwnedEntry {
    fn from(e: log::Entry<'_>) -> Self {
        OwnedEntry {
            ts: e.ts,
            address: e.address,
            record: e.record,
            kind: e.kind,
            key: e.key.to_vec(),
            value: e.value.to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tierkv_core::media::pmem::{DurabilityMode, EmulatedLatency, PmemConfig, PmemPool};

    /// An 8 MiB volatile pool formatted with blocks of 2^`block_bits` and 4 KiB pages.
    fn scratch_nvm(block_bits: u32) -> (tempfile::TempDir, Arc<PmemPool>, Nvm) {
        let dir = tempfile::tempdir().unwrap();
        let pool = PmemPool::create(&PmemConfig {
            path: dir.path().join("p"),
            size: 8 << 20,
            mode: DurabilityMode::Volatile,
            latency: EmulatedLatency::default(),
        })
        .unwrap();
        let nvm = Nvm::format(pool.clone(), block_bits, 12).unwrap();
        (dir, pool, nvm)
    }

    /// Next fit: parts fill pages in order, one per page, each at most `max_entry`; the
    /// commit goes after the last part or at the start of the next page; a page too small
    /// for the next operation is skipped; a subsequence never needs more pages.
    #[test]
    fn parts_pack_in_order_one_per_page_and_the_commit_follows() {
        let e = log::ENTRY_HEADER_LEN + batch::PAYLOAD_HEADER_LEN; // 48
        let commit = log::entry_len(0, batch::COMMIT_LEN); // 48
        let l = pack_parts(&[1000, 1000, 1000], &[400, 400, 400, 400], 1000).unwrap();
        assert_eq!(l.parts, vec![(0, 2), (1, 2)]);
        assert_eq!(l.commit, (1, e + 800));
        let l = pack_parts(&[100, 1000, 1000], &[400, 400], 1000).unwrap();
        assert_eq!(
            l.parts,
            vec![(1, 2)],
            "the first page is too small for an operation"
        );
        let l = pack_parts(&[1000, 850], &[400, 400, 400], 900).unwrap();
        assert_eq!(l.parts, vec![(0, 2), (1, 1)]);
        assert_eq!(
            l.commit,
            (1, e + 400),
            "capped by max_entry, the page's room is used"
        );
        let l = pack_parts(&[e + 800, 1000], &[400, 400], 1000).unwrap();
        assert_eq!(
            l.commit,
            (1, 0),
            "no room for the commit after the last part"
        );
        assert!(pack_parts(&[e + 800], &[400, 400], 1000).is_none());
        assert!(pack_parts(&[1000], &[400, 400, 400], 1000).is_none());
        assert!(
            pack_parts(&[1000], &[], 1000).is_none(),
            "no operation, no part"
        );
        assert!(commit <= 1000);
        // A subsequence (deletes of absent keys left out) fits the same pages.
        let rooms = [700, 1000, 1000, 1000];
        let ops = [300, 500, 200, 600, 100, 400, 300];
        let full = pack_parts(&rooms, &ops, 1000).unwrap();
        let last = |l: &PartsLayout| l.commit.0;
        for mask in 1u32..(1 << ops.len()) {
            let sub: Vec<u64> = (0..ops.len())
                .filter(|i| mask & (1 << i) != 0)
                .map(|i| ops[i])
                .collect();
            let l = pack_parts(&rooms, &sub, 1000).unwrap();
            assert!(last(&l) <= last(&full), "{sub:?}");
        }
    }

    /// A batch spanning pages, end to end on a pool: its parts and its commit, read back
    /// from the log block, carry the operations in order.
    #[test]
    fn a_span_ticket_writes_parts_then_the_commit() {
        let (_dir, _pool, nvm) = scratch_nvm(16);
        let geo = Geometry {
            page_bits: 12,
            block_bits: 16,
        };
        let log = OpLog::new(geo, 1);
        let value = vec![7u8; 1500];
        let keys: Vec<Vec<u8>> = (0..6).map(|i| format!("key{i}").into_bytes()).collect();
        let ops: Vec<batch::BatchOp<'_>> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| batch::BatchOp {
                ts: 10 + i as u64,
                record: 4096,
                kind: EntryKind::Put,
                key: k,
                value: &value,
            })
            .collect();
        let lens: Vec<u64> = ops
            .iter()
            .map(|o| batch::op_len(o.key.len() as u64, o.value.len() as u64))
            .collect();
        let ticket = log.begin_span(&nvm, 0, &lens, false).unwrap();
        ticket.commit(&nvm, 99, 8192, &ops).unwrap();
        let block = log.state.lock().blocks.front().unwrap().clone();
        let entries = log.entries(&nvm, &block).unwrap();
        let kinds: Vec<EntryKind> = entries.iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            vec![
                EntryKind::BatchPart,
                EntryKind::BatchPart,
                EntryKind::BatchPart,
                EntryKind::BatchCommit
            ]
        );
        assert!(entries.iter().all(|e| e.ts == 99 && e.address == 8192));
        let mut got = Vec::new();
        for (n, e) in entries.iter().take(3).enumerate() {
            let (part, ops) = batch::decode_part(&e.value, 8192).unwrap();
            assert_eq!(part as usize, n);
            got.extend(ops.iter().map(|o| o.key.to_vec()));
        }
        assert_eq!(got, keys);
        assert_eq!(batch::decode_commit(&entries[3].value), Some((3, 6)));
        assert_eq!(block.max_address.load(Ordering::Acquire), 8192);
        assert_eq!(log.counters.spanning_batches.get(), 1);
    }

    /// Regression (found by the crash-image test): a log block is zeroed before it is used,
    /// so the timestamp word of an entry whose first step is not yet durable can only read
    /// 0 — never bytes an earlier block left in the same chunks.
    #[test]
    fn a_new_log_block_holds_nothing_of_what_its_chunks_held_before() {
        let (_dir, pool, nvm) = scratch_nvm(15);
        let layout = nvm.alloc.layout();
        let area = layout.chunk_count * layout.chunk_size;
        pool.fill(layout.chunks_off, area as usize, 0xAB).unwrap();
        let geo = Geometry {
            page_bits: 12,
            block_bits: 15,
        };
        let log = OpLog::new(geo, 1);
        let at = Place {
            address: 4096,
            record: 4096,
        };
        let e = NewEntry {
            ts: 5,
            kind: EntryKind::Put,
            key: b"k",
            value: b"v",
            at,
        };
        log.append(&nvm, 0, &e).unwrap();
        let front = log.frozen_oldest();
        assert!(front.is_none(), "the block is still being written");
        let st = log.state.lock();
        let block = st.blocks.front().unwrap().clone();
        drop(st);
        let bytes = pool.read(block.off, 1 << 15).unwrap();
        let entry_end = 64 + log::entry_len(1, 1) as usize;
        assert!(
            bytes[entry_end..].iter().all(|b| *b == 0),
            "stale bytes survived"
        );
        assert_eq!(log.entries(&nvm, &block).unwrap().len(), 1);
    }
}
