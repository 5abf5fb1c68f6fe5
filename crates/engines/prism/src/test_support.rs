//! Test fixtures shared by the unit tests of the core modules: a pmem pool laid out as a
//! PRISM store (superblock plan, allocator region) in a temporary directory.

use std::sync::Arc;

use tempfile::TempDir;
use tierkv_core::media::pmem::{PmemAllocator, PmemConfig, PmemPool};
use tierkv_core::{DurabilityMode, EmulatedLatency};

use crate::superblock::{PlanInput, Superblock, plan};

/// A pool with PRISM's regions planned and its allocator formatted.
pub struct PmemFixture {
    /// Keeps the directory alive.
    pub _dir: TempDir,
    /// The pool.
    pub pool: Arc<PmemPool>,
    /// The allocator over the planned region.
    pub alloc: Arc<PmemAllocator>,
    /// The planned layout.
    pub sb: Superblock,
}

/// A Tracked pool of `pool_len` bytes with `pwb_count` PWBs of `pwb_size` bytes and 64 KiB
/// allocator chunks (HSIT segments of 4096 entries).
pub fn pmem_fixture(pool_len: u64, pwb_count: u32, pwb_size: u64) -> PmemFixture {
    let dir = tempfile::tempdir().unwrap();
    let cfg = PmemConfig {
        path: dir.path().join("pool"),
        size: pool_len,
        mode: DurabilityMode::Tracked,
        latency: EmulatedLatency::default(),
    };
    let pool = PmemPool::create(&cfg).unwrap();
    let (_, sb) = plan(&PlanInput {
        data_start: pool.data_start(),
        pool_len,
        pwb_count,
        pwb_size,
        alloc_chunk: 64 << 10,
        min_alloc_len: 1 << 20,
        chunk_size: 64 << 10,
        flash_count: 1,
    })
    .unwrap();
    let alloc = Arc::new(
        PmemAllocator::format(pool.clone(), sb.alloc_off, sb.alloc_len, 64 << 10).unwrap(),
    );
    PmemFixture {
        _dir: dir,
        pool,
        alloc,
        sb,
    }
}
