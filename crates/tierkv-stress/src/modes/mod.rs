//! The crash modes (issue 5, item 3) and what they share.
//!
//! - [`kill`]: a child process runs the workload against the real data directory and
//!   reports every write to the parent over a pipe; the parent SIGKILLs it at a random
//!   moment, reopens, verifies, and repeats on the same directory (DESIGN §4, failure 1).
//!   With `--pmem-mode tracked` the kill is a *power-loss* kill: the child's pool is Tracked
//!   and the parent recovers from the crash image taken at the moment of the kill.
//! - [`pmem_image`]: in-process, on a Tracked pool: crash images at random moments (line-
//!   level, or with 8-byte words torn), each recovered by a fresh engine (failure 2).
//! - [`persist_points`]: in-process, on a Tracked pool: a single-threaded workload's
//!   persists are counted, then the workload is replayed and cut right after persist N
//!   for every N (or a stratified sample), with line-level and word-torn images.
//! - [`flash_faults`]: in-process, on fault-injecting flash: unsynced writes dropped or torn
//!   at the crash, EIO / ENOSPC injected into writes and syncs (failures 3 and 4).
//!
//! - [`space`]: rounds of fill until `NoSpace`, verify, delete a share, write again,
//!   reopen (or SIGKILL a kill-mode child mid-fill), verify (issue 23).
//!
//! The two in-process modes share the round machinery of `power`: a round runs the
//! workload on the live store, cuts the power at a random moment (flash first, then the
//! pmem image, while the workers still run), copies the crash state into the next round's
//! directory, reopens it there (timed: the recovery time) and verifies every key. The
//! recovered store is the next round's live store, so recovery of a recovered store is
//! tested too.
//!
//! Reproducibility: every random choice of the harness (operations, keys, crash moments,
//! image and tear seeds, injected faults) comes from `--seed`; the interleaving of threads
//! does not, so a failure replays with the same seed as the same run, not the same
//! schedule.
//!
//! Thread safety: each mode runs on the caller's thread and owns the workload's threads.

pub mod flash_faults;
pub mod kill;
mod media;
pub mod persist_points;
pub mod pmem_image;
mod power;
pub mod space;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rand::Rng;
use tierkv::DurabilityMode;

use crate::expected_state::{ExpectedState, KeySpace};
use crate::fields::FieldConfig;
use crate::target::{Target, TierConfig};
use crate::workload::WorkloadConfig;

/// How long a run lasts: a number of rounds, a duration, or both (whichever ends first).
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// Rounds to run.
    pub rounds: Option<u64>,
    /// Wall-clock time to run.
    pub duration: Option<Duration>,
    /// When the run started.
    pub start: Instant,
}

impl Budget {
    /// True while another round should start after `done` rounds.
    pub fn more(&self, done: u64) -> bool {
        self.rounds.is_none_or(|r| done < r)
            && self.duration.is_none_or(|d| self.start.elapsed() < d)
    }
}

/// Everything a mode needs, resolved from the command line.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// The engine under test.
    pub target: Target,
    /// Tier placement and sizes.
    pub tiers: TierConfig,
    /// The pool mode asked for (kill mode; the in-process modes always use Tracked).
    pub pmem_mode: Option<DurabilityMode>,
    /// The workload (its seed is replaced every round).
    pub workload: WorkloadConfig,
    /// The keys.
    pub space: KeySpace,
    /// The run's working directory.
    pub work_dir: PathBuf,
    /// The longest workload phase of a round; the crash comes at a uniformly random
    /// moment within it.
    pub round_time: Duration,
    /// How long the run lasts.
    pub budget: Budget,
    /// Fraction of pmem crash images with 8-byte word tearing.
    pub tear_fraction: f64,
    /// Fraction of flash-faults rounds with an injected EIO / ENOSPC.
    pub fault_fraction: f64,
    /// The run's seed.
    pub seed: u64,
    /// Print one line per round.
    pub verbose: bool,
    /// `persist-points` mode's shape.
    pub persist_points: PersistPointsConfig,
    /// `space` mode's shape.
    pub space_mode: SpaceConfig,
    /// The field workload's shape, when it runs ([`crate::fields`]).
    pub fields: Option<FieldConfig>,
}

/// The shape of a `space` round (see [`space`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SpaceConfig {
    /// Share of the live keys deleted after each fill.
    pub delete_share: f64,
    /// New bytes written after the deletes, as a share of the bytes they freed.
    pub refill: f64,
    /// How long a refused write of a new key may be retried after the deletes.
    pub gc_wait: Duration,
    /// The longest one write may take.
    pub write_bound: Duration,
    /// The longest fill phase.
    pub fill_time: Duration,
    /// Share of the rounds that end with a child SIGKILLed mid-fill.
    pub kill_fraction: f64,
    /// The least share of the capacity live at the first refusals.
    pub min_full: f64,
}

/// The shape of a `persist-points` pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PersistPointsConfig {
    /// Checked operations of the workload of each pass.
    pub ops: u64,
    /// The most persist points cut per pass (all of them when there are fewer).
    pub points: u64,
}

impl RunConfig {
    /// A fresh expected state for this run (racing, with more than one writer per key).
    pub(crate) fn new_state(&self) -> ExpectedState {
        self.adopt_state(ExpectedState::new(self.space).with_fields(self.fields))
    }

    /// `state` prepared for this run's writers.
    pub(crate) fn adopt_state(&self, state: ExpectedState) -> ExpectedState {
        if self.workload.writers_per_key > 1 {
            state.racing()
        } else {
            state
        }
    }

    /// A random crash moment within a round (at least a twentieth of it, so that the
    /// workload always gets going).
    pub(crate) fn crash_delay(&self, rng: &mut impl Rng) -> Duration {
        let max = self.round_time.as_micros().max(20) as u64;
        Duration::from_micros(rng.random_range(max / 20..=max))
    }
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The name that prefixes the files a run keeps outside its working directory (in
/// `--pmem-path` and `--flash-path`): the working directory's last component.
pub(crate) fn run_name(cfg: &RunConfig) -> String {
    cfg.work_dir
        .file_name()
        .map_or_else(|| "stress".to_owned(), |n| n.to_string_lossy().into_owned())
}

/// Files and directories in `--pmem-path` and `--flash-path` that a run with this working
/// directory's name would write (`<name>` in kill mode, `<name>-r<round>…` in the other
/// modes): left by an earlier run under the same name that failed (kept for inspection)
/// or was killed. A new run would fail on them part-way (a crash image is never written
/// over an existing file), and the harness never deletes what it did not create.
pub(crate) fn leftovers(cfg: &RunConfig) -> Vec<std::path::PathBuf> {
    let name = run_name(cfg);
    let rounds = format!("{name}-r");
    // The working directory itself may sit in one of them (`--dir /dev/shm/x --pmem-path
    // /dev/shm`): it is no leftover.
    let work = std::fs::canonicalize(&cfg.work_dir).ok();
    let mut found: Vec<std::path::PathBuf> = [&cfg.tiers.pmem_dir, &cfg.tiers.flash_dir]
        .into_iter()
        .flatten()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flat_map(|entries| entries.flatten())
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n == name || n.starts_with(&rounds)
        })
        .map(|e| e.path())
        .filter(|p| work.is_none() || std::fs::canonicalize(p).ok() != work)
        .collect();
    found.sort();
    found.dedup();
    found
}

/// Removes a file or directory tree, ignoring "not found".
pub(crate) fn remove_path(p: &std::path::Path) -> std::io::Result<()> {
    let r = match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(p),
        Ok(_) => std::fs::remove_file(p),
        Err(e) => Err(e),
    };
    match r {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_ends_at_the_first_limit() {
        let b = Budget {
            rounds: Some(3),
            duration: None,
            start: Instant::now(),
        };
        assert!(b.more(2) && !b.more(3));
        let b = Budget {
            rounds: Some(100),
            duration: Some(Duration::ZERO),
            start: Instant::now(),
        };
        assert!(!b.more(0));
        let b = Budget {
            rounds: None,
            duration: Some(Duration::from_secs(3600)),
            start: Instant::now(),
        };
        assert!(b.more(1_000_000));
    }

    #[test]
    fn remove_path_ignores_missing_and_removes_trees() {
        let d = tempfile::tempdir().unwrap();
        let tree = d.path().join("a/b");
        std::fs::create_dir_all(&tree).unwrap();
        std::fs::write(tree.join("f"), b"x").unwrap();
        remove_path(&d.path().join("a")).unwrap();
        assert!(!d.path().join("a").exists());
        remove_path(&d.path().join("a")).unwrap();
    }
}
