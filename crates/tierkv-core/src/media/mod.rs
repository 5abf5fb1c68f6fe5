//! The storage tiers: the persistent-memory pool ([`pmem`]) and flash devices ([`flash`]).
//!
//! This is the only place in tierkv with `unsafe` code for media (the mapping of the pool,
//! cache-line flush instructions, aligned buffers for `O_DIRECT`, io_uring). Engines see
//! safe, bounds-checked APIs; every mutation of pmem goes through [`pmem::PmemPool`], so
//! that Tracked crash images are truthful.

pub mod flash;
pub mod pmem;

use std::sync::Arc;

use crate::api::stats::MediaCounters;

/// The media an engine is given at open: the pmem pool and the flash devices of the tiers
/// it declared. Cloning shares the same media.
#[derive(Clone, Default)]
pub struct Media {
    /// The pmem pool, if the engine uses pmem.
    pub pmem: Option<Arc<pmem::PmemPool>>,
    /// One device per flash directory, if the engine uses flash.
    pub flash: Vec<Arc<flash::FlashDevice>>,
}

impl Media {
    /// The pool, or an error saying the engine needs one.
    pub fn require_pmem(&self) -> crate::Result<&Arc<pmem::PmemPool>> {
        self.pmem
            .as_ref()
            .ok_or_else(|| crate::Error::invalid("this engine needs a pmem pool"))
    }

    /// The byte counters of all media, summed.
    pub fn counters(&self) -> MediaCounters {
        let mut c = MediaCounters::default();
        if let Some(p) = &self.pmem {
            let pc = p.counters();
            c.pmem_bytes_written += pc.pmem_bytes_written;
            c.pmem_bytes_read += pc.pmem_bytes_read;
            c.pmem_persists += pc.pmem_persists;
        }
        for f in &self.flash {
            let fc = f.counters();
            c.flash_bytes_written += fc.flash_bytes_written;
            c.flash_bytes_read += fc.flash_bytes_read;
            c.flash_syncs += fc.flash_syncs;
        }
        c
    }
}
