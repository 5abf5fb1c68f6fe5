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
//!
//! [`Db::range`] iterates a key range lazily, one page (one engine scan) at a time, so a scan
//! of a million keys never holds a million values; [`Db::range_rev`] walks it backwards.
//!
//! ```
//! use tierkv::{Db, Options, RangeOptions};
//! # fn main() -> tierkv::Result<()> {
//! # let dir = tempfile::tempdir().map_err(|e| tierkv::Error::io("tempdir", "/tmp", e))?;
//! let db = Db::open(dir.path(), Options::default().engine("dram:btree"))?;
//! for k in [b"a", b"b", b"c", b"d"] {
//!     db.put(k, b"v")?;
//! }
//! let keys: Vec<Vec<u8>> = db.range(&b"b"[..]..).map(|kv| kv.map(|(k, _)| k)).collect::<tierkv::Result<_>>()?;
//! assert_eq!(keys, [b"b", b"c", b"d"]);
//! let rev = db.range_with(&b"a"[..]..=&b"c"[..], RangeOptions::default().reverse(true).page_entries(2));
//! assert_eq!(rev.map(|kv| kv.map(|(k, _)| k[0])).collect::<tierkv::Result<Vec<u8>>>()?, b"cba");
//! assert_eq!(db.delete_range(&b"b"[..]..&b"d"[..])?, 2);
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]

mod db;
pub mod range;
mod registry;
mod salvage;

pub use db::Db;
pub use range::{Range, RangeOptions};
pub use registry::{
    ATOMIC_BATCH_ENGINES, BATCHES_OFF_WITH, ENGINES, check_atomic_batches,
    check_spec_atomic_batches, descriptor,
};
pub use registry::{UNORDERED_VARIANTS, is_ordered};
pub use salvage::{SALVAGE_ENGINES, SalvageEngine, salvage, salvage_engine};
pub use tierkv_core::{BatchOp, MAX_BATCH_BYTES, MAX_BATCH_OPS, WriteBatch};
pub use tierkv_core::{
    ByteSize, DurabilityMode, EmulatedLatency, EngineSpec, Error, FlashOptions, IoBackend,
    KvCursorPage, KvPair, KvStore, Limits, Manifest, Options, PmemOptions, Result, Stats, Tier,
};
pub use tierkv_core::{CollectSink, SalvageReport, SalvageSink};
pub use tierkv_core::{
    FieldDef, FieldId, FieldKind, FieldSelection, Row, RowPair, Schema, SchemaId, SchemaStore,
};

/// The core crate, for engine authors and tools that need the media layer.
pub use tierkv_core as core;
