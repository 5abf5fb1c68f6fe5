//! # The `prismdb` engine
//!
//! PrismDB (ASPLOS '23, `shared/papers/001_974e2867dc2a99c2.txt`): popularity-aware
//! tiering. Every write goes to slabs on the fast tier (the paper's NVM; here the pmem
//! pool, DESIGN §5), updated out of place; cold objects are demoted in key-range
//! compactions into sorted tables on flash, chosen by a cost-benefit metric (multi-tiered
//! storage compaction, MSC) fed by a clock popularity tracker; hot flash objects are
//! promoted back. Options: [`PrismDbOptions`] (`prismdb@victim=random,promotions=off`).
//!
//! ## Map of the paper
//!
//! | paper | what | where |
//! |---|---|---|
//! | §4.1 | partitions by key range | `partition_map.rs`, `partition.rs` |
//! | §4.1 | DRAM B-tree index over NVM objects (keys inline up to 24 bytes) | `partition.rs` (`State::index`), `key.rs` |
//! | §4.1, §6 | slabs per size class, object header with timestamp | `slab.rs`, `format.rs` |
//! | §4.1 | SST files with block index and Bloom filter | `table/` |
//! | §4.2, Fig. 4 | write-triggered compaction, watermarks, rate limiting | `background.rs`, `compaction.rs`, `partition.rs` (`reserve`) |
//! | §4.3 | clock tracker | `tracker.rs` |
//! | §4.3 | mapper, pinning threshold | `mapper.rs` |
//! | §5.2, Eq. 1 | MSC benefit / cost | `msc.rs` |
//! | §5.3, §6, Fig. 8 | precise/approx MSC, buckets, power-of-k, random | `msc.rs`, `policy.rs` |
//! | §4.2, §5.3 | promotions, read-triggered compactions | `compaction.rs`, `background.rs`, `hot.rs` |
//! | §6 | Put / Get / Scan / Delete | `partition.rs`, `store.rs` |
//! | §6 | manifest of SST files | `manifest.rs` |
//! | §6 | recovery (not implemented by the authors) | `recovery.rs` |
//! | (ours, issue 24) | crash-atomic write batches: intent record, commit word, `multi_get` | `batch/mod.rs`, `batch/record.rs`, `batch/recovery.rs` |
//! | (ours) | formats and crash argument | `FORMAT.md`, `format.rs` |
//! | (ours) | `tierkv check` | `check.rs` |
//!
//! ## Deviations (each argued where it is implemented)
//! - Keys are arbitrary bytes; partition boundaries default to YCSB's key shape
//!   (`partition_map.rs`) and bucket positions use the bytes after the partition's common
//!   prefix (`msc.rs`).
//! - Updates are out of place (new slot, persist, publish, free the old) — the paper's own
//!   suggestion for media without atomic 4 KiB writes (§6); an 8-byte word is our atomic unit.
//! - Deletes are tombstones only when a flash version (or a compaction in flight) could
//!   resurface the key; tombstones are dropped with the flash versions they hide.
//! - Table indexes and filters are in DRAM, not on NVM (`table/mod.rs`).
//! - Tracker per partition behind a mutex instead of TBB's concurrent map (`tracker.rs`).
//! - A compaction holds its partition's lock only in short pieces: to choose and mark its
//!   range, to list victims 256 index entries at a time (shared; their objects are copied
//!   and checked with no lock held), to swap the table set and to free victims 512 at a
//!   time (`compaction.rs`, FORMAT.md §3 "Compaction").
//! - approx-MSC's popular bit (§6's `pop_bitmap`, set by gets) is set when any access
//!   raises a tracked key's clock from 0, so a key written once (a load) is cold, as
//!   precise-MSC and the mapper see it (`msc.rs`); bucket edges include the candidate
//!   ranges' first keys.
//! - The mapper's probabilistic boundary draws per key (a hash), not per compaction, so the
//!   same keys of a partly pinned clock value stay pinned (`mapper.rs`).
//! - Scans read flash tables in runs sized by the entries they still want (`table/mod.rs`).
//! - Promotions take the hot objects gets noted on flash, wherever they are, with the
//!   values read (`hot.rs`), besides those a compaction meets in its range; a
//!   read-triggered compaction promotes them into the room below the low watermark, and
//!   demotes a range first (chosen by MSC) only when they are at least `read_min_promote`
//!   of its table's bytes; a write-triggered compaction promotes only after a
//!   read-dominated window (`promote_read_share`) (`compaction.rs`).
//! - A write-triggered compaction starts below the high watermark (down to `early_start`,
//!   0.88) when the partition's write rate would fill the room above it before a
//!   compaction ends, and partitions at or above the low watermark compact while any
//!   writer waits for room (`background.rs`).
//! - The read trigger's epoch is 1% of the store's objects by default (the paper's 1M
//!   operations on 100M keys), and its monitoring compares the share of reads served by
//!   promoted copies, not the fast tier's whole share, which sampling noise moved by more
//!   than the 1% threshold at these epoch lengths (`background.rs`).
//! - A full store (the paper does not consider one): slots and chunks of the fast tier are
//!   reserved for tombstones (`slab.rs`), tables are bounded by a 32nd of the flash device,
//!   compactions that grow flash use leave a reserve for one table's rewrite, and when
//!   flash has no other room, compactions drop tombstones only (`compaction.rs`), so a
//!   delete always succeeds (FORMAT.md §3 "Room for deletes", "Room on flash").
//! - Write batches (issue 24; the paper has no multi-key write): a batch's objects go to
//!   slab slots like puts, under an intent record listing the slots that recovery voids
//!   until one persisted word commits the batch for all its partitions (`batch/`,
//!   FORMAT.md §3 "Write batches"); `multi_get` reads its partitions under their locks at
//!   once.
//!
//! Thread safety: [`PrismDbStore`] is `Send + Sync`.

#![forbid(unsafe_code)]

pub mod background;
pub mod batch;
mod check;
pub mod compaction;
pub mod format;
pub mod hot;
pub mod key;
pub mod manifest;
pub mod mapper;
pub mod msc;
pub mod options;
pub mod partition;
pub mod partition_map;
pub mod policy;
mod recovery;
pub mod shared;
pub mod slab;
mod store;
pub mod table;
pub mod tracker;

use std::sync::Arc;

use tierkv_core::{EngineContext, EngineDescriptor, KvStore, Result, Tier};

pub use options::{PrismDbOptions, Victim};
pub use store::PrismDbStore;

/// The engine's descriptor, for the facade's registry.
pub const DESCRIPTOR: EngineDescriptor = EngineDescriptor {
    name: "prismdb",
    variants: &[],
    summary: "PrismDB (ASPLOS '23): slabs on pmem, sorted tables on flash, clock tracker, \
              multi-tiered storage compaction (MSC) with promotions",
    tiers: &[Tier::Pmem, Tier::Flash],
    variant_tiers: &[],
    volatile: false,
    min_pmem_size: 4 << 20,
    max_value_len: Some(4096),
    open: open_store,
};

fn open_store(ctx: EngineContext) -> Result<Arc<dyn KvStore>> {
    DESCRIPTOR.variant(&ctx.spec)?;
    Ok(PrismDbStore::open(&ctx)?)
}
