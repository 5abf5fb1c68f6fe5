//! Shared rig of the PrismDB integration tests: a pmem pool (Tracked by default) and a
//! flash directory in a temporary directory, opened straight through
//! `PrismDbStore::open_media`, with a tiny fast tier and small tables so that compactions,
//! promotions and class moves run constantly.

#![allow(dead_code)] // each test file uses a subset
#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tempfile::TempDir;
use tierkv_core::media::flash::{FaultInjector, FlashDevice};
use tierkv_core::media::pmem::{CrashImageOptions, PmemConfig, PmemPool};
use tierkv_core::{
    ByteSize, DurabilityMode, EmulatedLatency, EngineSpec, FlashOptions, KvStore, Limits,
};
use tierkv_prismdb::{PrismDbOptions, PrismDbStore};

/// Tiny everything: 16 KiB slabs, 64 KiB tables, watermarks low enough that a few hundred
/// KiB of data keeps compactions running, small buckets and tracker.
pub const TINY: &str = "prismdb@partitions=4,bounds=p1|p2|p3,chunk_size=16KiB,table_size=64KiB,\
high_watermark=0.08,low_watermark=0.05,bucket_keys=64,tracker_min=64,block_cache=256KiB";

/// The named crash points of the compaction thread (FORMAT.md §3 "Named crash points").
pub const BACKGROUND: [&str; 6] = [
    "prismdb.compaction.tables_synced",
    "prismdb.compaction.manifest_committed",
    "prismdb.compaction.victim_freed",
    "prismdb.compaction.old_files_removed",
    "prismdb.promotion.object_persisted",
    "prismdb.promotion.published",
];
/// The named crash points of puts and deletes.
pub const FOREGROUND: [&str; 6] = [
    "prismdb.put.object_persisted",
    "prismdb.put.published",
    "prismdb.delete.accepted",
    "prismdb.delete.slot_freed",
    "prismdb.delete.tombstone_persisted",
    "prismdb.delete.tombstone_published",
];

/// Where a test store lives and how it is opened.
pub struct Rig {
    pub root: PathBuf,
    _tmp: Option<TempDir>,
    pub spec: String,
    pub pool_size: u64,
    pub mode: DurabilityMode,
    pub injector: Option<Arc<FaultInjector>>,
    pub flash_size: u64,
}

/// A scratch directory, on /dev/shm when it exists (fsyncs there cost nothing, so the
/// tests measure the engine rather than the disk).
pub fn scratch_dir() -> TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(d) = tempfile::tempdir_in(shm)
    {
        return d;
    }
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

/// The seed of a random test: `TIERKV_TEST_SEED` if set, else `default`; printed.
pub fn seed(test: &str, default: u64) -> u64 {
    let s = std::env::var("TIERKV_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    println!("{test}: seed {s} (replay with TIERKV_TEST_SEED={s})");
    s
}

impl Rig {
    /// A rig with `spec` and a Tracked pool of `pool_mib` MiB.
    pub fn new(spec: &str, pool_mib: u64) -> Rig {
        let tmp = scratch_dir();
        Rig {
            root: tmp.path().to_owned(),
            _tmp: Some(tmp),
            spec: spec.to_owned(),
            pool_size: pool_mib << 20,
            mode: DurabilityMode::Tracked,
            injector: None,
            flash_size: 256 << 20,
        }
    }

    /// A rig in `dir` (which the caller keeps), with a Volatile pool: what a process
    /// that is killed writes to (SIGKILL tests).
    pub fn at(dir: &Path, spec: &str, pool_mib: u64) -> Rig {
        Rig {
            root: dir.to_owned(),
            _tmp: None,
            spec: spec.to_owned(),
            pool_size: pool_mib << 20,
            mode: DurabilityMode::Volatile,
            injector: None,
            flash_size: 256 << 20,
        }
    }

    /// The same rig with a flash device of `mib` MiB (256 by default).
    #[allow(dead_code, reason = "not every test binary uses it")]
    pub fn with_flash(mut self, mib: u64) -> Rig {
        self.flash_size = mib << 20;
        self
    }

    /// The same rig with a fault injector on the flash device.
    pub fn with_faults(mut self) -> Rig {
        self.injector = Some(Arc::new(FaultInjector::new()));
        self
    }

    pub fn pool_path(&self) -> PathBuf {
        self.root.join("pmem.pool")
    }

    pub fn flash_dir(&self) -> PathBuf {
        self.root.join("flash")
    }

    pub fn pool_config(&self, path: &Path) -> PmemConfig {
        PmemConfig {
            path: path.to_owned(),
            size: self.pool_size,
            mode: self.mode,
            latency: EmulatedLatency::default(),
        }
    }

    pub fn options(&self, spec: &str) -> PrismDbOptions {
        let s: EngineSpec = spec.parse().unwrap();
        PrismDbOptions::from_params(s.params(), 1 << 20).unwrap()
    }

    fn flash_options(&self) -> FlashOptions {
        FlashOptions {
            size: ByteSize(self.flash_size),
            ..FlashOptions::default()
        }
    }

    /// The flash device (through the injector when there is one).
    pub fn device(&self) -> Arc<FlashDevice> {
        match &self.injector {
            Some(inj) => {
                FlashDevice::open_with_faults(&self.flash_dir(), &self.flash_options(), inj.clone())
                    .unwrap()
            }
            None => FlashDevice::open(&self.flash_dir(), &self.flash_options()).unwrap(),
        }
    }

    /// A plain flash device (what a restart after a crash sees).
    pub fn plain_device(&self) -> Arc<FlashDevice> {
        FlashDevice::open(&self.flash_dir(), &self.flash_options()).unwrap()
    }

    /// Creates the store and returns its pool too.
    pub fn create_with_pool(&self) -> (Arc<PrismDbStore>, Arc<PmemPool>) {
        let pool = PmemPool::create(&self.pool_config(&self.pool_path())).unwrap();
        let store = PrismDbStore::open_media(
            pool.clone(),
            self.device(),
            self.options(&self.spec),
            Limits::default(),
            true,
        )
        .unwrap();
        (store, pool)
    }

    /// Creates the store.
    pub fn create(&self) -> Arc<PrismDbStore> {
        self.create_with_pool().0
    }

    /// Reopens the store from the pool file at `path` with a plain flash device.
    pub fn reopen_from(&self, path: &Path) -> tierkv_core::Result<Arc<PrismDbStore>> {
        let pool = PmemPool::open(&self.pool_config(path))?;
        PrismDbStore::open_media(
            pool,
            self.plain_device(),
            self.options(&self.spec),
            Limits::default(),
            false,
        )
    }

    /// Recovers a store from a crash image of `pool` (whole lines for an even `seed`,
    /// torn words for an odd one) and a copy of the flash directory as it stands, in a new
    /// scratch directory (returned: the store lives in it), and runs its `check`. The
    /// recovered pool is Volatile (it needs no crash images of its own).
    pub fn recover_image(
        &self,
        pool: &PmemPool,
        seed: u64,
        spec: &str,
    ) -> Result<(TempDir, Arc<PrismDbStore>), String> {
        let dir = self.snapshot(pool, seed)?;
        let store = self.open_snapshot(dir.path(), spec)?;
        Ok((dir, store))
    }

    /// Writes a crash image of `pool` (whole lines for an even `seed`, torn words for an
    /// odd one) and a copy of the flash directory as it stands into a new scratch
    /// directory.
    pub fn snapshot(&self, pool: &PmemPool, seed: u64) -> Result<TempDir, String> {
        let opts = if seed.is_multiple_of(2) {
            CrashImageOptions::lines()
        } else {
            CrashImageOptions::torn_words()
        };
        let image = pool
            .crash_image(seed, opts)
            .map_err(|e| format!("crash image: {e}"))?;
        self.image_dir(&image)
    }

    /// Writes `image` as the pool and a copy of the flash directory as it stands into a
    /// new scratch directory.
    pub fn image_dir(&self, image: &[u8]) -> Result<TempDir, String> {
        let dir = scratch_dir();
        std::fs::write(dir.path().join("pmem.pool"), image).map_err(|e| e.to_string())?;
        let flash = dir.path().join("flash");
        std::fs::create_dir_all(&flash).map_err(|e| e.to_string())?;
        for e in std::fs::read_dir(self.flash_dir()).map_err(|e| e.to_string())? {
            let e = e.map_err(|e| e.to_string())?;
            if e.file_type().map_err(|e| e.to_string())?.is_file() {
                std::fs::copy(e.path(), flash.join(e.file_name())).map_err(|e| e.to_string())?;
            }
        }
        Ok(dir)
    }

    /// Opens (recovers) the store a [`Rig::snapshot`] wrote into `dir`, and runs its
    /// `check`.
    pub fn open_snapshot(&self, dir: &Path, spec: &str) -> Result<Arc<PrismDbStore>, String> {
        let mut cfg = self.pool_config(&dir.join("pmem.pool"));
        cfg.mode = DurabilityMode::Volatile;
        let p = PmemPool::open(&cfg).map_err(|e| format!("open image: {e}"))?;
        let dev = FlashDevice::open(&dir.join("flash"), &self.flash_options())
            .map_err(|e| e.to_string())?;
        let store = PrismDbStore::open_media(p, dev, self.options(spec), Limits::default(), false)
            .map_err(|e| format!("recovery failed: {e}"))?;
        store.check().map_err(|e| format!("check failed: {e}"))?;
        Ok(store)
    }

    /// Reopens the store (recovery).
    pub fn reopen(&self) -> tierkv_core::Result<Arc<PrismDbStore>> {
        self.reopen_from(&self.pool_path())
    }
}

/// The value a test writes for `key` in round `round`, of a length that varies over the
/// first three size classes (so updates move objects between classes).
pub fn value_for(key: &[u8], round: u64) -> Vec<u8> {
    let len = 1 + (round as usize * 37 + key.len() * 11) % 400;
    let mut v = format!("{}#{round}#", String::from_utf8_lossy(key)).into_bytes();
    v.resize(len.max(v.len()), b'a' + (round % 26) as u8);
    v
}

/// Asserts the store passes its own check.
pub fn assert_check(store: &dyn KvStore) {
    match store.check() {
        Ok(lines) => assert!(!lines.is_empty()),
        Err(e) => panic!("check failed: {e}"),
    }
}

/// A counter of the store's stats.
pub fn counter(store: &dyn KvStore, name: &str) -> u64 {
    store.stats().counters.get(name).copied().unwrap_or(0)
}

/// Checks `store`, closes it, reopens it from `rig` (recovery), checks it again and
/// asserts that a full scan is unchanged; returns the reopened store and the scan.
pub fn reopen_unchanged(
    rig: &Rig,
    store: Arc<PrismDbStore>,
) -> (Arc<PrismDbStore>, Vec<tierkv_core::KvPair>) {
    assert_check(&*store);
    let before = store.scan(b"", usize::MAX).unwrap();
    store.close().unwrap();
    drop(store);
    let store = rig.reopen().unwrap();
    assert_check(&*store);
    assert_eq!(
        store.scan(b"", usize::MAX).unwrap(),
        before,
        "reopened store differs"
    );
    (store, before)
}
