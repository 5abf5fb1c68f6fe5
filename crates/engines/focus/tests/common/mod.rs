//! Helpers shared by the focus integration tests: pools on tmpfs, small chunks (so chunk
//! rollover happens in short tests), printed seeds.

#![allow(dead_code)] // each test file uses a subset
#![allow(clippy::unwrap_used, reason = "test helpers fail the test on errors")]

use std::path::Path;
use std::sync::Arc;

use parking_lot::Mutex;
use tierkv_core::media::pmem::{
    CrashImageOptions, DurabilityMode, EmulatedLatency, PmemConfig, PmemPool,
};
use tierkv_core::{EngineSpec, Limits};
use tierkv_focus::{FocusOptions, FocusStore};

#[allow(unused_imports, reason = "each test file uses a subset")]
pub use tierkv_testkit::rig::{create_pool, scratch_dir, seed};

/// Opens an existing pool.
pub fn open_pool(path: &Path, mode: DurabilityMode) -> Arc<PmemPool> {
    PmemPool::open(&PmemConfig {
        path: path.to_owned(),
        size: 0,
        mode,
        latency: EmulatedLatency::default(),
    })
    .expect("open pool")
}

/// Options from a spec's `@...` part (e.g. `"chunk_size=64KiB"`).
pub fn options(extra: &str) -> FocusOptions {
    let spec = if extra.is_empty() {
        "focus".to_owned()
    } else {
        format!("focus@{extra}")
    };
    let spec: EngineSpec = spec.parse().expect("spec");
    FocusOptions::from_params(spec.params(), 64 << 20).expect("options")
}

/// A new store in a fresh `size`-byte pool under `dir`.
pub fn new_store(dir: &Path, size: u64, mode: DurabilityMode, extra: &str) -> Arc<FocusStore> {
    let pool = create_pool(&dir.join("pool"), size, mode);
    FocusStore::open(pool, options(extra), Limits::default(), true).expect("create store")
}

/// Reopens (recovers) the store in the pool file `path`.
pub fn reopen(path: &Path, extra: &str) -> Arc<FocusStore> {
    try_reopen(path, extra).expect("recover store")
}

/// Reopens (recovers) the store in the pool file `path` (a Volatile pool); `Err` says
/// what failed.
pub fn try_reopen(path: &Path, extra: &str) -> Result<Arc<FocusStore>, String> {
    let pool = PmemPool::open(&PmemConfig {
        path: path.to_owned(),
        size: 0,
        mode: DurabilityMode::Volatile,
        latency: EmulatedLatency::default(),
    })
    .map_err(|e| format!("open pool: {e}"))?;
    FocusStore::open(pool, options(extra), Limits::default(), false)
        .map_err(|e| format!("recovery: {e}"))
}

/// Installs a persist hook on `s` (a Tracked pool) that takes a crash image just before
/// every persist point, alternately line- and word-torn; returns where they collect.
pub fn capture_images(s: &FocusStore, seed: u64) -> Arc<Mutex<Vec<Vec<u8>>>> {
    let images: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let (out, pool) = (images.clone(), s.plog().pool().clone());
    let n = std::sync::atomic::AtomicU64::new(seed);
    s.plog().set_persist_hook(Some(Arc::new(move |_| {
        let k = n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let o = if k.is_multiple_of(2) {
            CrashImageOptions::lines()
        } else {
            CrashImageOptions::torn_words()
        };
        out.lock()
            .push(pool.crash_image(k, o).expect("crash image"));
    })));
    images
}
