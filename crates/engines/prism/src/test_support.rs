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

/// A store opened straight through its `EngineContext` (no facade) in a temporary
/// directory: a Tracked pool of `pool_mib` MiB, one flash device of `flash_mib` MiB.
pub struct StoreFixture {
    /// Keeps the directory alive.
    pub _dir: TempDir,
    /// The open store.
    pub store: Arc<crate::PrismStore>,
}

/// The engine context of a store in `dir`.
pub fn store_context(
    dir: &std::path::Path,
    spec: &str,
    pool_mib: u64,
    flash_mib: u64,
    created: bool,
) -> tierkv_core::EngineContext {
    use tierkv_core::format::manifest::Manifest;
    use tierkv_core::media::Media;
    use tierkv_core::media::flash::FlashDevice;
    use tierkv_core::{ByteSize, FlashOptions, Options};
    let cfg = PmemConfig {
        path: dir.join("pmem.pool"),
        size: pool_mib << 20,
        mode: DurabilityMode::Tracked,
        latency: EmulatedLatency::default(),
    };
    let pool = if created {
        PmemPool::create(&cfg).unwrap()
    } else {
        PmemPool::open(&cfg).unwrap()
    };
    let flash = FlashOptions {
        size: ByteSize(flash_mib << 20),
        ..FlashOptions::default()
    };
    let dev = FlashDevice::open(&dir.join("flash"), &flash).unwrap();
    let options = Options::default()
        .engine(spec)
        .dram_budget(ByteSize::mib(1));
    tierkv_core::EngineContext {
        dir: dir.to_owned(),
        spec: options.engine_spec().unwrap(),
        options,
        manifest: Manifest {
            engine: "prism".into(),
            created_by: "tests".into(),
            pmem: None,
            flash: Vec::new(),
        },
        media: Media {
            pmem: Some(pool),
            flash: vec![dev],
        },
        created,
    }
}

/// A new store with `spec` (a Tracked pool of 32 MiB, 16 MiB of flash).
pub fn store_fixture(spec: &str) -> StoreFixture {
    let dir = tempfile::tempdir().unwrap();
    let ctx = store_context(dir.path(), spec, 32, 16, true);
    let store = crate::PrismStore::open(&ctx).unwrap();
    StoreFixture { _dir: dir, store }
}
