//! Model-based tests of `hetermm:btree` with 4 KiB pages and 32 KiB blocks: the shared
//! testkit driver (concurrent partitions + racing writers of shared keys, scans), then a
//! phased run whose read-only phases make the read cache grow and whose write phases take
//! its pages back — while flushing, reorganisation and log reclamation run many times.

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use common::*;
use tierkv_core::KvStore;
use tierkv_core::media::pmem::DurabilityMode;
use tierkv_testkit::{ModelConfig, run_model};

#[test]
fn model_btree_matches_the_oracle_through_flushes_reorganisations_and_cache_resizes() {
    model("btree", 5);
}

/// The whole scenario for one index (shared with `model_hash.rs` and `model_lockfree.rs`
/// through a copy of this call, each file one scenario).
pub fn model(variant: &str, scan_pct: u32) {
    let dir = scratch_dir();
    let pool = create_pool(&dir.path().join("pool"), 16 << 20, DurabilityMode::Volatile);
    let store = open(pool, small_options(64, ""), variant, true);
    let cfg = ModelConfig {
        scan_pct,
        seed: seed(&format!("model_{variant}")),
        ..ModelConfig::default()
    };
    let r = run_model(store.clone(), &cfg);
    assert!(r.hits > 1_000, "{r:?}");
    let phased = Phases {
        threads: 3,
        rounds: 4,
        ops: 2_500,
        read_only: std::time::Duration::from_millis(120),
        keys: 250,
        max_value: 300,
        scan_pct,
    };
    store.flush().unwrap();
    let p = run_phases(&store, &phased, cfg.seed);
    assert!(p.hits > 1_000, "{p:?}");
    let s = store.stats();
    println!("{variant}: {:#?}", s.counters);
    println!("{variant}: {:#?}", s.gauges);
    for (name, at_least) in [
        ("flushes", 50),
        ("reorganisations", 10),
        ("log_blocks_reclaimed", 20),
        ("cache_resizes", 4),
        ("cache_grows", 2),
        ("cache_hits", 10),
        ("in_place_updates", 100),
        ("marks", 1_000),
    ] {
        assert!(
            counter(&s, name) >= at_least,
            "{variant}: {name} = {} < {at_least}",
            counter(&s, name)
        );
    }
    let lines = store.check().unwrap();
    println!("{}", lines.join("\n"));
    store.close().unwrap();
}
