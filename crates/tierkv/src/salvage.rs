//! [`salvage`]: the read-only walk of a damaged store (issue 23, finding 10), for the
//! engines that have one ([`SALVAGE_ENGINES`]). It reads the manifest, takes the directory
//! lock (shared use of the lock file only; nothing is written), and hands the engine's
//! [`SalvageFn`] the paths the manifest names. See `tierkv_core::api::salvage` for the
//! contract and each engine's FORMAT.md for its walk.

use std::fs::File;
use std::path::Path;

use tierkv_core::{
    Error, Manifest, Options, Result, SalvageContext, SalvageFn, SalvageReport, SalvageSink,
};

use crate::db::LOCK_FILE;

/// An engine's salvage walk and what its format cannot verify.
#[derive(Clone, Copy, Debug)]
pub struct SalvageEngine {
    /// The engine's name.
    pub name: &'static str,
    /// The walk.
    pub walk: SalvageFn,
    /// What a record yielded by the walk is not checked for (printed in a dump's header);
    /// the report may add more ([`SalvageReport::caveats`]).
    pub caveats: &'static [&'static str],
}

/// The engines with a salvage walk.
pub static SALVAGE_ENGINES: &[SalvageEngine] = &[SalvageEngine {
    name: "prism",
    walk: tierkv_prism::salvage::salvage,
    caveats: &tierkv_prism::salvage::CAVEATS,
}];

/// The salvage walk of engine `name` (the base name, without variant), or
/// [`Error::Unsupported`] naming the engines that have one.
pub fn salvage_engine(name: &str) -> Result<&'static SalvageEngine> {
    SALVAGE_ENGINES
        .iter()
        .find(|e| e.name == name)
        .ok_or_else(|| {
            let names: Vec<&str> = SALVAGE_ENGINES.iter().map(|e| e.name).collect();
            Error::Unsupported(format!(
                "engine {name} has no salvage mode yet (engines with one: {})",
                names.join(", ")
            ))
        })
}

/// Salvages the store in `dir` into `sink`: every record the engine can validate, in key
/// order, and a note for everything skipped. Never writes to the store. `options` gives
/// the engine's parameters (its spec comes from the manifest unless `options` names the
/// same engine with parameters).
pub fn salvage(dir: &Path, options: &Options, sink: &mut dyn SalvageSink) -> Result<SalvageReport> {
    let manifest = Manifest::read_from(dir)?.ok_or_else(|| Error::NoStore(dir.to_owned()))?;
    let base = manifest
        .engine
        .split(':')
        .next()
        .unwrap_or_default()
        .to_owned();
    let engine = salvage_engine(&base)?;
    let spec = match options.engine_spec() {
        Ok(s) if s.name == base => s,
        _ => manifest.engine.parse()?,
    };
    let _lock = lock_shared(dir)?;
    let ctx = SalvageContext {
        dir: dir.to_owned(),
        spec,
        options: options.clone(),
        manifest,
    };
    (engine.walk)(&ctx, sink)
}

/// A shared lock on the lock file, if it exists: a store open in another process holds
/// it exclusively, and a salvage of files being written would read a moving target.
fn lock_shared(dir: &Path) -> Result<Option<File>> {
    let path = dir.join(LOCK_FILE);
    let f = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("open", &path, e)),
    };
    match f.try_lock_shared() {
        Ok(()) => Ok(Some(f)),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::Locked(dir.to_owned())),
        Err(std::fs::TryLockError::Error(e)) => Err(Error::io("lock", &path, e)),
    }
}
