//! `fallocate(2)`: reserving a file's blocks at creation, so that later writes into it
//! cannot fail for lack of space (DESIGN §4; issue 23 finding 1). Shared by the pmem pool
//! file (where a write into a hole of a full filesystem is a SIGBUS) and flash files.
//!
//! Thread safety: a plain function over a descriptor the caller owns.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// Allocates blocks for bytes `0..len` of `file` (extending its length to `len`). The
/// OS error as is on failure: `ENOSPC` when the filesystem is full, `EOPNOTSUPP` where it
/// cannot preallocate (callers fall back), `InvalidInput` for a length past `off_t`.
pub(crate) fn fallocate(file: &File, len: u64) -> io::Result<()> {
    let Ok(off_len) = libc::off_t::try_from(len) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("length {len} is too large"),
        ));
    };
    if len == 0 {
        return Ok(());
    }
    // SAFETY: the descriptor is open for writing and owned by `file` for the whole call.
    #[expect(unsafe_code, reason = "fallocate(2) on a descriptor we own")]
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, off_len) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
