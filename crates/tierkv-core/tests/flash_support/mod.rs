//! Helpers shared by the `flash_*` integration tests: where to put a device (the data disk,
//! or /dev/shm), how to open one on each back end, and deterministic block contents.

#![allow(dead_code, reason = "each test file uses a different subset")]

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use tempfile::TempDir;
use tierkv_core::media::flash::{AlignedBuf, FaultInjector, FlashDevice, IoCompletion, Notifier};
use tierkv_core::{ByteSize, FlashOptions, IoBackend};

/// The back ends every behaviour is checked on: io_uring (when this kernel allows it) and
/// pread/pwrite.
pub fn backends() -> Vec<IoBackend> {
    match tierkv_core::media::flash::uring_supported() {
        Ok(()) => vec![IoBackend::Uring, IoBackend::Threads],
        Err(e) => {
            eprintln!("io_uring is refused here ({e}); checking the pread/pwrite path only");
            vec![IoBackend::Threads]
        }
    }
}

/// A fresh directory on the data disk (under the target directory, not tmpfs).
pub fn data_disk_dir() -> TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir on the data disk")
}

/// True when `p` is on tmpfs (where O_DIRECT means nothing).
pub fn is_tmpfs(p: &Path) -> bool {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    let c = CString::new(p.as_os_str().as_bytes()).expect("path without NUL");
    let mut st = std::mem::MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: valid C string, writable statfs buffer.
    let rc = unsafe { libc::statfs(c.as_ptr(), st.as_mut_ptr()) };
    assert_eq!(rc, 0, "statfs {}", p.display());
    // SAFETY: statfs succeeded.
    let st = unsafe { st.assume_init() };
    #[allow(clippy::unnecessary_cast)]
    let t = st.f_type as i64;
    t == TMPFS_MAGIC
}

/// Options for a test device: `capacity` bytes, the given back end, queue depth 64.
pub fn options(backend: IoBackend, capacity: u64) -> FlashOptions {
    FlashOptions {
        size: ByteSize(capacity),
        io_backend: backend,
        queue_depth: 64,
        ..FlashOptions::default()
    }
}

/// Opens a device in `dir`.
pub fn open(dir: &Path, backend: IoBackend, capacity: u64) -> Arc<FlashDevice> {
    FlashDevice::open(dir, &options(backend, capacity)).expect("open flash device")
}

/// Opens a device in `dir` behind `injector`.
pub fn open_faulty(
    dir: &Path,
    backend: IoBackend,
    capacity: u64,
    injector: &Arc<FaultInjector>,
) -> Arc<FlashDevice> {
    FlashDevice::open_with_faults(dir, &options(backend, capacity), injector.clone())
        .expect("open flash device with faults")
}

/// A fresh data-disk directory and a device in it behind a new injector.
pub fn faulty_device(
    backend: IoBackend,
    capacity: u64,
) -> (TempDir, Arc<FaultInjector>, Arc<FlashDevice>) {
    let dir = data_disk_dir();
    let inj = Arc::new(FaultInjector::new());
    let dev = open_faulty(dir.path(), backend, capacity, &inj);
    (dir, inj, dev)
}

/// A notifier that forwards each completion, with the name of the thread that delivered
/// it, to the returned receiver.
pub fn channel_notifier() -> (Notifier, Completions) {
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let n: Notifier = Arc::new(move |c: IoCompletion| {
        let name = std::thread::current().name().unwrap_or("").to_owned();
        tx.lock()
            .expect("sender")
            .send((name, c))
            .expect("receiver alive");
    });
    (n, Completions(rx))
}

/// The receiving end of [`channel_notifier`].
pub struct Completions(mpsc::Receiver<(String, IoCompletion)>);

impl Completions {
    /// The next completion and the thread that delivered it (fails after a minute).
    pub fn next(&self) -> (String, IoCompletion) {
        self.0
            .recv_timeout(Duration::from_secs(60))
            .expect("a completion within a minute")
    }
}

/// Runs the test `name` of this test binary again in a child process with `env` set, checks
/// that it passed, and returns how many lines of its stderr contain `needle`. For behaviour
/// that is process-wide and cannot be undone (a notice said once, a seccomp filter).
pub fn child_stderr_lines(name: &str, env: &str, needle: &str) -> usize {
    let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(env, "1")
        .output()
        .expect("run the child test");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "child failed: {}\n{stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
    stderr.lines().filter(|l| l.contains(needle)).count()
}

/// A buffer of `len` bytes whose content depends on `seed` and the position.
pub fn pattern(len: usize, seed: u64) -> AlignedBuf {
    let mut b = AlignedBuf::new(len).expect("buffer");
    fill(&mut b, seed);
    b
}

/// Overwrites `b` with the pattern of `seed`.
pub fn fill(b: &mut AlignedBuf, seed: u64) {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for chunk in b.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let bytes = x.to_le_bytes();
        chunk.copy_from_slice(&bytes[..chunk.len()]);
    }
}

/// Reads `len` bytes at `offset` of `file` through `read_at`.
pub fn read(file: &tierkv_core::media::flash::FlashFile, offset: u64, len: usize) -> AlignedBuf {
    let mut b = AlignedBuf::new(len).expect("buffer");
    file.read_at(offset, &mut b).expect("read back");
    b
}
