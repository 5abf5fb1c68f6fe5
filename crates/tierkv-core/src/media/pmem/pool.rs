//! [`PmemPool`]: creating and opening a pool, its identity, root words, counters and
//! crash images. The data path (reads, writes, atomics, persist) is in `access.rs`.
//!
//! Lifecycle: `create` makes a new sparse file of the requested size, locks it, maps it
//! and writes + persists the header (and, in the durable modes, fsyncs the file and its
//! directory, so the pool exists after a power failure). `open` locks, validates the header
//! against the file (magic, checksum, version, size) and maps it. Dropping the last `Arc`
//! unmaps the file, then closes it, which releases the lock.
//!
//! Poisoning (STYLE §5): if a `persist` fails (an msync error), the pool refuses every
//! later mutation and persist with [`Error::Poisoned`]: the kernel may have dropped the
//! dirty pages, so retrying could report success for data that is gone. Reopen the pool.
//!
//! Thread safety: `PmemPool` is `Send + Sync`; every method takes `&self`.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use super::crash_points::{CrashPointHandler, PoolPoints};
use super::file;
use super::header::{
    DATA_START, PoolHeader, ROOT_COUNT, STATIC_LEN, decode_pool_header, encode_pool_header,
    pool_size_problem, root_offset,
};
use super::latency::LatencyEmulator;
use super::mapping::{MapKind, Mapping};
use super::persist::FlushInstr;
use super::tracked::{CrashImageOptions, Shadow};
use crate::api::error::{Error, Result, Tier};
use crate::api::options::{DurabilityMode, EmulatedLatency};
use crate::api::stats::{Counter, MediaCounters};

/// How to create or open a pool.
#[derive(Clone, Debug)]
pub struct PmemConfig {
    /// The pool file.
    pub path: PathBuf,
    /// Its size in bytes (create only; open reads it from the header). A multiple of
    /// 4096, at least [`MIN_POOL_SIZE`](super::header::MIN_POOL_SIZE).
    pub size: u64,
    /// The durability mode of this open (each open chooses its own).
    pub mode: DurabilityMode,
    /// Emulated latency (off by default).
    pub latency: EmulatedLatency,
}

/// A pool over one mapped file (see the module docs of `media::pmem`).
pub struct PmemPool {
    pub(super) path: PathBuf,
    pub(super) header: PoolHeader,
    pub(super) mode: DurabilityMode,
    /// The write-back instruction (Dax mode only).
    pub(super) flush: Option<FlushInstr>,
    /// The persisted image (Tracked mode only).
    pub(super) shadow: Option<Shadow>,
    /// Numbered persists and crash-point handlers (Tracked mode only).
    pub(super) points: Option<PoolPoints>,
    pub(super) latency: LatencyEmulator,
    pub(super) bytes_written: Counter,
    pub(super) bytes_read: Counter,
    pub(super) persists: Counter,
    /// The first persist failure; once set, mutations are refused.
    pub(super) poisoned: OnceLock<String>,
    // IMPORTANT: `map` is declared before `file`, so it is unmapped before the file is
    // closed and its lock released (mapping.rs, invariant 2).
    pub(super) map: Mapping,
    _file: File,
}

impl PmemPool {
    /// Creates a new pool file (it must not exist): `cfg.size` bytes, every block
    /// allocated, header written and persisted, exclusively locked. On failure nothing is
    /// left behind.
    ///
    /// On tmpfs (the DRAM stand-in for pmem, e.g. /dev/shm) in volatile or msync mode,
    /// the new pool's pages are also faulted in here (`Mapping::populate_write`) rather
    /// than at the first store into each: measured on `tierkv bench --engines mio` Load of
    /// 1,000,000 x 1 KiB (2 GiB written to the pool), 209k → 242k ops/s and p99.9
    /// 1.5 → 0.6 ms, for about 0.4 s of the create per GiB of pool. An open of an
    /// existing pool does not (recovery time would pay for pages it may never write).
    pub fn create(cfg: &PmemConfig) -> Result<Arc<PmemPool>> {
        if let Some(problem) = pool_size_problem(cfg.size) {
            return Err(Error::invalid(format!(
                "pmem pool {}: {problem}",
                cfg.path.display()
            )));
        }
        let flush = flush_for(cfg)?;
        let file = file::create_locked(&cfg.path, cfg.size)?;
        let made = Self::initialize(cfg, file, flush);
        if made.is_err() {
            // Best effort: a half-made pool must not be mistaken for a pool later.
            let _ = std::fs::remove_file(&cfg.path);
        }
        made.map(Arc::new)
    }

    /// Opens an existing pool, validating its header (magic, checksum, version, size ==
    /// file size). `cfg.size` is ignored.
    pub fn open(cfg: &PmemConfig) -> Result<Arc<PmemPool>> {
        let flush = flush_for(cfg)?;
        let (file, file_len) = file::open_locked(&cfg.path)?;
        let mut head = [0u8; STATIC_LEN];
        let n = file::read_prefix(&file, &cfg.path, &mut head)?;
        let header = decode_pool_header(head.get(..n).unwrap_or_default())
            .and_then(|h| h.check_file_len(file_len).map(|()| h))
            .map_err(|e| name_pool(e, &cfg.path))?;
        Self::map_file(cfg, file, header, flush).map(Arc::new)
    }

    fn initialize(cfg: &PmemConfig, file: File, flush: Option<FlushInstr>) -> Result<PmemPool> {
        if is_durable(cfg.mode) {
            file::sync_created(&file, &cfg.path)?;
        }
        let header = PoolHeader::new(cfg.size, new_pool_id());
        let pool = Self::map_file(cfg, file, header, flush)?;
        if matches!(cfg.mode, DurabilityMode::Volatile | DurabilityMode::Msync)
            && page_cache_is_the_storage(&cfg.path)
        {
            // NOTE: an optimization only (`Mapping::populate_write` says why); a kernel
            // without MADV_POPULATE_WRITE leaves the pages to fault in at first use.
            let _ = pool.map.populate_write();
        }
        let bytes = encode_pool_header(&header);
        pool.mutate(0, bytes.len(), || pool.store_bytes(0, &bytes));
        pool.persist(0, STATIC_LEN)?;
        Ok(pool)
    }

    fn map_file(
        cfg: &PmemConfig,
        file: File,
        header: PoolHeader,
        flush: Option<FlushInstr>,
    ) -> Result<PmemPool> {
        let len = usize::try_from(header.pool_size)
            .map_err(|_| Error::invalid("pool size exceeds the address space"))?;
        let kind = if cfg.mode == DurabilityMode::Dax {
            MapKind::SharedSync
        } else {
            MapKind::Shared
        };
        let map = Mapping::map(&file, len, kind).map_err(|e| map_error(cfg, e))?;
        if cfg.mode == DurabilityMode::Msync && !page_cache_is_the_storage(&cfg.path) {
            // NOTE: an optimization only (`Mapping::advise_base_pages` says why): a kernel
            // that refuses the advice leaves a pool that works, persisting more bytes.
            let _ = map.advise_base_pages();
        }

        let tracked = cfg.mode == DurabilityMode::Tracked;
        let shadow = tracked.then(|| Shadow::of(&map));
        Ok(PmemPool {
            path: cfg.path.clone(),
            header,
            mode: cfg.mode,
            flush,
            shadow,
            points: tracked.then(PoolPoints::default),
            latency: LatencyEmulator::new(cfg.latency),
            bytes_written: Counter::default(),
            bytes_read: Counter::default(),
            persists: Counter::default(),
            poisoned: OnceLock::new(),
            map,
            _file: file,
        })
    }

    /// The pool file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The pool's size in bytes (the whole file, header included).
    #[expect(
        clippy::len_without_is_empty,
        reason = "a pool is never empty: it holds at least its header"
    )]
    pub fn len(&self) -> u64 {
        self.header.pool_size
    }

    /// The identifier stored in the pool header (random, non-zero, fixed at creation).
    pub fn pool_id(&self) -> u64 {
        self.header.pool_id
    }

    /// The durability mode of this open.
    pub fn mode(&self) -> DurabilityMode {
        self.mode
    }

    /// The first offset engines may use; `[data_start(), len())` is the engine region.
    pub fn data_start(&self) -> u64 {
        DATA_START
    }

    /// What `persist` does in this mode, for reports ("clwb + sfence", "msync", ...).
    pub fn persist_method(&self) -> &'static str {
        match (self.mode, self.flush) {
            (DurabilityMode::Dax, Some(FlushInstr::Clwb)) => "clwb + sfence",
            (DurabilityMode::Dax, Some(FlushInstr::Clflushopt)) => "clflushopt + sfence",
            (DurabilityMode::Dax, _) => "clflush + sfence",
            (DurabilityMode::Msync, _) => "msync(MS_SYNC)",
            (DurabilityMode::Volatile, _) => "none (volatile)",
            (DurabilityMode::Tracked, _) => "copy to the tracked persisted image",
        }
    }

    /// The emulated latency of this open.
    pub fn latency(&self) -> EmulatedLatency {
        self.latency.config()
    }

    /// Total emulated latency injected so far, in nanoseconds (0 when latency is off).
    pub fn emulated_latency_ns(&self) -> u64 {
        self.latency.injected_ns()
    }

    /// Spin-loop iterations run to emulate latency so far (0 when latency is off).
    pub fn latency_spins(&self) -> u64 {
        self.latency.spins()
    }

    /// Byte counters: bytes written and read through this pool's API, and persist calls.
    pub fn counters(&self) -> MediaCounters {
        MediaCounters {
            pmem_bytes_written: self.bytes_written.get(),
            pmem_bytes_read: self.bytes_read.get(),
            pmem_persists: self.persists.get(),
            ..MediaCounters::default()
        }
    }

    /// Root word `i` (`i < ROOT_COUNT`): where engines record the offsets of their
    /// structures. 0 in a new pool.
    pub fn root(&self, i: usize) -> Result<u64> {
        let w = self.root_word(i)?;
        self.bytes_read.add(8);
        Ok(u64::from_le(w.load(Ordering::Acquire)))
    }

    /// Sets root word `i` to `v` with one atomic store and persists it: after a crash the
    /// word is either its old or its new value, and the new one once this returns.
    pub fn set_root(&self, i: usize, v: u64) -> Result<()> {
        self.check_poisoned()?;
        let w = self.root_word(i)?;
        let at = root_offset(i) as usize;
        self.mutate(at, 8, || w.store(v.to_le(), Ordering::Release));
        self.bytes_written.add(8);
        self.persist(root_offset(i), 8)
    }

    fn root_word(&self, i: usize) -> Result<&std::sync::atomic::AtomicU64> {
        if i >= ROOT_COUNT {
            return Err(Error::invalid(format!(
                "root word {i} does not exist (a pool has {ROOT_COUNT})"
            )));
        }
        usize::try_from(root_offset(i))
            .ok()
            .and_then(|off| self.map.word(off))
            .ok_or_else(|| {
                Error::corruption(Tier::Pmem, root_offset(i), "root word outside the pool")
            })
    }

    /// A crash image (Tracked mode only; [`Error::Unsupported`] otherwise): what a power
    /// failure now could leave on the media, the pool file's full content. See `tracked.rs`
    /// for the model and for what is consistent when other threads keep writing.
    pub fn crash_image(&self, seed: u64, opts: CrashImageOptions) -> Result<Vec<u8>> {
        let shadow = self.shadow.as_ref().ok_or_else(|| {
            Error::Unsupported(format!(
                "crash images need pmem mode tracked; pool {} is open in mode {}",
                self.path.display(),
                self.mode
            ))
        })?;
        Ok(shadow.crash_image(&self.map, seed, opts))
    }

    /// Writes [`PmemPool::crash_image`] to `path` as a new pool file (it must not exist),
    /// which [`PmemPool::open`] opens in any mode.
    pub fn write_crash_image(&self, seed: u64, opts: CrashImageOptions, path: &Path) -> Result<()> {
        let image = self.crash_image(seed, opts)?;
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| Error::io("create crash image", path, e))?;
        f.write_all(&image)
            .map_err(|e| Error::io("write crash image", path, e))
    }

    /// Arms `handler` for this pool's crash points (Tracked mode only;
    /// [`Error::Unsupported`] otherwise): every persist, numbered, and every named point
    /// reached through [`PmemPool::crash_point`]. See `crash_points.rs`.
    pub fn arm_crash_points(&self, handler: CrashPointHandler) -> Result<()> {
        let points = self.points.as_ref().ok_or_else(|| {
            Error::Unsupported(format!(
                "crash points need pmem mode tracked; pool {} is open in mode {}",
                self.path.display(),
                self.mode
            ))
        })?;
        points.arm(handler);
        Ok(())
    }

    /// Disarms this pool's crash-point handler (nothing if none was armed).
    pub fn disarm_crash_points(&self) {
        if let Some(p) = &self.points {
            p.disarm();
        }
    }

    /// The number of persists of this open so far (Tracked mode; 0 in other modes, where
    /// they are counted only in [`PmemPool::counters`]).
    pub fn persist_count(&self) -> u64 {
        self.points.as_ref().map_or(0, PoolPoints::persists)
    }

    /// A named crash point of the work this pool's engine is doing (e.g.
    /// `"prism.gc.after_copy"`): calls the pool's armed handler, else the global one. One
    /// relaxed load when nothing is armed. See `crash_points.rs`.
    #[inline]
    pub fn crash_point(&self, name: &str) {
        match &self.points {
            Some(p) => p.named(name),
            None => super::crash_points::crash_point(name),
        }
    }

    pub(super) fn check_poisoned(&self) -> Result<()> {
        match self.poisoned.get() {
            None => Ok(()),
            Some(why) => Err(Error::Poisoned(why.clone())),
        }
    }
}

impl fmt::Debug for PmemPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PmemPool")
            .field("path", &self.path)
            .field("len", &self.header.pool_size)
            .field("pool_id", &format_args!("{:#018x}", self.header.pool_id))
            .field("mode", &self.mode)
            .field("latency", &self.latency.config())
            .finish_non_exhaustive()
    }
}

/// Whether the pool file at `path` lives where the page cache is the storage itself
/// (tmpfs, ramfs: /dev/shm), so nothing is ever written back; a filesystem that cannot be
/// asked counts as a disk.
pub(super) fn page_cache_is_the_storage(path: &Path) -> bool {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    memory_backed(dir)
}

/// Whether files under the directory `dir` (or, if it does not exist yet, under its
/// nearest existing ancestor) live on a filesystem whose page cache is the storage itself
/// (tmpfs, ramfs: /dev/shm). There `msync` writes nothing back and nothing survives a
/// power loss in any mode, so pmem pools there are `Volatile` by default (`tierkv bench`).
/// A filesystem that cannot be asked counts as a disk.
pub fn memory_backed(dir: &Path) -> bool {
    let Some(existing) = dir
        .ancestors()
        .find(|d| !d.as_os_str().is_empty() && d.exists())
    else {
        return false;
    };
    matches!(
        crate::media::flash::probe::fs_without_direct_io(existing),
        Ok(Some(_))
    )
}

/// Whether a mode's persist reaches stable media (so creation must fsync too).
fn is_durable(mode: DurabilityMode) -> bool {
    matches!(mode, DurabilityMode::Dax | DurabilityMode::Msync)
}

/// The write-back instruction for Dax mode (an error if the CPU has none we can use).
fn flush_for(cfg: &PmemConfig) -> Result<Option<FlushInstr>> {
    if cfg.mode != DurabilityMode::Dax {
        return Ok(None);
    }
    FlushInstr::detect().map(Some).ok_or_else(|| {
        Error::Unsupported(format!(
            "pmem pool {}: dax mode needs a cache-line write-back instruction (clwb, \
             clflushopt or clflush) that this CPU or build does not provide; use pmem mode \
             `msync`",
            cfg.path.display()
        ))
    })
}

fn map_error(cfg: &PmemConfig, e: io::Error) -> Error {
    let refused = matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL));
    if cfg.mode == DurabilityMode::Dax && refused {
        return Error::Unsupported(format!(
            "pmem pool {} is not on a DAX filesystem: the kernel refused a MAP_SYNC mapping \
             ({e}). Put the pool on a filesystem mounted with -o dax on persistent memory, \
             or use pmem mode `msync` (durable on any filesystem) or `volatile` (tmpfs or \
             benchmarks; not durable across power loss)",
            cfg.path.display()
        ));
    }
    Error::io("mmap pool file", &cfg.path, e)
}

/// Adds the pool's path to a header error.
fn name_pool(e: Error, path: &Path) -> Error {
    match e {
        Error::Corruption { tier, offset, what } => Error::Corruption {
            tier,
            offset,
            what: format!("pool {}: {what}", path.display()),
        },
        other => other,
    }
}

fn new_pool_id() -> u64 {
    loop {
        let id: u64 = rand::random();
        if id != 0 {
            return id;
        }
    }
}
