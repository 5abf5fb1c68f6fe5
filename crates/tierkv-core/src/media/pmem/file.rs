//! The pool file itself: creating it (new, sparse, exactly sized), opening it, the
//! exclusive `flock` that keeps two pools off one file, and the free-space check that
//! keeps page faults on a sparse pool from running out of space (`mapping.rs`,
//! invariant 2).
//!
//! Thread safety: plain functions; the lock lives as long as the returned `File`.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::api::error::{Error, Result};

/// Creates `path` (it must not exist) with length `size` (a hole: no block is written)
/// and locks it exclusively.
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
    let sized = lock_exclusive(&file, path).and_then(|()| {
        file.set_len(size)
            .map_err(|e| Error::io("set length of pool file", path, e))
    });
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
    Ok((file, len))
}

/// Reads up to `buf.len()` bytes from the start of the file; returns how many.
pub(super) fn read_prefix(file: &File, path: &Path, buf: &mut [u8]) -> Result<usize> {
    let mut done = 0;
    while let Some(rest) = buf.get_mut(done..).filter(|r| !r.is_empty()) {
        match file.read_at(rest, done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io("read pool header", path, e)),
        }
    }
    Ok(done)
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

/// Refuses a pool larger than the free space of the filesystem that will hold it: the
/// file is sparse, and a page fault that cannot allocate raises SIGBUS.
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
             (a sparse pool that cannot grow would crash the process with SIGBUS)",
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

    #[test]
    fn created_file_is_sparse_and_sized() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("p");
        let f = create_locked(&p, 1 << 20).unwrap();
        assert_eq!(f.metadata().unwrap().len(), 1 << 20);
        let mut buf = [1u8; 16];
        assert_eq!(read_prefix(&f, &p, &mut buf).unwrap(), 16);
        assert_eq!(buf, [0u8; 16]);
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
