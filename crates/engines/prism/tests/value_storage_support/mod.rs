//! Helpers shared by the `value_storage_*` integration tests: a flash device on the data
//! disk (so `O_DIRECT` is real), the back ends to run on, and self-checking values.

#![allow(dead_code, reason = "each test file uses a different subset")]

use std::path::Path;
use std::sync::Arc;

use tempfile::TempDir;
use tierkv_core::media::flash::{FaultInjector, FlashDevice};
use tierkv_core::{ByteSize, FlashOptions, IoBackend};
use tierkv_prism::combining::CombiningMode;
use tierkv_prism::value_storage::ValueStorage;

/// io_uring (where this kernel allows it) and pread/pwrite.
pub fn backends() -> Vec<IoBackend> {
    match tierkv_core::media::flash::uring_supported() {
        Ok(()) => vec![IoBackend::Uring, IoBackend::Threads],
        Err(e) => {
            eprintln!("io_uring is refused here ({e}); testing the pread/pwrite path only");
            vec![IoBackend::Threads]
        }
    }
}

/// A fresh directory on the data disk (the target directory, not tmpfs).
pub fn data_dir() -> TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir on the data disk")
}

/// Device options: `capacity` bytes, `backend`, queue depth 64.
pub fn options(backend: IoBackend, capacity: u64) -> FlashOptions {
    FlashOptions {
        size: ByteSize(capacity),
        io_backend: backend,
        queue_depth: 64,
        ..FlashOptions::default()
    }
}

/// A device in `dir`.
pub fn device(dir: &Path, backend: IoBackend, capacity: u64) -> Arc<FlashDevice> {
    FlashDevice::open(dir, &options(backend, capacity)).expect("open flash device")
}

/// A device in `dir` behind `injector`.
pub fn faulty_device(
    dir: &Path,
    backend: IoBackend,
    capacity: u64,
    injector: &Arc<FaultInjector>,
) -> Arc<FlashDevice> {
    FlashDevice::open_with_faults(dir, &options(backend, capacity), injector.clone())
        .expect("open flash device")
}

/// A new storage 0 with `chunks` chunks of `chunk_size` bytes.
pub fn storage(
    dev: &Arc<FlashDevice>,
    chunks: u64,
    chunk_size: u32,
    mode: CombiningMode,
) -> ValueStorage {
    let capacity = 8192 + chunks * u64::from(chunk_size);
    ValueStorage::create(0, dev.clone(), capacity, chunk_size, mode, 64)
        .expect("create value storage")
}

/// A value that names its slot and version and can be checked on its own.
pub fn value(slot: u64, version: u64, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len.max(16));
    v.extend_from_slice(&slot.to_le_bytes());
    v.extend_from_slice(&version.to_le_bytes());
    let mut x = slot.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ version | 1;
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.push(x as u8);
    }
    v.truncate(len.max(16));
    v
}

/// The (slot, version) a value made by [`value`] claims, if it is intact.
pub fn parse(v: &[u8]) -> Option<(u64, u64)> {
    let slot = u64::from_le_bytes(v.get(..8)?.try_into().ok()?);
    let version = u64::from_le_bytes(v.get(8..16)?.try_into().ok()?);
    (value(slot, version, v.len()) == v).then_some((slot, version))
}
