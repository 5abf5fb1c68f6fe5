//! temp
#![allow(clippy::unwrap_used, reason = "tests")]
mod common;
use common::*;
use std::sync::Arc;
use tierkv_core::KvStore;
use tierkv_core::media::pmem::DurabilityMode;
use tierkv_testkit::{RacingConfig, run_racing};

#[test]
fn tmp_lf() {
    let mb: u64 = std::env::var("TMP_POOL_MB")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4);
    for i in 0..6u64 {
        let dir = scratch_dir();
        let pool = create_pool(&dir.path().join("pool"), mb << 20, DurabilityMode::Volatile);
        let store: Arc<dyn KvStore> = open(pool, small_options(64, ""), "lockfree", true);
        let c = RacingConfig {
            writers: 4,
            writers_per_key: 4,
            readers: 2,
            keys: 300,
            ops_per_writer: 15_000,
            scan_pct: 0,
            value_len: 16..=3000,
            seed: 77 + i,
            ..RacingConfig::default()
        };
        let r = run_racing(&store, &c);
        println!(
            "{i}: {r:?} {:?}",
            store
                .stats()
                .counters
                .iter()
                .filter(|(k, _)| k.contains("reorg")
                    || k.contains("space")
                    || k.contains("retract"))
                .collect::<Vec<_>>()
        );
        store.close().unwrap();
    }
}
