//! Opening a store (MioDB §4.7; `FORMAT.md` § Recovery): format a new pool, or decode the
//! directory, collect what crashes leaked (runs and objects the directory does not
//! reference), open every listed table (checking order, rebuilding Bloom filters), replay
//! each live log into a MemTable and flush it (which retires the log), then start a fresh
//! MemTable and the background threads.
//!
//! Thread safety: runs before any other thread sees the store.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use parking_lot::{Condvar, Mutex, RwLock};
use tierkv_core::media::flash::FlashDevice;
use tierkv_core::media::pmem::{PmemAllocator, PmemPool};
use tierkv_core::{Error, Limits, Result, Tier};
use tierkv_sstable::BlockCache;

use crate::arena::Arena;
use crate::dir::{self, Directory, MergeMeta};
use crate::flash::{FlashLevels, FlashRepo};
use crate::node::{self, MAX_HEIGHT};
use crate::options::MioOptions;
use crate::skiplist;
use crate::space::Sizes;
use crate::stats::Counters;
use crate::store::{
    DirState, Inner, MioStore, ROOT_DIR, ROOT_FORMATTED, ROOT_MAGIC, WriterState, log_capacity,
};
use crate::table::{self, PersistHook, PoolSource, Shared, TAG_TABLE, TAG_WAL, TableShape};
use crate::version::{MemTable, Version};
use crate::wal;
use crate::zerocopy::{self, MergeState};

/// Opens (or creates) a store in `pool`.
pub fn open(
    pool: Arc<PmemPool>,
    flash: Option<Arc<FlashDevice>>,
    opts: MioOptions,
    limits: Limits,
    created: bool,
    hook: Option<PersistHook>,
) -> Result<Arc<MioStore>> {
    let started = Instant::now();
    let fresh = created || pool.root(ROOT_FORMATTED)? == 0;
    let (alloc, dir_state) = if fresh {
        format(&pool, &opts)?
    } else {
        load(&pool, &opts)?
    };
    let shared = Arc::new(Shared {
        pool,
        alloc,
        counters: Counters::default(),
        hook,
        flush_awaited: Default::default(),
    });
    if !fresh {
        collect_leaks(&shared, &dir_state)?;
    }
    let (flash, flash_levels) = open_flash(flash, &opts, &dir_state.cur)?;
    let capacity = shared.alloc.layout().chunk_count * shared.alloc.chunk_size();
    let memtable_size = opts.memtable_for(capacity);
    let shape = TableShape {
        bloom_keys: if opts.bloom { memtable_size / 128 } else { 0 },
        bloom_bits: opts.bloom_bits,
    };
    let sizes = Sizes::new(
        &shared.alloc,
        memtable_size,
        log_capacity(memtable_size),
        limits.max_key_len,
    );
    repair_marks(&shared, &dir_state.cur)?;
    let levels = open_tables(&shared, &dir_state.cur, shape, &sizes)?;
    // A placeholder MemTable until the logs are replayed (no log, never written).
    let placeholder = Arc::new(MemTable::new(
        Arena::new(0, 1),
        dir::LogMeta {
            id: 0,
            run: dir::Run { off: 0, chunks: 0 },
            nonce: 0,
        },
        None,
    ));
    let dir_len = dir::encode(&dir_state.cur).len() as u64;
    let old_logs = dir_state.cur.logs.clone();
    let last_seq = dir_state.cur.last_seq;
    let inner = Arc::new(Inner {
        shared,
        limits,
        shape,
        sizes,
        spare: Mutex::new(None),
        arenas: Default::default(),
        lazy_done: Mutex::new(Default::default()),
        progress: AtomicU64::new(0),
        dir_len: AtomicU64::new(dir_len),
        last_room: AtomicI64::new(0),
        level_locks: (0..opts.levels).map(|_| RwLock::new(())).collect(),
        move_pause: crate::zerocopy::MovePause::default(),
        repository: Mutex::new(()),
        defrag_skip: Mutex::new(HashSet::new()),
        batch_gate: RwLock::new(()),
        version: RwLock::new(Arc::new(Version {
            mem: placeholder.clone(),
            imm: None,
            levels,
            flash: Arc::new(flash_levels),
        })),
        flash,
        writer: Mutex::new(WriterState {
            mem: placeholder,
            log: wal::LogWriter {
                key: wal::LogKey { id: 0, nonce: 0 },
                off: 0,
                cap: 0,
                tail: 0,
            },
            next_seq: 0,
            budget: 0,
        }),
        dir: Mutex::new(dir_state),
        signal: Mutex::new(0),
        wake: Condvar::new(),
        stop: AtomicBool::new(false),
        imm_pending: AtomicBool::new(false),
        poisoned: OnceLock::new(),
        opts,
    });
    let max_seq = replay_logs(&inner, &old_logs)?;
    let (mem, log) = inner.first_memtable()?;
    {
        let mut w = inner.writer.lock();
        w.next_seq = last_seq.max(max_seq) + 1;
        w.mem = mem.clone();
        w.log = log;
        {
            let mut v = inner.version.write();
            let mut nv = (**v).clone();
            nv.mem = mem;
            *v = Arc::new(nv);
        }
        inner.restore_spare()?;
        w.budget = inner.put_budget(0);
    }
    let threads = crate::background::start(&inner)?;
    if !created {
        inner
            .shared
            .counters
            .recovery_micros
            .set(started.elapsed().as_micros() as u64);
    }
    Ok(Arc::new(MioStore::new(inner, threads)))
}

fn format(pool: &Arc<PmemPool>, opts: &MioOptions) -> Result<(PmemAllocator, DirState)> {
    let start = pool.data_start();
    let alloc = PmemAllocator::format(
        pool.clone(),
        start,
        pool.len() - start,
        MioOptions::chunk_size_for(pool.len()),
    )?;
    let mut d = Directory::empty(opts.levels);
    if let Some(shape) = &opts.flash {
        d.flash = vec![Vec::new(); shape.levels];
    }
    // The repository: one skiplist whose head is an object of its own (§4.4).
    let head = alloc.alloc(node::HEAD_LEN as u64)?;
    let empty = Arena::new(0, 1).snapshot();
    pool.write(head, &empty)?;
    pool.persist(head, empty.len())?;
    d.next_id = 2;
    if let Some(r) = d.levels.last_mut() {
        r.push(dir::TableMeta {
            id: 1,
            head,
            entries: 0,
            max_seq: 0,
            allocs: Vec::new(),
        });
    }
    let bytes = dir::encode(&d);
    let off = alloc.alloc(bytes.len() as u64)?;
    pool.write(off, &bytes)?;
    pool.persist(off, bytes.len())?;
    pool.set_root(ROOT_DIR, off)?;
    pool.set_root(ROOT_FORMATTED, ROOT_MAGIC)?;
    Ok((alloc, DirState { cur: d, off }))
}

fn load(pool: &Arc<PmemPool>, opts: &MioOptions) -> Result<(PmemAllocator, DirState)> {
    let magic = pool.root(ROOT_FORMATTED)?;
    if magic != ROOT_MAGIC {
        return Err(Error::corruption(
            Tier::Pmem,
            0,
            format!("root word 0 is {magic:#x}, not a mio store"),
        ));
    }
    let alloc = PmemAllocator::open(pool.clone(), pool.data_start())?;
    let off = pool.root(ROOT_DIR)?;
    let head = pool.read(off, dir::FIXED_LEN)?;
    let len = dir::stated_len(head)
        .ok_or_else(|| Error::corruption(Tier::Pmem, off, "directory truncated"))?;
    let d = dir::decode(pool.read(off, len)?, off)?;
    if d.levels.len() != opts.levels {
        return Err(Error::invalid(format!(
            "this mio store was created with levels={}; it cannot be opened with levels={}",
            d.levels.len(),
            opts.levels
        )));
    }
    let stored_flash = (!d.flash.is_empty()).then_some(d.flash.len());
    match (stored_flash, &opts.flash) {
        (None, Some(_)) => {
            return Err(Error::invalid(
                "this mio store keeps its repository on pmem; it cannot be opened as mio:flash",
            ));
        }
        (Some(_), None) => {
            return Err(Error::invalid(
                "this mio store keeps its repository on flash; open it as mio:flash",
            ));
        }
        (Some(n), Some(shape)) if n != shape.levels => {
            return Err(Error::invalid(format!(
                "this mio:flash store was created with flash_levels={n}; it cannot be opened with flash_levels={}",
                shape.levels
            )));
        }
        _ => {}
    }
    Ok((alloc, DirState { cur: d, off }))
}

/// `mio:flash`: the flash repository and its tables (orphans removed, every listed table
/// opened and checked); `None` and empty levels for a pmem repository.
fn open_flash(
    dev: Option<Arc<FlashDevice>>,
    opts: &MioOptions,
    d: &Directory,
) -> Result<(Option<FlashRepo>, FlashLevels)> {
    let (Some(dev), Some(mut shape)) = (dev, opts.flash) else {
        if opts.flash.is_some() {
            return Err(Error::invalid("mio:flash needs a flash device"));
        }
        return Ok((None, FlashLevels::default()));
    };
    shape.resolve(dev.capacity())?;
    let cache = usize::try_from(shape.block_cache.unwrap_or(8 << 20)).unwrap_or(usize::MAX);
    let repo = FlashRepo {
        dev,
        cache: BlockCache::new(cache),
        shape,
        bloom_bits: opts.bloom_bits,
        next: AtomicU64::new(d.flash_next.max(1)),
        pointers: Mutex::new(vec![Vec::new(); shape.levels]),
        written_out: Default::default(),
    };
    let tables = repo.open_tables(&d.flash)?;
    Ok((Some(repo), FlashLevels::from_tables(tables)))
}

/// Frees every tagged run and object the directory does not reference.
fn collect_leaks(shared: &Shared, st: &DirState) -> Result<()> {
    let referenced: HashSet<u64> = st.cur.runs().map(|r| r.off).collect();
    for tag in [TAG_TABLE, TAG_WAL] {
        for a in shared.alloc.iter_chunks(tag) {
            if !referenced.contains(&a.offset) {
                shared.alloc.free_chunk(a.offset)?;
                shared.counters.leaks_collected.incr();
            }
        }
    }
    let mut keep: HashSet<u64> = st.cur.merges.iter().map(|m| m.mark).collect();
    keep.insert(st.off);
    if let Some(r) = st.cur.levels.last().and_then(|l| l.first()) {
        keep.insert(r.head);
        skiplist::walk_level(&PoolSource(&shared.pool), r.head, 0, |at, _, _| {
            keep.insert(at);
            Ok(())
        })?;
        let repaired = unlink_upper_only(shared, r.head, &keep)?;
        shared.counters.defrag_links_repaired.add(repaired);
    }
    for a in shared.alloc.iter_allocated() {
        if !keep.contains(&a.offset) {
            shared.alloc.free(a.offset)?;
            shared.counters.leaks_collected.incr();
        }
    }
    Ok(())
}

/// Unlinks, at every upper level of the repository whose head is `head`, each node that
/// level 0 does not reach (`level0`): the old node of a defragmentation move that crashed
/// after linking its copy at level 0 (`defrag.rs`). Runs before the leak collection frees
/// that node, so no link is left pointing at a freed object. Returns the links changed.
pub(crate) fn unlink_upper_only(shared: &Shared, head: u64, level0: &HashSet<u64>) -> Result<u64> {
    let pool = &shared.pool;
    let src = PoolSource(pool);
    let mut repaired = 0u64;
    for l in 1..MAX_HEIGHT {
        let (mut x, mut unlinked) = (head, 0usize);
        loop {
            let y = skiplist::next(&src, x, l)?;
            if y == 0 {
                break;
            }
            if level0.contains(&y) {
                x = y;
                continue;
            }
            // Legitimately one node (one move in flight); more means the links are damaged.
            unlinked += 1;
            if unlinked > 64 {
                return Err(Error::corruption(
                    Tier::Pmem,
                    x,
                    format!(
                        "mio: repository level {l} links more than 64 nodes that level 0 does not"
                    ),
                ));
            }
            let after = skiplist::next(&src, y, l)?;
            pool.store_u64(x + node::link_off(l), after)?;
            shared.persist("rec-unlink", x + node::link_off(l), 8)?;
            repaired += 1;
        }
    }
    Ok(repaired)
}

fn open_tables(
    shared: &Arc<Shared>,
    d: &Directory,
    shape: TableShape,
    sizes: &Sizes,
) -> Result<Vec<Vec<Arc<table::Table>>>> {
    let repo = d.levels.len() - 1;
    let mut levels = Vec::with_capacity(d.levels.len());
    for (i, l) in d.levels.iter().enumerate() {
        let shape = if i == repo {
            TableShape {
                bloom_keys: 0,
                ..shape
            }
        } else {
            shape
        };
        let merge = d.merges.iter().find(|m| m.level == i as u64);
        let mut tables = Vec::with_capacity(l.len());
        for m in l {
            // A table in a zero-copy merge lies in the oldtable's runs (which include the
            // newtable's since the merge started).
            let runs = match merge.and_then(|g| l.iter().find(|t| t.id == g.old)) {
                _ if i == repo => None, // repository nodes are objects, not runs
                Some(old) if merge.is_some_and(|g| g.new == m.id || g.old == m.id) => {
                    Some(old.allocs.as_slice())
                }
                _ => Some(m.allocs.as_slice()),
            };
            tables.push(Arc::new(table::open_table(
                shared,
                m.clone(),
                runs,
                shape,
                sizes,
            )?));
        }
        if let Some(g) = merge {
            attach_merge(shared, &mut tables, *g)?;
        }
        levels.push(tables);
    }
    Ok(levels)
}

/// Gives the two tables of an interrupted zero-copy merge their shared state and the
/// oldtable the OR of both filters (the compaction thread resumes the merge).
fn attach_merge(
    shared: &Arc<Shared>,
    tables: &mut [Arc<table::Table>],
    g: MergeMeta,
) -> Result<()> {
    let find = |id: u64| tables.iter().position(|t| t.meta.id == id);
    let (Some(o), Some(n)) = (find(g.old), find(g.new)) else {
        return Err(Error::corruption(
            Tier::Pmem,
            g.mark,
            "a zero-copy merge names tables its level does not hold",
        ));
    };
    if (o, n) != (0, 1) {
        return Err(Error::corruption(
            Tier::Pmem,
            g.mark,
            "a zero-copy merge is not of its level's two oldest tables",
        ));
    }
    let state = Arc::new(MergeState { meta: g });
    tables[0].absorb_filter(&tables[1]);
    tables[0].absorb_runs(&tables[1]);
    let _ = shared;
    let old = tables[0].rehandle(tables[0].meta.clone(), Some(state.clone()));
    let new = tables[1].rehandle(tables[1].meta.clone(), Some(state));
    tables[0] = Arc::new(old);
    tables[1] = Arc::new(new);
    Ok(())
}

/// Finishes the node move each interrupted merge was in (before any table is walked).
fn repair_marks(shared: &Shared, d: &Directory) -> Result<()> {
    for g in &d.merges {
        let level = d.levels.get(g.level as usize);
        let head = |id: u64| {
            level
                .and_then(|l| l.iter().find(|t| t.id == id))
                .map(|t| t.head)
        };
        let (Some(old), Some(new)) = (head(g.old), head(g.new)) else {
            return Err(Error::corruption(
                Tier::Pmem,
                g.mark,
                "a zero-copy merge names tables its level does not hold",
            ));
        };
        if zerocopy::repair_mark(shared, g, old, new)? {
            shared.counters.marks_repaired.incr();
        }
    }
    Ok(())
}

/// Replays each live log (oldest first) into a MemTable and flushes it; returns the
/// largest seq replayed.
fn replay_logs(inner: &Inner, logs: &[dir::LogMeta]) -> Result<u64> {
    let cs = inner.shared.alloc.chunk_size();
    let mut max_seq = 0;
    for log in logs {
        let bytes = inner
            .shared
            .pool
            .read(log.run.off, (log.run.chunks * cs) as usize)?;
        let (records, _) = wal::replay(bytes, wal::LogKey::of(log));
        let cap = node::HEAD_LEN
            + records
                .iter()
                .map(|r| node::node_len(r.key.len(), r.value.len(), MAX_HEIGHT))
                .sum::<usize>();
        let mem = Arc::new(MemTable::new(Arena::new(cap, log.id), *log, None));
        for r in &records {
            let h = mem.arena.insert(r.seq, r.kind, &r.key, &r.value)?;
            if r.kind == node::Kind::Put {
                let c = inner.sizes.put_cost(r.key.len(), r.value.len(), h);
                mem.cost.lock().add(c);
            }
            max_seq = max_seq.max(r.seq);
        }
        inner
            .shared
            .counters
            .replayed_records
            .add(records.len() as u64);
        inner.flush_memtable(&mem, false)?;
    }
    Ok(max_seq)
}
