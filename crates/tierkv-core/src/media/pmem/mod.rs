//! The persistent-memory pool. (Skeleton: the full pool lands with the pmem tier.)

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::api::error::{Error, Result};
pub use crate::api::options::{DurabilityMode, EmulatedLatency};
use crate::api::stats::MediaCounters;

/// How to create or open a pool.
#[derive(Clone, Debug)]
pub struct PmemConfig {
    /// The pool file.
    pub path: PathBuf,
    /// Its size in bytes (create only; open reads it from the header).
    pub size: u64,
    /// The durability mode of this open.
    pub mode: DurabilityMode,
    /// Emulated latency.
    pub latency: EmulatedLatency,
}

/// A pool over one mapped file.
#[derive(Debug)]
pub struct PmemPool {
    path: PathBuf,
}

impl PmemPool {
    /// Creates a new pool file; fails if it exists.
    pub fn create(cfg: &PmemConfig) -> Result<Arc<PmemPool>> {
        Err(Error::Unsupported(format!(
            "pmem pool {} not built yet",
            cfg.path.display()
        )))
    }
    /// Opens an existing pool file.
    pub fn open(cfg: &PmemConfig) -> Result<Arc<PmemPool>> {
        Err(Error::Unsupported(format!(
            "pmem pool {} not built yet",
            cfg.path.display()
        )))
    }
    /// The pool file.
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// The pool's size in bytes (the whole file).
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u64 {
        0
    }
    /// The identifier stored in the pool header.
    pub fn pool_id(&self) -> u64 {
        0
    }
    /// Byte counters.
    pub fn counters(&self) -> MediaCounters {
        MediaCounters::default()
    }
}
