//! # tierkv-core
//!
//! Everything the tierkv engines share (DESIGN §1):
//! - [`api`]: the [`KvStore`] trait, [`Options`], [`Error`], engine specs, [`Stats`];
//! - [`media`]: the persistent-memory pool and the flash tier;
//! - [`format`](mod@format): the manifest and checksums;
//! - [`common`]: building blocks (in-DRAM indexes, caches, ...);
//! - [`schema`]: the field-level API ([`SchemaStore`]) over any [`KvStore`] (adapters).
//!
//! Engines depend on this crate only, never on each other.

pub mod api;
pub mod common;
pub mod format;
pub mod media;
pub mod schema;

pub use api::batch::{BatchOp, MAX_BATCH_BYTES, MAX_BATCH_OPS, WriteBatch};
pub use api::error::{Error, Result, Tier};
pub use api::options::{
    DurabilityMode, EmulatedLatency, FlashOptions, IoBackend, Limits, Options, PmemOptions,
};
pub use api::salvage::{CollectSink, SalvageContext, SalvageFn, SalvageReport, SalvageSink};
pub use api::schema::{
    FieldDef, FieldId, FieldKind, FieldSelection, Row, RowPair, Schema, SchemaId, SchemaStore,
};
pub use api::size::ByteSize;
pub use api::spec::{EngineParams, EngineSpec, Switch};
pub use api::stats::{Counter, MediaCounters, OpCounters, Stats};
pub use api::store::{EngineContext, EngineDescriptor, KvCursorPage, KvPair, KvStore};
pub use format::manifest::Manifest;
pub use media::Media;
