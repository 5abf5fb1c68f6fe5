//! [`PrismDbStore`]: opening (format or recover), the [`KvStore`] operations routed to
//! partitions, `stats`, `check` and close (PrismDB §4, §6).
//!
//! Creation order: superblock (persisted) → allocator region (formatted) → root word 0
//! (the superblock's offset, persisted last); a pool whose root word is 0 holds no store.
//! The flash directory's leftover PrismDB files are removed at create.
//!
//! Thread safety: `Send + Sync`; every method takes `&self`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::{Condvar, Mutex, RwLock, RwLockWriteGuard};
use tierkv_core::media::flash::FlashDevice;
use tierkv_core::media::pmem::{PmemAllocator, PmemPool};
use tierkv_core::{EngineContext, Error, KvPair, KvStore, Limits, Result, Stats, WriteBatch};

use crate::background::Background;
use crate::format::{SUPER_LEN, Superblock};
use crate::manifest::{ManifestData, parse_name};
use crate::options::PrismDbOptions;
use crate::partition::Partition;
use crate::partition_map::PartitionMap;
use crate::shared::{EngineCounters, Shared};
use crate::slab::{Slabs, Usage};
use crate::table::BlockCache;

/// Root word holding the superblock's offset.
pub const ROOT_SUPERBLOCK: usize = 0;

/// An open PrismDB store.
pub struct PrismDbStore {
    sh: Arc<Shared>,
    background: Mutex<Background>,
}

impl std::fmt::Debug for PrismDbStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrismDbStore")
            .field("partitions", &self.sh.parts.len())
            .finish_non_exhaustive()
    }
}

/// The chunk size used when the spec does not give one: 16 KiB in pools under 64 MiB (so
/// small pools hold many slabs), else 256 KiB.
fn auto_chunk(pool_len: u64) -> u64 {
    if pool_len < 64 << 20 {
        16 << 10
    } else {
        256 << 10
    }
}

impl PrismDbStore {
    /// Opens (or, when `ctx.created`, creates) a store on the context's media.
    pub fn open(ctx: &EngineContext) -> Result<Arc<PrismDbStore>> {
        let opts = PrismDbOptions::from_params(ctx.spec.params(), ctx.options.dram_budget.bytes())?;
        let pool = ctx.media.require_pmem()?.clone();
        let dev = ctx
            .media
            .flash
            .first()
            .cloned()
            .ok_or_else(|| Error::invalid("prismdb needs a flash directory"))?;
        Self::open_media(pool, dev, opts, ctx.options.limits, ctx.created)
    }

    /// Opens (or creates) a store on a pool and a flash device (tests use this directly).
    pub fn open_media(
        pool: Arc<PmemPool>,
        dev: Arc<FlashDevice>,
        mut opts: PrismDbOptions,
        limits: Limits,
        created: bool,
    ) -> Result<Arc<PrismDbStore>> {
        let started = Instant::now();
        let sb_off = pool.data_start();
        let (alloc, sb) = if created {
            let chunk = opts.chunk_size.unwrap_or_else(|| auto_chunk(pool.len()));
            let sb = Superblock {
                chunk_size: chunk,
                classes: opts.classes.clone(),
                bounds: opts.boundaries(),
            };
            crate::format::check_classes(&sb.classes, chunk)?;
            PartitionMap::new(sb.bounds.clone())?;
            for name in dev.list_files() {
                if parse_name(&name).is_some() {
                    dev.remove_file(&name)?;
                }
            }
            pool.write(sb_off, &sb.encode()?)?;
            pool.persist(sb_off, SUPER_LEN)?;
            let start = sb_off + SUPER_LEN as u64;
            let alloc = PmemAllocator::format(pool.clone(), start, pool.len() - start, chunk)?;
            for p in 0..sb.bounds.len() + 1 {
                let m = ManifestData {
                    partition: u32::try_from(p).unwrap_or(0),
                    seq: 1,
                    next_table: 1,
                    tables: Vec::new(),
                };
                crate::manifest::commit(&dev, &m)?;
            }
            pool.set_root(ROOT_SUPERBLOCK, sb_off)?;
            (alloc, sb)
        } else {
            let off = pool.root(ROOT_SUPERBLOCK)?;
            if off != sb_off {
                return Err(Error::corruption(
                    tierkv_core::Tier::Pmem,
                    0,
                    "no prismdb superblock in this pool",
                ));
            }
            let sb = Superblock::decode(pool.read(off, SUPER_LEN)?, off)?;
            let alloc = PmemAllocator::open(pool.clone(), off + SUPER_LEN as u64)?;
            (alloc, sb)
        };
        // The superblock's layout wins over the spec's at reopen.
        opts.classes.clone_from(&sb.classes);
        opts.chunk_size = Some(sb.chunk_size);
        opts.partitions = sb.bounds.len() + 1;
        let alloc = Arc::new(alloc);
        let map = PartitionMap::new(sb.bounds)?;
        let layout = alloc.layout();
        let per_chunk = layout.chunk_size - crate::format::CHUNK_HEADER_LEN;
        // Room for deletes (FORMAT.md §3): a first slab of a tombstone's class for every
        // partition, and two to spare.
        let reserve_chunks = (map.len() as u64 + 2).min(layout.chunk_count / 4);
        // Room for batch records (FORMAT.md §3): the record of the largest batch.
        let record_chunks = crate::batch::record_chunks_for_largest_batch(layout.chunk_size)
            .min(layout.chunk_count / 8);
        let usage = Arc::new(Usage {
            used: AtomicU64::new(0),
            capacity: (layout.chunk_count - reserve_chunks - record_chunks) * per_chunk,
            chunks: AtomicU64::new(0),
            chunk_limit: layout.chunk_count,
            reserve_chunks,
            record_chunks,
        });
        // Compactions in units bounded by the flash reserve (FORMAT.md §3 "Room on
        // flash"): a table of at most a 32nd of the device.
        opts.table_size = opts.table_size.min((dev.capacity() / 32).max(64 << 10));
        let hot_cap = usize::try_from(opts.hot_notes / map.len().max(1) as u64).unwrap_or(0);
        let parts = (0..map.len())
            .map(|i| {
                let slabs = Slabs::new(
                    u32::try_from(i).unwrap_or(0),
                    sb.classes.clone(),
                    alloc.clone(),
                    usage.clone(),
                );
                Partition::new(
                    i,
                    map.lower(i).to_vec(),
                    map.upper(i).map(<[u8]>::to_vec),
                    slabs,
                    opts.tracker_min,
                    hot_cap,
                    opts.promote_reads,
                )
            })
            .collect();
        let sh = Arc::new(Shared {
            pool,
            alloc,
            dev,
            cache: BlockCache::new(usize::try_from(opts.block_cache).unwrap_or(usize::MAX)),
            opts,
            limits,
            map,
            parts,
            usage,
            counters: EngineCounters::default(),
            stop: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            wake: (Mutex::new(0), Condvar::new()),
            space: (Mutex::new(0), Condvar::new()),
            space_epoch: AtomicU64::new(0),
            op_clock: AtomicU64::new(0),
            poisoned: Mutex::new(None),
            is_poisoned: AtomicBool::new(false),
            flash_claims: Mutex::new(0),
            flash_reserve: Mutex::new(()),
            largest_files: (AtomicU64::new(0), AtomicU64::new(0)),
            flash_commit: RwLock::new(()),
            batches_done: (Mutex::new(0), Condvar::new()),
        });
        if !created {
            crate::recovery::recover(&sh)?;
        }
        sh.counters
            .recovery_micros
            .set(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX));
        let background = Background::start(&sh)?;
        Ok(Arc::new(PrismDbStore {
            sh,
            background: Mutex::new(background),
        }))
    }

    /// The shared state (tests drive compactions through it).
    pub fn shared(&self) -> &Arc<Shared> {
        &self.sh
    }

    /// Holds every compaction before its manifest commit (one in progress finishes first,
    /// old files removed) until the guard is dropped: meanwhile the flash directory and
    /// the pool change only by fast-tier writes, so a copy of the directory taken under
    /// the guard goes with any pool image taken under it (a backup, or a test's crash
    /// image under racing compactions).
    pub fn hold_flash_commits(&self) -> RwLockWriteGuard<'_, ()> {
        self.sh.flash_commit.write()
    }

    /// Stops the compaction threads (tests then call [`crate::compaction::compact`]).
    pub fn stop_background(&self) {
        self.background.lock().stop(&self.sh);
    }

    fn live(&self) -> Result<()> {
        if self.sh.closed.load(Ordering::Acquire) {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }

    fn dram_bytes(&self) -> u64 {
        let mut n = self.sh.cache.bytes();
        for p in &self.sh.parts {
            let st = p.state.read();
            let entry = std::mem::size_of::<(crate::key::DramKey, crate::partition::Loc)>();
            n += st
                .index
                .keys()
                .map(|k| entry + if k.spilled() { k.len() } else { 0 })
                .sum::<usize>();
            n += st
                .tables
                .tables
                .iter()
                .map(|t| t.dram_bytes())
                .sum::<usize>();
            drop(st);
            n += p.tracker.lock().dram_bytes();
            n += p.hot.lock().bytes();
        }
        n as u64
    }
}

impl KvStore for PrismDbStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.live()?;
        self.sh.limits.check_key(key)?;
        match self.sh.part(key) {
            Some(p) => p.get(&self.sh, key),
            None => Ok(None),
        }
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.live()?;
        self.sh.limits.check_key(key)?;
        self.sh.limits.check_value(value)?;
        let p = self
            .sh
            .part(key)
            .ok_or_else(|| Error::invalid("no partition"))?;
        p.write(&self.sh, key, Some(value))?;
        self.sh
            .counters
            .ops
            .user_bytes_written
            .add((key.len() + value.len()) as u64);
        Ok(())
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        self.live()?;
        self.sh.limits.check_key(key)?;
        let p = self
            .sh
            .part(key)
            .ok_or_else(|| Error::invalid("no partition"))?;
        p.write(&self.sh, key, None)
    }

    fn write_batch(&self, batch: &WriteBatch) -> Result<()> {
        self.live()?;
        crate::batch::write_batch(&self.sh, batch)
    }

    fn atomic_batches(&self) -> bool {
        true
    }

    fn multi_get(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        self.live()?;
        crate::batch::multi_get(&self.sh, keys)
    }

    fn scan(&self, start: &[u8], limit: usize) -> Result<Vec<KvPair>> {
        self.live()?;
        let mut out = Vec::new();
        let first = self.sh.map.partition_of(start);
        for p in self.sh.parts.iter().skip(first) {
            if out.len() >= limit {
                break;
            }
            let from = if p.id == first {
                start
            } else {
                p.lo.as_slice()
            };
            let got = p.scan(&self.sh, from, limit - out.len())?;
            for (_, v) in &got {
                self.sh.counters.ops.user_bytes_read.add(v.len() as u64);
            }
            out.extend(got);
        }
        Ok(out)
    }

    fn flush(&self) -> Result<()> {
        self.live()
    }

    fn stats(&self) -> Stats {
        let sh = &self.sh;
        let mut s = Stats::default();
        sh.counters.ops.fill(&mut s);
        // The per-tier byte counters are the media layer's: `tierkv::Db::stats` adds the
        // pool's and the device's (adding them here too counted every byte twice).
        s.dram_bytes = self.dram_bytes();
        s.recovery_micros = sh.counters.recovery_micros.get();
        let c = &sh.counters;
        for (k, v) in [
            ("prismdb_compactions_write", c.compactions_write.get()),
            ("prismdb_compactions_read", c.compactions_read.get()),
            ("prismdb_compactions_failed", c.compactions_failed.get()),
            ("prismdb_demoted", c.demoted.get()),
            ("prismdb_promoted", c.promoted.get()),
            ("prismdb_tombstones_dropped", c.tombstones_dropped.get()),
            ("prismdb_compactions_no_room", c.compactions_no_room.get()),
            (
                "prismdb_read_compactions_skipped",
                c.read_compactions_skipped.get(),
            ),
            ("prismdb_compaction_micros", c.compaction_micros.get()),
            ("prismdb_throttled_writes", c.throttled_writes.get()),
            ("prismdb_space_waits", c.space_waits.get()),
            ("prismdb_recovered_objects", c.recovered_objects.get()),
            ("prismdb_recovery_freed", c.recovery_freed.get()),
            ("prismdb_batches", c.batches.get()),
            ("prismdb_batch_ops", c.batch_ops.get()),
            ("prismdb_batches_rolled_back", c.batches_rolled_back.get()),
        ] {
            s.counters.insert(k.to_owned(), v);
        }
        let tracked: usize = sh.parts.iter().map(|p| p.tracker.lock().len()).sum();
        mapper_gauges(sh, &mut s);
        let tables: usize = sh
            .parts
            .iter()
            .map(|p| p.state.read().tables.tables.len())
            .sum();
        s.gauges
            .insert("prismdb_tracker_keys".into(), tracked as f64);
        s.gauges
            .insert("prismdb_flash_tables".into(), tables as f64);
        let noted: usize = sh.parts.iter().map(|p| p.hot.lock().len()).sum();
        s.gauges.insert("prismdb_hot_notes".into(), noted as f64);
        s.gauges
            .insert("prismdb_fast_tier_use".into(), sh.usage.ratio());
        // Pool chunks held by slabs and batch records, and how many the slabs of puts may
        // hold (FORMAT.md §3 "Room for deletes", "Room for batch records").
        s.gauges.insert(
            "prismdb_pmem_chunks_held".into(),
            sh.usage.chunks.load(std::sync::atomic::Ordering::Relaxed) as f64,
        );
        s.gauges.insert(
            "prismdb_pmem_chunks_for_puts".into(),
            sh.usage.put_chunks() as f64,
        );
        s.gauges
            .insert("prismdb_block_cache_bytes".into(), sh.cache.bytes() as f64);
        // Process-wide, outside `dram_bytes`: table images kept for the next compaction.
        s.gauges.insert(
            "sstable_image_pool_bytes".into(),
            crate::table::format::pooled_image_bytes() as f64,
        );
        let reads = (s.reads_from_pmem + s.reads_from_flash) as f64;
        if reads > 0.0 {
            s.gauges.insert(
                "prismdb_fast_read_share".into(),
                s.reads_from_pmem as f64 / reads,
            );
        }
        if let Some(wa) = s.write_amplification(true) {
            s.gauges
                .insert("prismdb_flash_bytes_per_user_byte".into(), wa);
        }
        let n = c.compactions_write.get() + c.compactions_read.get();
        if n > 0 {
            s.gauges.insert(
                "prismdb_micros_per_compaction".into(),
                c.compaction_micros.get() as f64 / n as f64,
            );
        }
        s
    }

    fn close(&self) -> Result<()> {
        if self.sh.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.background.lock().stop(&self.sh);
        Ok(())
    }

    fn check(&self) -> Result<Vec<String>> {
        self.live()?;
        crate::check::check(&self.sh)
    }
}

impl Drop for PrismDbStore {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

/// The mapper's view of the fast tier (PrismDB §4.3), summed over partitions: tracked keys
/// per clock value, the keys the mapper pins, how many of those only flash holds (what
/// promotions are for), fast-tier objects it does not pin (what compactions demote), and
/// the fullest and emptiest partition. Walks every tracker and index once: for `stats`, not
/// for a hot path.
fn mapper_gauges(sh: &Shared, s: &mut Stats) {
    use crate::mapper::{is_pinned, pin_draw, pin_probabilities};
    let mut hist = [0u64; 4];
    let (mut pinned, mut pinned_on_flash, mut fast_unpinned) = (0u64, 0u64, 0u64);
    let (mut full_min, mut full_max) = (f64::INFINITY, 0.0f64);
    for p in &sh.parts {
        let st = p.state.read();
        let fullness = Partition::fullness_of(&st.slabs, sh);
        full_min = full_min.min(fullness);
        full_max = full_max.max(fullness);
        let tracker = p.tracker.lock();
        let h = tracker.histogram();
        let probs = pin_probabilities(h, sh.opts.pin_threshold);
        for (sum, n) in hist.iter_mut().zip(h) {
            *sum += n;
        }
        for (k, clock) in tracker.iter() {
            if is_pinned(&probs, Some(clock), pin_draw(k)) {
                pinned += 1;
                if !st.index.contains_key(k) {
                    pinned_on_flash += 1;
                }
            }
        }
        fast_unpinned += st
            .index
            .iter()
            .filter(|(k, l)| !l.tomb && !is_pinned(&probs, tracker.clock(k), pin_draw(k)))
            .count() as u64;
    }
    for (v, n) in hist.iter().enumerate() {
        s.gauges
            .insert(format!("prismdb_tracker_clock{v}"), *n as f64);
    }
    for (k, v) in [
        ("prismdb_pinned_keys", pinned as f64),
        ("prismdb_pinned_only_on_flash", pinned_on_flash as f64),
        ("prismdb_fast_objects_unpinned", fast_unpinned as f64),
        ("prismdb_partition_fullness_min", full_min.min(1.0)),
        ("prismdb_partition_fullness_max", full_max),
    ] {
        s.gauges.insert(k.to_owned(), v);
    }
}
