//! # The `mio` engine
//!
//! MioDB (ASPLOS '23, `shared/papers/002_03a242d4c1fb4a49.txt`): an LSM store for DRAM +
//! persistent memory that replaces serialized SSTables with persistent skiplists
//! (PMTables). Writes go to a write-ahead log on pmem and a DRAM MemTable; a full MemTable
//! is flushed to pmem in one piece; PMTables flow through an elastic buffer of levels
//! (a level compacts as soon as it holds two tables, one thread per level) into a data
//! repository at the bottom. Options: [`MioOptions`]; formats and every persist order:
//! `FORMAT.md`.
//!
//! ## Map of the paper
//!
//! | paper | what | where |
//! |---|---|---|
//! | §4.1, Fig. 3 | architecture: MemTable, elastic buffer L0..L(n-1), repository Ln | `version.rs`, `store.rs` |
//! | §4.2, Fig. 4 | one-piece flush: one allocation, one copy, links rebased ("swizzled") | `arena.rs`, `table.rs` (`write_table`, `rebase`), `flush.rs` |
//! | §4.3, Fig. 5 | zero-copy compaction, insertion mark | `zerocopy.rs` |
//! | §4.4 | lazy-copy into the repository | `lazycopy.rs` |
//! | §4.5 | one compaction thread per level | `background.rs`, `compact.rs` (`choose`) |
//! | (baseline) | `compaction=copy`: a copying merge of a level's two oldest tables, built in place on pmem | `compact.rs`, `builder.rs` |
//! | §4.6 | reads newest first; mergeable Bloom filters | `store.rs` (`get`, `scan`), `merge.rs`, `bloom.rs` |
//! | §4.7 | WAL, recovery | `wal.rs`, `recovery.rs`, `dir.rs` |
//! | §4.7's WAL, for many keys (issue 24) | crash-atomic write batches: one checksummed batch record in the log, one MemTable, `multi_get` behind the batch gate | `batch.rs`, `wal.rs` (`encode_batch`) |
//! | §4.1 "Supporting Memory/Storage Hierarchy", §5.4 | the SSD extension, variant `mio:flash`: the repository is leveled sorted tables on flash (shared `tierkv-sstable`); the lazy copy becomes a write-out to flash level 0 | `flash.rs`, `flash_work.rs` |
//! | (ours) | node layout shared by DRAM and pmem | `node.rs`, `skiplist.rs` |
//! | (ours) | counters, check | `stats.rs`, `report.rs`, `check.rs` |
//! | (ours) §4.6's reads, on pmem | a DRAM seek index per buffer table (its nodes of level 2 and up), kept right through zero-copy merges | `seek_index.rs`, `table.rs`, `zerocopy.rs` |
//! | (ours) §4.4's repository after deletes | defragmentation: sparse slabs emptied by moving their nodes, under space pressure | `defrag.rs`, `recovery.rs` (`unlink_upper_only`) |
//! | §4.5 "writes never stall", meets a full pool (issue 23) | room: MemTables own their flush target, puts admitted against the lazy copies' debt, a spare pair for deletes, refusal when the background makes no progress | `space.rs`, `store.rs` (`admit`) |
//!
//! ## Deviations from the paper (each argued where it is implemented)
//! - Links are pool offsets (our pool is offset-addressed), so "pointer swizzling" is a
//!   rebase of arena offsets by the allocation's offset (`table.rs`). The rebase is done
//!   in the DRAM image before the single write, so pmem is written once.
//! - The level lists, the live logs and (later) the compaction state are a checksummed
//!   directory object published with one atomic root update (`dir.rs`), instead of the
//!   authors' DRAM objects, which did not survive a crash.
//! - Buffer memory is reclaimed when the last reader's version drops a retired table (an
//!   `Arc` is the reader's epoch), not at the end of a lazy copy.
//! - Readers of a pair under zero-copy compaction do not consult the insertion mark:
//!   each node move makes both tables' move counts odd while it runs, and a get or scan
//!   that read a buffer level without locks keeps its answer only if the counts did not
//!   change (a seqlock; a get reads around a move under way from a DRAM record of it
//!   instead of waiting for its end), else reads again while the merges pause between
//!   moves, and only as a last resort under the level locks, which each move holds
//!   exclusively (`zerocopy.rs` argues why the paper's lock-free reading can miss nodes);
//!   writers are never blocked.
//! - The lazy copy inserts each newest version as a new node and unlinks and frees the
//!   older ones (no in-place update: a value larger than 8 bytes cannot be overwritten
//!   crash-atomically).
//!
//! Thread safety: [`MioStore`] is `Send + Sync`.

#![forbid(unsafe_code)]

pub mod arena;
pub mod background;
mod batch;
pub mod bloom;
pub mod builder;
mod check;
pub mod compact;
pub mod defrag;
pub mod dir;
pub mod flash;
mod flash_work;
mod flush;
pub mod lazycopy;
pub mod merge;
pub mod node;
pub mod options;
pub mod points;
#[cfg(test)]
mod read_windows;
mod recovery;
mod report;
pub mod seek_index;
pub mod skiplist;
pub mod space;
pub mod stats;
mod store;
pub mod table;
pub mod version;
pub mod wal;
pub mod zerocopy;

use std::sync::Arc;

use tierkv_core::media::flash::FlashDevice;
use tierkv_core::media::pmem::PmemPool;
use tierkv_core::{EngineContext, EngineDescriptor, KvStore, Limits, Result, Tier};

pub use options::MioOptions;
pub use store::MioStore;

/// The engine's descriptor, for the facade's registry.
pub const DESCRIPTOR: EngineDescriptor = EngineDescriptor {
    name: "mio",
    variants: &["pmem", "flash"],
    summary: "MioDB: DRAM MemTables flushed to pmem skiplists in one piece, an elastic buffer of levels and a repository (pmem skiplist, or sorted tables on flash with mio:flash)",
    tiers: &[Tier::Pmem],
    variant_tiers: &[("flash", &[Tier::Pmem, Tier::Flash])],
    volatile: false,
    min_pmem_size: 1 << 20,
    max_value_len: None,
    open,
};

fn open(ctx: EngineContext) -> Result<Arc<dyn KvStore>> {
    let variant = DESCRIPTOR.variant(&ctx.spec)?;
    let mut opts = MioOptions::from_params(ctx.spec.params())?;
    let pool = ctx.media.require_pmem()?.clone();
    let store = if variant == "flash" {
        let dev = ctx
            .media
            .flash
            .first()
            .cloned()
            .ok_or_else(|| tierkv_core::Error::invalid("mio:flash needs a flash directory"))?;
        // The block cache gets the DRAM budget less two MemTables (the active and the
        // immutable one) and an eighth for the tables' indexes and filters, as RocksDB's
        // block cache gets its budget less its memtables; at least a quarter of the budget.
        let budget = ctx.options.dram_budget.bytes();
        let memtables = 2 * opts.memtable_for(pool.len());
        let cache = budget
            .saturating_sub(memtables + budget / 8)
            .max(budget / 4);
        opts.flash
            .get_or_insert_default()
            .block_cache
            .get_or_insert(cache);
        open_flash_store(pool, dev, opts, ctx.options.limits, ctx.created)?
    } else {
        if opts.flash.is_some() {
            return Err(tierkv_core::Error::invalid(
                "mio: the flash options (sst_size, flash_*, block_cache) need the mio:flash variant",
            ));
        }
        open_store(pool, opts, ctx.options.limits, ctx.created)?
    };
    Ok(store)
}

/// Opens (or, when `created`, formats) a mio store in `pool`.
pub fn open_store(
    pool: Arc<PmemPool>,
    opts: MioOptions,
    limits: Limits,
    created: bool,
) -> Result<Arc<MioStore>> {
    recovery::open(pool, None, opts, limits, created, None)
}

/// Opens (or, when `created`, formats) a `mio:flash` store: its buffer in `pool`, its
/// repository as sorted tables on `flash` (`flash.rs`). `opts.flash` gives the shape (the
/// default when `None`; an unset block cache gets 8 MiB).
pub fn open_flash_store(
    pool: Arc<PmemPool>,
    flash: Arc<FlashDevice>,
    mut opts: MioOptions,
    limits: Limits,
    created: bool,
) -> Result<Arc<MioStore>> {
    opts.flash
        .get_or_insert_default()
        .block_cache
        .get_or_insert(8 << 20);
    recovery::open(pool, Some(flash), opts, limits, created, None)
}

/// [`open_store`] with a hook called just before each of the engine's own persists (crash
/// tests take a crash image there: every persist point of every operation).
#[doc(hidden)]
pub fn open_store_with_persist_hook(
    pool: Arc<PmemPool>,
    opts: MioOptions,
    limits: Limits,
    created: bool,
    hook: table::PersistHook,
) -> Result<Arc<MioStore>> {
    recovery::open(pool, None, opts, limits, created, Some(hook))
}

/// [`open_flash_store`] with a persist hook (see [`open_store_with_persist_hook`]).
#[doc(hidden)]
pub fn open_flash_store_with_persist_hook(
    pool: Arc<PmemPool>,
    flash: Arc<FlashDevice>,
    mut opts: MioOptions,
    limits: Limits,
    created: bool,
    hook: table::PersistHook,
) -> Result<Arc<MioStore>> {
    opts.flash
        .get_or_insert_default()
        .block_cache
        .get_or_insert(8 << 20);
    recovery::open(pool, Some(flash), opts, limits, created, Some(hook))
}
