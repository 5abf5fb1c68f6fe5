//! The flash tier. (Skeleton: the full tier lands with the flash work.)

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::api::error::{Error, Result};
use crate::api::options::FlashOptions;
use crate::api::stats::MediaCounters;

/// One flash directory (a device) in which an engine creates files.
#[derive(Debug)]
pub struct FlashDevice {
    dir: PathBuf,
}

impl FlashDevice {
    /// Opens (creating if needed) the directory.
    pub fn open(dir: &Path, _opts: &FlashOptions) -> Result<Arc<FlashDevice>> {
        Err(Error::Unsupported(format!(
            "flash device {} not built yet",
            dir.display()
        )))
    }
    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
    /// Byte counters.
    pub fn counters(&self) -> MediaCounters {
        MediaCounters::default()
    }
}
