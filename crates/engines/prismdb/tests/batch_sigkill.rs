//! Process crash inside write batches (issue 24; FORMAT.md §3 "Write batches"): a child
//! process (this test binary re-run with `TIERKV_PRISMDB_BATCH_CHILD` set) writes batches
//! of 1..=100 keys from three threads (`BatchKit::run_logged`) to a store whose tiny fast
//! tier keeps compactions running, logging each batch's begin and acknowledgement; the
//! parent SIGKILLs it at a random moment, reopens the store (recovery voids the batch
//! records still pending) and judges it with the kit: every batch whole or absent, none
//! acknowledged lost.

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use std::process::Command;
use std::time::Duration;

use common::{Rig, assert_check, counter};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv_core::KvStore;
use tierkv_testkit::rig::run_until_killed;
use tierkv_testkit::{BatchKit, BatchKitConfig, BatchReport, Ledger};

/// Each thread's keys split over two partitions; compactions from a few dozen KiB on.
const SPEC: &str = "prismdb@partitions=6,bounds=bk0/0075|bk1|bk1/0075|bk2|bk2/0075,\
chunk_size=16KiB,table_size=64KiB,high_watermark=0.01,low_watermark=0.005,bucket_keys=16,\
tracker_min=16";
const CHILD_ENV: &str = "TIERKV_PRISMDB_BATCH_CHILD";

/// The kit of a run: three threads writing batches until the child is killed.
fn endless_kit(seed: u64) -> BatchKit {
    let cfg = BatchKitConfig {
        batches_per_thread: u64::MAX,
        seed,
        ..BatchKitConfig::default()
    };
    BatchKit::new(cfg)
}

/// The child's store directory and seed, when this process is the child.
fn child_args() -> Option<(std::path::PathBuf, u64)> {
    let dir = std::env::var_os(CHILD_ENV)?;
    let seed = std::env::var("TIERKV_PRISMDB_BATCH_SEED")
        .ok()?
        .parse()
        .ok()?;
    Some((dir.into(), seed))
}

/// The child: creates the store and writes batches until killed (a no-op otherwise).
#[test]
fn prismdb_batch_sigkill_child_entry() {
    if let Some((dir, seed)) = child_args() {
        let store = Rig::at(&dir, SPEC, 4).create();
        let log = parking_lot::Mutex::new(std::io::stdout());
        endless_kit(seed).run_logged(&*store, &log);
    }
}

#[test]
fn sigkill_inside_batches_loses_no_batch_and_tears_none() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    // A hang (in a child or in a recovery here) fails with its stacks, never stalls CI.
    let _watchdog = tierkv_testkit::rig::watchdog(
        "sigkill_inside_batches_loses_no_batch_and_tears_none",
        Duration::from_secs(900),
    );
    let seed = tierkv_testkit::rig::seed("prismdb_sigkill_inside_batches");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut total = BatchReport::default();
    let mut rolled = 0;
    let mut tables = 0.0;
    for round in 0..3u64 {
        let tmp = common::scratch_dir();
        let kit = endless_kit(seed.wrapping_add(round));
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--exact",
            "prismdb_batch_sigkill_child_entry",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, tmp.path())
        .env("TIERKV_PRISMDB_BATCH_SEED", kit.config().seed.to_string());
        let after = Duration::from_millis(rng.random_range(100..900));
        let lines = run_until_killed(cmd, after, 21, |l| l.starts_with("A "));
        let ledger = Ledger::from_log(kit.config().threads, lines.iter().map(String::as_str));
        let store = Rig::at(tmp.path(), SPEC, 4).reopen().unwrap();
        assert_check(&*store);
        rolled += counter(&*store, "prismdb_batches_rolled_back");
        tables += store.stats().gauges["prismdb_flash_tables"];
        total.merge(kit.check(&*store, &ledger, &format!("round {round}")));
    }
    println!(
        "sigkill: {} kills, {} batches checked, {} torn, {} lost, {rolled} pending batches \
         voided, {tables} flash tables (compactions ran in the children)",
        total.images, total.batches_checked, total.torn, total.lost
    );
    total.assert_clean();
    assert!(tables > 0.0, "no compaction ran in the children");
}
