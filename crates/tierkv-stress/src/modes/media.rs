//! Opening a store on media the harness injects through `Options::media`: the pmem pool in
//! Tracked mode (so crash images can be taken of it) and the flash devices with a fault
//! injector (so unsynced writes can be dropped or torn, and I/O can fail on demand). Used by
//! the in-process modes and by kill mode's power-loss child.
//!
//! Thread safety: plain functions; the returned handles are `Send + Sync`.

use std::path::Path;
use std::sync::Arc;

use tierkv::core::media::Media;
use tierkv::core::media::flash::{FaultInjector, FlashDevice};
use tierkv::core::media::pmem::{PmemConfig, PmemPool};
use tierkv::{Db, DurabilityMode, Tier};

use super::RunConfig;

/// A store and the injected media the harness crashes.
pub(crate) struct InjectedStore {
    pub db: Db,
    pub pool: Option<Arc<PmemPool>>,
    pub injector: Option<Arc<FaultInjector>>,
}

/// Where the injected media live.
pub(crate) struct MediaPaths<'a> {
    /// The data directory (MANIFEST).
    pub data: &'a Path,
    /// The pool file.
    pub pool: &'a Path,
    /// `Options::pmem.dir`, when the store was created with one (it must match).
    pub pmem_dir: Option<&'a Path>,
    /// The flash directory.
    pub flash: &'a Path,
}

/// Opens (or, with `create`, creates) the store with a Tracked pool and fault-injecting
/// flash, for the tiers the engine uses.
pub(crate) fn open_injected(
    cfg: &RunConfig,
    at: &MediaPaths<'_>,
    create: bool,
) -> tierkv::Result<InjectedStore> {
    let t = &cfg.target;
    std::fs::create_dir_all(at.data)
        .map_err(|e| tierkv::Error::io("create directory", at.data, e))?;
    let pool = if t.uses(Tier::Pmem) {
        let pc = PmemConfig {
            path: at.pool.to_owned(),
            size: cfg.tiers.pmem_size.bytes(),
            mode: DurabilityMode::Tracked,
            latency: Default::default(),
        };
        Some(if create {
            PmemPool::create(&pc)?
        } else {
            PmemPool::open(&pc)?
        })
    } else {
        None
    };
    let mut options = t.options(
        &cfg.tiers,
        DurabilityMode::Tracked,
        at.pmem_dir,
        Some(at.flash),
        None,
    );
    let (injector, flash) = if t.uses(Tier::Flash) {
        let inj = Arc::new(FaultInjector::new());
        let dev = FlashDevice::open_with_faults(at.flash, &options.flash, inj.clone())?;
        (Some(inj), vec![dev])
    } else {
        (None, Vec::new())
    };
    options.media = Some(Media {
        pmem: pool.clone(),
        flash,
    });
    let db = t.open(at.data, options)?;
    Ok(InjectedStore { db, pool, injector })
}
