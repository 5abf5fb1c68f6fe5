//! The flash tier (DESIGN §4, "Flash"): a [`FlashDevice`] is one directory on a block
//! device in which engines create fixed-size files ([`FlashFile`]) and read and write them
//! in 4 KiB-aligned blocks with `O_DIRECT`, one request at a time or in batches submitted
//! through io_uring. The media assumptions (what a write, a sync, a crash do) are in
//! `MEDIA.md` beside this file.
//!
//! Map of the module:
//! - [`aligned`]: [`AlignedBuf`], the 4 KiB-aligned buffers `O_DIRECT` needs;
//! - `file`: [`FlashFile`], positional reads and writes, `sync` (fdatasync);
//! - `request`: [`IoRequest`], [`IoBatch`], [`IoCompletion`], [`CompletionNotifier`];
//! - `queue`: [`IoQueue`], a caller-reaped queue for keeping many requests in flight;
//! - `uring`: the pool of io_uring rings behind the synchronous and caller-reaped paths;
//! - `reaper`: the asynchronous path: one ring per device and its completion thread;
//! - `threads`: the pread/pwrite back end (forced, or the fallback where io_uring is
//!   refused), with worker threads for the asynchronous path;
//! - [`faults`]: [`FaultInjector`], the crash and error-injecting double for tests;
//! - `probe`: what the kernel and filesystem allow, and the "said once" notices;
//! - `device`: the state shared by a device and its files (registry, counters, poison).
//!
//! Back ends ([`IoBackend`]): `Auto` uses io_uring and falls back to pread/pwrite (saying so
//! once on stderr) where the kernel refuses it; `Uring` makes a refusal an error; `Threads`
//! forces pread/pwrite. Where the filesystem refuses `O_DIRECT` (or is tmpfs, where it means
//! nothing) files use buffered I/O, said once. Every back end gives the same results and
//! errors.
//!
//! Errors: every failed system call is [`Error::Io`] with the operation and path; a request
//! that is misaligned or runs past the end of its file is [`Error::InvalidArgument`]; a file
//! that would exceed the device's capacity is [`Error::NoSpace`]; after a failed sync the
//! device is poisoned ([`Error::Poisoned`]) for writes and syncs, never retried.
//!
//! Thread safety: [`FlashDevice`] and [`FlashFile`] are `Send + Sync` and meant to be shared
//! (`Arc`, `Clone`); [`IoQueue`] is `!Send`. The device owns its background threads (the
//! completion thread of the asynchronous path, started on first use) and joins them on drop,
//! after the requests in flight complete and are delivered.

pub mod aligned;
mod device;
pub mod faults;
mod file;
pub(crate) mod probe;
mod queue;
mod reaper;
mod request;
mod threads;
mod uring;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

pub use aligned::{AlignedBuf, FLASH_BLOCK};
pub use faults::{CrashMode, CrashReport, FaultInjector, InjectedFaults, IoSeen};
pub use file::FlashFile;
pub use probe::{direct_io_fallback_announced, uring_fallback_announced, uring_supported};
pub use queue::IoQueue;
pub use request::{
    CompletionNotifier, IoBatch, IoCompletion, IoOp, IoRequest, MAX_IO_LEN, Notifier,
};

use self::device::{Backend, DeviceCore};
use self::probe::{
    DIRECT_IO_NOTICE, URING_NOTICE, fs_without_direct_io, uring_refusal_is_fallback,
};
use self::reaper::AsyncRing;
use self::threads::WorkerPool;
use self::uring::{RingPool, UringQueue};
use crate::api::error::{Error, Result};
use crate::api::options::{FlashOptions, IoBackend};
use crate::api::stats::MediaCounters;

/// The most worker threads the pread/pwrite asynchronous path starts per device.
const MAX_ASYNC_WORKERS: usize = 8;

/// One flash directory (a device) in which an engine creates files.
pub struct FlashDevice {
    core: Arc<DeviceCore>,
    /// The asynchronous path, started on first use.
    async_path: Mutex<Option<AsyncPath>>,
}

/// The engine of [`FlashDevice::submit_async`].
#[derive(Debug)]
enum AsyncPath {
    Uring(AsyncRing),
    Threads(WorkerPool),
}

impl std::fmt::Debug for FlashDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlashDevice")
            .field("dir", &self.core.dir)
            .field("backend", &self.backend())
            .field("direct_io", &self.direct_io())
            .field("capacity", &self.capacity())
            .field("used", &self.used())
            .finish()
    }
}

fn check_options(opts: &FlashOptions) -> Result<()> {
    let qd = opts.queue_depth;
    if qd == 0 || qd > 4096 || !qd.is_power_of_two() {
        return Err(Error::invalid(format!(
            "flash queue depth {qd} must be a power of two between 1 and 4096"
        )));
    }
    if opts.size.bytes() == 0 {
        return Err(Error::invalid("flash capacity must not be zero"));
    }
    Ok(())
}

/// Chooses the back end (see the module doc).
fn select_backend(requested: IoBackend, queue_depth: u32, dir: &Path) -> Result<Backend> {
    if requested == IoBackend::Threads {
        return Ok(Backend::Threads);
    }
    match RingPool::new(queue_depth, RingPool::default_size()) {
        Ok(pool) => Ok(Backend::Uring(pool)),
        Err(e) if uring_refusal_is_fallback(requested, &e) => {
            URING_NOTICE.say(|| {
                format!("io_uring is not available ({e}); flash I/O uses pread/pwrite instead")
            });
            Ok(Backend::Threads)
        }
        Err(e) => Err(Error::io("io_uring_setup", dir, e)),
    }
}

/// Whether files in `dir` should be opened with `O_DIRECT`.
fn choose_direct_io(wanted: bool, dir: &Path) -> Result<bool> {
    if !wanted {
        return Ok(false);
    }
    match fs_without_direct_io(dir).map_err(|e| Error::io("statfs", dir, e))? {
        Some(fs) => {
            DIRECT_IO_NOTICE.say(|| {
                format!(
                    "{} is on {fs}, which has no direct I/O; flash files there use buffered I/O",
                    dir.display()
                )
            });
            Ok(false)
        }
        None => Ok(true),
    }
}

/// Registers the regular files already in `dir`.
fn scan_files(core: &DeviceCore) -> Result<()> {
    let dir = &core.dir;
    let entries = fs::read_dir(dir).map_err(|e| Error::io("read directory", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("read directory", dir, e))?;
        let meta = entry
            .metadata()
            .map_err(|e| Error::io("stat", entry.path(), e))?;
        if !meta.is_file() {
            continue;
        }
        let Ok(name) = entry.file_name().into_string() else {
            return Err(Error::invalid(format!(
                "flash directory {} holds a file whose name is not UTF-8: {}",
                dir.display(),
                entry.path().display()
            )));
        };
        core.register_existing(name, meta.len());
    }
    Ok(())
}

impl FlashDevice {
    /// Opens the flash directory `dir` (creating it if missing), with capacity
    /// `opts.size`, and registers the files already in it.
    pub fn open(dir: &Path, opts: &FlashOptions) -> Result<Arc<FlashDevice>> {
        FlashDevice::open_inner(dir, opts, None)
    }

    /// Like [`FlashDevice::open`], with every operation reported to `injector` (tests).
    pub fn open_with_faults(
        dir: &Path,
        opts: &FlashOptions,
        injector: Arc<FaultInjector>,
    ) -> Result<Arc<FlashDevice>> {
        FlashDevice::open_inner(dir, opts, Some(injector))
    }

    fn open_inner(
        dir: &Path,
        opts: &FlashOptions,
        faults: Option<Arc<FaultInjector>>,
    ) -> Result<Arc<FlashDevice>> {
        check_options(opts)?;
        fs::create_dir_all(dir).map_err(|e| Error::io("create directory", dir, e))?;
        let direct = choose_direct_io(opts.direct_io, dir)?;
        let backend = select_backend(opts.io_backend, opts.queue_depth, dir)?;
        let core = DeviceCore::new(
            PathBuf::from(dir),
            opts.size.bytes(),
            opts.queue_depth,
            direct,
            backend,
            faults,
        );
        scan_files(&core)?;
        Ok(Arc::new(FlashDevice {
            core: Arc::new(core),
            async_path: Mutex::new(None),
        }))
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.core.dir
    }

    /// Byte and sync counters (flash_bytes_written, flash_bytes_read, flash_syncs).
    pub fn counters(&self) -> MediaCounters {
        self.core.media_counters()
    }

    /// The capacity the engine may use in this directory, in bytes.
    pub fn capacity(&self) -> u64 {
        self.core.capacity
    }

    /// The bytes taken by the files of this directory (their lengths).
    pub fn used(&self) -> u64 {
        self.core.used()
    }

    /// The back end in use: [`IoBackend::Uring`] or [`IoBackend::Threads`].
    pub fn backend(&self) -> IoBackend {
        match self.core.backend {
            Backend::Uring(_) => IoBackend::Uring,
            Backend::Threads => IoBackend::Threads,
        }
    }

    /// True while files are opened with `O_DIRECT` (false where the filesystem refused it).
    pub fn direct_io(&self) -> bool {
        self.core
            .direct_io
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The queue depth (entries per io_uring ring).
    pub fn queue_depth(&self) -> u32 {
        self.core.queue_depth
    }

    /// Why the device refuses writes, if a sync failed.
    pub fn poisoned(&self) -> Option<String> {
        self.core.poisoned()
    }

    /// Creates the file `name` with `len` bytes preallocated (a non-zero multiple of 4 KiB)
    /// and its length made durable. Fails with [`Error::NoSpace`] if the device's capacity
    /// would be exceeded. The file's existence is durable after [`FlashDevice::sync_dir`].
    pub fn create_file(&self, name: &str, len: u64) -> Result<FlashFile> {
        FlashFile::create(&self.core, name, len)
    }

    /// Opens the existing file `name`.
    pub fn open_file(&self, name: &str) -> Result<FlashFile> {
        FlashFile::open(&self.core, name)
    }

    /// Removes the file `name` and frees its space (handles still open keep working on the
    /// unlinked file). The removal is durable after [`FlashDevice::sync_dir`].
    pub fn remove_file(&self, name: &str) -> Result<()> {
        file::check_name(name)?;
        self.core.check_writable()?;
        let path = self.core.dir.join(name);
        let _in_flight = match &self.core.faults {
            Some(f) => Some(
                f.begin_dir_op()
                    .map_err(|e| Error::io("remove", &path, e))?,
            ),
            None => None,
        };
        fs::remove_file(&path).map_err(|e| Error::io("remove", &path, e))?;
        self.core.release(name);
        if let Some(f) = &self.core.faults {
            f.file_removed(&path);
        }
        Ok(())
    }

    /// The names of the files in the directory, sorted.
    pub fn list_files(&self) -> Vec<String> {
        self.core.file_names()
    }

    /// Makes the creation and removal of files durable (fsync of the directory). Poisons
    /// the device if it fails.
    pub fn sync_dir(&self) -> Result<()> {
        self.core.sync_dir()
    }

    /// A queue for keeping many requests in flight from this thread (see [`IoQueue`]).
    pub fn queue(&self) -> IoQueue<'_> {
        let depth = self.core.queue_depth as usize;
        match &self.core.backend {
            Backend::Uring(pool) => match pool.checkout() {
                Some(ring) => IoQueue::uring(UringQueue::new(ring, &self.core.dir)),
                // This thread already holds every ring: run this queue's requests here.
                None => IoQueue::threads(depth),
            },
            Backend::Threads => IoQueue::threads(depth),
        }
    }

    /// Submits every request of `batch` at once and waits for all of them. Returns one
    /// completion per request, in completion order (use [`IoRequest::tag`] to match them);
    /// a request that failed carries its error. `Err` only if the ring itself failed.
    pub fn submit_and_wait(&self, batch: IoBatch) -> Result<Vec<IoCompletion>> {
        let n = batch.len();
        let mut q = self.queue();
        for r in batch.requests {
            q.push(r);
        }
        let mut out = Vec::with_capacity(n);
        q.wait(n, &mut out)?;
        Ok(out)
    }

    /// Submits every request of `batch` without waiting. Each request is delivered, exactly
    /// once and with its buffer, to `notifier` on the device's completion thread when it
    /// finishes (or at once if it fails its checks). `Err` if the completion thread cannot
    /// be started (nothing was queued), or if io_uring refused the submission for now (the
    /// requests stay queued and are still delivered).
    pub fn submit_async(&self, batch: IoBatch, notifier: &Notifier) -> Result<()> {
        let mut slot = self.async_path.lock();
        if slot.is_none() {
            *slot = Some(self.start_async_path()?);
        }
        match &*slot {
            Some(AsyncPath::Uring(r)) => r.submit(batch.requests, notifier),
            Some(AsyncPath::Threads(p)) => p.submit(batch.requests, notifier),
            None => Err(Error::Closed),
        }
    }

    fn start_async_path(&self) -> Result<AsyncPath> {
        let dir = &self.core.dir;
        let qd = self.core.queue_depth;
        match &self.core.backend {
            Backend::Uring(_) => AsyncRing::start(qd, dir)
                .map(AsyncPath::Uring)
                .map_err(|e| Error::io("start flash completion thread", dir, e)),
            Backend::Threads => WorkerPool::start((qd as usize).min(MAX_ASYNC_WORKERS))
                .map(AsyncPath::Threads)
                .map_err(|e| Error::io("start flash worker threads", dir, e)),
        }
    }
}

impl Drop for FlashDevice {
    fn drop(&mut self) {
        // Stops and joins the completion thread (after delivering what is in flight),
        // without holding the lock while joining.
        let path = self.async_path.lock().take();
        drop(path);
    }
}
