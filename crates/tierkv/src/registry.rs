//! The engines this build knows, by name.

use tierkv_core::{EngineDescriptor, Error, Result};

/// Every engine in this build, default first.
pub static ENGINES: &[EngineDescriptor] = &[
    tierkv_prism::DESCRIPTOR,
    tierkv_dram::DESCRIPTOR,
    tierkv_hetermm::DESCRIPTOR,
    tierkv_focus::DESCRIPTOR,
    tierkv_mio::DESCRIPTOR,
    tierkv_prismdb::DESCRIPTOR,
];

/// The engines whose stores apply [`tierkv_core::WriteBatch`]es natively and
/// crash-atomically (`KvStore::atomic_batches`); the others refuse batches with
/// `Unsupported`. Kept equal to the engines' own answer by a test.
pub static ATOMIC_BATCH_ENGINES: &[&str] = &["prism", "dram"];

/// The engine called `name`, or an error listing the known ones.
pub fn descriptor(name: &str) -> Result<&'static EngineDescriptor> {
    ENGINES.iter().find(|d| d.name == name).ok_or_else(|| {
        let names: Vec<_> = ENGINES.iter().map(|d| d.name).collect();
        Error::invalid(format!(
            "unknown engine {name:?} (engines: {})",
            names.join(", ")
        ))
    })
}
