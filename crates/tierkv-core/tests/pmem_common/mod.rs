//! Helpers shared by the `pmem_*` integration tests: pool configurations, a scratch
//! directory on tmpfs when there is one, and seeds that are printed and can be replayed.

#![allow(dead_code)] // each test file uses a subset

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tierkv_core::media::pmem::{DurabilityMode, EmulatedLatency, PmemConfig, PmemPool};

/// A scratch directory, on /dev/shm when it exists (fast, and what Volatile mode is for).
pub fn scratch_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(d) = tempfile::tempdir_in(shm)
    {
        return d;
    }
    tempfile::tempdir().expect("temp dir")
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

#[path = "../seed_policy/mod.rs"]
mod seed_policy;

/// The seed of a random test (policy in `seed_policy`): printed so a failure can be replayed.
pub fn seed(test: &str) -> u64 {
    seed_policy::seed(test)
}

/// Creates the pool `name` of `size` bytes in `dir`.
pub fn create_pool(dir: &Path, name: &str, size: u64, mode: DurabilityMode) -> Arc<PmemPool> {
    PmemPool::create(&config(dir.join(name), size, mode)).expect("create pool")
}
