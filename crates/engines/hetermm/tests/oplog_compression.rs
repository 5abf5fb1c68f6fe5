//! Log compression (HeterMM §5.3.1): hot keys updated in place never move off_DRAM, so the
//! log grows without reclaimable blocks; compression keeps it bounded by copying only the
//! entries that may still be the newest durable version of their record — and a crash
//! image taken meanwhile still recovers the newest acknowledged values.

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use common::*;
use tierkv_core::KvStore;
use tierkv_core::media::pmem::{CrashImageOptions, DurabilityMode, PmemPool};

#[test]
fn in_place_updates_are_compressed_out_of_the_log_and_still_recover() {
    let seed = seed("oplog_compression");
    let dir = scratch_dir();
    let pool = create_pool(&dir.path().join("pool"), 16 << 20, DurabilityMode::Tracked);
    // Plenty of DRAM (no flush pressure) and a small log budget.
    let store = open(
        pool.clone(),
        small_options(512, "log_blocks=4"),
        "hash",
        true,
    );
    let keys: Vec<Vec<u8>> = (0..40).map(|k| format!("hot{k:02}").into_bytes()).collect();
    let mut last = vec![0u64; keys.len()];
    for round in 0..200u64 {
        for (i, k) in keys.iter().enumerate() {
            store.put(k, format!("{round:08}").as_bytes()).unwrap();
            last[i] = round;
        }
    }
    // The flusher compresses in the background: on a loaded machine it may lag behind the
    // writer, so give it time to catch up (the bound is on the log, not on the timing).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut s = store.stats();
    while (counter(&s, "log_compressions") < 5 || gauge(&s, "log_blocks") > 8.0)
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(20));
        s = store.stats();
    }
    println!("{:?}", s.counters);
    assert!(
        counter(&s, "log_compressions") >= 5,
        "the log must have been compressed: {s:?}"
    );
    assert!(
        gauge(&s, "log_blocks") <= 8.0,
        "the log stays bounded: {}",
        gauge(&s, "log_blocks")
    );
    assert!(counter(&s, "in_place_updates") > 7_000);
    assert!(
        counter(&s, "log_entries_copied") < counter(&s, "log_entries") / 4,
        "compression copies few entries"
    );
    let image = pool
        .crash_image(seed, CrashImageOptions::torn_words())
        .unwrap();
    let path = dir.path().join("img");
    std::fs::write(&path, &image).unwrap();
    let recovered = open(
        PmemPool::open(&config(&path, 0, DurabilityMode::Volatile)).unwrap(),
        small_options(512, "log_blocks=4"),
        "hash",
        false,
    );
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(
            recovered.get(k).unwrap().unwrap(),
            format!("{:08}", last[i]).into_bytes()
        );
    }
    recovered.check().unwrap();
}
