//! [`FlashFile`]: one preallocated file of a flash device, read and written in whole 4 KiB
//! blocks at explicit offsets, made durable by [`FlashFile::sync`] (DESIGN §4: "writes are
//! durable after the engine's sync point").
//!
//! Invariants:
//! 1. a file's length is fixed at creation (`fallocate`, then `fdatasync` so that the length
//!    itself is durable); I/O never extends it: a request past the end is refused
//!    ([`Error::InvalidArgument`]) before it reaches the kernel;
//! 2. every request passes [`FlashFile::admit`] (alignment, bounds, poison, injected
//!    faults) before the kernel sees it, and every admitted request ends in exactly one
//!    [`FlashFile::complete`] (counters, fault-injector bookkeeping, the `Error::Io` with
//!    the operation and path);
//! 3. the file is opened with `O_DIRECT` unless its filesystem refused it (then buffered,
//!    announced once per process).
//!
//! Thread safety: `FlashFile` is a cheap `Clone` handle (`Arc`), `Send + Sync`; reads and
//! writes from many threads at once are allowed (they are positional). Whether concurrent
//! writes to overlapping blocks are ordered is up to the device, as with `pwrite`.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::aligned::{AlignedBuf, FLASH_BLOCK};
use super::device::{Backend, DeviceCore};
use super::probe::DIRECT_IO_NOTICE;
use super::request::{IoOp, RawOp, check_span};
use super::threads;
use crate::api::error::{Error, Result, Tier};

/// A file on a flash device.
#[derive(Clone)]
pub struct FlashFile {
    inner: Arc<FileInner>,
}

struct FileInner {
    file: File,
    name: String,
    path: PathBuf,
    len: u64,
    direct: bool,
    core: Arc<DeviceCore>,
}

impl fmt::Debug for FlashFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FlashFile")
            .field("path", &self.inner.path)
            .field("len", &self.inner.len)
            .field("direct_io", &self.inner.direct)
            .finish()
    }
}

/// Checks a file name: one path component, not special, at most 255 bytes.
pub(crate) fn check_name(name: &str) -> Result<()> {
    let bad = name.is_empty()
        || name.len() > 255
        || name == "."
        || name == ".."
        || name.contains(['/', '\0']);
    if bad {
        return Err(Error::invalid(format!(
            "flash file name {name:?}: must be 1-255 bytes, without '/' or NUL, not . or .."
        )));
    }
    Ok(())
}

impl FlashFile {
    /// Creates `name` with `len` bytes preallocated (see [`super::FlashDevice::create_file`]).
    pub(crate) fn create(core: &Arc<DeviceCore>, name: &str, len: u64) -> Result<FlashFile> {
        check_name(name)?;
        if len == 0 || !len.is_multiple_of(FLASH_BLOCK as u64) {
            return Err(Error::invalid(format!(
                "flash file {name}: length {len} must be a non-zero multiple of {FLASH_BLOCK}"
            )));
        }
        core.check_writable()?;
        let path = core.dir.join(name);
        let _in_flight = match &core.faults {
            Some(f) => Some(
                f.begin_dir_op()
                    .map_err(|e| Error::io("create", &path, e))?,
            ),
            None => None,
        };
        core.reserve(name, len)?;
        match create_on_disk(core, &path, len) {
            Ok((file, direct)) => {
                if let Some(f) = &core.faults {
                    f.file_created(&path);
                }
                Ok(FlashFile::wrap(core, name, path, file, len, direct))
            }
            Err(e) => {
                core.release(name);
                Err(e)
            }
        }
    }

    /// Opens the existing file `name`.
    pub(crate) fn open(core: &Arc<DeviceCore>, name: &str) -> Result<FlashFile> {
        check_name(name)?;
        let path = core.dir.join(name);
        let (file, direct) = open_fd(core, &path, false)?;
        let len = file
            .metadata()
            .map_err(|e| Error::io("stat", &path, e))?
            .len();
        core.register_existing(name.to_owned(), len);
        Ok(FlashFile::wrap(core, name, path, file, len, direct))
    }

    fn wrap(
        core: &Arc<DeviceCore>,
        name: &str,
        path: PathBuf,
        file: File,
        len: u64,
        direct: bool,
    ) -> FlashFile {
        FlashFile {
            inner: Arc::new(FileInner {
                file,
                name: name.to_owned(),
                path,
                len,
                direct,
                core: core.clone(),
            }),
        }
    }

    /// The file's name in its device directory.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The file's length in bytes (fixed at creation).
    pub fn len(&self) -> u64 {
        self.inner.len
    }

    /// True for a zero-length file (never created by this tier; possible for foreign files).
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// True when the file bypasses the page cache (`O_DIRECT`).
    pub fn direct_io(&self) -> bool {
        self.inner.direct
    }

    /// Reads `buf.len()` bytes at `offset` into `buf`; every byte or an error.
    pub fn read_at(&self, offset: u64, buf: &mut AlignedBuf) -> Result<()> {
        let len = buf.len();
        let ptr = buf.as_mut_ptr();
        self.transfer(IoOp::Read, offset, ptr, len)
    }

    /// Writes `buf` at `offset`; durable only after a later [`FlashFile::sync`].
    pub fn write_at(&self, offset: u64, buf: &AlignedBuf) -> Result<()> {
        self.transfer(IoOp::Write, offset, buf.as_ptr().cast_mut(), buf.len())
    }

    /// Reads `len` bytes at `offset` into `buf[start..start + len]`; every byte or an
    /// error. `start` must be a multiple of [`FLASH_BLOCK`] and the span inside the
    /// buffer's length (else `InvalidArgument`): a large buffer filled in pieces, so that
    /// other requests to the device are not queued behind one long transfer.
    pub fn read_into(
        &self,
        offset: u64,
        buf: &mut AlignedBuf,
        start: usize,
        len: usize,
    ) -> Result<()> {
        check_piece(buf.len(), start, len)?;
        let ptr = buf.as_mut_ptr().wrapping_add(start);
        self.transfer(IoOp::Read, offset, ptr, len)
    }

    /// Writes `buf[start..start + len]` at `offset` (`start` and the span as in
    /// [`FlashFile::read_into`]); durable only after a later [`FlashFile::sync`].
    pub fn write_from(
        &self,
        offset: u64,
        buf: &AlignedBuf,
        start: usize,
        len: usize,
    ) -> Result<()> {
        check_piece(buf.len(), start, len)?;
        let ptr = buf.as_ptr().cast_mut().wrapping_add(start);
        self.transfer(IoOp::Write, offset, ptr, len)
    }

    /// Makes every write completed before this call durable (`fdatasync`). If it fails, the
    /// device is poisoned: later writes and syncs fail with [`Error::Poisoned`].
    pub fn sync(&self) -> Result<()> {
        let core = &self.inner.core;
        core.sync_fd(self.raw_fd(), &self.inner.path, "fdatasync")?;
        if let Some(f) = &core.faults {
            f.file_synced(&self.inner.path);
        }
        Ok(())
    }

    /// One synchronous transfer over a caller-owned buffer.
    fn transfer(&self, op: IoOp, offset: u64, ptr: *mut u8, len: usize) -> Result<()> {
        self.admit(op, offset, len)?;
        let mut raw = RawOp::new(self.raw_fd(), op, offset, ptr, len);
        let outcome = match &self.inner.core.backend {
            Backend::Uring(pool) => pool.run_one(&mut raw),
            Backend::Threads => threads::execute(&mut raw),
        };
        self.complete(op, len, outcome)
    }

    /// The device state this file belongs to.
    pub(crate) fn core(&self) -> &Arc<DeviceCore> {
        &self.inner.core
    }

    /// The descriptor, for submission.
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.inner.file.as_raw_fd()
    }

    /// Everything that must hold before the kernel sees a request (module invariant 2).
    pub(crate) fn admit(&self, op: IoOp, offset: u64, len: usize) -> Result<()> {
        check_span(self, op, offset, len)?;
        let core = &self.inner.core;
        let path = &self.inner.path;
        match op {
            IoOp::Read => match &core.faults {
                Some(f) => f.before_read().map_err(|e| Error::io("read", path, e)),
                None => Ok(()),
            },
            IoOp::Write => {
                core.check_writable()?;
                match &core.faults {
                    Some(f) => f
                        .before_write(path, offset, len)
                        .map_err(|e| Error::io("write", path, e)),
                    None => Ok(()),
                }
            }
        }
    }

    /// The end of an admitted request (module invariant 2).
    pub(crate) fn complete(&self, op: IoOp, len: usize, outcome: io::Result<()>) -> Result<()> {
        let core = &self.inner.core;
        if op == IoOp::Write
            && let Some(f) = &core.faults
        {
            f.write_done();
        }
        match outcome {
            Ok(()) => {
                let c = match op {
                    IoOp::Read => &core.counters.bytes_read,
                    IoOp::Write => &core.counters.bytes_written,
                };
                c.add(len as u64);
                Ok(())
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => Err(Error::no_space(
                Tier::Flash,
                format!("{} {}: {e}", op.name(), self.inner.path.display()),
            )),
            Err(e) => Err(Error::io(op.name(), &self.inner.path, e)),
        }
    }
}

/// Creates the file, preallocates it and makes its length durable.
fn create_on_disk(core: &DeviceCore, path: &Path, len: u64) -> Result<(File, bool)> {
    let (file, direct) = open_fd(core, path, true)?;
    let done =
        allocate(&file, path, len).and_then(|()| core.sync_fd(file.as_raw_fd(), path, "fdatasync"));
    if let Err(e) = done {
        drop(file);
        let _ = fs::remove_file(path);
        return Err(e);
    }
    Ok((file, direct))
}

/// Reserves `len` bytes for the file (`fallocate`, or `ftruncate` where unsupported: flash
/// files are written with `pwrite`, never mapped, so a write into a hole of a full
/// filesystem fails with ENOSPC, reported as [`Error::NoSpace`], rather than SIGBUS).
fn allocate(file: &File, path: &Path, len: u64) -> Result<()> {
    match crate::common::falloc::fallocate(file, len) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => Err(Error::no_space(
            Tier::Flash,
            format!("cannot allocate {len} bytes for {}: {e}", path.display()),
        )),
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => file
            .set_len(len)
            .map_err(|e| Error::io("ftruncate", path, e)),
        Err(e) => Err(Error::io("fallocate", path, e)),
    }
}

/// Opens (or creates) `path`, with `O_DIRECT` unless the device has learnt it is refused.
fn open_fd(core: &DeviceCore, path: &Path, create: bool) -> Result<(File, bool)> {
    let op = if create { "create" } else { "open" };
    let direct = core.direct_io.load(Ordering::Relaxed);
    match try_open(path, create, create, direct) {
        Ok(f) => Ok((f, direct)),
        Err(e) if direct && e.raw_os_error() == Some(libc::EINVAL) => {
            core.direct_io.store(false, Ordering::Relaxed);
            DIRECT_IO_NOTICE.say(|| {
                format!(
                    "the filesystem of {} refuses O_DIRECT ({e}); flash files there use \
                     buffered I/O",
                    core.dir.display()
                )
            });
            // NOTE: a refused O_DIRECT open may already have created the file; the name is
            // reserved in the registry, so opening it without O_EXCL is safe.
            try_open(path, create, false, false)
                .map(|f| (f, false))
                .map_err(|e| Error::io(op, path, e))
        }
        Err(e) => Err(Error::io(op, path, e)),
    }
}

fn try_open(path: &Path, create: bool, exclusive: bool, direct: bool) -> io::Result<File> {
    let mut o = OpenOptions::new();
    o.read(true).write(true).mode(0o644);
    if exclusive {
        o.create_new(true);
    } else if create {
        o.create(true);
    }
    if direct {
        o.custom_flags(libc::O_DIRECT);
    }
    o.open(path)
}

/// A piece `start..start + len` of a buffer of `buf_len` bytes must start on a block (so the
/// piece is as aligned as the buffer) and end inside the buffer.
fn check_piece(buf_len: usize, start: usize, len: usize) -> Result<()> {
    if !start.is_multiple_of(FLASH_BLOCK) || start.checked_add(len).is_none_or(|e| e > buf_len) {
        return Err(Error::invalid(format!(
            "buffer piece {start}..+{len} of a {buf_len}-byte buffer: not block aligned or past its end"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_must_be_single_components() {
        for bad in ["", ".", "..", "a/b", "nul\0", &"x".repeat(256)] {
            assert!(
                matches!(check_name(bad), Err(Error::InvalidArgument(_))),
                "{bad:?}"
            );
        }
        for good in ["a", "chunk-000001.vs", "..x", &"x".repeat(255)] {
            check_name(good).unwrap();
        }
    }
}
