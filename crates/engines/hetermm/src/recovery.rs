//! Opening a store and recovering it (HeterMM §5.3.2, Algorithm 1), parallel over blocks.
//!
//! 1. **Directory.** Read the block directory: every data block (keeping, for a block
//!    named twice after a crash in the middle of a reorganisation, the newer generation),
//!    every log block. Runs the allocator holds under our tags but no directory word names
//!    (prepared, or being written at the crash) are freed, as the allocator's contract asks.
//! 2. **recoverWAL.** Read every log block (in parallel) and keep, per key, the entry with
//!    the latest timestamp (`ht` of Algorithm 1; a delete is an entry too), as a run sorted
//!    by key rather than a hash table. An entry whose second persist did not happen has
//!    ts = 0 and is not read (`format::log`).
//! 3. **recoverNVM.** Walk every published block (in parallel), skipping records whose
//!    invalid bit is set. A record older than the key's log entry is a loser, and so is any
//!    but the newest of a key's versions (setAddr of lines 19-26; [`PluggedIndex::recover`]
//!    decides the same way). Losers are then marked invalid (durably), as lines 22 and 26
//!    require. Live bytes per block are recounted.
//!    The walk is parallel; the offers are not: each thread collects `(key, address)` pairs
//!    (keys borrowed from the mapped pool), sorts them, and the sorted runs are merged with
//!    each other and with the sorted log entries (so no lookup per record decides what a
//!    log entry outranks), then offered in key order after step 4
//!    ([`PluggedIndex::recover_sorted`]; the btree builds itself from them in one pass).
//!    `recover` keeps the newer version whatever the order, so this changes only speed:
//!    parallel offers contended on the index's lock and random-order inserts missed the
//!    cache on every tree level (4,000,000 records took 11 s to recover; the paper's §6.5
//!    counts on recovery being fast).
//! 4. **Replay.** A key's newest log entry is replayed when no record of the key in pmem is
//!    as new (a merge of the sorted entries with the sorted records, no index lookups): a
//!    put becomes a new DRAM record with the entry's timestamp (the paper's `set`, not logged
//!    again), a delete needs nothing (the older records lost in step 3). The replayed
//!    records join the sorted records, and the index is built from all of them in one pass
//!    ([`PluggedIndex::recover_sorted`]). The old log blocks stay until a forced flush has
//!    persisted the replayed records, and are retired only then; the flusher does it in
//!    the background, after the store has opened.
//!
//! Deletes: the paper's recovery would resurrect a deleted key from an older version in
//! pmem. Here a delete is a log entry until the deleted record's invalid bit is durable
//! (its entry is not reclaimed before), and a record with its bit set is never offered.
//!
//! Thread safety: runs before the store is shared. The background threads start between
//! steps 3 and 4 (flushing and reorganisation make room for replayed records), so the keys
//! of the records found in step 3 are copied out of the blocks into one buffer first.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use tierkv_core::common::prefetch::prefetch_bytes;
use tierkv_core::media::pmem::PmemPool;
use tierkv_core::{Error, Result, Tier};

use crate::batch_recovery::{self, Spanning};
use crate::format::HEADER_LEN;
use crate::format::batch;
use crate::format::block::BlockHeader;
use crate::format::compact::CompactHeader;
use crate::format::dir::{DirEntry, is_next_generation};
use crate::format::log::{self, EntryKind, LogHeader};
use crate::mem::HeterMem;
use crate::nvm::blocks::{BlockInfo, Layout};
use crate::nvm::walk::records;
use crate::nvm::{COMPACT_TAG, DATA_TAG, LOG_TAG, Nvm};
use crate::options::HeterOptions;
use crate::plugin::{LogicalAddress, PluggedIndex};

/// What recovery found in the directory.
#[derive(Debug, Default)]
pub struct Plan {
    /// Published data blocks: (block number, info without live bytes).
    pub blocks: Vec<(u64, BlockInfo)>,
    /// Log blocks: (run offset, sequence number), oldest first.
    pub logs: Vec<(u64, u64)>,
}

/// The newest log entry of a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogWinner<'a> {
    /// Its timestamp.
    pub ts: u64,
    /// The value put (in the mapped pool), or `None` for a delete.
    pub value: Option<&'a [u8]>,
    /// A put whose record is below the flush frontier: the record in pmem (current, marked
    /// invalid, or dropped by a reorganisation) stands for it, so it is not replayed; it
    /// still outranks the key's older entries and records.
    pub flushed: bool,
}

/// Formats a new store or opens an existing one: the memory with its published blocks, and
/// what recovery must do.
pub fn open_memory(
    pool: Arc<PmemPool>,
    opts: HeterOptions,
    created: bool,
) -> Result<(HeterMem, Plan)> {
    if created {
        let block_bits = opts.block_bits_for(Nvm::capacity(&pool));
        let nvm = Nvm::format(pool, block_bits, opts.page_bits)?;
        return Ok((HeterMem::new(nvm, opts, 0, 1)?, Plan::default()));
    }
    let nvm = Nvm::open(pool)?;
    if let Some(m) = opts.block_bits
        && m != nvm.block_bits()
    {
        return Err(Error::invalid(format!(
            "this hetermm store was created with block_bits={}; it cannot be opened with block_bits={m}",
            nvm.block_bits()
        )));
    }
    let (data, logs) = read_directory(&nvm)?;
    let sizes = collect_garbage(&nvm, &data, &logs)?;
    // IMPORTANT: never below the flush frontier — a block flushed and then freed (all of it
    // invalid) leaves no directory word, and its logical addresses must not come back.
    let frontier = nvm.flush_frontier()?;
    // Block numbers past what the geometry can address would overflow the address
    // arithmetic: a directory or frontier naming one is damaged.
    let numbers = crate::geometry::block_numbers(nvm.block_bits());
    if frontier >> nvm.block_bits() >= numbers {
        return Err(Error::corruption(
            Tier::Pmem,
            0,
            format!(
                "the flush frontier {frontier:#x} is past the last logical block ({numbers} \
                 blocks of 2^{} bytes)",
                nvm.block_bits()
            ),
        ));
    }
    if let Some((&b, &(off, _, _))) = data.range(numbers..).next() {
        return Err(Error::corruption(
            Tier::Pmem,
            off,
            format!(
                "the block directory names logical block {b}, past the last one ({numbers} \
                 blocks of 2^{} bytes)",
                nvm.block_bits()
            ),
        ));
    }
    let first_block = data
        .keys()
        .next_back()
        .map_or(0, |b| b + 1)
        .max(frontier >> nvm.block_bits());
    let next_seq = logs.iter().map(|(_, s)| s + 1).max().unwrap_or(1);
    let mem = HeterMem::new(nvm, opts, first_block, next_seq)?;
    let mut plan = Plan {
        blocks: Vec::new(),
        logs,
    };
    for (b, (off, compact, generation)) in data {
        let run_len = sizes.get(&off).copied().unwrap_or_default();
        let info = block_info(&mem, b, off, compact, generation, run_len)?;
        mem.blocks.publish(b, info)?;
        plan.blocks.push((b, info));
    }
    Ok((mem, plan))
}

type DataBlocks = BTreeMap<u64, (u64, bool, u16)>;

/// Step 1: the data blocks (newest generation of each) and log blocks the directory names;
/// the words of superseded generations are cleared and their runs freed.
fn read_directory(nvm: &Nvm) -> Result<(DataBlocks, Vec<(u64, u64)>)> {
    let mut data: DataBlocks = BTreeMap::new();
    let mut logs = Vec::new();
    let mut stale = Vec::new();
    for (off, e) in nvm.published()? {
        match e {
            DirEntry::None => {}
            DirEntry::Log { seq } => logs.push((off, seq)),
            DirEntry::Data {
                block_no,
                compact,
                generation,
            } => match data.get(&block_no).copied() {
                None => {
                    data.insert(block_no, (off, compact, generation));
                }
                Some((prev, _, g)) if is_next_generation(generation, g) => {
                    stale.push(prev);
                    data.insert(block_no, (off, compact, generation));
                }
                Some((_, _, g)) if is_next_generation(g, generation) => stale.push(off),
                Some((prev, _, g)) => {
                    return Err(Error::corruption(
                        Tier::Pmem,
                        off,
                        format!(
                            "block {block_no} is named at {prev} (generation {g}) and at {off} (generation {generation})"
                        ),
                    ));
                }
            },
        }
    }
    for off in stale {
        nvm.set_dir_entry(off, DirEntry::None)?;
        nvm.free_run(off)?;
    }
    logs.sort_by_key(|(_, seq)| *seq);
    Ok((data, logs))
}

/// Frees every run of ours that no directory word names; returns the sizes of the named.
fn collect_garbage(nvm: &Nvm, data: &DataBlocks, logs: &[(u64, u64)]) -> Result<HashMap<u64, u64>> {
    let named: HashSet<u64> = data
        .values()
        .map(|d| d.0)
        .chain(logs.iter().map(|l| l.0))
        .collect();
    let mut sizes = HashMap::new();
    for tag in [DATA_TAG, COMPACT_TAG, LOG_TAG] {
        for a in nvm.alloc.iter_chunks(tag) {
            if named.contains(&a.offset) {
                sizes.insert(a.offset, a.size);
            } else {
                nvm.free_run(a.offset)?;
            }
        }
    }
    if let Some(missing) = named.iter().find(|o| !sizes.contains_key(o)) {
        return Err(Error::corruption(
            Tier::Pmem,
            *missing,
            "the block directory names a run the allocator does not hold",
        ));
    }
    Ok(sizes)
}

fn block_info(
    mem: &HeterMem,
    b: u64,
    off: u64,
    compact: bool,
    generation: u16,
    run_len: u64,
) -> Result<BlockInfo> {
    let pool = mem.pool();
    let head = pool.read(off, HEADER_LEN)?;
    let layout = if compact {
        let h = CompactHeader::decode(head, off, b, mem.geo.block_bits, run_len)?;
        Layout::Compact { slots: h.slots }
    } else {
        if run_len < mem.geo.block_size() {
            return Err(Error::corruption(
                Tier::Pmem,
                off,
                format!("block {b}'s run is shorter than a block"),
            ));
        }
        BlockHeader::decode(head, off, b, mem.geo.block_bits)?;
        Layout::Full
    };
    Ok(BlockInfo {
        off,
        run_len,
        layout,
        live: 0,
        capacity: if compact { 0 } else { mem.geo.block_capacity() },
        generation,
    })
}

fn threads(mem: &HeterMem) -> usize {
    match mem.opts.recovery_threads {
        0 => std::thread::available_parallelism().map_or(2, |n| n.get()),
        n => n,
    }
}

/// Replayed records written under one pinned operation.
pub(crate) const REPLAY_BATCH: usize = 256;

/// Where a test makes an open fail (`regressions.rs`), or installs a hook on the new memory:
/// once the memory is open, before each background thread is spawned, after each batch of replayed records, once the index is built, and at the end of
/// [`crate::HeterStore::open`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenPoint {
    /// The memory is open (its blocks published), nothing recovered yet.
    Memory,
    /// A background thread is about to be spawned (`background.rs`).
    Spawning,
    /// A batch of [`REPLAY_BATCH`] replayed records is in DRAM.
    Replayed,
    /// The index is built from the recovered and the replayed records.
    Built,
    /// Everything is done but the store is not serving yet.
    Opened,
}

/// A test hook of the opening thread (a thread-local, so that tests running in parallel do
/// not see each other's): an error it returns fails the open there.
#[cfg(test)]
pub type OpenHook = Box<dyn FnMut(OpenPoint, &HeterMem) -> Result<()>>;

#[cfg(test)]
thread_local! {
    /// The opening thread's hook, if set.
    pub static OPEN_HOOK: std::cell::RefCell<Option<OpenHook>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs the opening thread's test hook (in tests; nothing otherwise).
pub fn open_hook(point: OpenPoint, mem: &HeterMem) -> Result<()> {
    #[cfg(test)]
    {
        if let Some(r) = OPEN_HOOK.with(|h| h.borrow_mut().as_mut().map(|f| f(point, mem))) {
            return r;
        }
    }
    let _ = (point, mem);
    Ok(())
}

/// The bytes of a replayed value prefetched before the batch is written (the rest of a
/// long value is read sequentially, which the hardware prefetches on its own).
const PREFETCH_VALUE_BYTES: usize = 256;

/// What steps 2 and 3 found, before the index is built.
pub struct Found<'a> {
    /// The newest valid record of each key in the persisted region that no log entry
    /// outranks, sorted by key, its key in `keys`.
    offers: Vec<Held>,
    /// The keys of `offers`, copied out of the blocks in one buffer: the reclaimer may
    /// reorganise (move, free) blocks while the log is replayed, before the index is built.
    keys: Vec<u8>,
    /// The log entries to replay, sorted by key: each is its key's newest entry, is not
    /// flushed, and no record in pmem is as new.
    replay: Vec<(u64, &'a [u8], LogWinner<'a>)>,
}

impl Found<'_> {
    /// True when the log holds writes to replay.
    pub fn replays(&self) -> bool {
        !self.replay.is_empty()
    }
}

/// Steps 2 and 3 without the index: reads the logs, walks the blocks, marks the records a
/// log entry outranks, and sorts what is left to offer and to replay.
pub fn find<'a>(mem: &'a HeterMem, plan: &Plan) -> Result<Found<'a>> {
    let frontier = mem.nvm.flush_frontier()?;
    let started = Instant::now();
    let log = read_logs(mem, &plan.logs, frontier)?;
    mem.counters
        .recovery_log_micros
        .set(started.elapsed().as_micros() as u64);
    let started = Instant::now();
    let Scanned {
        lives,
        losers,
        offers,
        keys,
    } = scan_blocks(mem, &plan.blocks, &log)?;
    for (b, live, total) in lives {
        if let Some(cell) = mem.blocks.info(b) {
            let mut info = cell.lock();
            info.live = live;
            if matches!(info.layout, Layout::Compact { .. }) {
                info.capacity = total;
            }
        }
    }
    mem.apply_marks(&losers)?;
    // A key's records older than its newest entry lost above; so the entry is replayed
    // exactly when none of the key's records is offered (one as new is its own record).
    // Both are sorted by key: one merge, no lookups.
    let mut replay = Vec::new();
    let mut at = 0;
    for (prefix, key, w) in log.into_iter().filter(|(_, _, w)| !w.flushed) {
        let probe = (prefix, key, LogicalAddress(0), 0);
        let cmp = |h: &Held| by_key(&held_offer(&keys, h), &probe);
        while offers.get(at).is_some_and(|h| cmp(h).is_lt()) {
            at += 1;
        }
        if offers.get(at).is_none_or(|h| cmp(h).is_ne()) {
            replay.push((prefix, key, w));
        }
    }
    mem.counters
        .recovery_scan_micros
        .set(started.elapsed().as_micros() as u64);
    Ok(Found {
        offers,
        keys,
        replay,
    })
}

/// Step 4: writes the replayed puts into DRAM records (not logged again: the old logs keep
/// them durable until the forced flush that retires them), then builds the index from
/// them and the persisted records in one sorted pass, and marks the versions that lost.
/// Needs the background threads running (the replayed records may not fit in DRAM, or in
/// the pmem not yet reorganised, at once).
pub fn replay_and_build(
    mem: &HeterMem,
    index: &dyn PluggedIndex<HeterMem>,
    found: Found<'_>,
) -> Result<()> {
    // The entries come in key order, so their log entries are read in random order: each
    // batch's entries are prefetched first, so that their cache misses overlap. The keys
    // are copied into one buffer, which the index build below then reads in order.
    let mut replayed: Vec<Held> = Vec::with_capacity(found.replay.len());
    let mut replayed_keys: Vec<u8> = Vec::new();
    let started = Instant::now();
    mem.replaying.store(true, Ordering::Release);
    // One pinned operation per batch of records, not per record (the flusher waits for
    // pinned operations; a record that must wait for DRAM waits unpinned).
    let written = found.replay.chunks(REPLAY_BATCH).try_for_each(|batch| {
        for (_, key, w) in batch {
            prefetch_bytes(key);
            if let Some(value) = w.value {
                prefetch_bytes(value.get(..PREFETCH_VALUE_BYTES).unwrap_or(value));
            }
        }
        let g = mem.pin()?;
        for (prefix, key, w) in batch {
            if let Some(value) = w.value {
                let addr = LogicalAddress(mem.restore_value(&g, key, value, w.ts)?);
                let at = ((replayed_keys.len() as u64) << 16) | key.len() as u64;
                push_key(&mut replayed_keys, *prefix, key);
                replayed.push((*prefix, at, addr));
            }
            mem.counters.replayed_entries.incr();
        }
        drop(g);
        open_hook(OpenPoint::Replayed, mem)
    });
    mem.replaying.store(false, Ordering::Release);
    written?;
    mem.counters
        .recovery_replay_micros
        .set(started.elapsed().as_micros() as u64);
    let started = Instant::now();
    let keys = &found.keys;
    let mut a = found.offers.iter().map(|h| held_offer(keys, h)).peekable();
    let mut b = replayed
        .iter()
        .map(|h| held_offer(&replayed_keys, h))
        .peekable();
    let mut merged = std::iter::from_fn(|| match (a.peek(), b.peek()) {
        (Some(x), Some(y)) if by_key(y, x).is_lt() => b.next(),
        (Some(_), _) => a.next(),
        (None, _) => b.next(),
    })
    .map(|(_, key, addr, _)| (key, addr));
    mem.recovering.store(true, Ordering::Release);
    let built = index.recover_sorted(mem, &mut merged);
    mem.recovering.store(false, Ordering::Release);
    built?;
    open_hook(OpenPoint::Built, mem)?;
    let losers = std::mem::take(&mut *mem.recovery_losers.lock());
    mem.apply_marks(&losers)?;
    mem.counters
        .recovery_build_micros
        .set(started.elapsed().as_micros() as u64);
    Ok(())
}

/// Runs `work` over `items` on the recovery threads (item i on thread i mod n), each thread
/// with its own state from `init`; returns the states.
fn in_parallel<I: Sync, T: Send>(
    mem: &HeterMem,
    items: &[I],
    init: impl Fn() -> T + Sync,
    work: impl Fn(&mut T, &I) -> Result<()> + Sync,
) -> Result<Vec<T>> {
    let n = threads(mem).min(items.len()).max(1);
    let (init, work) = (&init, &work);
    let parts: Vec<Result<T>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|t| {
                s.spawn(move || {
                    let mut state = init();
                    for item in items.iter().skip(t).step_by(n) {
                        work(&mut state, item)?;
                    }
                    Ok(state)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(panicked())))
            .collect()
    });
    parts.into_iter().collect()
}

/// Step 2 (recoverWAL): the newest entry of every key in the log blocks, sorted by key (the
/// `ht` of Algorithm 1, as a sorted run). Each recovery thread reads its share of the log
/// blocks, sorts its entries and keeps each key's newest; the runs are then merged. A
/// sorted run, not a hash table: step 3 sorts the records by key anyway, so deciding which
/// records an entry outranks is one merge of the two, not a random lookup per record (with
/// 4,000,000 records and 1,000,000 entries the table's inserts and lookups took a third of
/// the recovery). Keys and values are borrowed from the mapped pool.
fn read_logs<'a>(mem: &'a HeterMem, logs: &[(u64, u64)], frontier: u64) -> Result<LogRun<'a>> {
    let read = in_parallel(
        mem,
        logs,
        || (Vec::new(), Spanning::default()),
        |(run, spanning), (off, seq)| read_log_block(mem, *off, *seq, frontier, run, spanning),
    )?;
    let (mut parts, spanning): (Vec<LogRun<'a>>, Vec<Spanning<'a>>) = read.into_iter().unzip();
    // Batches that span pages: their parts and commits may lie in different blocks.
    let mut batches = Vec::new();
    batch_recovery::join(spanning, frontier, |op| {
        batches.push(winner(
            op.ts, op.kind, op.record, op.key, op.value, frontier,
        ));
    })?;
    parts.push(batches);
    let runs = on_own_threads(mem, parts, |run: &mut LogRun<'a>| {
        run.sort_unstable_by(|a, b| entry_order(a, b).then_with(|| b.2.ts.cmp(&a.2.ts)));
        run.dedup_by(|later, first| entry_order(later, first).is_eq());
    })?;
    let mut merged: LogRun<'a> = Vec::with_capacity(runs.iter().map(Vec::len).sum());
    merge_runs(&runs, entry_order, |e| {
        match merged.last_mut() {
            Some(last) if entry_order(last, &e).is_eq() => {
                if e.2.ts > last.2.ts {
                    *last = e;
                }
            }
            _ => merged.push(e),
        }
        Ok(())
    })?;
    Ok(merged)
}

/// Log entries in key order: (key prefix, key, the entry).
type LogRun<'a> = Vec<(u64, &'a [u8], LogWinner<'a>)>;

fn entry_order(
    a: &(u64, &[u8], LogWinner<'_>),
    b: &(u64, &[u8], LogWinner<'_>),
) -> std::cmp::Ordering {
    key_order(a.0, a.1, b.0, b.1)
}

/// A log entry of a key as recovery ranks it.
fn winner<'a>(
    ts: u64,
    kind: EntryKind,
    record: u64,
    key: &'a [u8],
    value: &'a [u8],
    frontier: u64,
) -> (u64, &'a [u8], LogWinner<'a>) {
    let put = kind == EntryKind::Put;
    let flushed = put && record < frontier;
    let value = (put && !flushed).then_some(value);
    (key_prefix(key), key, LogWinner { ts, value, flushed })
}

fn read_log_block<'a>(
    mem: &'a HeterMem,
    off: u64,
    seq: u64,
    frontier: u64,
    run: &mut LogRun<'a>,
    spanning: &mut Spanning<'a>,
) -> Result<()> {
    let bytes = mem.pool().read(off, mem.geo.block_size() as usize)?;
    let header = LogHeader::decode(bytes, off, seq, mem.geo.block_bits)?;
    let mut newest = 0;
    let mut bad = None;
    log::walk(bytes, &header, |e| {
        newest = newest.max(e.ts);
        match e.kind {
            EntryKind::Put | EntryKind::Delete => {
                run.push(winner(e.ts, e.kind, e.record, e.key, e.value, frontier));
            }
            // A committed batch entry stands for each of its operations, with the
            // operation's own timestamp (FORMAT.md § Write batches).
            EntryKind::Batch => match batch::decode(e.value, e.address) {
                Some(ops) => run.extend(
                    ops.iter()
                        .map(|op| winner(op.ts, op.kind, op.record, op.key, op.value, frontier)),
                ),
                None => {
                    bad.get_or_insert(Error::corruption(
                        Tier::Pmem,
                        off,
                        "a committed hetermm batch entry whose operations do not decode",
                    ));
                }
            },
            EntryKind::BatchPart | EntryKind::BatchCommit => {
                if let Err(err) = spanning.collect(&e, off) {
                    bad.get_or_insert(err);
                }
            }
        }
    });
    if let Some(err) = bad {
        return Err(err);
    }
    mem.observe_ts(newest);
    Ok(())
}

type Lives = Vec<(u64, u64, u64)>;

/// A record offered to the index: the first 8 bytes of its key as a big-endian number (so
/// that most comparisons while sorting are one integer comparison, not a `memcmp` call),
/// its key (in the mapped pool) and its logical address.
type Offer<'a> = (u64, &'a [u8], LogicalAddress, u64);

#[expect(
    clippy::big_endian_bytes,
    reason = "an in-memory sort key, never stored: big-endian is what orders like the bytes"
)]
fn key_prefix(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = key.len().min(8);
    b[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(b)
}

/// Key order of two offers. Keys of at most 8 bytes are wholly in their prefix (zero
/// padded), so with equal prefixes the shorter such key is a prefix of the longer one: they
/// are ordered by length without touching their bytes, which lie scattered over the pool.
fn by_key(a: &Offer<'_>, b: &Offer<'_>) -> std::cmp::Ordering {
    key_order(a.0, a.1, b.0, b.1)
}

/// The order of two keys given with their prefixes (see [`by_key`]).
fn key_order(ap: u64, a: &[u8], bp: u64, b: &[u8]) -> std::cmp::Ordering {
    ap.cmp(&bp).then_with(|| {
        if a.len() <= 8 && b.len() <= 8 {
            a.len().cmp(&b.len())
        } else {
            a.cmp(b)
        }
    })
}

/// Appends `key` (whose prefix is `prefix`) to a key buffer; a key of at most 8 bytes is
/// taken from its prefix, so its scattered bytes are not touched again.
#[expect(
    clippy::big_endian_bytes,
    reason = "the inverse of `key_prefix`, in memory only"
)]
fn push_key(keys: &mut Vec<u8>, prefix: u64, key: &[u8]) {
    match prefix.to_be_bytes().get(..key.len()) {
        Some(bytes) => keys.extend_from_slice(bytes),
        None => keys.extend_from_slice(key),
    }
}

/// Step 3 (recoverNVM): walks every block in parallel and sorts the valid records by key;
/// returns per block (live bytes, all record bytes), the records that lost (to the key's
/// newest log entry in `log`, or to a newer version), and the others in key order.
fn scan_blocks(mem: &HeterMem, blocks: &[(u64, BlockInfo)], log: &LogRun<'_>) -> Result<Scanned> {
    let parts = in_parallel(
        mem,
        blocks,
        || (Lives::new(), Vec::new(), Vec::new()),
        |(lives, losers, offers), (b, info)| {
            let (live, total) = scan_block(mem, *b, info, losers, offers)?;
            lives.push((*b, live, total));
            Ok(())
        },
    )?;
    let mut lives = Vec::new();
    let mut losers = Vec::new();
    let mut runs = Vec::with_capacity(parts.len());
    for (l, x, o) in parts {
        lives.extend(l);
        losers.extend(x);
        runs.push(o);
    }
    let runs = on_own_threads(mem, runs, |r: &mut Vec<Offer<'_>>| {
        r.sort_unstable_by(by_key);
    })?;
    let mut merged = Vec::with_capacity(runs.iter().map(Vec::len).sum());
    let key_bytes = runs.iter().flatten().map(|(_, k, _, _)| k.len()).sum();
    let mut keys = Vec::with_capacity(key_bytes);
    // The key's log entry (both are in key order, so a cursor that only moves forward).
    let mut entry = 0;
    // Versions of a key arrive together: the newest stays (the first of equals, as
    // `recover_value` decides), the others are losers now — marked before the log is
    // replayed, so that reorganisation can reclaim their space meanwhile.
    let mut last_ts = 0;
    merge_runs(&runs, by_key, |(prefix, key, addr, ts)| {
        while log
            .get(entry)
            .is_some_and(|e| key_order(e.0, e.1, prefix, key).is_lt())
        {
            entry += 1;
        }
        if log
            .get(entry)
            .is_some_and(|e| e.2.ts > ts && key_order(e.0, e.1, prefix, key).is_eq())
        {
            losers.push(addr.0);
            return Ok(());
        }
        if let Some(last) = merged.last_mut() {
            let (p, k, a, _) = held_offer(&keys, last);
            if by_key(&(p, k, a, 0), &(prefix, key, addr, 0)).is_eq() {
                if ts > last_ts {
                    losers.push(a.0);
                    last.2 = addr;
                    last_ts = ts;
                } else {
                    losers.push(addr.0);
                }
                return Ok(());
            }
        }
        merged.push((prefix, ((keys.len() as u64) << 16) | key.len() as u64, addr));
        push_key(&mut keys, prefix, key);
        last_ts = ts;
        Ok(())
    })?;
    mem.counters.recovered_records.add(merged.len() as u64);
    Ok(Scanned {
        lives,
        losers,
        offers: merged,
        keys,
    })
}

/// What step 3 found in the blocks.
struct Scanned {
    /// Per block: (block, live bytes, all record bytes).
    lives: Lives,
    /// Records that lost (to a log entry or a newer version).
    losers: Vec<u64>,
    /// The valid records, sorted by key, one per key, keys in `keys`.
    offers: Vec<Held>,
    keys: Vec<u8>,
}

/// An offer whose key was copied into a key buffer: (prefix, start << 16 | length, address).
type Held = (u64, u64, LogicalAddress);

/// The offer `h` with its key in `keys`.
fn held_offer<'k>(keys: &'k [u8], h: &Held) -> Offer<'k> {
    let start = (h.1 >> 16) as usize;
    let len = (h.1 & 0xffff) as usize;
    (
        h.0,
        keys.get(start..start + len).unwrap_or_default(),
        h.2,
        0,
    )
}

/// Runs `work` on each of `runs`, each on its own thread (sorting the recovery threads'
/// runs in parallel).
fn on_own_threads<T: Send>(
    mem: &HeterMem,
    runs: Vec<T>,
    work: impl Fn(&mut T) + Sync,
) -> Result<Vec<T>> {
    if runs.len() <= 1 || threads(mem) <= 1 {
        let mut runs = runs;
        runs.iter_mut().for_each(&work);
        return Ok(runs);
    }
    let work = &work;
    std::thread::scope(|s| {
        let handles: Vec<_> = runs
            .into_iter()
            .map(|mut r| {
                s.spawn(move || {
                    work(&mut r);
                    r
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| panicked()))
            .collect()
    })
}

/// Calls `offer` for every item of the sorted `runs`, in `order` (a k-way merge; k is the
/// number of recovery threads, so a linear pick of the smallest head is enough; of equal
/// heads, the earlier run's goes first).
fn merge_runs<T: Copy>(
    runs: &[Vec<T>],
    order: impl Fn(&T, &T) -> std::cmp::Ordering,
    mut offer: impl FnMut(T) -> Result<()>,
) -> Result<()> {
    let mut heads = vec![0usize; runs.len()];
    loop {
        let mut next: Option<(usize, &T)> = None;
        for (r, run) in runs.iter().enumerate() {
            if let Some(o) = run.get(heads[r])
                && next.is_none_or(|(_, n)| order(o, n).is_lt())
            {
                next = Some((r, o));
            }
        }
        let Some((r, &o)) = next else {
            return Ok(());
        };
        heads[r] += 1;
        offer(o)?;
    }
}

fn scan_block<'a>(
    mem: &'a HeterMem,
    b: u64,
    info: &BlockInfo,
    losers: &mut Vec<u64>,
    offers: &mut Vec<Offer<'a>>,
) -> Result<(u64, u64)> {
    let (mut live, mut total, mut newest) = (0, 0, 0);
    for r in records(mem.pool(), &mem.geo, b, info)? {
        let size = r.record.header.size();
        total += size;
        if r.marked {
            continue;
        }
        live += size;
        let addr = mem.geo.block_start(b) + r.rel;
        if r.record.header.is_padding() {
            losers.push(addr);
            continue;
        }
        let ts = r.record.header.ts();
        newest = newest.max(ts);
        offers.push((
            key_prefix(r.record.key),
            r.record.key,
            LogicalAddress(addr),
            ts,
        ));
    }
    mem.observe_ts(newest);
    Ok((live, total))
}

fn panicked() -> Error {
    Error::Poisoned("a recovery thread panicked".into())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::plugin::CoreIndex;
    use crate::store::HeterStore;
    use std::sync::mpsc;
    use tierkv_core::media::pmem::{
        CrashImageOptions, DurabilityMode, EmulatedLatency, PmemConfig, PmemPool,
    };
    use tierkv_core::{EngineSpec, KvStore, Limits};

    const BIG: usize = 3000;

    fn options() -> HeterOptions {
        let spec: EngineSpec = "hetermm@page_bits=12,block_bits=15".parse().unwrap();
        HeterOptions::from_params(spec.params(), 64 * 4096).unwrap()
    }

    pub(crate) fn pool_config(path: std::path::PathBuf) -> PmemConfig {
        PmemConfig {
            path,
            size: 8 << 20,
            mode: DurabilityMode::Tracked,
            latency: EmulatedLatency::default(),
        }
    }

    /// A second writer thread (its own slot, DRAM page and log page) that runs the
    /// closures it is sent, one at a time, while the caller waits.
    struct Writer {
        jobs: mpsc::Sender<Box<dyn FnOnce() + Send + 'static>>,
        done: mpsc::Receiver<()>,
    }

    impl Writer {
        fn run(&self, job: impl FnOnce() + Send + 'static) {
            self.jobs.send(Box::new(job)).unwrap();
            self.done.recv().unwrap();
        }
    }

    fn spawn_writer() -> (Writer, std::thread::JoinHandle<()>) {
        let (jobs, rx) = mpsc::channel::<Box<dyn FnOnce() + Send + 'static>>();
        let (tx, done) = mpsc::channel();
        let handle = std::thread::spawn(move || {
            for job in rx {
                job();
                tx.send(()).unwrap();
            }
        });
        (Writer { jobs, done }, handle)
    }

    /// A store without background threads (so the test decides when blocks are flushed
    /// and log blocks reclaimed), with thread A = a `Writer`, thread B = the caller.
    struct Bench {
        mem: Arc<HeterMem>,
        index: Arc<CoreIndex>,
        pool: Arc<PmemPool>,
        dir: tempfile::TempDir,
        a: Writer,
        a_thread: std::thread::JoinHandle<()>,
    }

    impl Bench {
        /// Thread A holds page 0 of DRAM block 0 and of log block 1; thread B has filled
        /// the other pages of both and holds the first pages of the next ones.
        fn new() -> Bench {
            let dir = tempfile::tempdir().unwrap();
            let pool = PmemPool::create(&pool_config(dir.path().join("pool"))).unwrap();
            let (mem, _) = open_memory(pool.clone(), options(), true).unwrap();
            let (a, a_thread) = spawn_writer();
            let b = Bench {
                mem: Arc::new(mem),
                index: CoreIndex::new("btree").unwrap(),
                pool,
                dir,
                a,
                a_thread,
            };
            b.put_from_a("a-filler", 16);
            for i in 0..8 {
                b.put(&format!("b-filler-{i}"), BIG);
            }
            assert_eq!(b.log_blocks(), 2, "B's log page is in the second log block");
            b
        }

        fn put(&self, key: &str, len: usize) {
            PluggedIndex::put(&*self.index, &*self.mem, key.as_bytes(), &vec![7; len]).unwrap();
        }

        fn put_from_a(&self, key: &'static str, len: usize) {
            let (mem, index) = (self.mem.clone(), self.index.clone());
            self.a.run(move || {
                PluggedIndex::put(&*index, &*mem, key.as_bytes(), &vec![9; len]).unwrap();
            });
        }

        fn delete_from_a(&self, key: &'static str) {
            let (mem, index) = (self.mem.clone(), self.index.clone());
            self.a
                .run(move || PluggedIndex::delete(&*index, &*mem, key.as_bytes()).unwrap());
        }

        /// Flushes DRAM blocks up to (not including) `end`, then reclaims the log.
        fn flush_until(&self, end: u64) {
            let mut st = self.mem.flusher.lock();
            while self.mem.geo.block_of(self.mem.off_dram()) < end {
                self.mem.flush_oldest(&mut st).unwrap();
            }
            let log = self.mem.oplog.as_ref().unwrap();
            log.reclaim(&self.mem.nvm, self.mem.off_dram()).unwrap();
        }

        fn log_blocks(&self) -> usize {
            self.mem.oplog.as_ref().unwrap().block_count()
        }

        /// Stops thread A and recovers a crash image of the pool (every store above was
        /// persisted).
        fn crash_and_recover(self) -> Arc<HeterStore> {
            drop(self.a);
            self.a_thread.join().unwrap();
            let path = self.dir.path().join("image");
            let image = self.pool.crash_image(1, CrashImageOptions::torn_words());
            std::fs::write(&path, image.unwrap()).unwrap();
            let pool = PmemPool::open(&pool_config(path)).unwrap();
            let index = CoreIndex::new("btree").unwrap();
            HeterStore::open(pool, options(), Limits::default(), index, false).unwrap()
        }
    }

    /// Regression (`tierkv stress`, kill mode, 4 MiB pool): thread A's delete went into its
    /// log page in an older log block than thread B's earlier put of the same key. Once the
    /// deleted record's block was flushed (and marked), the older log block was reclaimed
    /// with the delete, the put's entry stayed, and recovery replayed it: the key came back.
    /// A put entry whose record is below the flush frontier is not replayed now.
    #[test]
    fn a_delete_in_an_older_log_block_than_the_put_it_deletes_stays_deleted() {
        let b = Bench::new();
        b.put("k", 16);
        b.delete_from_a("k");
        assert_eq!(PluggedIndex::<HeterMem>::address(&*b.index, b"k"), None);
        b.flush_until(2);
        b.put("b-after", BIG);
        b.flush_until(2);
        assert_eq!(
            b.log_blocks(),
            1,
            "the first log block, with the delete, is reclaimed"
        );
        let store = b.crash_and_recover();
        assert_eq!(store.get(b"k").unwrap(), None, "a deleted key came back");
        assert!(store.get(b"b-filler-3").unwrap().is_some());
        store.close().unwrap();
    }

    /// The same loss the other way round: an older version of the key (thread B's record, in
    /// a later DRAM block) outlived the newer version and the delete (thread A's records, in
    /// an earlier block), whose entries went with their log block. A put's entry covers the
    /// address of the version it replaces now, so it stays while that version's entry does.
    #[test]
    fn an_older_version_at_a_higher_address_does_not_outlive_its_delete() {
        let b = Bench::new();
        b.put("k", 16); // B's page: DRAM block 1
        b.put_from_a("k", 600); // A's page: DRAM block 0, out of place
        b.delete_from_a("k");
        b.flush_until(1);
        let store = b.crash_and_recover();
        assert_eq!(store.get(b"k").unwrap(), None, "an older version came back");
        assert!(store.get(b"b-filler-7").unwrap().is_some());
        store.close().unwrap();
    }

    #[test]
    fn sorted_runs_merge_in_byte_order_whatever_the_prefix() {
        let keys: Vec<&[u8]> = vec![
            b"b",
            b"a\0",
            b"a",
            b"abcdefgh2",
            b"abcdefgh1",
            b"abcdefgh",
            b"",
            b"\xff",
            b"a\x01",
        ];
        let mut runs: Vec<Vec<Offer<'_>>> = vec![Vec::new(), Vec::new(), Vec::new()];
        for (i, k) in keys.iter().enumerate() {
            runs[i % 3].push((key_prefix(k), k, LogicalAddress(i as u64), 1));
        }
        for r in &mut runs {
            r.sort_unstable_by(by_key);
        }
        let mut seen = Vec::new();
        merge_runs(&runs, by_key, |(_, k, _, _)| {
            seen.push(k.to_vec());
            Ok(())
        })
        .unwrap();
        let mut expected: Vec<Vec<u8>> = keys.iter().map(|k| k.to_vec()).collect();
        expected.sort();
        assert_eq!(seen, expected);
    }

    #[test]
    fn keys_pushed_from_their_prefix_are_the_keys() {
        let keys: [&[u8]; 6] = [b"", b"a", b"a\0", b"abcdefgh", b"abcdefgh1", b"\0\0\0"];
        let mut buf = Vec::new();
        let mut held = Vec::new();
        for (i, k) in keys.iter().enumerate() {
            held.push((
                key_prefix(k),
                ((buf.len() as u64) << 16) | k.len() as u64,
                LogicalAddress(i as u64),
            ));
            push_key(&mut buf, key_prefix(k), k);
        }
        for (k, h) in keys.iter().zip(&held) {
            let (_, got, _, _) = held_offer(&buf, h);
            assert_eq!(got, *k);
        }
        for a in keys {
            for b in keys {
                let (oa, ob) = (
                    (key_prefix(a), a, LogicalAddress(0), 0),
                    (key_prefix(b), b, LogicalAddress(0), 0),
                );
                assert_eq!(by_key(&oa, &ob), a.cmp(b), "{a:?} vs {b:?}");
            }
        }
    }
}
