//! # tierkv
//!
//! An embedded, crash-consistent key-value store for heterogeneous storage: DRAM, a
//! persistent byte-addressable tier (pmem, through a mapped file) and NVMe flash. Five
//! published designs are engines behind one API; [`Db::open`] reads the data directory's
//! manifest and opens the engine named in the [`Options`].
//!
//! ```
//! use tierkv::{Db, Options};
//! # fn main() -> tierkv::Result<()> {
//! # let dir = tempfile::tempdir().map_err(|e| tierkv::Error::io("tempdir", "/tmp", e))?;
//! let db = Db::open(dir.path(), Options::default().engine("dram:btree"))?;
//! db.put(b"k", b"v")?;
//! assert_eq!(db.get(b"k")?, Some(b"v".to_vec()));
//! let rows = db.scan(&b"a"[..].., 100)?;
//! assert_eq!(rows.len(), 1);
//! db.delete(b"k")?;
//! db.close()?;
//! # Ok(()) }
//! ```
//!
//! A `put` or `delete` returns once it is durable under the configured durability mode
//! ([`DurabilityMode`]); that is what *acknowledged* means. [`Db::write`] applies a
//! [`WriteBatch`] crash-atomically on the engines in [`ATOMIC_BATCH_ENGINES`] and refuses
//! it (`Unsupported`) on the others.

#![forbid(unsafe_code)]

mod db;
mod registry;
mod salvage;

pub use db::Db;
pub use registry::{ATOMIC_BATCH_ENGINES, ENGINES, check_atomic_batches, descriptor};
pub use salvage::{SALVAGE_ENGINES, SalvageEngine, salvage, salvage_engine};
pub use tierkv_core::{BatchOp, MAX_BATCH_BYTES, MAX_BATCH_OPS, WriteBatch};
pub use tierkv_core::{
    ByteSize, DurabilityMode, EngineSpec, Error, FlashOptions, IoBackend, KvPair, KvStore, Limits,
    Manifest, Options, PmemOptions, Result, Stats, Tier,
};
pub use tierkv_core::{CollectSink, SalvageReport, SalvageSink};
pub use tierkv_core::{
    FieldDef, FieldId, FieldKind, FieldSelection, Row, RowPair, Schema, SchemaId, SchemaStore,
};

/// The core crate, for engine authors and tools that need the media layer.
pub use tierkv_core as core;
