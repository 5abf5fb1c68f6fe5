//! The read cache (HeterMM §5.1, §6.3): in a read-only phase the cache takes DRAM from the
//! write region and raises the DRAM hit ratio of reads whose data is in pmem; with the cache
//! off the ratio stays where the write region leaves it; a write phase gives the pages back.

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use std::time::{Duration, Instant};

use common::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv_core::KvStore;
use tierkv_core::media::pmem::DurabilityMode;

/// Loads 6,000 keys, then reads a skewed key set for a while; returns the stats.
fn read_phase(cache: &str, seed: u64) -> (tierkv_core::Stats, tierkv_core::Stats) {
    let dir = scratch_dir();
    let pool = create_pool(&dir.path().join("pool"), 16 << 20, DurabilityMode::Volatile);
    let store = open(
        pool,
        small_options(96, &format!("read_cache={cache},sample_freq=10")),
        "btree",
        true,
    );
    for k in 0..6_000u32 {
        store
            .put(format!("key{k:05}").as_bytes(), &[k as u8; 100])
            .unwrap();
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let hot: Vec<u32> = (0..300).map(|_| rng.random_range(0..3_000)).collect();
    let until = Instant::now() + Duration::from_millis(700);
    while Instant::now() < until {
        let k = hot[rng.random_range(0..hot.len())];
        assert_eq!(
            store.get(format!("key{k:05}").as_bytes()).unwrap().unwrap(),
            vec![k as u8; 100]
        );
    }
    let after_reads = store.stats();
    for k in 0..2_000u32 {
        store
            .put(format!("key{k:05}").as_bytes(), &[1; 100])
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(100));
    (after_reads, store.stats())
}

#[test]
fn the_cache_grows_in_read_only_phases_raises_the_dram_hit_ratio_and_shrinks_for_writes() {
    let seed = seed("cache_read_only");
    let (on, on_after_writes) = read_phase("on", seed);
    let (off, _) = read_phase("off", seed);
    let (ratio_on, ratio_off) = (gauge(&on, "dram_hit_ratio"), gauge(&off, "dram_hit_ratio"));
    println!(
        "DRAM hit ratio with the read cache: {ratio_on:.3} (cache hit ratio {:.3}, {} pages); without: {ratio_off:.3}",
        gauge(&on, "read_cache_hit_ratio"),
        gauge(&on, "read_cache_pages")
    );
    assert!(
        counter(&on, "cache_grows") > 5 && gauge(&on, "read_cache_pages") > 5.0,
        "{on:?}"
    );
    assert!(
        ratio_on > ratio_off + 0.2,
        "the cache must raise the DRAM hit ratio: {ratio_on} vs {ratio_off}"
    );
    assert!(
        gauge(&on_after_writes, "read_cache_pages") < gauge(&on, "read_cache_pages"),
        "writes take the cache's pages back"
    );
    assert!(counter(&on_after_writes, "cache_shrinks") > 0);
}
