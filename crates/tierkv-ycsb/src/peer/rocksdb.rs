//! The RocksDB peer (cargo feature `rocksdb`; `--engines rocksdb`): the LSM tree users would
//! otherwise pick, configured to use the same machine the way our engines do (DESIGN §6).
//!
//! # Configuration (every option this peer sets; everything else is RocksDB's default)
//! - **DRAM budget `B` = `--dram`**, split so that RocksDB's memory stays inside it:
//!   memtables get `M = B / 4` (a `WriteBufferManager` of `M`, `write_buffer_size = M / 2`,
//!   `max_write_buffer_number = 2`), the LRU block cache gets `B - M`, and index and filter
//!   blocks live in the block cache (`cache_index_and_filter_blocks`), so they are inside
//!   the budget too. They are *partitioned* (`kTwoLevelIndexSearch`, `partition_filters`,
//!   the top level pinned, L0's pinned, index and filter blocks at high priority), RocksDB's
//!   own recipe for a block cache smaller than the index: with one monolithic index block
//!   per table, small records (8-byte keys, 64-byte values) made each get re-read a
//!   ~150 KiB index block from flash, and a peer configured into that thrash would be a
//!   crippled one.
//! - Bloom filters of 10 bits per key (full filters), no compression (our engines do not
//!   compress, and the peer is built without compression libraries).
//! - **Direct I/O**: `use_direct_reads` and `use_direct_io_for_flush_and_compaction`.
//! - **Tiers**: the WAL (`wal_dir`) and the first `db_paths` entry on the pmem path; the
//!   second `db_paths` entry on the flash path with target size `--flash-size`.
//!   `max_bytes_for_level_base = 4 × write_buffer_size` and the first path's target size is
//!   exactly that, so by RocksDB's placement rule (`CompactionPicker::GetPathId`: L0 is
//!   estimated at `max_bytes_for_level_base`, each level takes the first path with room)
//!   L0, the flush output, lives on the pmem path and L1 and below on flash.
//!   `level_compaction_dynamic_level_bytes` is off (RocksDB ignores it with several paths).
//!   With `rocksdb@placement=pmem` ([`RocksPlacement::Pmem`]) there is one `db_paths` entry,
//!   on the pmem path, and every level lives there (the level sizes stay the same), the
//!   baseline of the pmem-only papers; nothing goes to the flash path.
//! - **Emulated pmem latency** (`--pmem-latency`): the files under the pmem path (the WAL,
//!   and the tables placed there) pay it as the engines' pools do, per 64-byte line read
//!   and per sync ([`super::slow_pmem`]); the manifest and the flash path's tables do not.
//!   The engine counters `emulated_pmem_lines_read` and `emulated_pmem_syncs` say what was
//!   charged.
//! - **Every write synced** (`WriteOptions::set_sync(true)`): a put returns once its WAL
//!   record is synced, which is what "acknowledged" means for our engines.
//! - Statistics on (`enable_statistics`), read back as tickers.
//!
//! # Counters (how RocksDB's statistics map onto [`Stats`])
//! - `user_bytes_written` / `user_bytes_read`: key + value bytes of acknowledged puts / value
//!   bytes returned, counted by this peer (as our engines count them).
//! - `pmem_bytes_written` = `rocksdb.wal.bytes` + `rocksdb.flush.write.bytes`: the WAL and the
//!   flushed L0 tables, the only files on the pmem path.
//! - `flash_bytes_written` = `rocksdb.compact.write.bytes`: every compaction writes L1 or
//!   below, which live on the flash path (an intra-L0 compaction, which RocksDB runs only
//!   when L0 is congested, would be counted here though it writes the pmem path).
//! - `flash_bytes_read` = `rocksdb.last.level.read.bytes` + `rocksdb.non.last.level.read.bytes`:
//!   every byte read from table files, by gets, scans and compactions. RocksDB does not split
//!   file reads by path, so reads of the L0 tables on the pmem path are included here and
//!   `pmem_bytes_read` stays 0.
//! - `pmem_persists` = `rocksdb.wal.synced`; `flash_syncs` is not counted by RocksDB (0).
//! - `reads_from_dram` = `rocksdb.memtable.hit`, `reads_from_pmem` = `rocksdb.l0.hit`,
//!   `reads_from_flash` = `rocksdb.l1.hit` + `rocksdb.l2andup.hit`: gets by the level that
//!   held the key (a block-cache hit counts under its level's tier).
//! - `dram_bytes` = `rocksdb.estimate-table-readers-mem` + `rocksdb.cur-size-all-mem-tables`
//!   + block cache usage.
//! - With `placement=pmem` every table is on the pmem path: `pmem_bytes_written` adds
//!   `rocksdb.compact.write.bytes`, the table reads are `pmem_bytes_read`, every level's
//!   hits are `reads_from_pmem`, and the flash counters are 0.
//! - The raw tickers are in the engine counters, under their RocksDB names.
//!
//! # Schema workloads
//! `--schema` runs the field-level API over the peer through tierkv's adapters: the peer's
//! store side ([`RocksKv`]) is a [`KvStore`], and `consolidated` (also for `native`: RocksDB
//! has no schema store of its own) or `scattered` wraps it, as over our engines without a
//! native schema store.
//!
//! Thread safety: `DB` is `Send + Sync` (RocksDB's own locking); the counters are atomics.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use anyhow::Context as _;
use rocksdb::statistics::Ticker;
use rocksdb::{
    BlockBasedIndexType, BlockBasedOptions, Cache, DB, DBCompressionType, DBPath, Direction,
    IteratorMode, Options, WriteBufferManager, WriteOptions,
};
use tierkv::core::schema::{Consolidated, Scattered};
use tierkv::{BatchOp, Error, KvPair, KvStore, SchemaStore, Stats, WriteBatch};

use super::slow_pmem::SlowPmem;
use super::{BenchTarget, MediaSettings, RocksPlacement, TargetPlacement};
use crate::schema::SchemaLayout;

/// The tickers copied into the engine counters.
const RAW_TICKERS: &[Ticker] = &[
    Ticker::WalFileBytes,
    Ticker::WalFileSynced,
    Ticker::FlushWriteBytes,
    Ticker::CompactReadBytes,
    Ticker::CompactWriteBytes,
    Ticker::LastLevelReadBytes,
    Ticker::NonLastLevelReadBytes,
    Ticker::MemtableHit,
    Ticker::GetHitL0,
    Ticker::GetHitL1,
    Ticker::GetHitL2AndUp,
    Ticker::BlockCacheHit,
    Ticker::BlockCacheMiss,
    Ticker::StallMicros,
];

/// The DRAM split: memtables get a quarter of the budget, the block cache the rest.
const MEMTABLE_SHARE: u64 = 4;
/// Bloom filter bits per key.
const BLOOM_BITS_PER_KEY: f64 = 10.0;
/// `max_bytes_for_level_base` in write buffers (L0 holds about four before compacting).
const LEVEL_BASE_IN_BUFFERS: u64 = 4;

/// RocksDB, opened for a benchmark.
pub struct RocksDbPeer {
    kv: Arc<RocksKv>,
}

/// The peer's store: RocksDB behind the [`KvStore`] API (what the schema adapters wrap).
pub struct RocksKv {
    db: DB,
    options: Options,
    cache: Cache,
    sync: WriteOptions,
    dir: PathBuf,
    placement: RocksPlacement,
    slow_pmem: Option<SlowPmem>,
    closed: AtomicBool,
    user_bytes_written: AtomicU64,
    user_bytes_read: AtomicU64,
}

/// The options this peer opens RocksDB with, its block cache and, with emulated pmem
/// latency, its slowed pmem path.
pub fn options(
    place: &TargetPlacement,
    media: &MediaSettings,
    placement: RocksPlacement,
) -> anyhow::Result<(Options, Cache, Option<SlowPmem>)> {
    let budget = usize::try_from(media.dram.bytes()).context("--dram does not fit in memory")?;
    let memtables = budget / MEMTABLE_SHARE as usize;
    let write_buffer = memtables / 2;
    let level_base = write_buffer as u64 * LEVEL_BASE_IN_BUFFERS;
    let cache = Cache::new_lru_cache(budget - memtables);
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(&cache);
    table.set_cache_index_and_filter_blocks(true);
    table.set_cache_index_and_filter_blocks_with_high_priority(true);
    table.set_index_type(BlockBasedIndexType::TwoLevelIndexSearch);
    table.set_partition_filters(true);
    table.set_pin_top_level_index_and_filter(true);
    table.set_pin_l0_filter_and_index_blocks_in_cache(true);
    table.set_bloom_filter(BLOOM_BITS_PER_KEY, false);
    let (mut o, slow_pmem) = super::slow_pmem::base_options(&place.pmem_dir, media.pmem_latency)?;
    o.create_if_missing(true);
    o.set_block_based_table_factory(&table);
    o.set_write_buffer_manager(&WriteBufferManager::new_write_buffer_manager(
        memtables, false,
    ));
    o.set_write_buffer_size(write_buffer);
    o.set_max_write_buffer_number(2);
    o.set_compression_type(DBCompressionType::None);
    o.set_use_direct_reads(true);
    o.set_use_direct_io_for_flush_and_compaction(true);
    o.set_level_compaction_dynamic_level_bytes(false);
    o.set_max_bytes_for_level_base(level_base);
    o.set_wal_dir(wal_dir(place));
    match placement {
        RocksPlacement::Tiered => o.set_db_paths(&[
            DBPath::new(sst_pmem_dir(place), level_base)?,
            DBPath::new(&place.flash_dir, media.flash_size.bytes())?,
        ]),
        // One path: RocksDB places every level in it whatever its target size.
        RocksPlacement::Pmem => {
            o.set_db_paths(&[DBPath::new(sst_pmem_dir(place), media.pmem_size.bytes())?])
        }
    }
    o.enable_statistics();
    Ok((o, cache, slow_pmem))
}

fn wal_dir(place: &TargetPlacement) -> PathBuf {
    place.pmem_dir.join("wal")
}

fn sst_pmem_dir(place: &TargetPlacement) -> PathBuf {
    place.pmem_dir.join("sst")
}

impl RocksDbPeer {
    /// The store side, as a [`KvStore`].
    pub fn store(&self) -> &Arc<RocksKv> {
        &self.kv
    }

    /// The directory RocksDB keeps its manifest in.
    pub fn dir(&self) -> &Path {
        &self.kv.dir
    }

    /// Opens a fresh RocksDB in `place`, its files placed as `placement` says.
    pub fn open(
        place: &TargetPlacement,
        media: &MediaSettings,
        placement: RocksPlacement,
    ) -> anyhow::Result<Self> {
        let mut dirs = vec![wal_dir(place), sst_pmem_dir(place)];
        if placement == RocksPlacement::Tiered {
            dirs.push(place.flash_dir.clone());
        }
        for d in dirs {
            std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
        }
        let (options, cache, slow_pmem) = options(place, media, placement)?;
        let db = DB::open(&options, &place.data_dir)
            .with_context(|| format!("opening RocksDB in {}", place.data_dir.display()))?;
        let mut sync = WriteOptions::default();
        sync.set_sync(true);
        Ok(RocksDbPeer {
            kv: Arc::new(RocksKv {
                db,
                options,
                cache,
                sync,
                dir: place.data_dir.clone(),
                placement,
                slow_pmem,
                closed: AtomicBool::new(false),
                user_bytes_written: AtomicU64::new(0),
                user_bytes_read: AtomicU64::new(0),
            }),
        })
    }
}

impl RocksKv {
    fn check_open(&self) -> tierkv::Result<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }

    fn error(&self, op: &'static str, e: rocksdb::Error) -> Error {
        Error::io(op, &self.dir, std::io::Error::other(e.into_string()))
    }

    fn ticker(&self, t: Ticker) -> u64 {
        self.options.get_ticker_count(t)
    }

    fn property(&self, name: &str) -> u64 {
        self.db.property_int_value(name).ok().flatten().unwrap_or(0)
    }

    /// Calls `f` on up to `limit` pairs from `start`, in key order, counting the value
    /// bytes read.
    fn visit(
        &self,
        start: &[u8],
        limit: usize,
        mut f: impl FnMut(Box<[u8]>, Box<[u8]>),
    ) -> tierkv::Result<()> {
        self.check_open()?;
        let mut bytes = 0u64;
        for item in self
            .db
            .iterator(IteratorMode::From(start, Direction::Forward))
            .take(limit)
        {
            let (k, v) = item.map_err(|e| self.error("rocksdb scan", e))?;
            bytes += v.len() as u64;
            f(k, v);
        }
        self.user_bytes_read.fetch_add(bytes, Ordering::Relaxed);
        Ok(())
    }

    /// Counts up to `limit` pairs from `start` (the benchmark's scan: no pairs collected).
    fn scan_count(&self, start: &[u8], limit: usize) -> tierkv::Result<usize> {
        let mut rows = 0;
        self.visit(start, limit, |_, _| rows += 1)?;
        Ok(rows)
    }
}

impl BenchTarget for RocksDbPeer {
    fn get(&self, key: &[u8]) -> tierkv::Result<Option<Vec<u8>>> {
        self.kv.get(key)
    }

    fn put(&self, key: &[u8], value: &[u8]) -> tierkv::Result<()> {
        self.kv.put(key, value)
    }

    fn write_batch(&self, batch: &WriteBatch) -> tierkv::Result<()> {
        self.kv.write_batch(batch)
    }

    fn scan(&self, start: &[u8], limit: usize) -> tierkv::Result<usize> {
        self.kv.scan_count(start, limit)
    }

    /// The adapters over the peer's store; `native` is `consolidated` (no schema store of
    /// its own).
    fn schema_store(&self, layout: SchemaLayout) -> tierkv::Result<Arc<dyn SchemaStore>> {
        let kv: Arc<dyn KvStore> = self.kv.clone();
        Ok(match layout {
            SchemaLayout::Native | SchemaLayout::Consolidated => Arc::new(Consolidated::open(kv)?),
            SchemaLayout::Scattered => Arc::new(Scattered::open(kv)?),
        })
    }

    fn stats(&self) -> Stats {
        KvStore::stats(&*self.kv)
    }

    fn close(&self) -> tierkv::Result<()> {
        KvStore::close(&*self.kv)
    }
}

impl KvStore for RocksKv {
    fn get(&self, key: &[u8]) -> tierkv::Result<Option<Vec<u8>>> {
        self.check_open()?;
        let v = self.db.get(key).map_err(|e| self.error("rocksdb get", e))?;
        if let Some(v) = &v {
            self.user_bytes_read
                .fetch_add(v.len() as u64, Ordering::Relaxed);
        }
        Ok(v)
    }

    fn put(&self, key: &[u8], value: &[u8]) -> tierkv::Result<()> {
        self.check_open()?;
        self.db
            .put_opt(key, value, &self.sync)
            .map_err(|e| self.error("rocksdb put", e))?;
        self.user_bytes_written
            .fetch_add((key.len() + value.len()) as u64, Ordering::Relaxed);
        Ok(())
    }

    /// One `rocksdb::WriteBatch` written with the puts' `WriteOptions` (synced WAL): atomic
    /// and durable once it returns, as `Db::write` is.
    fn write_batch(&self, batch: &WriteBatch) -> tierkv::Result<()> {
        self.check_open()?;
        let mut wb = rocksdb::WriteBatch::default();
        let mut bytes = 0u64;
        for (k, op) in batch.iter() {
            match op {
                BatchOp::Put(v) => {
                    wb.put(k, v);
                    bytes += (k.len() + v.len()) as u64;
                }
                BatchOp::Delete => wb.delete(k),
            }
        }
        self.db
            .write_opt(wb, &self.sync)
            .map_err(|e| self.error("rocksdb write batch", e))?;
        self.user_bytes_written.fetch_add(bytes, Ordering::Relaxed);
        Ok(())
    }

    fn delete(&self, key: &[u8]) -> tierkv::Result<()> {
        self.check_open()?;
        self.db
            .delete_opt(key, &self.sync)
            .map_err(|e| self.error("rocksdb delete", e))
    }

    fn scan(&self, start: &[u8], limit: usize) -> tierkv::Result<Vec<KvPair>> {
        let mut rows = Vec::new();
        self.visit(start, limit, |k, v| rows.push((k.into_vec(), v.into_vec())))?;
        Ok(rows)
    }

    /// Flushes the memtables (acknowledged writes are already durable in the WAL).
    fn flush(&self) -> tierkv::Result<()> {
        self.check_open()?;
        self.db.flush().map_err(|e| self.error("rocksdb flush", e))
    }

    fn atomic_batches(&self) -> bool {
        true
    }

    fn stats(&self) -> Stats {
        let t = |x| self.ticker(x);
        let mut s = Stats {
            user_bytes_written: self.user_bytes_written.load(Ordering::Relaxed),
            user_bytes_read: self.user_bytes_read.load(Ordering::Relaxed),
            pmem_bytes_written: t(Ticker::WalFileBytes) + t(Ticker::FlushWriteBytes),
            pmem_persists: t(Ticker::WalFileSynced),
            flash_bytes_written: t(Ticker::CompactWriteBytes),
            flash_bytes_read: t(Ticker::LastLevelReadBytes) + t(Ticker::NonLastLevelReadBytes),
            reads_from_dram: t(Ticker::MemtableHit),
            reads_from_pmem: t(Ticker::GetHitL0),
            reads_from_flash: t(Ticker::GetHitL1) + t(Ticker::GetHitL2AndUp),
            dram_bytes: self.property("rocksdb.estimate-table-readers-mem")
                + self.property("rocksdb.cur-size-all-mem-tables")
                + self.cache.get_usage() as u64,
            ..Stats::default()
        };
        if self.placement == RocksPlacement::Pmem {
            // Every table is on the pmem path.
            s.pmem_bytes_written += std::mem::take(&mut s.flash_bytes_written);
            s.pmem_bytes_read = std::mem::take(&mut s.flash_bytes_read);
            s.reads_from_pmem += std::mem::take(&mut s.reads_from_flash);
        }
        for ticker in RAW_TICKERS {
            s.counters.insert(ticker.name().to_owned(), t(*ticker));
        }
        if let Some(slow) = &self.slow_pmem {
            let c = slow.charged();
            s.counters
                .insert("emulated_pmem_lines_read".to_owned(), c.lines);
            s.counters.insert("emulated_pmem_syncs".to_owned(), c.syncs);
        }
        s
    }

    fn close(&self) -> tierkv::Result<()> {
        if !self.closed.swap(true, Ordering::AcqRel) {
            // Acknowledged writes are already synced; stop compactions and wait for them.
            // The files are released when the peer is dropped.
            self.db.cancel_all_background_work(true);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tierkv::{ByteSize, DurabilityMode};

    fn open(tmp: &Path) -> RocksDbPeer {
        open_placed(tmp, RocksPlacement::Tiered)
    }

    fn open_placed(tmp: &Path, placement: RocksPlacement) -> RocksDbPeer {
        open_slowed(tmp, placement, Default::default())
    }

    fn open_slowed(
        tmp: &Path,
        placement: RocksPlacement,
        pmem_latency: tierkv::EmulatedLatency,
    ) -> RocksDbPeer {
        let place = TargetPlacement {
            data_dir: tmp.join("data"),
            pmem_dir: tmp.join("pmem"),
            flash_dir: tmp.join("flash"),
        };
        let media = MediaSettings {
            dram: ByteSize::mib(16),
            pmem_size: ByteSize::mib(64),
            pmem_mode: DurabilityMode::Volatile,
            pmem_latency,
            flash_size: ByteSize::gib(1),
        };
        RocksDbPeer::open(&place, &media, placement).unwrap()
    }

    #[test]
    fn puts_gets_and_scans_round_trip_and_count_user_bytes() {
        let tmp = tempfile::tempdir().unwrap();
        let p = open(tmp.path());
        for i in 0..100u32 {
            p.put(format!("k{i:03}").as_bytes(), &[7; 10]).unwrap();
        }
        assert_eq!(p.get(b"k042").unwrap(), Some(vec![7; 10]));
        assert_eq!(p.get(b"nope").unwrap(), None);
        assert_eq!(p.scan(b"k090", 50).unwrap(), 10);
        let mut b = WriteBatch::new();
        b.put("k200", [9u8; 10])
            .put("k201", [9u8; 10])
            .delete("k000");
        p.write_batch(&b).unwrap();
        assert_eq!(p.get(b"k201").unwrap(), Some(vec![9; 10]));
        assert_eq!(p.get(b"k000").unwrap(), None);
        let s = p.stats();
        assert_eq!(s.user_bytes_written, 102 * (4 + 10));
        assert!(
            s.pmem_bytes_written > s.user_bytes_written,
            "WAL bytes on the pmem path"
        );
        assert!(s.pmem_persists >= 100, "every put synced its WAL record");
        // k042, k201 and k000's tombstone: RocksDB counts a deletion found in the memtable
        // as a memtable hit (`nope` is no hit).
        assert_eq!(s.reads_from_dram, 3, "the hits came from the memtable");
        assert!(s.dram_bytes > 0);
        p.close().unwrap();
        assert!(matches!(p.get(b"k001"), Err(Error::Closed)));
    }

    /// 16 MiB budget: 2 MiB write buffers, an 8 MiB L0; writes ~40 MiB and flushes.
    fn fill(p: &RocksDbPeer) {
        let value = [1u8; 1000];
        for i in 0..40_000u32 {
            p.put(
                &crate::generator::fnvhash64(u64::from(i)).to_le_bytes(),
                &value,
            )
            .unwrap();
        }
        p.kv.db.flush().unwrap();
    }

    #[test]
    fn tables_go_to_pmem_then_flash_by_level() {
        let tmp = tempfile::tempdir().unwrap();
        let p = open(tmp.path());
        fill(&p);
        // Automatic compactions (a manual compact_range would write path 0, its default
        // target_path_id) move L0 into L1, on the flash path.
        let count = |d: &str| std::fs::read_dir(tmp.path().join(d)).unwrap().count();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while count("flash") == 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert!(count("flash") > 0, "L1 tables live on the flash path");
        let s = p.stats();
        assert!(
            s.flash_bytes_written > 0,
            "compactions wrote the flash path: {s:?}"
        );
        assert!(
            s.pmem_bytes_written > s.user_bytes_written,
            "WAL and L0 flushes on the pmem path: {s:?}"
        );
        p.close().unwrap();
    }

    #[test]
    fn emulated_pmem_latency_charges_the_pmem_path_files_and_nothing_without_it() {
        let tmp = tempfile::tempdir().unwrap();
        let p = open_slowed(tmp.path(), RocksPlacement::Pmem, Default::default());
        p.put(b"k", b"v").unwrap();
        assert!(
            !p.stats().counters.contains_key("emulated_pmem_syncs"),
            "no latency, no slowed Env"
        );
        p.close().unwrap();

        let tmp = tempfile::tempdir().unwrap();
        let latency = tierkv::EmulatedLatency {
            read_ns_per_line: 1,
            persist_ns: 1,
        };
        let p = open_slowed(tmp.path(), RocksPlacement::Pmem, latency);
        for i in 0..50u32 {
            p.put(format!("k{i:03}").as_bytes(), &[7; 1000]).unwrap();
        }
        let s = p.stats();
        assert!(
            s.counters["emulated_pmem_syncs"] >= 50,
            "every synced put paid a persist: {:?}",
            s.counters
        );
        assert_eq!(
            s.counters["emulated_pmem_lines_read"], 0,
            "nothing read yet"
        );
        p.kv.db.flush().unwrap();
        // A table on the pmem path: opening it reads its footer and meta blocks, and a get
        // that misses the memtable reads its data block.
        let before = p.stats().counters["emulated_pmem_lines_read"];
        assert!(before > 0, "the new table was read when opened");
        assert_eq!(p.get(b"k007").unwrap(), Some(vec![7; 1000]));
        let s = p.stats();
        assert!(
            s.counters["emulated_pmem_lines_read"] > before,
            "the get read a data block: {:?}",
            s.counters
        );
        p.close().unwrap();
    }

    #[test]
    fn with_placement_pmem_every_level_stays_on_the_pmem_path() {
        let tmp = tempfile::tempdir().unwrap();
        let p = open_placed(tmp.path(), RocksPlacement::Pmem);
        fill(&p);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while p.stats().pmem_bytes_written
            <= p.stats().counters["rocksdb.wal.bytes"]
                + p.stats().counters["rocksdb.flush.write.bytes"]
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let s = p.stats();
        assert!(
            s.counters["rocksdb.compact.write.bytes"] > 0,
            "compactions ran: {s:?}"
        );
        assert!(
            !tmp.path().join("flash").exists(),
            "nothing on the flash path"
        );
        assert_eq!(s.flash_bytes_written, 0, "{s:?}");
        assert_eq!(
            s.pmem_bytes_written,
            s.counters["rocksdb.wal.bytes"]
                + s.counters["rocksdb.flush.write.bytes"]
                + s.counters["rocksdb.compact.write.bytes"],
            "WAL, flushes and compactions all write the pmem path"
        );
        assert!(
            p.get(&crate::generator::fnvhash64(7).to_le_bytes())
                .unwrap()
                .is_some()
        );
        p.close().unwrap();
    }

    #[test]
    fn the_schema_adapters_run_over_the_peer() {
        use tierkv::{FieldDef, FieldSelection};
        for layout in [
            SchemaLayout::Native,
            SchemaLayout::Consolidated,
            SchemaLayout::Scattered,
        ] {
            let tmp = tempfile::tempdir().unwrap();
            let p = open(tmp.path());
            let store = p.schema_store(layout).unwrap();
            let s = store
                .create_schema("t", &[FieldDef::fixed("a", 2), FieldDef::fixed("b", 3)])
                .unwrap();
            for i in 0..10u8 {
                store.put_row(s.id, &[b'k', i], &[&[i, i], b"xyz"]).unwrap();
            }
            assert!(store.update_fields(s.id, b"k\x03", &[(1, b"new")]).unwrap());
            assert!(!store.update_fields(s.id, b"none", &[(1, b"new")]).unwrap());
            let row = store
                .get_fields(s.id, b"k\x03", &FieldSelection::Only(vec![1]))
                .unwrap();
            assert_eq!(row, Some(vec![b"new".to_vec()]), "{layout}");
            let rows = store
                .scan_fields(s.id, b"k\x05", &FieldSelection::All, 3)
                .unwrap();
            let keys: Vec<&[u8]> = rows.iter().map(|(k, _)| k.as_slice()).collect();
            assert_eq!(keys, [&b"k\x05"[..], b"k\x06", b"k\x07"], "{layout}");
            assert_eq!(rows[0].1, vec![vec![5, 5], b"xyz".to_vec()]);
            store.delete_row(s.id, b"k\x05").unwrap();
            assert_eq!(
                store
                    .get_fields(s.id, b"k\x05", &FieldSelection::All)
                    .unwrap(),
                None
            );
            p.close().unwrap();
        }
    }
}
