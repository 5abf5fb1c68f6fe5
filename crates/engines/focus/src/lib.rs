//! # The `focus` engine
//!
//! FOCUS (`shared/papers/003_8176f821789163c1.txt`, "Boosting Schema-aware Access for KV
//! Stores via Hierarchical Data Management"): records of a declared schema (named fixed-
//! and variable-length fields) kept on persistent memory in a two-layer persistent log —
//! complete records in the CLog, field deltas in the DLog — so that one field can be read
//! or updated without touching the rest of the record. It implements the field-level API
//! of `tierkv_core::api::schema` natively ([`FocusStore`] is a
//! [`SchemaStore`](tierkv_core::SchemaStore)) and the plain [`KvStore`] as schema 0 (a
//! value is the body of a record without field layout).
//!
//! ## Map of the paper
//!
//! | paper | what | where |
//! |---|---|---|
//! | §IV, Table I | the API: create_schema, put, update, get, scan, del | `tierkv_core::api::schema`, `store.rs` |
//! | §IV, Fig. 5 | schema management layer (catalog, precomputed offsets) | `tierkv_core::schema::Catalog`, `format/row.rs` ([`format::row::Layout`]) |
//! | §IV, §V-C1 | global index: key → newest chain entry, CAS-updated, ordered (tierkv's lock-free `SkipIndex`) | `store.rs` ([`store::Entry`]) |
//! | §V-A, Fig. 6 | CLog record: KV size, fixed fields inline, 12-byte var heads, ≤ 8 bytes inline | `format/row.rs`, `format/record.rs` |
//! | §V-A, Fig. 6 | DLog record: FieldsCount, FieldArray, values, ChainPointer | `format/delta.rs`, `format/record.rs` |
//! | §V-A, Fig. 7 | PLog = CLog + DLog in linked chunks | `plog.rs`, `format/chunk.rs` |
//! | §V-A | full update / full read process | `store.rs` (`put_row`), `swim.rs` |
//! | §V-B | swim: out-of-place delta append, CAS of the index | `store.rs` (`update_fields`) |
//! | §V-B | restore point after N deltas (default 5) | `store.rs` (`update_fields`), `options.rs` |
//! | §V-B | partial read: tail to head, stop once every field is found | `swim.rs` |
//! | §V-B, Alg. 1 | cacheline-aware in-place merge, thread `focus:merge` | `merge.rs` |
//! | §V-C, Fig. 8 | SeaCache: page pool, per-schema page lists, slots, index pointers, thread `focus:cache` | `seacache.rs`, `cache_ops.rs` |
//! | §I (one sentence) | garbage collection of CLog/DLog chunks, thread `focus:gc` | `gc.rs` |
//! | (ours) | record key, schema id, sequence number, checksums, epochs; recovery | `format/`, `recovery.rs`, FORMAT.md |
//! | (ours) | `tierkv check` | `check.rs` |
//! | (ours, issue 24) | crash-atomic write batches: flagged member records and a commit record in the CLog, kept by GC while members remain | `batch.rs`, `recovery.rs`, `gc.rs` |
//!
//! ## Deviations (each argued where it is implemented)
//! - Writers of one row serialize on a striped lock; the index word still moves by CAS.
//!   The paper's lock-free retry can leave a durable losing delta with a higher sequence
//!   number than the winner, which recovery by sequence number would follow (`store.rs`).
//! - A delta goes to the DLog chunk of the writer's shard, not to a DLog tied to its
//!   record's CLog chunk (`plog.rs`).
//! - Variable-field heads hold a body-relative offset, not an absolute address
//!   (`format/row.rs`).
//! - The restore point is written by the update that would put the (N+1)th delta on a
//!   chain, in the foreground, so that it is crash-atomic with that update (`store.rs`).
//! - The in-place merge leaves the chain on pmem as it is and lets reads jump over the
//!   merged deltas in DRAM; it persists only dirty cache lines (Algorithm 1 read literally
//!   also flushes clean lines between close fields) (`merge.rs`).
//! - SeaCache's admission probability and lifetime formulas and the R_W table were lost in
//!   the text; ours are in `seacache.rs`, their constants are options. Plain key-value
//!   pairs (schema 0) are not cached; rows wider than half a cache page are not cached.
//! - GC is ours (the paper has one sentence): log-order victims, live rows rewritten as
//!   restore points (`gc.rs`).
//!
//! Thread safety: [`FocusStore`] is `Send + Sync`; every method takes `&self`.

#![forbid(unsafe_code)]

pub mod batch;
mod cache_ops;
mod check;
pub mod format;
pub mod gc;
pub mod merge;
pub mod options;
pub mod plog;
mod recovery;
pub mod seacache;
pub mod stats;
pub mod store;
pub mod swim;

use std::sync::Arc;

use tierkv_core::media::pmem::PmemPool;
use tierkv_core::{EngineContext, EngineDescriptor, KvStore, Limits, Result, Tier};

pub use options::FocusOptions;
pub use store::FocusStore;

/// The engine's descriptor, for the facade's registry.
pub const DESCRIPTOR: EngineDescriptor = EngineDescriptor {
    name: "focus",
    variants: &[],
    summary: "FOCUS: schema-aware records on pmem in a CLog/DLog persistent log, field updates by swim delta chains",
    tiers: &[Tier::Pmem],
    variant_tiers: &[],
    volatile: false,
    min_pmem_size: 4 << 20,
    max_value_len: Some(60 << 10),
    open,
};

fn open(ctx: EngineContext) -> Result<Arc<dyn KvStore>> {
    DESCRIPTOR.variant(&ctx.spec)?;
    let opts = FocusOptions::from_params(ctx.spec.params(), ctx.options.dram_budget.bytes())?;
    let pool = ctx.media.require_pmem()?.clone();
    let store = FocusStore::open(pool, opts, ctx.options.limits, ctx.created)?;
    Ok(store)
}

impl FocusStore {
    /// Creates (`created`) or recovers the store in `pool`.
    pub fn open(
        pool: Arc<PmemPool>,
        opts: FocusOptions,
        limits: Limits,
        created: bool,
    ) -> Result<Arc<FocusStore>> {
        let store = if created {
            recovery::create(pool, opts, limits)?
        } else {
            recovery::open(pool, opts, limits)?
        };
        let store = Arc::new(store);
        store.start()?;
        Ok(store)
    }
}
