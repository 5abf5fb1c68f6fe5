//! # The `hetermm` engine
//!
//! HeterMM (Frontiers of Computer Science, `shared/papers/004_6ba9cdbae3649cc8.txt`): a
//! framework that turns an in-DRAM index into a persistent key-value store over DRAM and
//! persistent memory by replacing the index's value get/set with two calls. The index
//! holds *logical addresses*; one logical space spans a ring of DRAM pages (new and hot
//! data, updated in place) and pmem blocks (old data, append-only), with background
//! flushing, a sampled-FIFO read cache, space reclamation, an operation log and a
//! thread-oriented allocator.
//!
//! `hetermm:btree` (default; scans), `hetermm:hash` and `hetermm:lockfree` (scans return
//! `Unsupported`; they enumerate their keys with `scan_cursor` instead) plug tierkv's three concurrent indexes in through the API (`btree` is a
//! lock-free hash map plus skip list with a writer lock per key, standing in for the
//! paper's concurrent B+-tree, `hash` dashmap, `lockfree` papaya:
//! `tierkv_core::common::index`), so each can be measured against itself in
//! `dram:<same index>`. HeterMM's `btree` keeps each key's logical address in one atomic
//! word (`new_word_index`, `WordCell`): an update swaps the word, allocating nothing.
//! Options: [`HeterOptions`].
//!
//! ## Map of the paper
//!
//! | paper | what | where |
//! |---|---|---|
//! | §3.2, Fig. 3-4 | plug-in API (`get_value`, `set_value`) | `plugin.rs` ([`HeterMemory`], [`PluggedIndex`]) |
//! | §4.1, Fig. 5 | one logical space, three regions, markers | `mem/mod.rs`, `geometry.rs` |
//! | §4.1.1 | DRAM pages in a ring; pmem blocks (pool runs, not files) | `dram/`, `nvm/mod.rs` |
//! | §4.1.2 | background flushing: persisting and freeing stages | `flush.rs` |
//! | §4.2, Eq. 1 | get: address translation | `mem/access.rs`, `dram/ring.rs`, `nvm/blocks.rs`, `nvm/read.rs` |
//! | §4.3 | set: in place above off_ReadOnly, out of place elsewhere | `mem/access.rs`, `dram/record.rs` |
//! | §5.1, Fig. 6 | read cache: sampled FIFO, dynamic DRAM split | `cache.rs`, `policy.rs` |
//! | §5.2, Fig. 7 | space reclamation: marking (invalid lists), reorganising (coalesced hash) | `invalid.rs`, `nvm/marks.rs`, `reorg.rs`, `format/compact.rs` |
//! | §5.3.1 | operation log, reclamation by maxAddress, compression | `oplog.rs`, `flush.rs` |
//! | §5.3.2, Alg. 1 | recovery, parallel over blocks | `recovery.rs` |
//! | §5.4, Alg. 2, Eq. 2-3 | thread-oriented allocation, alarms | `threads.rs`, `mem/alloc.rs`, `cache.rs` |
//! | (ours) | epochs instead of timed waits | `threads.rs`, `mem/guard.rs` |
//! | (ours) | a full pool: the reserve, room passes, log back-pressure | `nvm/reserve.rs`, `flush.rs`, `mem/mod.rs`, `mem/alloc.rs` |
//! | (ours) | one persist commits a log entry (its checksum covers its ts; the paper's two-step write is option `two_step_write`) | `format/log.rs`, `oplog.rs` (`write_entry`), FORMAT.md § Operation log |
//! | (ours) | a put's log persists after the index lock, grouped across writers; readers wait for a version's entry to be durable | `mem/access.rs` (`complete`), `oplog.rs` (`PreparedEntry`), `groupsync.rs`, FORMAT.md § Writes |
//! | (ours) | named crash points of flushing, reorganisation, log retirement | `flush.rs`, `reorg.rs`, `oplog.rs`, FORMAT.md |
//! | (ours) | crash-atomic write batches: one log entry commits them; a larger batch is parts and one commit | `batch.rs`, `mem/batch.rs`, `format/batch.rs`, `oplog.rs`, `batch_recovery.rs`, FORMAT.md § Write batches |
//! | (ours) | formats, crash argument | `format/`, `FORMAT.md` |
//!
//! ## Deviations from the paper (each argued where it is implemented)
//! - Pages 2^15 and blocks 2^21 bytes by default instead of 2^20 and 2^30 (`options.rs`).
//! - Blocks are runs of the pool's allocator, published in a block directory, not files
//!   (`nvm/mod.rs`).
//! - Old pages and blocks are recycled after an epoch synchronization, not a 5-second wait
//!   (`threads.rs`, `reorg.rs`).
//! - The read cache keeps its own map from logical address to cache entry instead of
//!   rewriting the index's slot through a pointer (`cache.rs`).
//! - Invalid-address lists are persistent bitmaps in each block, set only once what
//!   replaced a record is durable; with them deletes survive recovery, which Algorithm 1 as
//!   written would undo (`invalid.rs`, `recovery.rs`).
//! - Records carry a checksum and a seal bit for lock-free indexes (`format/record.rs`).
//! - A log entry's maxAddress covers the version its write replaced as well as its own
//!   record, and a durable flush frontier tells recovery which put entries' records are
//!   already in pmem: with per-thread log pages, entries of one key sit in log blocks in
//!   any order, and reclaiming blocks by maxAddress alone lost deletes (`format/log.rs`,
//!   `recovery.rs`, FORMAT.md § Covered address).
//!
//! Thread safety: [`HeterStore`] is `Send + Sync`; see each module for its contract.

#![forbid(unsafe_code)]

mod background;
mod batch;
mod batch_recovery;
pub mod cache;
mod check;
pub mod dram;
mod flush;
pub mod format;
pub mod geometry;
mod groupsync;
pub mod invalid;
pub mod mem;
pub mod nvm;
pub mod oplog;
pub mod options;
pub mod plugin;
pub mod policy;
#[cfg(test)]
mod reader_tests;
mod recovery;
#[cfg(test)]
mod regressions;
mod reorg;
mod signal;
pub mod stats;
mod store;
pub mod threads;

use std::sync::Arc;

use tierkv_core::common::index::INDEX_VARIANTS;
use tierkv_core::{EngineContext, EngineDescriptor, KvStore, Result, Tier};

pub use geometry::LogicalAddress;
pub use mem::HeterMem;
pub use options::HeterOptions;
pub use plugin::{CoreIndex, HeterMemory, PluggedIndex};
pub use store::HeterStore;

/// The engine's descriptor, for the facade's registry.
pub const DESCRIPTOR: EngineDescriptor = EngineDescriptor {
    name: "hetermm",
    variants: INDEX_VARIANTS,
    summary: "HeterMM: a plugged-in DRAM index over one logical space of DRAM pages and pmem blocks",
    tiers: &[Tier::Pmem],
    variant_tiers: &[],
    volatile: false,
    min_pmem_size: 1 << 20,
    max_value_len: Some(MAX_VALUE_LEN),
    open,
};

/// The largest value a store with the default pages holds whatever its key (key + value must
/// fit a page less 128 bytes, `mem/mod.rs`, and keys may be up to 1 KiB), declared so that the
/// facade refuses larger ones itself and every key length gets the same promise. Stores created with a larger `page_bits` are held to it through the facade
/// too (the descriptor is the same for every store).
pub const MAX_VALUE_LEN: usize =
    (1 << options::DEFAULT_PAGE_BITS) - 128 - tierkv_core::api::options::DEFAULT_MAX_KEY_LEN;

fn open(ctx: EngineContext) -> Result<Arc<dyn KvStore>> {
    let variant = DESCRIPTOR.variant(&ctx.spec)?;
    let opts = HeterOptions::from_params(ctx.spec.params(), ctx.options.dram_budget.bytes())?;
    let pool = ctx.media.require_pmem()?.clone();
    let index = CoreIndex::new(variant)?;
    let store = HeterStore::open(pool, opts, ctx.options.limits, index, ctx.created)?;
    Ok(store)
}
