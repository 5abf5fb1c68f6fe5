//! One round of space mode: the fill, the deletes on the full store, the writes of new
//! keys, the verifications between them and the reopen (steps 1-5 of the `space` module
//! doc; issue 23).
//!
//! Thread safety: each phase runs on scoped worker threads that share the store, the
//! expected state and atomics; the caller's thread watches them ([`super::watch`]).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rand::Rng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use tierkv::{Db, Error};

use super::super::kill::{self, KillPaths};
use super::super::{RunConfig, ms};
use super::close;
use super::watch::{Watchdog, hang, watch};
use crate::expected_state::{ExpectedState, KeySpace};
use crate::report::RunReport;
use crate::value_codec::ValueSizes;
use crate::verify::{VerifyOutcome, unrecoverable, verify_store};
use crate::workload::{NoObserver, OpMix, Workload, WorkloadConfig};

/// The fill's operations: puts, with gets and scans checking reads while the store fills
/// (and write batches, with the batch weight of `--mix`).
const FILL_MIX: OpMix = OpMix {
    put: 80,
    delete: 0,
    get: 15,
    scan: 5,
    batch: None,
};

/// The longest pause between retries of a refused new key.
const MAX_BACKOFF: Duration = Duration::from_millis(100);

/// How the fill ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FillEnd {
    Refused,
    /// A violation or an error other than `NoSpace` stopped the workload.
    Stopped,
    /// Fewer refusals than wanted (this many) within `--fill-time`.
    TooFewRefusals(u64),
}

/// One round's context.
pub(super) struct Round<'a> {
    pub(super) cfg: &'a RunConfig,
    pub(super) paths: &'a KillPaths,
    pub(super) state: &'a ExpectedState,
    pub(super) round: u64,
}

impl Round<'_> {
    fn sizes(&self) -> &ValueSizes {
        &self.cfg.workload.sizes
    }

    /// The longest a worker may make no progress before the run is declared hung.
    fn stall(&self) -> Duration {
        let s = &self.cfg.space_mode;
        s.write_bound + s.gc_wait + Duration::from_secs(5)
    }

    /// Opens the store (timed as a recovery when `reopen` names what preceded it).
    pub(super) fn open(&self, report: &mut RunReport, reopen: Option<&str>) -> Option<Db> {
        let cfg = self.cfg;
        let options = cfg.target.options(
            &cfg.tiers,
            kill::verify_mode(cfg),
            Some(&self.paths.pmem_dir),
            Some(&self.paths.flash),
            None,
        );
        let t0 = Instant::now();
        match cfg.target.open(&self.paths.data, options) {
            Ok(db) => {
                if reopen.is_some() {
                    report.add_recovery(t0.elapsed(), db.stats().recovery_micros);
                }
                Some(db)
            }
            Err(e) => {
                let ctx = format!(
                    "round {}: {}",
                    self.round,
                    reopen.unwrap_or("opening the store")
                );
                report.add_violations(vec![unrecoverable(&ctx, &self.paths.data, &e)]);
                None
            }
        }
    }

    /// Steps 1-5 of the module doc; the reopened store, or `None` when the run must stop.
    pub(super) fn run(
        &self,
        db: Db,
        rng: &mut ChaCha8Rng,
        report: &mut RunReport,
    ) -> anyhow::Result<Option<Db>> {
        let round = self.round;
        let end = self.fill(&db, rng.random(), report);
        let live = self.verify_live(&db, "after the fill", report);
        if end != FillEnd::Refused || !report.passed() {
            if let FillEnd::TooFewRefusals(n) = end {
                report.fail(format!(
                    "round {round}: the fill had {n} of the {} refused writes it waits for \
                     after --fill-time {:.0} s ({}% of the capacity live): the store neither \
                     filled nor refused",
                    self.refusals_wanted(),
                    self.cfg.space_mode.fill_time.as_secs_f64(),
                    percent(live.present_keys.iter().map(|k| k.1).sum(), report)
                ));
            }
            return Ok(None);
        }
        let live_bytes: u64 = live.present_keys.iter().map(|k| k.1).sum();
        report.space.fills += 1;
        let share = live_bytes as f64 / report.space.capacity.max(1) as f64;
        report.space.full_shares.push(share);
        if share < self.cfg.space_mode.min_full {
            report.fail(format!(
                "round {round}: writes were refused with only {:.1}% of the capacity live \
                 ({live_bytes} of {} bytes; --min-full {:.0}%)",
                share * 100.0,
                report.space.capacity,
                self.cfg.space_mode.min_full * 100.0
            ));
            return Ok(None);
        }
        let mut present = live.present_keys;
        present.shuffle(rng);
        let n = (present.len() as f64 * self.cfg.space_mode.delete_share).ceil() as usize;
        let deleted = &present[..n.min(present.len())];
        if !self.delete(&db, deleted, report) {
            return Ok(None);
        }
        self.verify_live(&db, "after the deletes", report);
        if !report.passed() {
            return Ok(None);
        }
        let freed: u64 = deleted.iter().map(|k| k.1).sum();
        let mut fresh: Vec<u32> = {
            let mut live = vec![false; self.state.space().count() as usize];
            for (id, _) in &present[deleted.len()..] {
                if let Some(l) = live.get_mut(*id as usize) {
                    *l = true;
                }
            }
            (0..self.state.space().count())
                .filter(|id| !live.get(*id as usize).copied().unwrap_or(true))
                .collect()
        };
        fresh.shuffle(rng);
        if !self.refill(&db, &fresh, deleted.len(), freed, report) {
            return Ok(None);
        }
        self.verify_live(&db, "after writing again", report);
        if !report.passed() {
            return Ok(None);
        }
        close(db, round, report);
        if !report.passed() {
            return Ok(None);
        }
        let t0 = Instant::now();
        let Some(db) = self.open(report, Some("reopening after a clean close")) else {
            return Ok(None);
        };
        let reopen = t0.elapsed();
        let ctx = format!("round {round}: after close and reopen");
        let v = verify_store(&db, self.state, self.sizes(), &ctx, true);
        report.add_verify(v);
        if self.cfg.verbose {
            println!(
                "round {round}: filled to {:.1}% ({live_bytes} bytes), deleted {} keys \
                 ({freed} bytes), wrote again, reopened in {:.2} ms",
                share * 100.0,
                deleted.len(),
                ms(reopen)
            );
        }
        Ok(report.passed().then_some(db))
    }

    /// The refused writes that end a fill.
    fn refusals_wanted(&self) -> u64 {
        2 * self.cfg.workload.threads as u64 + 8
    }

    /// Step 1: fills the store until writes are refused.
    fn fill(&self, db: &Db, seed: u64, report: &mut RunReport) -> FillEnd {
        let cfg = self.cfg;
        let wl_cfg = WorkloadConfig {
            // NOTE: write batches as `--mix` says (by default on engines that have them).
            mix: OpMix {
                batch: cfg.workload.mix.batch,
                ..FILL_MIX
            },
            seed,
            ..cfg.workload.clone()
        };
        let ctx = format!("round {}, fill", self.round);
        let wl = Workload::new(db, self.state, wl_cfg, &NoObserver, ctx).allow_refusals();
        let want = self.refusals_wanted();
        let started = Instant::now();
        let snapshot = &*report;
        let (end, out) = std::thread::scope(|s| {
            let h = s.spawn(|| wl.run());
            // NOTE: writes only: reads go on beside writers that hang.
            let progress = || wl.counts.puts.get() + wl.counts.refused.get();
            let mut dog = Watchdog::new(self.stall());
            let end = loop {
                if wl.stopped() {
                    break FillEnd::Stopped;
                }
                if wl.counts.refused.get() >= want {
                    break FillEnd::Refused;
                }
                if started.elapsed() > cfg.space_mode.fill_time {
                    break FillEnd::TooFewRefusals(wl.counts.refused.get());
                }
                if dog.stalled(progress()) {
                    hang(cfg, snapshot, &format!("round {}: the fill", self.round));
                }
                std::thread::sleep(Duration::from_millis(2));
            };
            wl.stop();
            watch(&h, progress, self.stall(), cfg, snapshot, "the fill");
            (end, h.join())
        });
        report.add_ops(&wl.counts);
        report.space.refused += wl.counts.refused.get();
        let longest = Duration::from_micros(wl.counts.max_write_micros.load(Ordering::Relaxed));
        self.note_write(longest, "a write of the fill", report);
        let Ok(out) = out else {
            report.fail(format!("round {}: a fill thread panicked", self.round));
            return FillEnd::Stopped;
        };
        report.add_violations(out.violations);
        if let Some(e) = out.write_error {
            report.fail(format!(
                "round {}: a write of the fill failed with an error other than NoSpace: {e}",
                self.round
            ));
            return FillEnd::Stopped;
        }
        end
    }

    /// Records the longest write; one over `--write-bound` is a failure.
    fn note_write(&self, took: Duration, what: &str, report: &mut RunReport) {
        report.space.write_max = report.space.write_max.max(took);
        let bound = self.cfg.space_mode.write_bound;
        if took > bound {
            report.fail(format!(
                "round {}: {what} took {:.1} ms (--write-bound {:.1} ms)",
                self.round,
                ms(took),
                ms(bound)
            ));
        }
    }

    /// Verifies every key of the live store (nothing resolved: a refused write stays in
    /// flight until a reopen shows what became of it).
    fn verify_live(&self, db: &Db, when: &str, report: &mut RunReport) -> VerifyOutcome {
        let ctx = format!("round {}: {when}", self.round);
        let mut v = verify_store(db, self.state, self.sizes(), &ctx, false);
        report.keys_verified += v.keys_verified;
        report.add_violations(std::mem::take(&mut v.violations));
        v
    }

    /// Step 3: deletes `keys` on the full store; every delete must succeed.
    fn delete(&self, db: &Db, keys: &[(u32, u64)], report: &mut RunReport) -> bool {
        let next = AtomicUsize::new(0);
        let done = AtomicU64::new(0);
        let longest = AtomicU64::new(0);
        let errors = Mutex::new(Vec::new());
        let space = self.state.space();
        let worker = || {
            while errors.lock().is_empty() {
                let Some(&(id, _)) = keys.get(next.fetch_add(1, Ordering::Relaxed)) else {
                    return;
                };
                let key = space.key(id);
                let version = match self.state.begin_write(id, true) {
                    Ok(v) => v,
                    Err(e) => {
                        errors.lock().push(e.to_string());
                        return;
                    }
                };
                let t0 = Instant::now();
                let r = db.delete(&key);
                longest.fetch_max(micros(t0.elapsed()), Ordering::Relaxed);
                match r {
                    Ok(()) => self.state.commit(id, version),
                    Err(e) => errors.lock().push(format!(
                        "the delete of {} v#{version} on a full store failed: {e}",
                        KeySpace::show(&key)
                    )),
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
        };
        self.run_workers(
            &worker,
            || done.load(Ordering::Relaxed),
            "the deletes",
            report,
        );
        let ok = done.load(Ordering::Relaxed) - errors.lock().len() as u64;
        report.deletes += ok;
        report.space.deletes += ok;
        self.end_phase(&longest, "a delete on the full store", errors, report)
    }

    /// Step 4: writes new keys (`fresh`, in order) until they hold `refill` of `freed`.
    fn refill(
        &self,
        db: &Db,
        fresh: &[u32],
        deleted: usize,
        freed: u64,
        report: &mut RunReport,
    ) -> bool {
        let s = &self.cfg.space_mode;
        let target = (freed as f64 * s.refill) as u64;
        let next = AtomicUsize::new(0);
        let written = AtomicU64::new(0);
        let (puts, retried, refused) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
        let (longest, waited) = (AtomicU64::new(0), AtomicU64::new(0));
        let errors = Mutex::new(Vec::new());
        let space = self.state.space();
        let capacity = report.space.capacity.max(1);
        let put_one = |id: u32| -> Result<(), String> {
            let key = space.key(id);
            let mut first_refusal: Option<Instant> = None;
            let mut backoff = Duration::from_millis(1);
            loop {
                let version = self
                    .state
                    .begin_write(id, false)
                    .map_err(|e| e.to_string())?;
                let value = self.sizes().value(&key, version);
                let t0 = Instant::now();
                let r = db.put(&key, &value);
                longest.fetch_max(micros(t0.elapsed()), Ordering::Relaxed);
                match r {
                    Ok(()) => {
                        self.state.commit(id, version);
                        written.fetch_add((value.len() + key.len()) as u64, Ordering::Relaxed);
                        puts.fetch_add(1, Ordering::Relaxed);
                        if let Some(f) = first_refusal {
                            retried.fetch_add(1, Ordering::Relaxed);
                            waited.fetch_max(micros(f.elapsed()), Ordering::Relaxed);
                        }
                        return Ok(());
                    }
                    Err(Error::NoSpace { .. })
                        if first_refusal.is_none_or(|f| f.elapsed() < s.gc_wait) =>
                    {
                        refused.fetch_add(1, Ordering::Relaxed);
                        first_refusal.get_or_insert_with(Instant::now);
                        std::thread::sleep(backoff);
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                    }
                    Err(e) => {
                        return Err(format!(
                            "the new key {} ({} bytes) was refused{} after {deleted} deletes \
                             freed {freed} bytes ({:.1}% of the capacity; {} of the {target} \
                             bytes to write again written): {e}",
                            KeySpace::show(&key),
                            value.len(),
                            first_refusal.map_or(String::new(), |f| format!(
                                " for {:.1} s",
                                f.elapsed().as_secs_f64()
                            )),
                            freed as f64 * 100.0 / capacity as f64,
                            written.load(Ordering::Relaxed)
                        ));
                    }
                }
            }
        };
        let worker = || {
            while errors.lock().is_empty() && written.load(Ordering::Relaxed) < target {
                let Some(&id) = fresh.get(next.fetch_add(1, Ordering::Relaxed)) else {
                    return;
                };
                if let Err(e) = put_one(id) {
                    errors.lock().push(e);
                }
            }
        };
        let progress = || puts.load(Ordering::Relaxed) + refused.load(Ordering::Relaxed);
        self.run_workers(&worker, progress, "writing again", report);
        report.puts += puts.load(Ordering::Relaxed);
        report.space.refill_puts += puts.load(Ordering::Relaxed);
        report.space.refill_retried += retried.load(Ordering::Relaxed);
        report.space.refused += refused.load(Ordering::Relaxed);
        let wait = Duration::from_micros(waited.load(Ordering::Relaxed));
        report.space.gc_wait_max = report.space.gc_wait_max.max(wait);
        self.end_phase(&longest, "a write of a new key", errors, report)
    }

    /// Ends a phase: its longest write (`what`, in microseconds) against the bound, its
    /// errors as failures; true when the run may go on.
    fn end_phase(
        &self,
        longest: &AtomicU64,
        what: &str,
        errors: Mutex<Vec<String>>,
        report: &mut RunReport,
    ) -> bool {
        let took = Duration::from_micros(longest.load(Ordering::Relaxed));
        self.note_write(took, what, report);
        for e in errors.into_inner() {
            report.fail(format!("round {}: {e}", self.round));
        }
        report.passed()
    }

    /// Runs `worker` on the workload's threads, watching `progress` for a hang.
    fn run_workers(
        &self,
        worker: &(dyn Fn() + Sync),
        progress: impl Fn() -> u64,
        what: &str,
        report: &RunReport,
    ) {
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..self.cfg.workload.threads.max(1))
                .map(|_| s.spawn(worker))
                .collect();
            for h in &hs {
                watch(h, &progress, self.stall(), self.cfg, report, what);
            }
        });
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

fn percent(bytes: u64, report: &RunReport) -> String {
    format!(
        "{:.1}",
        bytes as f64 * 100.0 / report.space.capacity.max(1) as f64
    )
}
