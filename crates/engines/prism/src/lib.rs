//! # The `prism` engine
//!
//! PRISM (Song et al., ASPLOS '23; `shared/papers/000_d69a7359ad220b97.txt`): a key-value
//! store for DRAM + persistent memory + flash. Keys live in a persistent range index on
//! pmem that maps each key to an entry of HSIT, the table of forward pointers; a value is
//! written to the writer thread's Persistent Write Buffer on pmem, moved in the background
//! to log-structured Value Storage on flash in chunk-sized writes, and cached in DRAM by
//! the Scan-aware Value Cache when read from flash. The on-media layout and the crash-
//! consistency argument are in `FORMAT.md` beside this crate.
//!
//! | paper | module |
//! |---|---|
//! | §4.1 Persistent Key Index on NVM (PACTree) | [`key_index`] |
//! | §4.2, §5.1 Value Storage on flash, §5.2 GC | [`value_storage`] |
//! | §5.3 Opportunistic thread combining | [`combining`] |
//! | §4.4 Scan-aware Value Cache | [`svc`] |
//! | §4.3 Persistent Write Buffer, §5.2 reclamation | [`pwb`], `engine/reclaim.rs` |
//! | §4.5 HSIT, §5.4 concurrency control (dirty bit, epochs) | [`hsit`], `engine/write.rs`, `engine/read.rs` |
//! | §5.5 crash consistency and recovery | `recovery.rs`, `FORMAT.md` |
//! | (not in the paper) crash-atomic write batches: redo log + commit word | [`batch`] |
//! | (not in the paper) salvage of a damaged store: a read-only walk of the leaves, HSIT, PWBs and chunks | [`salvage`] |
//! | the store: open, threads, `KvStore` | [`engine`] |
//! | options (paper defaults), counters, `tierkv check` | [`options`], [`stats`], `check.rs` |
//!
//! Where we part from the paper, and why:
//! - a combining leader reaps its own batch on a ring it checks out, instead of a
//!   completion thread polling for every batch (§5.3 ④): the extra hop cost more than the
//!   read on a small machine (`value_storage/reader.rs`); timeout batching and multi-reads
//!   keep the completion thread;
//! - a watermark-triggered PWB reclamation moves the oldest records until a quarter of the
//!   ring is left (`pwb_retain`), not the whole ring (§4.3 does not say how much): the
//!   newest values stay readable on pmem and their overwrites never reach flash.
//!
//! Thread safety: [`PrismStore`] is `Send + Sync`; see each module for its contract.

#![deny(unsafe_code)]

pub mod batch;
mod check;
pub mod combining;
pub mod engine;
mod faults;
pub mod hsit;
pub mod key_index;
pub mod options;
pub mod pwb;
mod recovery;
pub mod salvage;
pub mod stats;
pub mod superblock;
pub mod svc;
#[cfg(test)]
mod test_support;
pub mod value_storage;

pub use engine::{DESCRIPTOR, PrismStore};
