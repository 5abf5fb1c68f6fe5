//! Process crash inside write batches (issue 24): a child process (this test binary re-run
//! with `TIERKV_BATCH_CHILD` set) writes batches of 1..=100 keys from three threads
//! (`BatchKit::run_logged`) to a store whose pool is a shared mapping (Volatile mode: what
//! the process stored survives it), logging each batch's begin and acknowledgement, with a
//! fourth thread's single puts keeping the flusher busy; the parent SIGKILLs it at a random
//! moment, reopens the store and judges it with the kit: every batch whole or absent, none
//! acknowledged lost. Each round uses another index, first with batches that fit one log
//! page, then with batches that span pages (parts and a commit).

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{batch_options, create_pool, span_options, try_open};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv_core::KvStore;
use tierkv_core::media::pmem::{DurabilityMode, PmemPool};
use tierkv_testkit::rig::{config, run_until_killed};
use tierkv_testkit::{BatchKit, BatchKitConfig, BatchReport, Ledger};

const CHILD_ENV: &str = "TIERKV_BATCH_CHILD";
const VARIANTS: [&str; 3] = ["btree", "hash", "lockfree"];

/// The kit; with `span`, values of up to ~270 bytes, so that most batches span log pages.
fn kit(seed: u64, span: bool) -> BatchKit {
    BatchKit::new(BatchKitConfig {
        seed,
        value_pad: if span { 0..=240 } else { 0..=80 },
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
    let variant = std::env::var("TIERKV_BATCH_CHILD_INDEX").unwrap();
    let span = std::env::var("TIERKV_BATCH_CHILD_SPAN").is_ok_and(|v| v == "1");
    let pool = create_pool(
        &Path::new(&dir).join("pool"),
        16 << 20,
        DurabilityMode::Volatile,
    );
    let store = try_open(pool, options(span), &variant, true).unwrap();
    let out = parking_lot::Mutex::new(std::io::stdout());
    std::thread::scope(|s| {
        let filler = store.clone();
        s.spawn(move || {
            for n in 0u64.. {
                let key = format!("fill/{}", n % 400);
                if filler.put(key.as_bytes(), &[n as u8; 300]).is_err() {
                    return;
                }
            }
        });
        kit(seed, span).run_logged(&*store, &out);
    });
}

/// Runs a child until `kill_after` has passed and it acknowledged some batches; returns
/// the ledger its log gives.
fn options(span: bool) -> tierkv_hetermm::HeterOptions {
    if span {
        span_options()
    } else {
        batch_options()
    }
}

fn run_child(dir: &Path, seed: u64, variant: &str, span: bool, kill_after: Duration) -> Ledger {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "batch_sigkill_child_entry",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_ENV, dir)
    .env("TIERKV_BATCH_CHILD_SEED", seed.to_string())
    .env("TIERKV_BATCH_CHILD_INDEX", variant)
    .env("TIERKV_BATCH_CHILD_SPAN", if span { "1" } else { "0" });
    let lines = run_until_killed(cmd, kill_after, 21, |l| l.starts_with("A "));
    Ledger::from_log(3, lines.iter().map(String::as_str))
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
    let seed = tierkv_testkit::rig::seed("hetermm_sigkill_inside_batches");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut total = BatchReport::default();
    // Each index with batches in one log page, then with batches that span pages.
    let rounds = [false, true]
        .into_iter()
        .flat_map(|span| VARIANTS.into_iter().map(move |v| (span, v)));
    for (round, (span, variant)) in rounds.enumerate() {
        let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let kit = kit(seed.wrapping_add(round as u64), span);
        let after = Duration::from_millis(rng.random_range(100..700));
        let ledger = run_child(tmp.path(), kit.config().seed, variant, span, after);
        let pool = PmemPool::open(&config(
            tmp.path().join("pool"),
            0,
            DurabilityMode::Volatile,
        ))
        .unwrap();
        let store = try_open(pool, options(span), variant, false)
            .unwrap_or_else(|e| panic!("{variant}: recovery after SIGKILL: {e}"));
        store.check().unwrap();
        let what = format!("{variant} (round {round}, spanning pages: {span})");
        total.merge(kit.check(&*store, &ledger, &what));
        store.close().unwrap();
    }
    println!(
        "sigkill: {} kills, {} batches checked, {} torn, {} lost",
        total.images, total.batches_checked, total.torn, total.lost
    );
    total.assert_clean();
    assert!(total.batches_checked >= 6 * 21, "{total:?}");
}
