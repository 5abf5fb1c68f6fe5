//! Shared fixtures of the `key_index_*` integration tests: a pool with an allocator on a
//! temporary file, reopening it, and the keys the tests use (short keys stored inline and
//! long ones stored in key blobs).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tierkv_core::media::pmem::{PmemAllocator, PmemConfig, PmemPool};
use tierkv_core::{DurabilityMode, EmulatedLatency};
use tierkv_prism::key_index::{KeyIndexOptions, PersistentKeyIndex};

/// The root word the tests keep their index in.
pub const ROOT: usize = 5;
/// The allocator chunk size of the tests' pools (small, so that chunks fill up).
pub const CHUNK: u64 = 16 << 10;

/// A pool with an allocator over its whole engine region.
pub struct Media {
    pub dir: tempfile::TempDir,
    pub pool: Arc<PmemPool>,
    pub alloc: Arc<PmemAllocator>,
}

pub fn config(path: &Path, size: u64, mode: DurabilityMode) -> PmemConfig {
    PmemConfig {
        path: path.to_path_buf(),
        size,
        mode,
        latency: EmulatedLatency::default(),
    }
}

/// Extra time per persist, spent before the persist takes effect: a Tracked crash image
/// requested meanwhile shows the stores before it as not yet persisted. Crash tests use it
/// so that their images land inside the protocols' store-then-persist windows instead of
/// between operations.
pub fn slow_persists(ns: u32) -> EmulatedLatency {
    EmulatedLatency {
        read_ns_per_line: 0,
        persist_ns: ns,
    }
}

pub fn pool_path(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("pool")
}

impl Media {
    /// A new pool of `size` bytes in `mode` with a formatted allocator.
    pub fn new(size: u64, mode: DurabilityMode) -> Media {
        Media::with_latency(size, mode, EmulatedLatency::default())
    }

    /// [`Media::new`] with emulated latency.
    pub fn with_latency(size: u64, mode: DurabilityMode, latency: EmulatedLatency) -> Media {
        let dir = tempfile::tempdir().unwrap();
        let cfg = PmemConfig {
            latency,
            ..config(&pool_path(&dir), size, mode)
        };
        let pool = PmemPool::create(&cfg).unwrap();
        let start = pool.data_start();
        let alloc = PmemAllocator::format(pool.clone(), start, pool.len() - start, CHUNK).unwrap();
        Media {
            dir,
            pool,
            alloc: Arc::new(alloc),
        }
    }

    /// Opens the pool file at `path` (a crash image, or a pool closed earlier) in `mode`.
    pub fn open(dir: tempfile::TempDir, path: &Path, mode: DurabilityMode) -> Media {
        let pool = PmemPool::open(&config(path, 0, mode)).unwrap();
        let alloc = PmemAllocator::open(pool.clone(), pool.data_start()).unwrap();
        Media {
            dir,
            pool,
            alloc: Arc::new(alloc),
        }
    }

    /// Closes and reopens the pool in `mode` (every index on it must be dropped first).
    pub fn reopen(self, mode: DurabilityMode) -> Media {
        let Media { dir, pool, alloc } = self;
        drop(alloc);
        drop(pool);
        let path = pool_path(&dir);
        Media::open(dir, &path, mode)
    }

    pub fn create_index(&self, fanout: usize) -> PersistentKeyIndex {
        PersistentKeyIndex::create_with(
            self.pool.clone(),
            self.alloc.clone(),
            ROOT,
            KeyIndexOptions { fanout },
        )
        .unwrap()
    }

    pub fn open_index(&self) -> PersistentKeyIndex {
        PersistentKeyIndex::open(self.pool.clone(), self.alloc.clone(), ROOT).unwrap()
    }

    /// Asserts the index's and the allocator's checks pass.
    pub fn assert_checks_pass(&self, index: &PersistentKeyIndex, context: &str) {
        assert_eq!(index.check().unwrap(), Vec::<String>::new(), "{context}");
        self.alloc
            .check()
            .unwrap_or_else(|e| panic!("{context}: allocator check: {e}"));
    }
}

/// Key number `id`: every fifth key is long (a key blob, of varying size), the rest short.
pub fn key(id: u32) -> Vec<u8> {
    let mut k = format!("k{:08x}", id.wrapping_mul(0x9e37_79b1)).into_bytes();
    if id.is_multiple_of(5) {
        k.resize(41 + (id as usize * 37) % 900, b'0' + (id % 10) as u8);
    }
    k
}

/// The seed of a random test (`tierkv_testkit::rig::seed`: from the environment, fixed in
/// CI, else random; printed so a failure can be replayed).
pub fn seed(test: &str) -> u64 {
    tierkv_testkit::rig::seed(test)
}
