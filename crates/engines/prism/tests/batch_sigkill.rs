//! Process crash inside write batches (issue 24): a child process (this test binary re-run
//! with `TIERKV_BATCH_CHILD` set) writes batches of 1..=100 keys from three threads
//! (`BatchKit::run_logged`) to a store whose pool is in Volatile mode, logging each batch's
//! begin and acknowledgement; the parent SIGKILLs it at a random moment, reopens the store
//! and judges it with the kit: every batch whole or absent, none acknowledged lost.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{Rig, assert_check};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv_core::DurabilityMode;
use tierkv_testkit::rig::run_until_killed;
use tierkv_testkit::{BatchKit, BatchKitConfig, BatchReport, Ledger};

const SPEC: &str = "prism@pwb_count=4,pwb_size=64KiB,chunk_size=16KiB,svc_size=64KiB";
const CHILD_ENV: &str = "TIERKV_BATCH_CHILD";

fn rig_at(dir: &Path) -> Rig {
    let mut rig = Rig::at(dir, SPEC, 16, 32);
    rig.mode = DurabilityMode::Volatile;
    rig
}

fn kit(seed: u64) -> BatchKit {
    BatchKit::new(BatchKitConfig {
        seed,
        batches_per_thread: u64::MAX,
        ..BatchKitConfig::default()
    })
}

/// The child: creates the store and writes batches until killed.
#[test]
fn batch_sigkill_child_entry() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let seed: u64 = std::env::var("TIERKV_BATCH_CHILD_SEED")
        .unwrap()
        .parse()
        .unwrap();
    let store = rig_at(Path::new(&dir)).create();
    let out = parking_lot::Mutex::new(std::io::stdout());
    kit(seed).run_logged(&*store, &out);
}

/// Runs a child until `kill_after` has passed and it acknowledged some batches; returns
/// the ledger its log gives.
fn run_child(dir: &Path, seed: u64, kill_after: Duration, threads: usize) -> Ledger {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "batch_sigkill_child_entry",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_ENV, dir)
    .env("TIERKV_BATCH_CHILD_SEED", seed.to_string());
    let lines = run_until_killed(cmd, kill_after, 21, |l| l.starts_with("A "));
    Ledger::from_log(threads, lines.iter().map(String::as_str))
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
    let seed = tierkv_testkit::rig::seed("sigkill_inside_batches_loses_no_batch_and_tears_none");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut total = BatchReport::default();
    for round in 0..3u64 {
        let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let kit = kit(seed.wrapping_add(round));
        let after = Duration::from_millis(rng.random_range(100..900));
        let ledger = run_child(tmp.path(), kit.config().seed, after, kit.config().threads);
        let store = rig_at(tmp.path()).reopen().unwrap();
        assert_check(&*store);
        total.merge(kit.check(&*store, &ledger, &format!("round {round}")));
    }
    println!(
        "sigkill: {} kills, {} batches checked, {} torn, {} lost",
        total.images, total.batches_checked, total.torn, total.lost
    );
    total.assert_clean();
}
