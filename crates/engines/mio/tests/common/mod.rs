//! Helpers shared by the mio integration tests: pools on tmpfs, stores with tiny
//! MemTables (so flushes and compactions run many times in a short test), printed seeds.

#![allow(dead_code)] // each test file uses a subset
#![allow(clippy::unwrap_used, reason = "test helpers fail the test on errors")]

use std::sync::Arc;

use tierkv_core::media::pmem::PmemPool;
use tierkv_core::{EngineSpec, Limits, Stats};
use tierkv_mio::{MioOptions, MioStore};

#[allow(unused_imports, reason = "each test file uses a subset")]
pub use tierkv_testkit::rig::{config, create_pool, scratch_dir, seed};

/// Options from a spec's parameters (`"memtable=16KiB,levels=4"`).
pub fn options(params: &str) -> MioOptions {
    let spec = if params.is_empty() {
        "mio".to_owned()
    } else {
        format!("mio@{params}")
    };
    let spec: EngineSpec = spec.parse().expect("spec");
    MioOptions::from_params(spec.params()).expect("options")
}

/// Limits small enough for tiny MemTables (values up to 4 KiB).
pub fn limits() -> Limits {
    Limits {
        max_key_len: 64,
        max_value_len: 4096,
    }
}

/// Opens (or creates) a store.
pub fn open(pool: Arc<PmemPool>, params: &str, created: bool) -> Arc<MioStore> {
    tierkv_mio::open_store(pool, options(params), limits(), created).expect("open store")
}

/// An engine counter (0 if absent).
pub fn counter(s: &Stats, name: &str) -> u64 {
    s.counters.get(&format!("mio_{name}")).copied().unwrap_or(0)
}

/// A flash device of `size` bytes in `dir` (for `mio:flash`).
pub fn flash_device(
    dir: &std::path::Path,
    size: u64,
) -> Arc<tierkv_core::media::flash::FlashDevice> {
    let opts = tierkv_core::FlashOptions {
        size: tierkv_core::ByteSize(size),
        ..tierkv_core::FlashOptions::default()
    };
    tierkv_core::media::flash::FlashDevice::open(dir, &opts).expect("flash device")
}

/// Opens (or creates) a `mio:flash` store on `pool` and `flash`.
pub fn open_flash(
    pool: Arc<PmemPool>,
    flash: Arc<tierkv_core::media::flash::FlashDevice>,
    params: &str,
    created: bool,
) -> Arc<MioStore> {
    tierkv_mio::open_flash_store(pool, flash, options(params), limits(), created)
        .expect("open mio:flash store")
}

pub mod crash;
