//! Opening a PRISM store: formatting the media of a new one, or opening those of an
//! existing one and recovering (PRISM §5.5), then assembling the [`Core`].
//!
//! Creation order (the facade's manifest, written after this returns, commits the store;
//! within the pool, root word [`ROOT_SUPERBLOCK`] is set last):
//! superblock -> allocator region -> HSIT directory -> PWB heads -> key index -> Value
//! Storages -> root word.
//!
//! Thread safety: runs on the opening thread before anything else can see the store.

use std::sync::Arc;

use crossbeam::channel;
use parking_lot::Mutex;
use tierkv_core::media::flash::FlashDevice;
use tierkv_core::media::pmem::{DEFAULT_CHUNK_SIZE, PmemAllocator, PmemPool};
use tierkv_core::{EngineContext, Error, Limits, Result, Tier};

use super::core::{ChainBatch, Core, Table};
use super::lifecycle::{ChannelSignal, Lifecycle, Signal, SpaceState};
use crate::combining::CombiningMode;
use crate::hsit::Hsit;
use crate::key_index::PersistentKeyIndex;
use crate::options::{PrismOptions, ReadBatching};
use crate::pwb::record::HEADER_LEN;
use crate::pwb::{Pwb, PwbSet};
use crate::stats::PrismCounters;
use crate::superblock::{self, PlanInput, ROOT_KEY_INDEX, ROOT_SUPERBLOCK, Superblock};
use crate::svc::{EvictFn, EvictionBatch, ScanAwareValueCache};
use crate::value_storage::ValueStorage;
use crate::value_storage::chunk_format::max_value_len;
use crate::value_storage::location::{MAX_CHUNK_SIZE, MAX_STORAGES};

/// Allocator chunks (and HSIT segments) of 256 KiB (16384 HSIT entries per segment), or
/// 64 KiB in pools under 64 MiB, so that small (test) pools still hold many segments.
pub(crate) fn alloc_chunk(pool_len: u64) -> u64 {
    if pool_len < 64 << 20 {
        64 << 10
    } else {
        DEFAULT_CHUNK_SIZE
    }
}
/// The allocator region must hold at least this many chunks (HSIT + key index).
pub(crate) const MIN_ALLOC_CHUNKS: u64 = 16;
/// Evicted scan chains queued for rewriting before further ones are dropped.
const CHAIN_QUEUE: usize = 64;

/// The parts opened or formatted from the media, before the DRAM-only ones are added.
struct Parts {
    sb: Superblock,
    alloc: Arc<PmemAllocator>,
    hsit: Arc<Table>,
    pwbs: PwbSet,
    index: PersistentKeyIndex,
    storages: Vec<ValueStorage>,
}

/// Opens (or creates) the store `ctx` describes; the caller runs recovery when
/// `!ctx.created` and starts the background threads.
pub fn open_core(ctx: &EngineContext) -> Result<Arc<Core>> {
    let opts = PrismOptions::parse(&ctx.spec, &ctx.options)?;
    let pool = ctx.media.require_pmem()?.clone();
    let devices = &ctx.media.flash;
    if devices.is_empty() || devices.len() > MAX_STORAGES as usize {
        return Err(Error::invalid(format!(
            "PRISM needs between 1 and {MAX_STORAGES} flash directories, got {}",
            devices.len()
        )));
    }
    let parts = if ctx.created {
        format(&pool, devices, &opts)?
    } else {
        reopen(&pool, devices, &opts)?
    };
    assemble(pool, parts, opts, ctx.options.limits)
}

fn combining(opts: &PrismOptions) -> CombiningMode {
    match opts.read_batching {
        ReadBatching::Combining if opts.queue_depth > 1 => CombiningMode::Combining,
        ReadBatching::Combining | ReadBatching::Single => CombiningMode::Single,
        ReadBatching::Timeout => CombiningMode::Timeout {
            micros: opts.batch_timeout_us,
        },
    }
}

fn format(
    pool: &Arc<PmemPool>,
    devices: &[Arc<FlashDevice>],
    opts: &PrismOptions,
) -> Result<Parts> {
    let chunk_size = opts.chunk_size_or_default();
    if chunk_size > u64::from(MAX_CHUNK_SIZE) {
        return Err(Error::invalid(format!(
            "chunk_size {chunk_size} exceeds the largest chunk a value location can address \
             ({MAX_CHUNK_SIZE})"
        )));
    }
    let (sb_off, sb) = superblock::plan(&PlanInput {
        data_start: pool.data_start().next_multiple_of(superblock::REGION_ALIGN),
        pool_len: pool.len(),
        pwb_count: opts.pwb_count_or_default(),
        pwb_size: opts.pwb_size_or_default(pool.len()),
        alloc_chunk: alloc_chunk(pool.len()),
        min_alloc_len: MIN_ALLOC_CHUNKS * alloc_chunk(pool.len()),
        chunk_size: u32::try_from(chunk_size).map_err(|_| Error::invalid("chunk_size"))?,
        flash_count: u32::try_from(devices.len()).unwrap_or(u32::MAX),
    })?;
    pool.write_persist(sb_off, &sb.encode())?;
    let alloc = Arc::new(PmemAllocator::format(
        pool.clone(),
        sb.alloc_off,
        sb.alloc_len,
        alloc_chunk(pool.len()),
    )?);
    let hsit = Arc::new(Hsit::create(pool.clone(), alloc.clone(), &sb)?);
    let pwbs = each(sb.pwb_count, |i| {
        Pwb::create(pool.clone(), &sb, i, opts.reclaim_limits())
    })?;
    let index = PersistentKeyIndex::create(pool.clone(), alloc.clone(), ROOT_KEY_INDEX)?;
    let storages = each_device(devices, |id, dev| {
        let capacity = dev.capacity();
        ValueStorage::create(
            id,
            dev,
            capacity,
            sb.chunk_size,
            combining(opts),
            opts.queue_depth,
        )
    })?;
    // IMPORTANT: the root word is the pool's commit point of the format.
    pool.set_root(ROOT_SUPERBLOCK, sb_off)?;
    Ok(Parts {
        sb,
        alloc,
        hsit,
        pwbs: PwbSet::new(pwbs),
        index,
        storages,
    })
}

/// `make(i)` for `i` in `0..n`, or the first error.
fn each<T>(n: u32, make: impl Fn(u32) -> Result<T>) -> Result<Vec<T>> {
    (0..n).map(make).collect()
}

/// `make(id, device)` for each flash device, ids in manifest order.
fn each_device(
    devices: &[Arc<FlashDevice>],
    make: impl Fn(u8, Arc<FlashDevice>) -> Result<ValueStorage>,
) -> Result<Vec<ValueStorage>> {
    devices
        .iter()
        .enumerate()
        .map(|(i, dev)| make(u8::try_from(i).unwrap_or(u8::MAX), dev.clone()))
        .collect()
}

fn reopen(
    pool: &Arc<PmemPool>,
    devices: &[Arc<FlashDevice>],
    opts: &PrismOptions,
) -> Result<Parts> {
    let sb_off = pool.root(ROOT_SUPERBLOCK)?;
    if sb_off == 0 {
        return Err(Error::corruption(
            Tier::Pmem,
            0,
            "the pool holds no PRISM superblock (root word 0 is empty)",
        ));
    }
    let sb = superblock::decode(pool.read(sb_off, superblock::LEN)?, sb_off)?;
    sb.validate(pool.data_start(), pool.len(), sb_off)?;
    opts.check_matches(sb.pwb_count, sb.pwb_size, u64::from(sb.chunk_size))?;
    if sb.flash_count as usize != devices.len() {
        return Err(Error::invalid(format!(
            "the store was created with {} flash directories, opened with {}",
            sb.flash_count,
            devices.len()
        )));
    }
    let alloc = Arc::new(PmemAllocator::open(pool.clone(), sb.alloc_off)?);
    let hsit = Arc::new(Hsit::open(pool.clone(), alloc.clone(), &sb)?);
    let pwbs = each(sb.pwb_count, |i| {
        Pwb::open(pool.clone(), &sb, i, opts.reclaim_limits())
    })?;
    let index = PersistentKeyIndex::open(pool.clone(), alloc.clone(), ROOT_KEY_INDEX)?;
    let storages = each_device(devices, |id, dev| {
        ValueStorage::open(id, dev, sb.chunk_size, combining(opts), opts.queue_depth)
    })?;
    Ok(Parts {
        sb,
        alloc,
        hsit,
        pwbs: PwbSet::new(pwbs),
        index,
        storages,
    })
}

/// The largest value this store accepts: the configured limit, one chunk's payload, and
/// half a PWB (PWB records never wrap).
fn engine_limits(limits: Limits, sb: &Superblock) -> Limits {
    let pwb_max = usize::try_from(sb.pwb_size / 2)
        .unwrap_or(usize::MAX)
        .saturating_sub(HEADER_LEN);
    Limits {
        max_value_len: limits
            .max_value_len
            .min(max_value_len(sb.chunk_size))
            .min(pwb_max),
        ..limits
    }
}

fn assemble(
    pool: Arc<PmemPool>,
    parts: Parts,
    opts: PrismOptions,
    limits: Limits,
) -> Result<Arc<Core>> {
    let (chain_tx, chain_rx) = channel::bounded::<ChainBatch>(CHAIN_QUEUE);
    let hsit = parts.hsit.clone();
    let writeback = opts.scan_writeback;
    let chains_dropped = Arc::new(tierkv_core::Counter::default());
    let dropped = chains_dropped.clone();
    let evict: EvictFn = Arc::new(move |b: EvictionBatch| {
        let guard = crossbeam_epoch::pin();
        let evicted = &b.evicted;
        let evicted_loc =
            hsit.cache()
                .clear_if(evicted.slot(), |v| Arc::ptr_eq(v, evicted), &guard);
        if writeback && b.chain.len() > 1 {
            let members: ChainBatch = b
                .chain
                .iter()
                .filter_map(|cv| {
                    let loc = if Arc::ptr_eq(cv, evicted) {
                        evicted_loc
                    } else {
                        hsit.cache()
                            .loc_of(cv.slot(), |v| Arc::ptr_eq(v, cv), &guard)
                    };
                    loc.map(|l| (cv.clone(), l))
                })
                .collect();
            // NOTE: co-locating a chain is an optimisation; when the GC thread is behind,
            // the chain is dropped (and counted) rather than stalling the cache thread.
            if chain_tx.try_send(members).is_err() {
                dropped.incr();
            }
        }
    });
    for s in &parts.storages {
        let chunks = f64::from(s.chunk_count()) * opts.gc_threshold;
        s.set_gc_threshold(chunks.ceil() as usize);
    }
    let svc = ScanAwareValueCache::new(opts.svc_size, evict)?;
    Ok(Arc::new(Core {
        limits: engine_limits(limits, &parts.sb),
        pool,
        alloc: parts.alloc,
        sb: parts.sb,
        index: parts.index,
        hsit: parts.hsit,
        pwbs: parts.pwbs,
        storages: parts.storages,
        svc,
        opts,
        counters: PrismCounters {
            chains_dropped,
            ..PrismCounters::default()
        },
        life: Lifecycle::default(),
        space: SpaceState::default(),
        reclaim_signal: Signal::default(),
        gc_signal: ChannelSignal::default(),
        reclaim_locks: (0..parts.sb.pwb_count).map(|_| Mutex::new(())).collect(),
        gc_lock: Mutex::new(()),
        chains: Mutex::new(Some(chain_rx)),
    }))
}
