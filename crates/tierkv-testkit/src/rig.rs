//! The small pieces every engine's integration tests need: a scratch directory on tmpfs, a
//! printed (and replayable) seed, and pmem pools of a given size and durability mode.
//!
//! Test helpers: they panic (failing the test) on errors instead of returning them.

#![allow(clippy::unwrap_used, reason = "test helpers fail the test on errors")]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tierkv_core::media::pmem::{DurabilityMode, EmulatedLatency, PmemConfig, PmemPool};

/// A scratch directory, on /dev/shm when it exists (pools there cost no disk I/O).
pub fn scratch_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(d) = tempfile::tempdir_in(shm)
    {
        return d;
    }
    tempfile::tempdir().expect("temp dir")
}

/// The seed of a random test, printed either way so a failure can be replayed:
/// - `TIERKV_SEED` (or the older name `TIERKV_TEST_SEED`) if set;
/// - else, when `TIERKV_FIXED_SEEDS` is set (CI sets it: a CI run must be reproducible), a
///   seed derived from the test's name, the same on every run;
/// - else a fresh random seed (local runs explore new cases every time).
pub fn seed(test: &str) -> u64 {
    let seed = env_seed().unwrap_or_else(|| {
        if fixed_seeds() {
            fixed_seed(test)
        } else {
            rand::random()
        }
    });
    println!("{test}: seed {seed} (replay with TIERKV_SEED={seed})");
    seed
}

/// The seed given in the environment (`TIERKV_SEED`, or the older `TIERKV_TEST_SEED`).
pub fn env_seed() -> Option<u64> {
    ["TIERKV_SEED", "TIERKV_TEST_SEED"]
        .iter()
        .find_map(|v| std::env::var(v).ok().and_then(|s| s.trim().parse().ok()))
}

/// Whether this run asks for fixed seeds (`TIERKV_FIXED_SEEDS` set and not `0`).
pub fn fixed_seeds() -> bool {
    std::env::var("TIERKV_FIXED_SEEDS").is_ok_and(|v| v != "0" && !v.is_empty())
}

/// The fixed seed of `test`: FNV-1a of its name.
pub fn fixed_seed(test: &str) -> u64 {
    test.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A pool configuration without emulated latency.
pub fn config(path: impl Into<PathBuf>, size: u64, mode: DurabilityMode) -> PmemConfig {
    PmemConfig {
        path: path.into(),
        size,
        mode,
        latency: EmulatedLatency::default(),
    }
}

/// Creates a pool of `size` bytes at `path`.
pub fn create_pool(path: &Path, size: u64, mode: DurabilityMode) -> Arc<PmemPool> {
    PmemPool::create(&config(path, size, mode)).expect("create pool")
}

/// Runs `cmd` (a child test process) with its stdout piped and returns the lines it
/// printed. Once `kill_after` has passed and at least `min_acks` lines satisfy `is_ack`,
/// the child is SIGKILLed; lines already in the pipe are still read (they were printed, so
/// what they acknowledge happened). Stderr is discarded.
pub fn run_until_killed(
    mut cmd: Command,
    kill_after: Duration,
    min_acks: usize,
    is_ack: impl Fn(&str) -> bool,
) -> Vec<String> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let deadline = Instant::now() + kill_after;
    let (mut lines, mut acks, mut killed) = (Vec::new(), 0, false);
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        acks += usize::from(is_ack(&line));
        lines.push(line);
        if !killed && Instant::now() >= deadline && acks >= min_acks {
            // SIGKILL: no chance to close anything.
            child.kill().unwrap();
            killed = true;
        }
    }
    let _ = child.wait();
    lines
}
