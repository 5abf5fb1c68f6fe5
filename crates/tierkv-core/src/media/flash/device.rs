//! [`DeviceCore`]: the state of one flash directory shared by the device handle and every
//! file opened on it: the file registry and capacity accounting, the byte and sync
//! counters, the poison latch, the fault injector, and the back end that executes I/O.
//!
//! Invariants:
//! 1. `registry.used` is the sum of the lengths in `registry.files`, and a file is entered
//!    (its space reserved) *before* it is created on disk, so two creators cannot both pass
//!    the capacity check or both claim one name;
//! 2. once poisoned (a sync failed, or a completion callback panicked) the device stays
//!    poisoned: writes and syncs return [`Error::Poisoned`], reads still work. A failed
//!    `fdatasync` is never retried (STYLE §5): the kernel may already have dropped the
//!    dirty pages and marked them clean.
//!
//! Thread safety: `Send + Sync`. The registry is behind a mutex held only for map updates
//! (never across I/O); counters are relaxed atomics; the poison flag is an atomic with its
//! reason behind a mutex.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use super::faults::FaultInjector;
use super::uring::RingPool;
use crate::api::error::{Error, Result, Tier};
use crate::api::stats::{Counter, MediaCounters};

/// How a device executes I/O.
#[derive(Debug)]
pub(crate) enum Backend {
    /// io_uring, from a pool of rings.
    Uring(RingPool),
    /// pread/pwrite on the calling thread (and worker threads for the asynchronous path).
    Threads,
}

/// The byte and sync counters of one device.
#[derive(Debug, Default)]
pub(crate) struct FlashCounters {
    pub(crate) bytes_written: Counter,
    pub(crate) bytes_read: Counter,
    pub(crate) syncs: Counter,
}

/// The latch that refuses writes after a failed sync.
#[derive(Debug, Default)]
struct Poison {
    set: AtomicBool,
    why: Mutex<String>,
}

/// The files of a device and the space they take.
#[derive(Debug, Default)]
struct Registry {
    files: BTreeMap<String, u64>,
    used: u64,
}

/// The shared state of one flash directory (see the module doc).
#[derive(Debug)]
pub(crate) struct DeviceCore {
    pub(crate) dir: PathBuf,
    pub(crate) capacity: u64,
    pub(crate) queue_depth: u32,
    /// Whether files are opened with `O_DIRECT` (turned off, once, when refused).
    pub(crate) direct_io: AtomicBool,
    pub(crate) backend: Backend,
    pub(crate) counters: FlashCounters,
    pub(crate) faults: Option<Arc<FaultInjector>>,
    poison: Poison,
    registry: Mutex<Registry>,
}

impl DeviceCore {
    pub(crate) fn new(
        dir: PathBuf,
        capacity: u64,
        queue_depth: u32,
        direct_io: bool,
        backend: Backend,
        faults: Option<Arc<FaultInjector>>,
    ) -> DeviceCore {
        DeviceCore {
            dir,
            capacity,
            queue_depth,
            direct_io: AtomicBool::new(direct_io),
            backend,
            counters: FlashCounters::default(),
            faults,
            poison: Poison::default(),
            registry: Mutex::new(Registry::default()),
        }
    }

    /// A snapshot of the counters.
    pub(crate) fn media_counters(&self) -> MediaCounters {
        MediaCounters {
            flash_bytes_written: self.counters.bytes_written.get(),
            flash_bytes_read: self.counters.bytes_read.get(),
            flash_syncs: self.counters.syncs.get(),
            ..MediaCounters::default()
        }
    }

    // ---- poison ----

    /// `Ok` unless the device is poisoned.
    pub(crate) fn check_writable(&self) -> Result<()> {
        if self.poison.set.load(Ordering::Acquire) {
            return Err(Error::Poisoned(self.poison.why.lock().clone()));
        }
        Ok(())
    }

    /// Latches the poison (the first reason is kept).
    pub(crate) fn poison(&self, why: String) {
        let mut w = self.poison.why.lock();
        if !self.poison.set.load(Ordering::Acquire) {
            *w = why;
            self.poison.set.store(true, Ordering::Release);
        }
    }

    /// The reason the device is poisoned, if it is.
    pub(crate) fn poisoned(&self) -> Option<String> {
        self.poison
            .set
            .load(Ordering::Acquire)
            .then(|| self.poison.why.lock().clone())
    }

    // ---- syncs ----

    /// `fdatasync` of `fd` (the file at `path`), poisoning the device if it fails.
    pub(crate) fn sync_fd(&self, fd: RawFd, path: &Path, what: &'static str) -> Result<()> {
        self.check_writable()?;
        let outcome = match &self.faults {
            Some(f) => f.before_sync(),
            None => Ok(()),
        }
        .and_then(|()| {
            // SAFETY: `fd` is an open descriptor owned by the caller for the whole call.
            #[expect(unsafe_code, reason = "fdatasync(2) on a descriptor we own")]
            let rc = unsafe { libc::fdatasync(fd) };
            let r = if rc == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            };
            if let Some(f) = &self.faults {
                f.sync_done(path, r.is_ok());
            }
            r
        });
        match outcome {
            Ok(()) => {
                self.counters.syncs.incr();
                Ok(())
            }
            Err(e) => {
                // IMPORTANT: never retry a failed fdatasync; refuse writes from now on.
                self.poison(format!("{what} of {} failed: {e}", path.display()));
                Err(Error::io(what, path, e))
            }
        }
    }

    /// Syncs the directory, making the creation and removal of files durable.
    pub(crate) fn sync_dir(&self) -> Result<()> {
        let d = File::open(&self.dir).map_err(|e| Error::io("open directory", &self.dir, e))?;
        self.sync_fd(d.as_raw_fd(), &self.dir, "fsync directory")?;
        if let Some(f) = &self.faults {
            f.dir_synced(&self.dir);
        }
        Ok(())
    }

    // ---- registry ----

    /// Enters a file found on disk at open.
    pub(crate) fn register_existing(&self, name: String, len: u64) {
        let mut r = self.registry.lock();
        if let Some(old) = r.files.insert(name, len) {
            r.used -= old;
        }
        r.used += len;
    }

    /// Reserves `len` bytes for a new file `name`; fails if the name is taken or the
    /// capacity would be exceeded.
    pub(crate) fn reserve(&self, name: &str, len: u64) -> Result<()> {
        let mut r = self.registry.lock();
        if r.files.contains_key(name) {
            return Err(Error::io(
                "create",
                self.dir.join(name),
                std::io::Error::from_raw_os_error(libc::EEXIST),
            ));
        }
        let after = r.used.checked_add(len).filter(|&u| u <= self.capacity);
        let Some(after) = after else {
            return Err(Error::no_space(
                Tier::Flash,
                format!(
                    "file {name} of {len} bytes: {} of {} bytes of {} are in use",
                    r.used,
                    self.capacity,
                    self.dir.display()
                ),
            ));
        };
        r.used = after;
        r.files.insert(name.to_owned(), len);
        Ok(())
    }

    /// Forgets `name` and frees its space; returns whether it was registered.
    pub(crate) fn release(&self, name: &str) -> bool {
        let mut r = self.registry.lock();
        match r.files.remove(name) {
            Some(len) => {
                r.used -= len;
                true
            }
            None => false,
        }
    }

    /// Space taken by the files.
    pub(crate) fn used(&self) -> u64 {
        self.registry.lock().used
    }

    /// The names of the files, sorted.
    pub(crate) fn file_names(&self) -> Vec<String> {
        self.registry.lock().files.keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn core(capacity: u64) -> DeviceCore {
        DeviceCore::new(
            PathBuf::from("/nonexistent"),
            capacity,
            1,
            false,
            Backend::Threads,
            None,
        )
    }

    #[test]
    fn reserve_refuses_taken_names_and_space_beyond_capacity() {
        let c = core(16384);
        c.reserve("a", 8192).unwrap();
        assert_eq!(
            c.reserve("a", 4096).unwrap_err().raw_os_error(),
            Some(libc::EEXIST)
        );
        assert!(matches!(
            c.reserve("b", 12288),
            Err(Error::NoSpace {
                tier: Tier::Flash,
                ..
            })
        ));
        c.reserve("b", 8192).unwrap();
        assert_eq!(c.used(), 16384);
        assert!(c.release("a"));
        assert!(!c.release("a"));
        assert_eq!(c.used(), 8192);
        assert_eq!(c.file_names(), vec!["b".to_owned()]);
    }

    #[test]
    fn poison_keeps_the_first_reason_and_refuses_writes() {
        let c = core(4096);
        c.check_writable().unwrap();
        c.poison("first".into());
        c.poison("second".into());
        match c.check_writable() {
            Err(Error::Poisoned(why)) => assert_eq!(why, "first"),
            other => panic!("{other:?}"),
        }
        assert_eq!(c.poisoned().as_deref(), Some("first"));
    }
}
