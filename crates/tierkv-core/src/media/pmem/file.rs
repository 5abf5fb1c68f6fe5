//! The pool file itself: creating it (new, exactly sized, every block allocated), opening
//! it, and the exclusive `flock` that keeps two pools off one file.
//!
//! Invariant (`mapping.rs`, invariant 2): every page of a pool file has its blocks
//! allocated before the file is mapped. A store through a shared mapping into a hole must
//! allocate a block inside the page fault; when the filesystem is full (a tmpfs such as
//! /dev/shm is shared with the whole machine) the kernel can only answer with SIGBUS,
//! which kills the process. So [`create_locked`] allocates the whole file (`fallocate`,
//! or writing zeros where the filesystem does not support it) and refuses with
//! [`Error::NoSpace`] when it cannot; [`open_locked`] does the same for a pool left sparse
//! by an older build (`fallocate` of blocks already allocated changes nothing).
//!
//! Thread safety: plain functions; the lock lives as long as the returned `File`.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::api::error::{Error, Result};

/// Creates `path` (it must not exist) with length `size`, every block allocated (and
/// reading as zeros), and locks it exclusively.
pub(super) fn create_locked(path: &Path, size: u64) -> Result<File> {
    // The pool's directory is made on first use, as flash directories are.
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| Error::io("create directory", dir, e))?;
    }
    check_free_space(path, size)?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| match e.kind() {
            io::ErrorKind::AlreadyExists => Error::invalid(format!(
                "pmem pool file {} already exists (create makes a new pool; open an existing one)",
                path.display()
            )),
            _ => Error::io("create pool file", path, e),
        })?;
    let sized = lock_exclusive(&file, path).and_then(|()| allocate(&file, path, size));
    if let Err(e) = sized {
        // Best effort: we made the file, so we remove it.
        let _ = std::fs::remove_file(path);
        return Err(e);
    }
    Ok(file)
}

/// Opens the existing pool file `path` read-write, locks it and returns it with its length.
pub(super) fn open_locked(path: &Path) -> Result<(File, u64)> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| Error::io("open pool file", path, e))?;
    lock_exclusive(&file, path)?;
    let len = file
        .metadata()
        .map_err(|e| Error::io("stat pool file", path, e))?
        .len();
    allocate(&file, path, len)?;
    Ok((file, len))
}

/// Allocates blocks for the first `len` bytes of `file` (and sets its length to at least
/// `len`): `fallocate`, or zeros written over the holes where the filesystem does not
/// support it. A full filesystem is [`Error::NoSpace`] on the pmem tier.
fn allocate(file: &File, path: &Path, len: u64) -> Result<()> {
    match crate::common::falloc::fallocate(file, len) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => Err(no_space(path, len, &e)),
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => write_zeros(file, path, len),
        Err(e) => Err(Error::io("fallocate pool file", path, e)),
    }
}

/// The fallback of [`allocate`]: rewrites every MiB of the file with the bytes it holds
/// (zeros past the end), which allocates its holes and changes no byte. The file is
/// locked and not mapped yet, so nothing writes it meanwhile.
fn write_zeros(file: &File, path: &Path, len: u64) -> Result<()> {
    const STEP: usize = 1 << 20;
    let mut buf = vec![0u8; STEP];
    let mut at = 0u64;
    while at < len {
        let n = usize::try_from((len - at).min(STEP as u64)).unwrap_or(STEP);
        let chunk = buf.get_mut(..n).unwrap_or_default();
        let got = read_full(file, path, chunk, at)?;
        chunk.get_mut(got..).unwrap_or_default().fill(0);
        file.write_all_at(chunk, at)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ENOSPC) => no_space(path, len, &e),
                _ => Error::io("write pool file", path, e),
            })?;
        at += n as u64;
    }
    Ok(())
}

fn read_full(file: &File, path: &Path, buf: &mut [u8], at: u64) -> Result<usize> {
    let mut done = 0;
    while let Some(rest) = buf.get_mut(done..).filter(|r| !r.is_empty()) {
        match file.read_at(rest, at + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io("read pool file", path, e)),
        }
    }
    Ok(done)
}

fn no_space(path: &Path, len: u64, e: &io::Error) -> Error {
    Error::no_space(
        crate::api::error::Tier::Pmem,
        format!(
            "cannot allocate the {len}-byte pool file {} ({e}); free space on its \
             filesystem or choose a smaller --pmem-size",
            path.display()
        ),
    )
}

/// Reads up to `buf.len()` bytes from the start of the file; returns how many.
pub(super) fn read_prefix(file: &File, path: &Path, buf: &mut [u8]) -> Result<usize> {
    read_full(file, path, buf, 0)
}

/// Makes the file's length and its directory entry durable (fsync of file and parent).
pub(super) fn sync_created(file: &File, path: &Path) -> Result<()> {
    file.sync_all()
        .map_err(|e| Error::io("fsync pool file", path, e))?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    crate::format::manifest::sync_dir(dir)
}

fn lock_exclusive(file: &File, path: &Path) -> Result<()> {
    match file.try_lock() {
        Ok(()) => Ok(()),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::invalid(format!(
            "pmem pool {} is already open (another process or another pool in this \
             process holds its exclusive lock)",
            path.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => Err(Error::io("lock pool file", path, e)),
    }
}

/// Refuses at once a pool larger than the free space of the filesystem that will hold it
/// (before a file is made; [`allocate`] is what guarantees the space).
fn check_free_space(path: &Path, size: u64) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let Some(free) = free_bytes(dir)? else {
        return Ok(());
    };
    if free >= size {
        return Ok(());
    }
    Err(Error::no_space(
        crate::api::error::Tier::Pmem,
        format!(
            "the filesystem of {} has {free} bytes free, less than the {size}-byte pool \
             (choose a smaller --pmem-size or another --pmem-path)",
            dir.display()
        ),
    ))
}

/// Bytes available to unprivileged users on the filesystem holding `dir`; `None` if the
/// filesystem does not say.
#[expect(unsafe_code, reason = "statvfs")]
fn free_bytes(dir: &Path) -> Result<Option<u64>> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| Error::invalid(format!("path {} contains a NUL byte", dir.display())))?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: `c` is a NUL-terminated path and `st` points to writable memory the size of
    // a `statvfs`, which the call fills on success.
    let rc = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return Err(Error::io(
            "statvfs pool directory",
            dir,
            io::Error::last_os_error(),
        ));
    }
    // SAFETY: statvfs returned 0, so it initialized `st` (and it was zeroed before).
    let st = unsafe { st.assume_init() };
    if st.f_blocks == 0 {
        return Ok(None);
    }
    Ok(Some(st.f_bavail.saturating_mul(st.f_frsize)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_makes_the_pool_directory() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a/b/pool");
        create_locked(&p, 8192).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 8192);
    }

    #[test]
    fn create_refuses_an_existing_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("p");
        std::fs::write(&p, b"x").unwrap();
        let e = create_locked(&p, 8192).unwrap_err();
        assert!(e.to_string().contains("already exists"), "{e}");
    }

    /// Bytes the filesystem has really allocated to `f` (not its length).
    fn allocated(f: &File) -> u64 {
        use std::os::unix::fs::MetadataExt;
        f.metadata().unwrap().blocks() * 512
    }

    #[test]
    fn created_file_is_sized_zeroed_and_really_allocated() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("p");
        let f = create_locked(&p, 1 << 20).unwrap();
        assert_eq!(f.metadata().unwrap().len(), 1 << 20);
        // Issue 23 finding 1: a sparse pool dies with SIGBUS when its filesystem fills up.
        assert!(
            allocated(&f) >= 1 << 20,
            "pool of 1 MiB has only {} bytes allocated",
            allocated(&f)
        );
        let mut buf = [1u8; 16];
        assert_eq!(read_prefix(&f, &p, &mut buf).unwrap(), 16);
        assert_eq!(buf, [0u8; 16]);
    }

    #[test]
    fn the_zero_writing_fallback_allocates_and_keeps_every_byte() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("p");
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&p)
            .unwrap();
        f.set_len(3 << 20).unwrap();
        f.write_all_at(b"header", 0).unwrap();
        f.write_all_at(b"tail", (3 << 20) - 4).unwrap();
        write_zeros(&f, &p, 3 << 20).unwrap();
        assert!(
            allocated(&f) >= 3 << 20,
            "{} bytes allocated",
            allocated(&f)
        );
        let mut b = [0u8; 6];
        f.read_exact_at(&mut b, 0).unwrap();
        assert_eq!(&b, b"header");
        f.read_exact_at(&mut b[..4], (3 << 20) - 4).unwrap();
        assert_eq!(&b[..4], b"tail");
    }

    #[test]
    fn opening_a_sparse_pool_allocates_it() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("p");
        // A pool file as older builds made it: a hole of the right length.
        File::create(&p).unwrap().set_len(1 << 20).unwrap();
        let (f, len) = open_locked(&p).unwrap();
        assert_eq!(len, 1 << 20);
        assert!(
            allocated(&f) >= 1 << 20,
            "{} bytes allocated",
            allocated(&f)
        );
    }

    #[test]
    fn second_lock_on_the_same_file_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("p");
        let _held = create_locked(&p, 8192).unwrap();
        let e = open_locked(&p).unwrap_err();
        assert!(e.to_string().contains("already open"), "{e}");
    }

    #[test]
    fn pool_larger_than_free_space_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let e = create_locked(&d.path().join("p"), u64::MAX / 2).unwrap_err();
        assert!(matches!(e, Error::NoSpace { .. }), "{e}");
        assert!(!d.path().join("p").exists());
    }
}
