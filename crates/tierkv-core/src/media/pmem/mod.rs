//! The persistent-memory tier (DESIGN §4): a pool over one file mapped `MAP_SHARED`, and a
//! crash-consistent allocator over a region of it.
//!
//! ```text
//! pool file:  [ header area: 4 KiB (magic, version, size, id, checksum, 32 root words) ]
//!             [ engine region: data_start() .. len(), offsets are absolute pool offsets ]
//! ```
//! The byte layout is specified in `FORMAT.md` beside this file, with the assumptions
//! about the media that every engine's crash-consistency argument builds on.
//!
//! # Durability modes ([`DurabilityMode`])
//! | mode       | mapping                              | `persist`                         | survives |
//! |------------|--------------------------------------|-----------------------------------|----------|
//! | `Dax`      | `MAP_SHARED_VALIDATE \| MAP_SYNC`     | `clwb` (or `clflushopt`/`clflush`) per line + `sfence` | power loss |
//! | `Msync`    | `MAP_SHARED`                         | `msync(MS_SYNC)` of the pages     | power loss |
//! | `Volatile` | `MAP_SHARED` (e.g. on /dev/shm)      | nothing (counted)                 | process crash only |
//! | `Tracked`  | `MAP_SHARED` + a shadow image        | copy the lines to the shadow      | simulated: crash images |
//!
//! # Using a pool
//! All mutations go through [`PmemPool`] (`write`, `fill`, aligned atomic words,
//! `persist`), so that Tracked crash images are truthful; reads may use slices
//! ([`PmemPool::read`]). A write is durable only once a `persist` covering it has returned.
//! Engines publish data through atomic words (Release store after the data, Acquire load
//! before reading it) and find their structures through the pool's root words
//! ([`PmemPool::set_root`]). `mapping.rs` holds the soundness argument and the engines'
//! obligations; `tracked.rs` the crash-image model.
//!
//! # Modules
//! - `pool.rs` — create/open, identity, root words, counters, crash images;
//! - `access.rs` — reads, writes, atomics, persist;
//! - `mapping.rs` — the mmap and its soundness argument; `file.rs` — the file and its lock;
//! - `header.rs` — the header codec; `persist.rs` — write-back instructions;
//! - `tracked.rs` — the shadow image and crash images; `crash_points.rs` — numbered
//!   persists and named points where tests cut crash images; `latency.rs` — emulated latency;
//! - `alloc/` — [`PmemAllocator`], chunks and size-class slabs with persistent metadata.
//!
//! `unsafe` is denied in this module tree except at the sites in `mapping.rs`,
//! `persist.rs` and `file.rs` that carry an `#[expect(unsafe_code)]` and a `SAFETY` comment.
//!
//! Thread safety: [`PmemPool`] and [`PmemAllocator`] are `Send + Sync`; all methods take
//! `&self`.

#![deny(unsafe_code)]

mod access;
pub mod alloc;
mod codec;
pub mod crash_points;
mod file;
mod header;
mod latency;
mod mapping;
mod persist;
mod pool;
mod tracked;

pub use crate::api::options::{DurabilityMode, EmulatedLatency};
pub use alloc::{AllocStats, Allocation, DEFAULT_CHUNK_SIZE, PmemAllocator};
pub use crash_points::{CrashPoint, CrashPointHandler, arm_global, crash_point};
pub use header::{
    DATA_START, FORMAT_VERSION, MIN_POOL_SIZE, POOL_MAGIC, POOL_SIZE_ALIGN, PoolHeader, ROOT_COUNT,
    ROOTS_OFF, STATIC_LEN as HEADER_STATIC_LEN, decode_pool_header, encode_pool_header,
};
pub use persist::{FlushInstr, LINE as CACHE_LINE};
pub use pool::{PmemConfig, PmemPool, memory_backed};
pub use tracked::CrashImageOptions;

#[cfg(test)]
mod tests;
