//! Racing writers (bug 2 of this engine's release stress runs: a get older than an
//! acknowledged write, a scan returning a key below its start): groups of threads put and
//! delete the same few keys at once while readers get and scan them, with a 4 KiB
//! MemTable and three levels, so that flushes, zero-copy merges, moves and lazy copies
//! into the repository run all the time under the readers; every read is judged by
//! linearizability (`tierkv_testkit::racing`). Then the same with a Tracked crash image
//! taken while it all runs, recovered and judged by the crash rule.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use tierkv_core::KvStore;
use tierkv_core::media::pmem::{CrashImageOptions, DurabilityMode, PmemPool};
use tierkv_testkit::{Racing, RacingConfig, run_racing};

const PARAMS: &str = "memtable=4KiB,levels=3,stall_timeout_ms=60000,progress_wait_ms=60000";

fn cfg(seed: u64) -> RacingConfig {
    RacingConfig {
        keys: 24,
        ops_per_writer: 1_500,
        seed,
        ..RacingConfig::default()
    }
}

#[test]
fn racing_writers_and_readers_across_merges_and_lazy_copies_are_linearizable() {
    let seed = seed("racing_writers");
    let dir = scratch_dir();
    for round in 0..3u64 {
        let path = dir.path().join(format!("pool{round}"));
        let pool = create_pool(&path, 4 << 20, DurabilityMode::Volatile);
        let store = open(pool, PARAMS, true);
        let dynstore: Arc<dyn KvStore> = store.clone();
        let r = run_racing(&dynstore, &cfg(seed.wrapping_add(round)));
        assert!(store.wait_idle(Duration::from_secs(30)));
        let s = store.stats();
        println!(
            "round {round}: {r:?}; flushes {}, nodes relinked {}, repository merges {}",
            counter(&s, "flushes"),
            counter(&s, "nodes_relinked"),
            counter(&s, "compactions_l1")
        );
        assert!(r.overlapping_writes > 20, "{r:?}");
        assert!(counter(&s, "nodes_relinked") > 100, "zero-copy merges ran");
        assert!(counter(&s, "compactions_l1") > 5, "lazy copies ran");
        store.check().unwrap();
        store.close().unwrap();
    }
}

#[test]
fn a_crash_image_taken_under_racing_writers_recovers_linearizably() {
    let seed = seed("racing_writers_crash");
    let dir = scratch_dir();
    let path = dir.path().join("pool");
    let pool = create_pool(&path, 4 << 20, DurabilityMode::Tracked);
    let store = open(pool.clone(), PARAMS, true);
    let mut racing = Racing::new(cfg(seed).keys);
    let image_path = dir.path().join("image");
    let (recovered, r) = racing.crash(
        store,
        &cfg(seed),
        2_500,
        || {
            let img = pool
                .crash_image(seed, CrashImageOptions::torn_words())
                .unwrap();
            std::fs::write(&image_path, img).unwrap();
            image_path.clone()
        },
        |p| {
            let img = PmemPool::open(&config(&p, 0, DurabilityMode::Volatile)).unwrap();
            open(img, PARAMS, false) as Arc<dyn KvStore>
        },
    );
    println!("{r:?}");
    recovered.check().unwrap();
    recovered.close().unwrap();
}
