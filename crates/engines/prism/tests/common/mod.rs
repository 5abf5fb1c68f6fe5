//! Shared rig of the PRISM integration tests: a pmem pool and a flash directory in a
//! temporary directory, opened straight through the engine's `EngineContext` (no facade),
//! with small buffers and chunks so that reclamation, GC and cache eviction run often.

#![allow(dead_code)]
#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tempfile::TempDir;
use tierkv_core::format::manifest::Manifest;
use tierkv_core::media::Media;
use tierkv_core::media::flash::{FaultInjector, FlashDevice};
use tierkv_core::media::pmem::{CrashImageOptions, PmemConfig, PmemPool};
use tierkv_core::{
    ByteSize, DurabilityMode, EmulatedLatency, EngineContext, FlashOptions, KvStore, Options,
};
use tierkv_prism::PrismStore;

/// Small everything: 4 PWBs of 64 KiB, 16 KiB chunks, a 128 KiB SVC.
pub const SMALL: &str = "prism@pwb_count=4,pwb_size=64KiB,chunk_size=16KiB,svc_size=128KiB";

/// Where a test store lives and how it is opened.
pub struct Rig {
    /// The directory holding the pool file and the flash directory.
    pub root: PathBuf,
    _tmp: Option<TempDir>,
    pub spec: String,
    pub pool_size: u64,
    pub flash_size: u64,
    pub mode: DurabilityMode,
    pub injector: Option<Arc<FaultInjector>>,
}

impl Rig {
    /// A rig with `spec`, a Tracked pool of `pool_mib` MiB and `flash_mib` MiB of flash.
    pub fn new(spec: &str, pool_mib: u64, flash_mib: u64) -> Rig {
        let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let mut rig = Rig::at(tmp.path(), spec, pool_mib, flash_mib);
        rig._tmp = Some(tmp);
        rig
    }

    /// A rig over an existing directory (a child process reopening its parent's store).
    pub fn at(root: &Path, spec: &str, pool_mib: u64, flash_mib: u64) -> Rig {
        Rig {
            root: root.to_owned(),
            _tmp: None,
            spec: spec.to_owned(),
            pool_size: pool_mib << 20,
            flash_size: flash_mib << 20,
            mode: DurabilityMode::Tracked,
            injector: None,
        }
    }

    /// The same rig (same files) opened with another spec.
    pub fn with_spec(mut self, spec: &str) -> Rig {
        spec.clone_into(&mut self.spec);
        self
    }

    /// The same rig with `kib` KiB of flash.
    pub fn with_flash_kib(mut self, kib: u64) -> Rig {
        self.flash_size = kib << 10;
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

    fn pool_config(&self, path: &Path) -> PmemConfig {
        PmemConfig {
            path: path.to_owned(),
            size: self.pool_size,
            mode: self.mode,
            latency: EmulatedLatency::default(),
        }
    }

    pub fn flash_options(&self) -> FlashOptions {
        FlashOptions {
            size: ByteSize(self.flash_size),
            ..FlashOptions::default()
        }
    }

    /// Opens the flash device (through the injector when there is one).
    pub fn device(&self) -> Arc<FlashDevice> {
        match &self.injector {
            Some(inj) => {
                FlashDevice::open_with_faults(&self.flash_dir(), &self.flash_options(), inj.clone())
                    .unwrap()
            }
            None => FlashDevice::open(&self.flash_dir(), &self.flash_options()).unwrap(),
        }
    }

    fn context(&self, pool: Arc<PmemPool>, dev: Arc<FlashDevice>, created: bool) -> EngineContext {
        self.context_with(&self.spec, pool, dev, created)
    }

    fn context_with(
        &self,
        spec: &str,
        pool: Arc<PmemPool>,
        dev: Arc<FlashDevice>,
        created: bool,
    ) -> EngineContext {
        let options = Options::default()
            .engine(spec)
            .dram_budget(ByteSize::mib(1));
        EngineContext {
            dir: self.root.clone(),
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

    /// Creates the store.
    pub fn create(&self) -> Arc<PrismStore> {
        self.create_with_pool().0
    }

    /// Creates the store and returns its pool too (for crash images).
    pub fn create_with_pool(&self) -> (Arc<PrismStore>, Arc<PmemPool>) {
        let pool = PmemPool::create(&self.pool_config(&self.pool_path())).unwrap();
        let store = PrismStore::open(&self.context(pool.clone(), self.device(), true)).unwrap();
        (store, pool)
    }

    /// Reopens the store (recovery).
    pub fn reopen(&self) -> tierkv_core::Result<Arc<PrismStore>> {
        self.reopen_pool(&self.pool_path())
    }

    /// Opens the store with the pool file at `pool_path` (a crash image) and this rig's
    /// flash directory.
    pub fn reopen_pool(&self, pool_path: &Path) -> tierkv_core::Result<Arc<PrismStore>> {
        let pool = PmemPool::open(&self.pool_config(pool_path))?;
        PrismStore::open(&self.context(pool, self.device(), false))
    }

    /// Like [`Rig::reopen_pool`], with a plain flash device (no fault injector): what a
    /// restart after a simulated power failure sees.
    pub fn reopen_after_crash(&self, pool_path: &Path) -> tierkv_core::Result<Arc<PrismStore>> {
        self.reopen_after_crash_as(pool_path, &self.spec)
    }

    /// [`Rig::reopen_after_crash`] with another spec (same shape options).
    pub fn reopen_after_crash_as(
        &self,
        pool_path: &Path,
        spec: &str,
    ) -> tierkv_core::Result<Arc<PrismStore>> {
        let pool = PmemPool::open(&self.pool_config(pool_path))?;
        let dev = FlashDevice::open(&self.flash_dir(), &self.flash_options())?;
        PrismStore::open(&self.context_with(spec, pool, dev, false))
    }
}

impl Rig {
    /// Recovers a store from a crash image of `pool` (whole lines for an even `seed`, torn
    /// words for an odd one) and a copy of this rig's flash directory as it stands, in a
    /// new scratch directory (returned: the store lives in it), and runs its `check`. The
    /// recovered pool is Volatile.
    pub fn recover_image(
        &self,
        pool: &PmemPool,
        seed: u64,
    ) -> Result<(TempDir, Arc<PrismStore>), String> {
        let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).map_err(|e| e.to_string())?;
        let mut copy = Rig::at(tmp.path(), &self.spec, 0, 0);
        copy.pool_size = self.pool_size;
        copy.flash_size = self.flash_size;
        copy.mode = DurabilityMode::Volatile;
        let opts = if seed.is_multiple_of(2) {
            CrashImageOptions::lines()
        } else {
            CrashImageOptions::torn_words()
        };
        pool.write_crash_image(seed, opts, &copy.pool_path())
            .map_err(|e| format!("crash image: {e}"))?;
        std::fs::create_dir_all(copy.flash_dir()).map_err(|e| e.to_string())?;
        for f in std::fs::read_dir(self.flash_dir()).map_err(|e| e.to_string())? {
            let f = f.map_err(|e| e.to_string())?;
            std::fs::copy(f.path(), copy.flash_dir().join(f.file_name()))
                .map_err(|e| e.to_string())?;
        }
        let store = copy
            .reopen_after_crash(&copy.pool_path())
            .map_err(|e| format!("recovery: {e}"))?;
        store.check().map_err(|e| format!("check: {e}"))?;
        Ok((tmp, store))
    }
}

/// The value a test writes for `key` in round `round`, of a length that varies.
pub fn value_for(key: &[u8], round: u64) -> Vec<u8> {
    let len = 1 + (round as usize * 37 + key.len() * 11) % 700;
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

/// Asserts every acknowledged key reads back its value.
pub fn assert_all_present(store: &dyn KvStore, acked: &BTreeMap<Vec<u8>, Vec<u8>>) {
    for (k, v) in acked {
        assert_eq!(
            store.get(k).unwrap().as_ref(),
            Some(v),
            "acknowledged key {} lost",
            String::from_utf8_lossy(k)
        );
    }
}
