//! The engines this build knows, by name.

use tierkv_core::{EngineDescriptor, EngineSpec, Error, Result};

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
pub static ATOMIC_BATCH_ENGINES: &[&str] = &["prism", "dram", "prismdb", "hetermm", "mio", "focus"];

/// The error for a batch given to engine `name`, which has no atomic batches.
pub fn batches_unsupported(name: &str) -> Error {
    Error::Unsupported(format!(
        "engine {name} has no crash-atomic write batches yet (engines with them: {})",
        ATOMIC_BATCH_ENGINES.join(", ")
    ))
}

/// `Ok` when engine `name` applies batches atomically, else the error of `batches_unsupported`
/// (tools check this before they create a store for a batch).
pub fn check_atomic_batches(name: &str) -> Result<()> {
    if ATOMIC_BATCH_ENGINES.contains(&name) {
        Ok(())
    } else {
        Err(batches_unsupported(name))
    }
}

/// Engine options that turn an engine's batches off: (engine, option, value). A `hetermm`
/// store without its operation log has no log entry to commit a batch with.
pub static BATCHES_OFF_WITH: &[(&str, &str, &str)] = &[("hetermm", "oplog", "off")];

/// Like [`check_atomic_batches`], for a whole engine spec (its options may turn batches off:
/// [`BATCHES_OFF_WITH`]).
pub fn check_spec_atomic_batches(spec: &EngineSpec) -> Result<()> {
    check_atomic_batches(&spec.name)?;
    for (engine, option, value) in BATCHES_OFF_WITH {
        if spec.name == *engine && spec.params.get(*option).map(String::as_str) == Some(*value) {
            return Err(Error::Unsupported(format!(
                "engine {engine} with {option}={value} has no crash-atomic write batches \
                 (drop {option}={value} to have them)"
            )));
        }
    }
    Ok(())
}

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

/// The engine variants whose index is unordered (a hash map) and so cannot scan: `scan` and
/// [`crate::Db::range`] return `Unsupported` on them; they enumerate their keys with
/// [`crate::Db::scan_cursor`] instead (which every other engine refuses). Every other
/// engine and variant scans in key order. Kept equal to the engines' own answer by a test.
pub static UNORDERED_VARIANTS: &[(&str, &[&str])] = &[
    ("dram", &["hash", "lockfree"]),
    ("hetermm", &["hash", "lockfree"]),
];

/// True when engine `name` with index `variant` (its canonical variant, `""` if it has
/// none) scans in key order.
pub fn is_ordered(name: &str, variant: &str) -> bool {
    !UNORDERED_VARIANTS
        .iter()
        .any(|(n, vs)| *n == name && vs.contains(&variant))
}
