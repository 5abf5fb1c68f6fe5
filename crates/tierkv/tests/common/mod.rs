//! Helpers shared by the facade's integration tests.

#![allow(dead_code)]

use tierkv_core::{ByteSize, DurabilityMode, Options};

/// A prism spec with small buffers and chunks.
pub const SMALL_PRISM: &str = "prism@pwb_count=2,pwb_size=64KiB,chunk_size=64KiB";

/// Options for a small store of `engine`: 32 MiB volatile pmem, 16 MiB flash, 8 MiB DRAM.
pub fn small_options(engine: &str) -> Options {
    Options::default()
        .engine(engine)
        .pmem_size(ByteSize::mib(32))
        .pmem_mode(DurabilityMode::Volatile)
        .flash_size(ByteSize::mib(16))
        .dram_budget(ByteSize::mib(8))
}
