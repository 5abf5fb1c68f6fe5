//! A benchmark plan and where it puts data: every target in its own fresh directories, all
//! under one run directory per root, removed after the target ran unless `--keep`.
//!
//! # Layout
//! ```text
//! <dir>/<run>/<NN>-<label>/              data directory of target NN (its manifest, its files)
//! <dir>/<run>/<NN>-<label>/flash/        its flash directory, unless --flash-path
//! <pmem root>/<run>/<NN>-<label>/        its pmem pool directory (RocksDB: WAL + L0 tables)
//! <flash-path>/<run>/<NN>-<label>/       its flash directory, with --flash-path
//! ```
//! `<run>` is `run-<unix seconds>-<pid>`, so two runs never share a directory; `<label>` is
//! the target's spec with every character outside `[A-Za-z0-9._-]` replaced by `_`, and
//! `NN` its position, so one engine can be listed twice. The pmem root is `--pmem-path`, or
//! `/dev/shm/tierkv-bench` where `/dev/shm` exists, or else the data directory itself
//! (`<dir>/<run>/<NN>-<label>/pmem`).
//!
//! Only directories this plan created are ever removed.
//!
//! Thread safety: plain values; [`execute`] runs targets one after another on the calling
//! thread (each target's client threads are the runner's).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;

use crate::peer::{MediaSettings, TargetPlacement, TargetSpec, open_target};
use crate::runner::progress::Progress;
use crate::runner::{PhaseResult, RunSettings, run_target};
use crate::workload::Phase;

/// Where the default pmem root lives when the machine has a `/dev/shm`.
pub const SHM: &str = "/dev/shm";
/// The default pmem root's name inside `/dev/shm`.
pub const SHM_ROOT_NAME: &str = "tierkv-bench";

/// Where the pmem pools go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PmemRoot {
    /// A directory (given with `--pmem-path`, or `/dev/shm/tierkv-bench`).
    Dir(PathBuf),
    /// Inside each target's data directory (no `/dev/shm`, no `--pmem-path`).
    InDataDir,
}

/// The directories of one run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// `--dir`.
    pub dir: PathBuf,
    /// `run-<unix seconds>-<pid>`.
    pub run: String,
    /// The pmem root.
    pub pmem_root: PmemRoot,
    /// `--flash-path`, if given.
    pub flash_root: Option<PathBuf>,
    /// Keep every directory after the run.
    pub keep: bool,
    /// `--dir` existed before the run (so it is never removed).
    pub dir_existed: bool,
}

impl Layout {
    /// A layout with a fresh run name.
    pub fn new(dir: PathBuf, pmem_root: PmemRoot, flash_root: Option<PathBuf>, keep: bool) -> Self {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Layout {
            dir_existed: dir.exists(),
            dir,
            run: format!("run-{secs}-{}", std::process::id()),
            pmem_root,
            flash_root,
            keep,
        }
    }

    /// `<dir>/<run>`.
    pub fn run_dir(&self) -> PathBuf {
        self.dir.join(&self.run)
    }

    /// The run's directory under the pmem root (`None`: pools live in data directories).
    pub fn pmem_run_dir(&self) -> Option<PathBuf> {
        match &self.pmem_root {
            PmemRoot::Dir(d) => Some(d.join(&self.run)),
            PmemRoot::InDataDir => None,
        }
    }

    /// The run's directory under `--flash-path`, if given.
    pub fn flash_run_dir(&self) -> Option<PathBuf> {
        self.flash_root.as_ref().map(|f| f.join(&self.run))
    }

    /// The directories of target `index` (0-based) labelled `label`.
    pub fn placement(&self, index: usize, label: &str) -> TargetPlacement {
        let name = format!("{:02}-{}", index + 1, sanitize(label));
        let data_dir = self.run_dir().join(&name);
        // NOTE: a root given as the data directory itself (`--flash-path` = `--dir`) must
        // not put the tier's files in the store's directory, which has to start empty.
        let own = |root: Option<PathBuf>, sub: &str| match root.map(|d| d.join(&name)) {
            Some(d) if d != data_dir => d,
            _ => data_dir.join(sub),
        };
        TargetPlacement {
            pmem_dir: own(self.pmem_run_dir(), "pmem"),
            flash_dir: own(self.flash_run_dir(), "flash"),
            data_dir,
        }
    }

    /// Removes one target's directories (unless `keep`).
    fn remove_target(&self, place: &TargetPlacement) -> std::io::Result<()> {
        if self.keep {
            return Ok(());
        }
        for d in [&place.pmem_dir, &place.flash_dir, &place.data_dir] {
            remove_dir_if_present(d)?;
        }
        Ok(())
    }

    /// Removes the run directories once empty (unless `keep`), then `--dir` and the default
    /// `/dev/shm` root if the run made them and left them empty.
    pub fn remove_run(&self) -> std::io::Result<()> {
        if self.keep {
            return Ok(());
        }
        let roots = [
            Some(self.run_dir()),
            self.pmem_run_dir(),
            self.flash_run_dir(),
        ];
        for d in roots.into_iter().flatten() {
            remove_empty_dir(&d)?;
        }
        if let PmemRoot::Dir(d) = &self.pmem_root
            && d == &Path::new(SHM).join(SHM_ROOT_NAME)
        {
            remove_empty_dir(d)?;
        }
        if !self.dir_existed {
            remove_empty_dir(&self.dir)?;
        }
        Ok(())
    }
}

fn remove_dir_if_present(d: &Path) -> std::io::Result<()> {
    match fs::remove_dir_all(d) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

fn remove_empty_dir(d: &Path) -> std::io::Result<()> {
    match fs::remove_dir(d) {
        // Not ours to empty (kept data, or something else put there), or already gone.
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::DirectoryNotEmpty
            ) =>
        {
            Ok(())
        }
        other => other,
    }
}

/// A label as a directory name: `[A-Za-z0-9._-]` kept, everything else `_`.
pub fn sanitize(label: &str) -> String {
    label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Everything a benchmark run does.
#[derive(Clone, Debug)]
pub struct BenchPlan {
    /// The targets, in report order (ratios are against the first).
    pub targets: Vec<TargetSpec>,
    /// The phases, in the order given.
    pub phases: Vec<Phase>,
    /// Rounds of every target (`--repeat`), each in a rotated order.
    pub rounds: u32,
    /// What every target is run with.
    pub settings: RunSettings,
    /// The media every target gets.
    pub media: MediaSettings,
    /// Where data goes.
    pub layout: Layout,
}

/// Runs every target of `plan` in turn, each in fresh directories removed afterwards
/// (unless `--keep`); says on `log` where each one runs.
pub fn execute(
    plan: &BenchPlan,
    progress: Progress,
    log: &mut dyn Write,
) -> anyhow::Result<Vec<PhaseResult>> {
    let results = run_all(plan, progress, log);
    let removed = plan
        .layout
        .remove_run()
        .with_context(|| format!("removing {}", plan.layout.run_dir().display()));
    let results = results?;
    removed?;
    Ok(results)
}

/// Which target runs `k`-th in `round` (0-based) of `n` targets: round `r` starts with
/// target `r mod n`, so that over several rounds every target runs early and late (a
/// machine's state drifts during a run: page cache, other tenants, thermal limits).
pub fn round_order(round: u32, n: usize, k: usize) -> usize {
    (k + round as usize) % n.max(1)
}

/// Runs each target in turn, removing its directories after it ran; `plan.rounds` times
/// over, each round in its rotated order ([`round_order`]). Results carry their round.
fn run_all(
    plan: &BenchPlan,
    progress: Progress,
    log: &mut dyn Write,
) -> anyhow::Result<Vec<PhaseResult>> {
    let mut results = Vec::new();
    let n = plan.targets.len();
    for round in 0..plan.rounds {
        for k in 0..n {
            let i = round_order(round, n, k);
            let spec = &plan.targets[i];
            // Numbered in running order across rounds: a kept run keeps every round's data.
            let place = plan.layout.placement(round as usize * n + k, &spec.label);
            if plan.rounds > 1 {
                write!(log, "round {} of {}: ", round + 1, plan.rounds)?;
            }
            writeln!(
                log,
                "running {} in {}",
                spec.label,
                place.data_dir.display()
            )?;
            let outcome = run_in(plan, spec, &place, progress);
            let removed = plan.layout.remove_target(&place).with_context(|| {
                format!(
                    "removing the data of {} in {}",
                    spec.label,
                    place.data_dir.display()
                )
            });
            results.extend(outcome?.into_iter().map(|mut r| {
                r.round = round + 1;
                r
            }));
            removed?;
        }
    }
    Ok(results)
}

fn run_in(
    plan: &BenchPlan,
    spec: &TargetSpec,
    place: &TargetPlacement,
    progress: Progress,
) -> anyhow::Result<Vec<PhaseResult>> {
    let parent = plan.layout.run_dir();
    fs::create_dir_all(&parent).with_context(|| format!("creating {}", parent.display()))?;
    let target = open_target(spec, place, &plan.media)?;
    let results = run_target(
        target.as_ref(),
        &spec.label,
        &plan.phases,
        &plan.settings,
        progress,
    );
    let closed = target.close();
    let results = results.map_err(|e| anyhow::anyhow!("running {}: {e}", spec.label))?;
    closed.with_context(|| format!("closing {}", spec.label))?;
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_target_gets_its_own_numbered_directories() {
        let l = Layout::new(
            "/data".into(),
            PmemRoot::Dir("/dev/shm/tierkv-bench".into()),
            Some("/nvme".into()),
            false,
        );
        let a = l.placement(0, "prism@queue_depth=1");
        let b = l.placement(1, "dram:btree");
        let run = &l.run;
        assert_eq!(
            a.data_dir,
            Path::new("/data").join(run).join("01-prism_queue_depth_1")
        );
        assert_eq!(
            b.pmem_dir,
            Path::new("/dev/shm/tierkv-bench")
                .join(run)
                .join("02-dram_btree")
        );
        assert_eq!(
            b.flash_dir,
            Path::new("/nvme").join(run).join("02-dram_btree")
        );
    }

    #[test]
    fn without_shm_or_flash_path_everything_stays_in_the_data_directory() {
        let l = Layout::new("d".into(), PmemRoot::InDataDir, None, false);
        let p = l.placement(0, "x");
        assert_eq!(p.pmem_dir, p.data_dir.join("pmem"));
        assert_eq!(p.flash_dir, p.data_dir.join("flash"));
    }

    #[test]
    fn a_tier_root_equal_to_the_data_root_gets_its_own_subdirectory() {
        let l = Layout::new(
            "/work/b".into(),
            PmemRoot::Dir("/work/b".into()),
            Some("/work/b".into()),
            false,
        );
        let p = l.placement(0, "focus");
        assert_eq!(p.pmem_dir, p.data_dir.join("pmem"));
        assert_eq!(p.flash_dir, p.data_dir.join("flash"));
    }

    #[test]
    fn removal_spares_directories_it_did_not_empty() {
        let tmp = tempfile::tempdir().unwrap();
        let l = Layout::new(tmp.path().to_owned(), PmemRoot::InDataDir, None, false);
        let p = l.placement(0, "x");
        fs::create_dir_all(p.data_dir.join("flash")).unwrap();
        let stray = l.run_dir().join("not-ours");
        fs::create_dir_all(&stray).unwrap();
        l.remove_target(&p).unwrap();
        l.remove_run().unwrap();
        assert!(!p.data_dir.exists());
        assert!(
            stray.exists(),
            "a directory the run did not make is left alone"
        );
    }

    #[test]
    fn keep_leaves_everything_in_place() {
        let tmp = tempfile::tempdir().unwrap();
        let l = Layout::new(tmp.path().to_owned(), PmemRoot::InDataDir, None, true);
        let p = l.placement(0, "x");
        fs::create_dir_all(&p.data_dir).unwrap();
        l.remove_target(&p).unwrap();
        l.remove_run().unwrap();
        assert!(p.data_dir.exists());
    }
}
