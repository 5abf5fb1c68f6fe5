//! The small pieces every engine's integration tests need: a scratch directory on tmpfs, a
//! printed (and replayable) seed, and pmem pools of a given size and durability mode.
//!
//! Test helpers: they panic (failing the test) on errors instead of returning them.

#![allow(clippy::unwrap_used, reason = "test helpers fail the test on errors")]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tierkv_core::media::pmem::{DurabilityMode, EmulatedLatency, PmemConfig, PmemPool};

/// A scratch directory, on /dev/shm when it exists (pools there cost no disk I/O).
pub fn scratch_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(d) = tempfile::tempdir_in(shm)
    {
        return d;
    }
    tempfile::tempdir().expect("temp dir")
}

/// The seed of a random test: `TIERKV_SEED` if set, else a fresh one; printed either way.
pub fn seed(test: &str) -> u64 {
    let seed = std::env::var("TIERKV_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    println!("{test}: seed {seed} (replay with TIERKV_SEED={seed})");
    seed
}

/// A pool configuration without emulated latency.
pub fn config(path: impl Into<PathBuf>, size: u64, mode: DurabilityMode) -> PmemConfig {
    PmemConfig {
        path: path.into(),
        size,
        mode,
        latency: EmulatedLatency::default(),
    }
}

/// Creates a pool of `size` bytes at `path`.
pub fn create_pool(path: &Path, size: u64, mode: DurabilityMode) -> Arc<PmemPool> {
    PmemPool::create(&config(path, size, mode)).expect("create pool")
}
