//! `persist-points` mode (issue 17, item 2): systematic crash points instead of random
//! ones. Each pass runs a single-threaded workload twice on a fresh store over a Tracked
//! pool:
//! 1. **count**: the persists the workload makes (`PmemPool::persist_count`; each persist
//!    is a write-back plus a fence), P of them;
//! 2. **cut**: the same workload (same seed) again, with a crash-point handler armed on the
//!    pool (`tierkv_core::media::pmem::crash_points`): right after persist number N
//!    returns, for every N of `1..=P` when P ≤ `--points`, else one N drawn in each of
//!    `--points` equal strata of `1..=P`, the handler takes two crash images — whole lines
//!    and torn words — and stages each beside the live store (the data directory and the
//!    flash directory copied as they stand) with the expected state at that instant; a
//!    verifier thread recovers each staged image into a fresh store and verifies every key
//!    (acknowledged writes must be there; the write in flight whole or absent). The
//!    verifier runs apart from the paused engine thread because recovery may wait for it
//!    (prism's epochs are process-wide); the workload waits between operations while more
//!    than a few images are staged.
//!
//! Every named crash point the engine reaches during the cutting run
//! (`PmemPool::crash_point("prism.gc.after_copy")`, see `crash_points.rs`) is cut the same
//! way, up to `--points` of them.
//!
//! So every ordering step of the engine's protocols on the workload's path is cut at
//! least once (up to `--points` per pass), including the persists of background threads
//! (whose numbering varies a little between the two runs: the sample is taken over the
//! numbers, not over the steps). The verdict counts the points cut and the acknowledged
//! writes lost.
//!
//! Limitations: flash is copied as it stands at the point (unsynced writes kept), so this
//! mode tests the pmem protocol, not the flash one (`flash-faults` does); a single
//! writer thread (the point of the mode is determinism); `--writers-per-key` is refused.
//!
//! Thread safety: runs on the caller's thread plus the workload's thread; the handler runs
//! on whichever engine thread persisted.

use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use parking_lot::{Condvar, Mutex, RwLock};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv::Tier;
use tierkv::core::media::pmem::{CrashImageOptions, CrashPoint, PmemPool};

use super::RunConfig;
use super::power::{self, LiveStore, RoundPaths, carry_over, open_store};
use crate::expected_state::ExpectedState;
use crate::fields::FieldState;
use crate::report::RunReport;
use crate::verify::{Violation, unrecoverable, verify_store};
use crate::workload::{NoObserver, Workload, WorkloadConfig};

/// Checks that the engine has a pool to cut, and that the flags make sense.
pub fn check_engine(cfg: &RunConfig) -> anyhow::Result<()> {
    power::check_in_process_mode(
        cfg,
        "persist-points",
        Tier::Pmem,
        "keeps nothing on pmem, so persist-points mode has no persists to cut; use --mode kill or --mode flash-faults",
    )?;
    if cfg.workload.writers_per_key > 1 {
        bail!(
            "persist-points mode runs one writer thread (its point is determinism); drop \
             --writers-per-key"
        );
    }
    Ok(())
}

/// Picks the persist numbers to cut after: all of `1..=total` if there are at most
/// `points`, else one drawn uniformly in each of `points` equal strata.
pub fn sample_points(total: u64, points: u64, rng: &mut impl Rng) -> BTreeSet<u64> {
    if total <= points {
        return (1..=total).collect();
    }
    (0..points)
        .map(|i| {
            let lo = 1 + i * total / points;
            let hi = ((i + 1) * total / points).max(lo);
            rng.random_range(lo..=hi)
        })
        .collect()
}

/// What the handler found, shared with the mode's thread.
#[derive(Default)]
struct Cuts {
    points: u64,
    /// Of those, at named points of the engine (`PmemPool::crash_point`).
    named: u64,
    images: u64,
    torn: u64,
    keys_verified: u64,
    rows_verified: u64,
    rows_in_flight: u64,
    in_flight: u64,
    recoveries: Vec<(Duration, u64)>,
    violations: Vec<Violation>,
    lost: u64,
    failures: Vec<String>,
}

/// The handler's context.
struct Cutter {
    cfg: RunConfig,
    state: Arc<ExpectedState>,
    pool: Weak<PmemPool>,
    live: RoundPaths,
    first: u64,
    wanted: BTreeSet<u64>,
    seed: u64,
    pass: u64,
    next_dir: AtomicU64,
    cuts: Mutex<Cuts>,
    queue: Mutex<VecDeque<Job>>,
    queued: Condvar,
    /// Held (shared) by every running handler; the mode takes it exclusively after
    /// disarming, to wait for a handler still running on a background thread.
    busy: RwLock<()>,
}

impl Cutter {
    fn at_point(&self, cp: CrashPoint<'_>) {
        let (label, number) = match cp {
            CrashPoint::Persist { number, .. } => {
                let rel = number.saturating_sub(self.first);
                if !self.wanted.contains(&rel) {
                    return;
                }
                (format!("persist {rel} of the workload"), number)
            }
            CrashPoint::Named(name) => {
                // Every named point the run reaches is cut, up to --points of them.
                let mut c = self.cuts.lock();
                if c.named >= self.cfg.persist_points.points {
                    return;
                }
                c.named += 1;
                (format!("the engine's point {name}"), c.named << 32)
            }
        };
        let _busy = self.busy.read();
        let Some(pool) = self.pool.upgrade() else {
            return;
        };
        if self.cuts.lock().violations.len() >= 8 {
            return; // enough to explain the failure
        }
        // IMPORTANT: what was acknowledged is read before the images: the cut may fall on
        // a background thread while the workload goes on, and a write acknowledged after
        // an image may be missing from it.
        let before = self.state.snapshot();
        let fields_before = self.state.fields().map(FieldState::copy_at_cut);
        let mut images = Vec::new();
        for tear_words in [false, true] {
            let seed = self.seed ^ number.wrapping_mul(0x9e37_79b9) ^ u64::from(tear_words);
            match pool.crash_image(seed, CrashImageOptions { tear_words }) {
                Ok(img) => images.push((tear_words, img)),
                Err(e) => self.cuts.lock().failures.push(format!("crash image: {e}")),
            }
        }
        // The expected state at the instant: acknowledged before `before`, anything
        // announced since in flight.
        let Some(mut at) = ExpectedState::decode(&self.state.encode()) else {
            return;
        };
        // The rows with their round's writes: those not acknowledged by now are in flight.
        at.copy_fields_at_cut(&self.state);
        at.rewind_fields(fields_before.as_ref());
        at.batches().replace(self.state.batches().all());
        for (id, b) in before.iter().enumerate() {
            if let Ok(id) = u32::try_from(id) {
                at.rewind(id, *b);
            }
        }
        let at = Arc::new(at);
        self.cuts.lock().points += 1;
        for (tear_words, img) in images {
            let how = if tear_words { "torn words" } else { "lines" };
            let ctx = format!("pass {}: crash at {label} ({how})", self.pass);
            match self.stage(&img) {
                Ok(paths) => {
                    self.queue.lock().push_back(Job {
                        paths,
                        at: at.clone(),
                        ctx,
                    });
                    self.queued.notify_one();
                }
                Err(e) => self.cuts.lock().failures.push(format!("{ctx}: {e:#}")),
            }
            let mut c = self.cuts.lock();
            c.images += 1;
            c.torn += u64::from(tear_words);
        }
    }

    /// Copies the live store's files beside it with `img` as its pool (quick: the engine
    /// is paused at the point meanwhile).
    fn stage(&self, img: &[u8]) -> anyhow::Result<RoundPaths> {
        let n = self.next_dir.fetch_add(1, Ordering::SeqCst);
        let paths = RoundPaths::new(&self.cfg, 1_000_000 + self.pass * 100_000 + n);
        carry_over(&self.live, &paths)?;
        std::fs::write(&paths.pool, img)
            .with_context(|| format!("writing {}", paths.pool.display()))?;
        Ok(paths)
    }

    /// Recovers and verifies staged images until `done` and nothing is queued (runs on
    /// its own thread: recovering a store while the live one is paused inside its
    /// protocol could wait for it, e.g. on a process-wide epoch).
    fn verifier(&self, done: &AtomicBool) {
        loop {
            let job = {
                let mut q = self.queue.lock();
                loop {
                    if let Some(j) = q.pop_front() {
                        break Some(j);
                    }
                    if done.load(Ordering::SeqCst) {
                        break None;
                    }
                    self.queued.wait_for(&mut q, Duration::from_millis(20));
                }
            };
            let Some(job) = job else { return };
            if let Err(e) = self.verify(&job) {
                self.cuts
                    .lock()
                    .failures
                    .push(format!("{}: {e:#}", job.ctx));
            }
        }
    }

    /// Images queued and not verified yet.
    fn backlog(&self) -> usize {
        self.queue.lock().len()
    }

    fn verify(&self, job: &Job) -> anyhow::Result<()> {
        let (paths, ctx) = (&job.paths, job.ctx.as_str());
        let t0 = Instant::now();
        let store = match open_store(&self.cfg, paths, false) {
            Ok(s) => s,
            Err(e) => {
                let mut c = self.cuts.lock();
                c.violations.push(unrecoverable(ctx, &paths.data, &e));
                c.lost += 1;
                return Ok(()); // kept for inspection
            }
        };
        let took = t0.elapsed();
        let v = verify_store(&store.db, &job.at, &self.cfg.workload.sizes, ctx, false);
        let engine = store.db.stats().recovery_micros;
        let _ = store.db.close();
        drop(store);
        let ok = v.ok();
        {
            let mut c = self.cuts.lock();
            c.recoveries.push((took, engine));
            c.keys_verified += v.keys_verified;
            c.rows_verified += v.rows_verified;
            c.rows_in_flight += v.rows_in_flight;
            c.in_flight += v.in_flight;
            c.lost += v.violations.len() as u64;
            c.violations.extend(v.violations);
        }
        if ok {
            paths
                .remove()
                .with_context(|| format!("removing {}", paths.data.display()))?;
        }
        Ok(())
    }
}

/// A staged image waiting to be recovered and verified.
struct Job {
    paths: RoundPaths,
    at: Arc<ExpectedState>,
    ctx: String,
}

/// Images staged ahead of the verifier before the workload waits for it.
const MAX_BACKLOG: usize = 4;

/// Runs the single-threaded workload on `live` for `ops` operations.
fn run_workload(
    cfg: &RunConfig,
    live: &LiveStore,
    state: &ExpectedState,
    seed: u64,
    ops: u64,
    what: String,
    pacer: &(dyn Fn() + Sync),
) -> anyhow::Result<(crate::workload::WorkloadEnd, Counts)> {
    let wl_cfg = WorkloadConfig {
        threads: 1,
        seed,
        ..cfg.workload.clone()
    };
    let wl = Workload::new(&live.db, state, wl_cfg, &NoObserver, what)
        .limit_ops(ops)
        .pace_with(pacer);
    let end = wl.run();
    let c = &wl.counts;
    let fields = c.field_counts();
    Ok((
        end,
        Counts {
            ops: [c.puts.get(), c.deletes.get(), c.gets.get(), c.scans.get()],
            fields,
        },
    ))
}

/// A workload's counters: puts, deletes, gets, scans; and the field operations (as
/// [`RunReport::field_ops`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counts {
    ops: [u64; 4],
    fields: [u64; 7],
}

/// Runs the mode.
pub fn run(cfg: &RunConfig, report: &mut RunReport) -> anyhow::Result<()> {
    check_engine(cfg)?;
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let mut pass = 0u64;
    while cfg.budget.more(pass) {
        pass += 1;
        if !one_pass(cfg, report, pass, rng.random(), &mut rng)? {
            return Ok(());
        }
    }
    Ok(())
}

fn add_ops(report: &mut RunReport, c: Counts) {
    report.puts += c.ops[0];
    report.deletes += c.ops[1];
    report.gets += c.ops[2];
    report.scans += c.ops[3];
    for (sum, n) in report.field_ops.iter_mut().zip(c.fields) {
        *sum += n;
    }
}

/// One pass (count, then cut); false when it failed.
fn one_pass(
    cfg: &RunConfig,
    report: &mut RunReport,
    pass: u64,
    seed: u64,
    rng: &mut ChaCha8Rng,
) -> anyhow::Result<bool> {
    let ops = cfg.persist_points.ops;
    // 1. Count.
    let counting = RoundPaths::new(cfg, pass * 2);
    let live = open_store(cfg, &counting, true).context("creating the counting store")?;
    let pool = live
        .pool
        .clone()
        .ok_or_else(|| anyhow!("the store has no pmem pool"))?;
    let state = cfg.new_state();
    let first = pool.persist_count();
    let (end, c) = run_workload(
        cfg,
        &live,
        &state,
        seed,
        ops,
        format!("pass {pass}, count"),
        &|| {},
    )?;
    let total = pool.persist_count() - first;
    add_ops(report, c);
    if !end.violations.is_empty() || end.write_error.is_some() {
        report.add_violations(end.violations);
        if let Some(e) = end.write_error {
            report.fail(format!("pass {pass}: a write failed: {e}"));
        }
        return Ok(false);
    }
    let _ = live.db.close();
    drop(live);
    drop(pool);
    counting.remove()?;
    // 2. Cut.
    let cutting = RoundPaths::new(cfg, pass * 2 + 1);
    let live = open_store(cfg, &cutting, true).context("creating the cutting store")?;
    let pool = live
        .pool
        .clone()
        .ok_or_else(|| anyhow!("the store has no pmem pool"))?;
    let state = Arc::new(cfg.new_state());
    let wanted = sample_points(total, cfg.persist_points.points, rng);
    let cutter = Arc::new(Cutter {
        cfg: cfg.clone(),
        state: state.clone(),
        pool: Arc::downgrade(&pool),
        live: cutting.clone(),
        first: pool.persist_count(),
        wanted,
        seed,
        pass,
        next_dir: AtomicU64::new(0),
        cuts: Mutex::new(Cuts::default()),
        queue: Mutex::new(VecDeque::new()),
        queued: Condvar::new(),
        busy: RwLock::new(()),
    });
    let handler = cutter.clone();
    pool.arm_crash_points(Arc::new(move |cp| handler.at_point(cp)))?;
    let done = AtomicBool::new(false);
    let pace = || {
        while cutter.backlog() > MAX_BACKLOG {
            std::thread::sleep(Duration::from_micros(500));
        }
    };
    let run = std::thread::scope(|s| {
        let v = s.spawn(|| cutter.verifier(&done));
        let run = run_workload(
            cfg,
            &live,
            &state,
            seed,
            ops,
            format!("pass {pass}, cut"),
            &pace,
        );
        pool.disarm_crash_points();
        drop(cutter.busy.write());
        done.store(true, Ordering::SeqCst);
        let joined = v.join();
        joined
            .map_err(|_| anyhow!("the verifier thread panicked"))
            .and(run)
    });
    let (end, c) = run?;
    add_ops(report, c);
    let cuts = std::mem::take(&mut *cutter.cuts.lock());
    report.persists_counted += total;
    report.crash_points += cuts.points;
    report.named_points += cuts.named;
    report.crash_images += cuts.images;
    report.torn_images += cuts.torn;
    report.keys_verified += cuts.keys_verified;
    report.rows_verified += cuts.rows_verified;
    report.rows_in_flight += cuts.rows_in_flight;
    report.in_flight += cuts.in_flight;
    report.acked_lost += cuts.lost;
    for (took, engine) in &cuts.recoveries {
        report.add_recovery(*took, *engine);
    }
    report.add_violations(end.violations);
    report.add_violations(cuts.violations);
    for f in cuts.failures {
        report.fail(f);
    }
    if let Some(e) = end.write_error {
        report.fail(format!("pass {pass}: a write failed: {e}"));
    }
    if cfg.verbose {
        println!(
            "pass {pass}: {total} persists counted, {} points cut ({} images)",
            cuts.points, cuts.images
        );
    }
    if !report.passed() {
        return Ok(false);
    }
    report.rounds += 1;
    let _ = live.db.close();
    drop(live);
    drop(cutter);
    drop(pool);
    cutting.remove()?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_counts_are_cut_everywhere_and_large_ones_once_per_stratum() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        assert_eq!(
            sample_points(5, 10, &mut rng),
            (1..=5).collect::<BTreeSet<_>>()
        );
        let s = sample_points(10_000, 100, &mut rng);
        assert_eq!(s.len(), 100);
        for i in 0..100u64 {
            let lo = 1 + i * 100;
            assert_eq!(s.range(lo..lo + 100).count(), 1, "stratum {i}");
        }
        assert!(sample_points(0, 10, &mut rng).is_empty());
    }
}
