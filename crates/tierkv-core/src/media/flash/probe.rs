//! What the kernel and the filesystem allow: whether io_uring can be set up and whether a
//! directory's filesystem does direct I/O, plus the "said once" notices printed when the
//! flash tier falls back (DESIGN §4: "say so once, do not fail").
//!
//! Decisions are pure functions of what the OS answered ([`uring_refusal_is_fallback`]), so
//! they are tested without a kernel that refuses anything.
//!
//! Thread safety: the notices are process-wide statics, each printed at most once however
//! many devices and threads hit it.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::api::options::IoBackend;

/// A message printed on stderr at most once per process.
#[derive(Debug)]
pub(crate) struct Notice {
    said: AtomicBool,
}

impl Notice {
    pub(crate) const fn new() -> Notice {
        Notice {
            said: AtomicBool::new(false),
        }
    }

    /// Prints `message` unless this notice was already given; true when it printed.
    pub(crate) fn say(&self, message: impl FnOnce() -> String) -> bool {
        if self.said.swap(true, Ordering::Relaxed) {
            return false;
        }
        eprintln!("tierkv: {}", message());
        true
    }

    /// True once the notice has been given.
    pub(crate) fn given(&self) -> bool {
        self.said.load(Ordering::Relaxed)
    }
}

/// Given when a filesystem refuses `O_DIRECT`.
pub(crate) static DIRECT_IO_NOTICE: Notice = Notice::new();
/// Given when io_uring is refused and [`IoBackend::Auto`] falls back to pread/pwrite.
pub(crate) static URING_NOTICE: Notice = Notice::new();

/// True when the buffered fallback has been announced in this process (for tests and
/// reports).
pub fn direct_io_fallback_announced() -> bool {
    DIRECT_IO_NOTICE.given()
}

/// True when the io_uring fallback has been announced in this process.
pub fn uring_fallback_announced() -> bool {
    URING_NOTICE.given()
}

/// What to do when setting up io_uring failed with `err` under `requested`: `true` to fall
/// back to pread/pwrite, `false` to fail the open.
pub(crate) fn uring_refusal_is_fallback(requested: IoBackend, _err: &io::Error) -> bool {
    // NOTE: under Auto every refusal falls back (ENOSYS: no io_uring in this kernel;
    // EPERM/EACCES: disabled by sysctl, seccomp or a container; ENOMEM: memlock limit on old
    // kernels). The error text goes into the notice.
    requested == IoBackend::Auto
}

/// Checks that this process may use io_uring, by setting up (and dropping) a one-entry ring.
pub fn uring_supported() -> io::Result<()> {
    io_uring::IoUring::new(1).map(drop)
}

/// Filesystems on which `O_DIRECT` cannot bypass a cache because the page cache *is* the
/// storage (tmpfs, ramfs): newer kernels accept the flag there and ignore it, older ones
/// refuse it. Either way buffered I/O is what happens, so the tier says so and uses it.
pub(crate) fn fs_without_direct_io(dir: &Path) -> io::Result<Option<&'static str>> {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    let c = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    let mut st = std::mem::MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: `c` is a valid NUL-terminated path and `st` points to writable memory of the
    // size `statfs` fills.
    #[expect(unsafe_code, reason = "statfs(2) to learn the filesystem type")]
    let rc = unsafe { libc::statfs(c.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: statfs returned 0, so it initialised the struct.
    #[expect(unsafe_code, reason = "statfs(2) initialised the struct")]
    let st = unsafe { st.assume_init() };
    #[allow(
        clippy::unnecessary_cast,
        reason = "f_type's width differs between targets"
    )]
    let kind = st.f_type as i64;
    Ok(match kind {
        TMPFS_MAGIC => Some("tmpfs"),
        RAMFS_MAGIC => Some("ramfs"),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notice_is_said_once() {
        let n = Notice::new();
        assert!(!n.given());
        assert!(n.say(|| "first".into()));
        assert!(!n.say(|| "second".into()));
        assert!(n.given());
    }

    #[test]
    fn only_auto_falls_back_when_io_uring_is_refused() {
        let e = io::Error::from_raw_os_error(libc::EPERM);
        assert!(uring_refusal_is_fallback(IoBackend::Auto, &e));
        assert!(!uring_refusal_is_fallback(IoBackend::Uring, &e));
    }

    #[test]
    fn dev_shm_is_recognised_as_tmpfs() {
        let shm = Path::new("/dev/shm");
        if !shm.is_dir() {
            eprintln!("no /dev/shm on this machine; nothing to check");
            return;
        }
        assert_eq!(fs_without_direct_io(shm).unwrap(), Some("tmpfs"));
    }
}
