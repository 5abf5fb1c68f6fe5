//! Power-failure rounds, shared by the `pmem-image` and `flash-faults` modes.
//!
//! A round (see the `modes` doc): open the live store, run the workload, and at a random
//! moment *cut the power* while the workers run:
//! 1. stop judging reads ([`Workload::mark_crashed`]) and snapshot the expected state:
//!    every write acknowledged by now must survive;
//! 2. crash the flash devices (the fault injector freezes them and drops or tears every
//!    unsynced write, and removes files created since the last directory sync);
//! 3. write the pmem crash image (one instant: the Tracked pool blocks its mutations while
//!    the image is built) as the next round's pool file;
//! 4. stop and join the workers; rewind the expected state to the snapshot (writes announced
//!    after it are in flight); copy the data directory and the crashed flash directory into
//!    the next round's directory (rewriting the manifest's paths); drop the live store.
//!
//! Flash is crashed before the pmem image is taken, so the image can only refer to flash
//! data that was synced before the cut (writes fail once the device is frozen).
//!
//! Then reopen in the next round's directory (timed: recovery) and verify every key; the
//! recovered store is the next round's live store. A mode policy ([`Policy`]) decides how
//! each cut is made and which I/O errors are injected; after an injected error the live
//! store is verified as it is (it must still be consistent), then either crashed or closed
//! cleanly, and reopened.
//!
//! Directory layout: `<work>/r<round>/` holds the data (MANIFEST), the pool (`pmem.pool`,
//! or `<pmem-path>/<work>-r<round>.pool`) and the flash directory (`flash/`, or
//! `<flash-path>/<work>-r<round>/`). A round's directory is removed once the next one holds
//! its crash state; the last one is kept when the run fails.
//!
//! Thread safety: runs on the mode's thread; the workload's threads are scoped to a round.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv::core::media::flash::{CrashMode, FaultInjector};
use tierkv::core::media::pmem::{CrashImageOptions, PmemPool};
use tierkv::{Db, Manifest, Tier};

use super::media::{MediaPaths, open_injected};
use super::{RunConfig, ms, remove_path};
use crate::expected_state::{ExpectedState, KeyState};
use crate::report::RunReport;
use crate::verify::{unrecoverable, verify_store};
use crate::workload::{NoObserver, Workload, WorkloadConfig, WorkloadEnd};

/// How one power cut is made.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CutPlan {
    /// Seed of the pmem crash image.
    pub image_seed: u64,
    /// Tear 8-byte words instead of whole lines.
    pub tear_words: bool,
    /// What happens to unsynced flash writes.
    pub flash: CrashMode,
}

impl CutPlan {
    pub(crate) fn describe(&self, uses_pmem: bool, uses_flash: bool) -> String {
        let mut parts = Vec::new();
        if uses_pmem {
            parts.push(if self.tear_words {
                "pmem image with torn words"
            } else {
                "pmem image by lines"
            });
        }
        if uses_flash {
            parts.push(match self.flash {
                CrashMode::DropUnsynced => "unsynced flash writes dropped",
                CrashMode::TearUnsynced { .. } => "unsynced flash writes torn",
            });
        }
        parts.join(", ")
    }
}

/// What a mode decides in each round.
pub(crate) trait Policy {
    /// How this round's power cut is made.
    fn plan(&mut self, rng: &mut ChaCha8Rng) -> CutPlan;
    /// Called before the workload starts: arm injected faults (and say which). `delay` is
    /// how long the workload will run before this round's power cut.
    fn arm(
        &mut self,
        _rng: &mut ChaCha8Rng,
        _live: &LiveStore,
        _delay: Duration,
    ) -> Option<String> {
        None
    }
    /// True when a write error of this round was injected on purpose.
    fn error_was_injected(&mut self, _live: &LiveStore) -> bool {
        false
    }
    /// Called before the round's power cut or clean close: account for what was injected
    /// (a crash makes later writes fail too, and those are not injected faults).
    fn settle(&mut self, _live: &LiveStore) {}
}

/// The paths of one round.
#[derive(Clone, Debug)]
pub(crate) struct RoundPaths {
    pub data: PathBuf,
    pub pool: PathBuf,
    pub flash: PathBuf,
    /// The name prefix of the files this run keeps outside its working directory.
    pub prefix: String,
}

impl RoundPaths {
    pub(crate) fn new(cfg: &RunConfig, round: u64) -> RoundPaths {
        let name = format!("r{round:06}");
        let data = cfg.work_dir.join(&name);
        let prefix = super::run_name(cfg);
        let pool = match &cfg.tiers.pmem_dir {
            Some(d) => d.join(format!("{prefix}-{name}.pool")),
            None => data.join("pmem.pool"),
        };
        let flash = match &cfg.tiers.flash_dir {
            Some(d) => d.join(format!("{prefix}-{name}")),
            None => data.join("flash"),
        };
        RoundPaths {
            data,
            pool,
            flash,
            prefix: format!("{prefix}-r*"),
        }
    }

    pub(crate) fn remove(&self) -> std::io::Result<()> {
        remove_path(&self.pool)?;
        remove_path(&self.flash)?;
        remove_path(&self.data)
    }
}

/// An open store with the media the harness injected.
pub(crate) struct LiveStore {
    pub db: Db,
    pub pool: Option<Arc<PmemPool>>,
    pub injector: Option<Arc<FaultInjector>>,
    pub paths: RoundPaths,
}

/// Opens (or creates) the store of `paths`, with a Tracked pool and fault-injecting flash.
pub(crate) fn open_store(
    cfg: &RunConfig,
    paths: &RoundPaths,
    create: bool,
) -> tierkv::Result<LiveStore> {
    let at = MediaPaths {
        data: &paths.data,
        pool: &paths.pool,
        pmem_dir: None,
        flash: &paths.flash,
    };
    let s = open_injected(cfg, &at, create)?;
    Ok(LiveStore {
        db: s.db,
        pool: s.pool,
        injector: s.injector,
        paths: paths.clone(),
    })
}

/// Steps 2 and 3 of a power cut (the caller has done step 1).
fn cut(live: &LiveStore, plan: &CutPlan, next: &RoundPaths) -> anyhow::Result<()> {
    if let Some(inj) = &live.injector {
        inj.crash(plan.flash)
            .context("crashing the flash devices")?;
    }
    if let Some(pool) = &live.pool {
        if let Some(dir) = next.pool.parent() {
            fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let opts = CrashImageOptions {
            tear_words: plan.tear_words,
        };
        pool.write_crash_image(plan.image_seed, opts, &next.pool)
            .context("writing the pmem crash image")?;
    }
    Ok(())
}

fn copy_tree(from: &Path, to: &Path, skip: &[&Path]) -> anyhow::Result<()> {
    fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    let entries = match fs::read_dir(from) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", from.display())),
    };
    for entry in entries {
        let entry = entry.with_context(|| format!("reading {}", from.display()))?;
        let src = entry.path();
        if skip.contains(&src.as_path()) || entry.file_name() == "LOCK" {
            continue;
        }
        let dst = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&src, &dst, skip)?;
        } else {
            fs::copy(&src, &dst)
                .with_context(|| format!("copying {} to {}", src.display(), dst.display()))?;
        }
    }
    Ok(())
}

/// Copies the crashed store's files (not its pool: the image replaces it) into `next` and
/// points the manifest at the new places.
pub(crate) fn carry_over(from: &RoundPaths, next: &RoundPaths) -> anyhow::Result<()> {
    copy_tree(&from.data, &next.data, &[&from.pool, &from.flash])?;
    copy_tree(&from.flash, &next.flash, &[])?;
    let mut m = Manifest::read_from(&next.data)?
        .ok_or_else(|| anyhow!("{} has no manifest to carry over", from.data.display()))?;
    if let Some(p) = m.pmem.as_mut() {
        p.path = next.pool.clone();
    }
    for f in &mut m.flash {
        f.path = next.flash.clone();
    }
    m.write_to(&next.data)?;
    Ok(())
}

/// Refuses an engine without the `tier` the in-process `mode` works on (`why` says what
/// that means), and a pool mode other than tracked.
pub(crate) fn check_in_process_mode(
    cfg: &RunConfig,
    mode: &str,
    tier: Tier,
    why: &str,
) -> anyhow::Result<()> {
    if !cfg.target.uses(tier) {
        bail!("engine {} {why}", cfg.target.desc.name);
    }
    if let Some(m) = cfg.pmem_mode
        && m != tierkv::DurabilityMode::Tracked
    {
        bail!("{mode} mode runs the pool, if any, in tracked mode; drop --pmem-mode {m}");
    }
    Ok(())
}

/// How a round's workload phase ended.
struct Phase {
    end: WorkloadEnd,
    /// The expected state at the power cut, if the timer cut the power.
    cut_at: Option<Vec<KeyState>>,
    /// Whether an injected fault had fired when the timer cut the power.
    injected_before_cut: bool,
    ops: u64,
}

/// The run's state across rounds.
struct Rounds<'a> {
    cfg: &'a RunConfig,
    report: &'a mut RunReport,
    policy: &'a mut dyn Policy,
    state: ExpectedState,
    rng: ChaCha8Rng,
    uses_pmem: bool,
    uses_flash: bool,
}

/// Runs power-failure rounds until the budget is spent or something fails.
pub(crate) fn run_rounds(
    cfg: &RunConfig,
    report: &mut RunReport,
    policy: &mut dyn Policy,
) -> anyhow::Result<()> {
    let first = RoundPaths::new(cfg, 0);
    let mut live = open_store(cfg, &first, true).context("creating the store")?;
    let mut r = Rounds {
        cfg,
        report,
        policy,
        state: cfg.new_state(),
        rng: ChaCha8Rng::seed_from_u64(cfg.seed),
        uses_pmem: cfg.target.uses(Tier::Pmem),
        uses_flash: cfg.target.uses(Tier::Flash),
    };
    let mut round = 0u64;
    while cfg.budget.more(round) {
        round += 1;
        match r.round(live, round)? {
            Some(next) => live = next,
            None => {
                // The failing round's files stay for inspection; say where those outside the
                // working directory are.
                let at = RoundPaths::new(cfg, round);
                for (dir, what) in [
                    (&cfg.tiers.pmem_dir, "pool files"),
                    (&cfg.tiers.flash_dir, "flash directories"),
                ] {
                    if let Some(d) = dir {
                        r.report
                            .kept
                            .push(format!("{what} in {} ({})", d.display(), at.prefix));
                    }
                }
                return Ok(());
            }
        }
    }
    let _ = live.db.close();
    let last = live.paths.clone();
    drop(live);
    last.remove()
        .with_context(|| format!("removing {}", last.data.display()))
}

impl Rounds<'_> {
    /// One round; `None` when it failed (the report says why) and the run must stop.
    fn round(&mut self, live: LiveStore, round: u64) -> anyhow::Result<Option<LiveStore>> {
        let next = RoundPaths::new(self.cfg, round);
        let wl_cfg = WorkloadConfig {
            seed: self.rng.random(),
            ..self.cfg.workload.clone()
        };
        let delay = self.cfg.crash_delay(&mut self.rng);
        let mut plan = self.policy.plan(&mut self.rng);
        plan.tear_words &= self.uses_pmem;
        let armed = self.policy.arm(&mut self.rng, &live, delay);
        let phase = self.workload_phase(&live, wl_cfg, delay, &plan, &next, round)?;
        if !phase.end.violations.is_empty() {
            self.report.add_violations(phase.end.violations);
            return Ok(None);
        }
        let described = plan.describe(self.uses_pmem, self.uses_flash);
        let (cut_at, how) = match (phase.cut_at, phase.end.write_error) {
            (Some(_), Some(err)) if !phase.injected_before_cut => {
                self.report.fail(format!(
                    "round {round}: a write failed although no fault was injected: {err}"
                ));
                return Ok(None);
            }
            (Some(snap), err) => {
                self.report.write_errors += u64::from(err.is_some());
                (
                    Some(snap),
                    format!("power cut after {:.0} ms ({described})", ms(delay)),
                )
            }
            (None, Some(err)) => {
                let fault = armed.unwrap_or_default();
                let Some(cut_at) =
                    self.after_write_error(&live, &plan, &next, round, &fault, &err)?
                else {
                    return Ok(None);
                };
                let how = match cut_at {
                    Some(_) => format!("{fault}, then a power cut ({described})"),
                    None => format!("{fault}, then a clean close"),
                };
                (cut_at, how)
            }
            (None, None) => {
                return Err(anyhow!("round {round}: the workload stopped for no reason"));
            }
        };
        if cut_at.is_some() {
            self.report.crash_images += u64::from(self.uses_pmem);
            self.report.torn_images += u64::from(self.uses_pmem && plan.tear_words);
            self.report.flash_crashes += u64::from(self.uses_flash);
        }
        let reopen_at = self.tear_down(live, cut_at, next)?;
        self.reopen_and_verify(&reopen_at, round, &how, phase.ops)
    }

    /// Runs the workload on `live` until the crash moment (or until it stops by itself),
    /// and cuts the power at that moment if it was reached.
    fn workload_phase(
        &mut self,
        live: &LiveStore,
        wl_cfg: WorkloadConfig,
        delay: Duration,
        plan: &CutPlan,
        next: &RoundPaths,
        round: u64,
    ) -> anyhow::Result<Phase> {
        let state = &self.state;
        let policy = &mut *self.policy;
        let wl = Workload::new(
            &live.db,
            state,
            wl_cfg,
            &NoObserver,
            format!("round {round}"),
        );
        let mut injected_before_cut = false;
        let (end, cut_result) = std::thread::scope(|s| {
            let worker = s.spawn(|| wl.run());
            let cut_result = if wl.run_until(Instant::now() + delay) {
                wl.mark_crashed();
                state.mark_cut();
                let snap = state.snapshot();
                injected_before_cut = policy.error_was_injected(live);
                policy.settle(live);
                cut(live, plan, next).map(|()| Some(snap))
            } else {
                Ok(None)
            };
            wl.stop();
            (worker.join(), cut_result)
        });
        let end = end.map_err(|_| anyhow!("a workload thread panicked"))?;
        self.report.add_ops(&wl.counts);
        Ok(Phase {
            end,
            cut_at: cut_result?,
            injected_before_cut,
            ops: wl.counts.total(),
        })
    }

    /// A write failed and stopped the workload. If the failure was injected: verify the
    /// live store, then cut the power (`Some(Some(snapshot))`) or close cleanly
    /// (`Some(None)`). `None` when the run failed.
    fn after_write_error(
        &mut self,
        live: &LiveStore,
        plan: &CutPlan,
        next: &RoundPaths,
        round: u64,
        fault: &str,
        err: &str,
    ) -> anyhow::Result<Option<Option<Vec<KeyState>>>> {
        if !self.policy.error_was_injected(live) {
            self.report.fail(format!(
                "round {round}: a write failed although no fault was injected: {err}"
            ));
            return Ok(None);
        }
        self.policy.settle(live);
        self.report.write_errors += 1;
        let ctx = format!("round {round}, the live store after {fault} ({err})");
        let v = verify_store(&live.db, &self.state, &self.cfg.workload.sizes, &ctx, false);
        self.report.add_verify(v);
        if !self.report.passed() {
            return Ok(None);
        }
        if self.rng.random_bool(0.5) {
            self.state.mark_cut();
            let snap = self.state.snapshot();
            cut(live, plan, next)?;
            Ok(Some(Some(snap)))
        } else {
            // A store that refuses writes may refuse to close cleanly too; what matters is
            // that it reopens.
            let _ = live.db.close();
            Ok(Some(None))
        }
    }

    /// Drops the live store. After a power cut, rewinds the expected state to the cut and
    /// carries the crash state over to `next` (returned); after a clean close, the store is
    /// reopened where it is.
    fn tear_down(
        &mut self,
        live: LiveStore,
        cut_at: Option<Vec<KeyState>>,
        next: RoundPaths,
    ) -> anyhow::Result<RoundPaths> {
        let Some(snap) = cut_at else {
            let here = live.paths.clone();
            drop(live);
            return Ok(here);
        };
        for (id, before) in snap.iter().enumerate() {
            self.state.rewind(u32::try_from(id)?, *before);
        }
        carry_over(&live.paths, &next)?;
        let old = live.paths.clone();
        drop(live);
        old.remove()
            .with_context(|| format!("removing {}", old.data.display()))?;
        Ok(next)
    }

    /// Reopens the store (timed: recovery) and verifies every key.
    fn reopen_and_verify(
        &mut self,
        at: &RoundPaths,
        round: u64,
        how: &str,
        ops: u64,
    ) -> anyhow::Result<Option<LiveStore>> {
        let t0 = Instant::now();
        let live = match open_store(self.cfg, at, false) {
            Ok(l) => l,
            Err(e) => {
                let ctx = format!("recovery after round {round}: {how}");
                self.report
                    .add_violations(vec![unrecoverable(&ctx, &at.data, &e)]);
                return Ok(None);
            }
        };
        let took = t0.elapsed();
        self.report
            .add_recovery(took, live.db.stats().recovery_micros);
        let ctx = format!("recovery after round {round}: {how}");
        let v = verify_store(&live.db, &self.state, &self.cfg.workload.sizes, &ctx, true);
        let line = format!(
            "round {round}: {ops} ops, {how}; recovered in {:.2} ms, {} keys verified, {} in \
             flight ({} applied)",
            ms(took),
            v.keys_verified,
            v.in_flight,
            v.in_flight_applied
        );
        self.report.add_verify(v);
        if !self.report.passed() {
            return Ok(None);
        }
        self.report.rounds += 1;
        if self.cfg.verbose {
            println!("{line}");
        }
        Ok(Some(live))
    }
}
