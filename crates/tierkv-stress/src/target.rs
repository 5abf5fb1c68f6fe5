//! The engine under test: resolved by name from `tierkv::ENGINES` (so every registered
//! engine gets the harness for free) or, with the `reference-engine` feature, from the
//! harness's own reference engines; opened through the facade ([`tierkv::Db`]) exactly as a
//! user opens it, with the harness's media injected where a mode needs them.
//!
//! Thread safety: plain data.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use tierkv::core::media::Media;
use tierkv::{ByteSize, Db, DurabilityMode, EngineSpec, IoBackend, Options, Tier};
use tierkv_core::EngineDescriptor;

/// Where the tiers go and how they are configured (from the command line).
#[derive(Clone, Debug)]
pub struct TierConfig {
    /// Directory for pmem pool files (default: beside the data).
    pub pmem_dir: Option<PathBuf>,
    /// Pool size.
    pub pmem_size: ByteSize,
    /// Directory for flash directories (default: inside the data directory).
    pub flash_dir: Option<PathBuf>,
    /// Flash capacity per directory.
    pub flash_size: ByteSize,
    /// Flash I/O back end.
    pub io_backend: IoBackend,
}

/// The engines whose stores have a native schema store (the field workload is on by
/// default for them). Kept equal to the engines' own answer by a test.
pub const NATIVE_SCHEMA_ENGINES: &[&str] = &["focus"];

/// A resolved engine.
#[derive(Clone, Debug)]
pub struct Target {
    /// The spec as given.
    pub spec: String,
    /// Its descriptor.
    pub desc: &'static EngineDescriptor,
}

fn lookup(name: &str) -> Option<&'static EngineDescriptor> {
    if let Ok(d) = tierkv::descriptor(name) {
        return Some(d);
    }
    #[cfg(feature = "reference-engine")]
    if let Some(d) = crate::reference::descriptor(name) {
        return Some(d);
    }
    None
}

/// Every engine this build can stress, for error messages.
pub fn known_engines() -> Vec<&'static str> {
    #[allow(unused_mut)]
    let mut names: Vec<&'static str> = tierkv::ENGINES.iter().map(|d| d.name).collect();
    #[cfg(feature = "reference-engine")]
    names.extend(["reflog", "reflog-flash"]);
    names
}

impl Target {
    /// Resolves `spec` (name, variant, options) to an engine.
    pub fn resolve(spec: &str) -> anyhow::Result<Target> {
        let parsed: EngineSpec = spec.parse().context("--engine")?;
        let Some(desc) = lookup(&parsed.name) else {
            bail!(
                "unknown engine {:?} (engines: {})",
                parsed.name,
                known_engines().join(", ")
            );
        };
        desc.variant(&parsed).context("--engine")?;
        Ok(Target {
            spec: spec.to_owned(),
            desc,
        })
    }

    /// True when the engine keeps data on `tier`.
    pub fn uses(&self, tier: Tier) -> bool {
        self.spec
            .parse::<EngineSpec>()
            .is_ok_and(|spec| self.desc.spec_uses(&spec, tier))
    }

    /// True when the engine's stores offer the schema API natively
    /// (`KvStore::native_schema_store`; the others get the consolidated adapter).
    pub fn native_schema(&self) -> bool {
        NATIVE_SCHEMA_ENGINES.contains(&self.desc.name)
    }

    /// The longest value the engine takes (its own limit or the default one).
    pub fn max_value_len(&self) -> usize {
        let default = Options::default().limits.max_value_len;
        self.desc.max_value_len.map_or(default, |m| m.min(default))
    }

    /// The options to open the store with: this engine, the tier settings, the pool in
    /// `pmem_mode`, flash in `flash_dir` (if the engine uses flash), and `media` injected.
    pub fn options(
        &self,
        tiers: &TierConfig,
        pmem_mode: DurabilityMode,
        pmem_dir: Option<&Path>,
        flash_dir: Option<&Path>,
        media: Option<Media>,
    ) -> Options {
        let mut o = Options::default()
            .engine(&self.spec)
            .pmem_size(tiers.pmem_size)
            .pmem_mode(pmem_mode)
            .flash_size(tiers.flash_size);
        o.flash.io_backend = tiers.io_backend;
        if let Some(d) = pmem_dir {
            o = o.pmem_dir(d);
        }
        if let Some(d) = flash_dir.filter(|_| self.uses(Tier::Flash)) {
            o = o.flash_dir(d);
        }
        o.media = media;
        o
    }

    /// Opens (or creates) the store in `dir`.
    pub fn open(&self, dir: &Path, options: Options) -> tierkv::Result<Db> {
        Db::open_with_engine(dir, options, self.desc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_engines_resolve_and_unknown_ones_are_listed() {
        let t = Target::resolve("dram:hash").unwrap();
        assert_eq!(t.desc.name, "dram");
        assert!(t.desc.volatile);
        let e = Target::resolve("nosuch").unwrap_err().to_string();
        assert!(e.contains("unknown engine \"nosuch\""), "{e}");
        assert!(e.contains("dram"), "{e}");
        assert!(Target::resolve("dram:nosuch").is_err());
        assert!(Target::resolve("Bad Spec").is_err());
    }

    #[test]
    fn native_schema_engines_are_those_whose_stores_say_so() {
        for d in tierkv::ENGINES.iter().filter(|d| !d.volatile) {
            let t = Target::resolve(d.name).unwrap();
            let dir = tempfile::tempdir().unwrap();
            let tiers = TierConfig {
                pmem_dir: None,
                pmem_size: ByteSize(16 << 20),
                flash_dir: None,
                flash_size: ByteSize(64 << 20),
                io_backend: IoBackend::Threads,
            };
            let o = t.options(&tiers, DurabilityMode::Volatile, None, None, None);
            let db = t.open(dir.path(), o).unwrap();
            let native = db.store().native_schema_store().is_some();
            assert_eq!(native, t.native_schema(), "{}", d.name);
        }
    }

    #[cfg(feature = "reference-engine")]
    #[test]
    fn reference_engines_resolve_with_their_variants() {
        let t = Target::resolve("reflog:skip-persist").unwrap();
        assert!(t.uses(Tier::Pmem) && !t.uses(Tier::Flash));
        let t = Target::resolve("reflog-flash@segment=1MiB").unwrap();
        assert!(t.uses(Tier::Flash));
    }
}
