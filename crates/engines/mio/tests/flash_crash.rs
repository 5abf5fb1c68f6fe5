//! `mio:flash` under power failure (DESIGN §4; issue 18): a writer puts and deletes with a
//! 4 KiB MemTable and 8 KiB flash tables, so write-outs of PMTables to flash and flash
//! compactions of every level run many times. At every directory publish (the persists of
//! the directory object and of the root word, under the directory lock, and the named
//! points `mio.flash.before_publish` / `after_publish` of the write-out and the flash
//! compaction), the test takes a Tracked crash image of the pool (line-level and
//! word-torn alternately) together with a copy of the flash directory, recovers both into
//! a fresh store, and checks that every acknowledged write is there and nothing else and
//! that `check` passes (which fails on a listed table missing or any table file left
//! unlisted after the open). Files written after the last sync are the orphans of an
//! uncommitted step; the copy may catch them half written, which the open must survive.

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use common::crash::{Model, Sampler, assert_recovered, write};
use common::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv_core::media::pmem::{CrashPoint, DurabilityMode, PmemPool};
use tierkv_core::{KvStore, Stats};
use tierkv_mio::MioStore;

const PARAMS: &str = "memtable=4KiB,levels=3,stall_timeout_ms=60000,progress_wait_ms=60000,\
                      sst_size=16KiB,flash_base=32KiB,flash_ratio=2,flash_l0_trigger=2,flash_levels=4";
const FLASH_SIZE: u64 = 1 << 30;

struct Crasher {
    pool: Mutex<Option<Arc<PmemPool>>>,
    flash_dir: PathBuf,
    model: Mutex<Model>,
    dir: PathBuf,
    sampler: Sampler,
}

/// Copies every file of `from` into the new directory `to`.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        // A file removed meanwhile (an unlisted table) is simply not copied.
        let _ = std::fs::copy(e.path(), to.join(e.file_name()));
    }
}

impl Crasher {
    fn at(&self, label: &str) {
        let Some((n, opts)) = self.sampler.next(label) else {
            return;
        };
        let Some(pool) = self.pool.lock().unwrap().clone() else {
            return;
        };
        let img_flash = self.dir.join(format!("flash-{label}-{n}"));
        let (image, model) = {
            let m = self.model.lock().unwrap();
            let image = pool.crash_image(n ^ 0x5eed, opts).unwrap();
            copy_dir(&self.flash_dir, &img_flash);
            (image, m.clone())
        };
        let path = self.dir.join(format!("img-{label}-{n}"));
        std::fs::write(&path, &image).unwrap();
        let ctx = format!("crash at {label} #{n}");
        let img = PmemPool::open(&config(&path, 0, DurabilityMode::Volatile)).unwrap();
        let store = tierkv_mio::open_flash_store(
            img,
            flash_device(&img_flash, FLASH_SIZE),
            options(PARAMS),
            limits(),
            false,
        )
        .unwrap_or_else(|e| panic!("{ctx}: recovery failed: {e}"));
        assert_recovered(&ctx, &*store, &model);
        if let Err(e) = store.check() {
            panic!("{ctx}: check: {e}");
        }
        store.close().unwrap();
        drop(store);
        std::fs::remove_file(&path).unwrap();
        std::fs::remove_dir_all(&img_flash).unwrap();
        self.sampler.verified(label);
    }

    fn workload(&self, store: &MioStore, seed: u64) -> Stats {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        for i in 0..3_000u32 {
            let k = format!("key{:04}", rng.random_range(0..400)).into_bytes();
            let put = rng.random_range(0..100) < 80;
            let v = put.then(|| {
                let mut v = format!("{i}:").into_bytes();
                v.resize(rng.random_range(20..300), b'a' + (i % 26) as u8);
                v
            });
            write(&self.model, store, &k, v).unwrap();
        }
        assert!(store.wait_idle(std::time::Duration::from_secs(600)));
        *self.pool.lock().unwrap() = None;
        let s = store.stats();
        self.sampler.report();
        println!(
            "flushes {}, flash tables written {}, flash compactions f0 {} f1 {} f2 {}",
            counter(&s, "flushes"),
            counter(&s, "flash_tables_written"),
            counter(&s, "flash_compactions_f0"),
            counter(&s, "flash_compactions_f1"),
            counter(&s, "flash_compactions_f2"),
        );
        s
    }
}

#[test]
fn every_publish_of_write_outs_and_flash_compactions_recovers() {
    let seed = seed("flash_crash_points");
    let dir = scratch_dir();
    let flash_dir = dir.path().join("flash");
    let crasher = Arc::new(Crasher {
        pool: Mutex::new(None),
        flash_dir: flash_dir.clone(),
        model: Mutex::new(Model::new()),
        dir: dir.path().to_path_buf(),
        sampler: Sampler::new(6),
    });
    let pool = create_pool(&dir.path().join("pool"), 4 << 20, DurabilityMode::Tracked);
    let c = crasher.clone();
    let hook = Arc::new(move |label: &'static str| {
        if label == "dir-object" || label == "dir-root" {
            c.at(label);
        }
    }) as tierkv_mio::table::PersistHook;
    let store = tierkv_mio::open_flash_store_with_persist_hook(
        pool.clone(),
        flash_device(&flash_dir, FLASH_SIZE),
        options(PARAMS),
        limits(),
        true,
        hook,
    )
    .unwrap();
    *crasher.pool.lock().unwrap() = Some(pool.clone());
    let c = crasher.clone();
    pool.arm_crash_points(Arc::new(move |cp| {
        if let CrashPoint::Named(name) = cp
            && name.starts_with("mio.flash.")
        {
            c.at(name);
        }
    }))
    .unwrap();
    let s = crasher.workload(&store, seed);
    pool.disarm_crash_points();
    store.close().unwrap();
    assert!(
        counter(&s, "flash_compactions_f0") >= 3,
        "level-0 compactions"
    );
    assert!(
        counter(&s, "flash_compactions_f1") >= 1,
        "level-1 compactions"
    );
    let verified = crasher.sampler.verified_counts();
    for label in [
        "dir-object",
        "dir-root",
        "mio.flash.before_publish",
        "mio.flash.after_publish",
    ] {
        assert!(
            verified.get(label).copied().unwrap_or(0) >= 8,
            "{label}: {verified:?}"
        );
    }
}
