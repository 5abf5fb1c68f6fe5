//! The runner: one target, all phases (DESIGN §6). The load always comes first (measured
//! and reported when `load` is among the workloads), then each workload in the order given,
//! on the same store, so that the inserts of D and E extend the key space for the workloads
//! after them, as in YCSB's run sequence on one loaded database.
//!
//! Every target gets the same seed, so the same key and value streams; per workload a
//! warm-up (not measured), then the measured operations.
//!
//! Thread safety: [`run_target`] blocks its caller and runs the client threads itself
//! ([`phase`]); nothing outlives the call.

pub mod phase;
pub mod progress;
pub mod worker;

use std::time::{Duration, Instant};

use tierkv::Stats;

use crate::histogram::OpHistograms;
use crate::keys::KeyFormat;
use crate::peer::BenchTarget;
use crate::schema::{RowSchema, SchemaLayout};
use crate::values::{ValueShape, ValueSource};
use crate::workload::{Distribution, KeyChooser, KeySpace, OpKind, Phase};
use phase::{PhaseSetup, PhaseWork, Quota, run_phase};
use progress::Progress;

/// What every target is run with.
#[derive(Clone, Debug, PartialEq)]
pub struct RunSettings {
    /// Records loaded.
    pub records: u64,
    /// Operations (and/or time) per workload.
    pub quota: Quota,
    /// Warm-up per workload (not measured).
    pub warmup: Quota,
    /// Client threads.
    pub threads: usize,
    /// Overrides every workload's request distribution.
    pub distribution: Option<Distribution>,
    /// How keys are spelt.
    pub keys: KeyFormat,
    /// What values look like.
    pub values: ValueShape,
    /// Records through the field-level API, held as this says (`--schema`; needs
    /// [`ValueShape::Fields`]).
    pub schema: Option<SchemaLayout>,
    /// The seed of every stream.
    pub seed: u64,
    /// SIGKILL the process once the load has ended (`--crash-after-load`).
    pub crash_after_load: bool,
    /// After the load, wait at most this long for the target's background work to end,
    /// and count the load's counters again up to then (`--settle-load`).
    pub settle_load: Option<Duration>,
}

impl RunSettings {
    /// The request distribution `phase` runs with.
    pub fn distribution_of(&self, phase: &Phase) -> Option<Distribution> {
        match phase {
            Phase::Load => None,
            Phase::Run(w) => Some(self.distribution.unwrap_or(w.distribution)),
        }
    }

    /// YCSB's expected inserts of a workload: `ops × insert proportion × 2` (with a time
    /// quota only, the record count stands in for the operation count).
    fn expected_inserts(&self, phase: &Phase) -> u64 {
        match phase {
            Phase::Load => 0,
            Phase::Run(w) => {
                let ops = self.quota.ops.unwrap_or(self.records);
                (ops as f64 * w.mix.share(OpKind::Insert) * 2.0) as u64
            }
        }
    }
}

/// How a phase ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PhaseStatus {
    /// Every operation completed.
    Ok,
    /// The target cannot run it (e.g. scans on a hash index); the message says why.
    Unsupported(String),
    /// Some operations failed; the first failure's message.
    Failed(String),
}

impl PhaseStatus {
    /// `ok`, `unsupported` or `failed`.
    pub fn name(&self) -> &'static str {
        match self {
            PhaseStatus::Ok => "ok",
            PhaseStatus::Unsupported(_) => "unsupported",
            PhaseStatus::Failed(_) => "failed",
        }
    }

    /// The message, if any.
    pub fn message(&self) -> Option<&str> {
        match self {
            PhaseStatus::Ok => None,
            PhaseStatus::Unsupported(m) | PhaseStatus::Failed(m) => Some(m),
        }
    }
}

/// One target's measurements of one phase.
#[derive(Debug)]
pub struct PhaseResult {
    /// The target's label.
    pub engine: String,
    /// The phase.
    pub phase: Phase,
    /// The request distribution it ran with (none for the load).
    pub distribution: Option<Distribution>,
    /// How it ended.
    pub status: PhaseStatus,
    /// Wall-clock time of the measured part.
    pub duration: Duration,
    /// Latencies, errors and misses per operation kind.
    pub ops: OpHistograms,
    /// The target's counters over the measured part.
    pub counters: Stats,
    /// The load's counters once the target's background work ended (`--settle-load`).
    pub settled: Option<Settled>,
    /// The round it ran in, from 1 (`--repeat`).
    pub round: u32,
}

/// A load's counters from its start until the target's background work ended: what the
/// load cost, including the flushes and compactions it left behind.
#[derive(Clone, Debug)]
pub struct Settled {
    /// How long after the load's last operation the counters stopped changing (or the
    /// wait gave up).
    pub waited: Duration,
    /// True when they stopped changing; false when the wait gave up.
    pub quiet: bool,
    /// The counters from the load's start to the end of the wait.
    pub counters: Stats,
}

/// How long the written bytes must stay unchanged for the target to count as settled.
const SETTLE_QUIET: Duration = Duration::from_secs(1);
/// How often the counters are read meanwhile.
const SETTLE_POLL: Duration = Duration::from_millis(250);

/// Waits (at most `max`) until `target`'s pmem and flash bytes written stop changing for
/// [`SETTLE_QUIET`], then returns its counters since `before`.
fn settle(target: &dyn BenchTarget, before: &Stats, max: Duration) -> Settled {
    let started = Instant::now();
    let written = |s: &Stats| (s.pmem_bytes_written, s.flash_bytes_written);
    let mut last = target.stats();
    let mut quiet_since = Instant::now();
    loop {
        let waited = started.elapsed();
        if quiet_since.elapsed() >= SETTLE_QUIET || waited >= max {
            let quiet = quiet_since.elapsed() >= SETTLE_QUIET;
            return Settled {
                // The time the bytes last changed, not the quiet second after it.
                waited: if quiet {
                    waited.saturating_sub(quiet_since.elapsed())
                } else {
                    waited
                },
                quiet,
                counters: last.delta_since(before),
            };
        }
        std::thread::sleep(SETTLE_POLL.min(max.saturating_sub(waited)));
        let now = target.stats();
        if written(&now) != written(&last) {
            quiet_since = Instant::now();
        }
        last = now;
    }
}

impl PhaseResult {
    /// Operations completed (not failed) per second of the measured part.
    pub fn ops_per_sec(&self) -> f64 {
        let secs = self.duration.as_secs_f64();
        if secs > 0.0 {
            self.ops.completed() as f64 / secs
        } else {
            0.0
        }
    }

    /// Keys written per second by write batches (batches per second times the batch
    /// size of the workload; 0 for workloads without batches).
    pub fn keys_per_sec(&self) -> f64 {
        let size = match self.phase {
            Phase::Run(w) => w.batch_size,
            Phase::Load => 0,
        };
        let secs = self.duration.as_secs_f64();
        match self.ops.latency(OpKind::Batch) {
            Some(h) if secs > 0.0 => h.count() as f64 * size as f64 / secs,
            _ => 0.0,
        }
    }

    /// Failed operations, all kinds.
    pub fn errors(&self) -> u64 {
        OpKind::ALL.iter().map(|k| self.ops.errors(*k)).sum()
    }
}

/// Runs the load and `phases` against `target`; one result per phase listed (the load is
/// run even when not listed, unmeasured in the report).
pub fn run_target(
    target: &dyn BenchTarget,
    label: &str,
    phases: &[Phase],
    settings: &RunSettings,
    progress: Progress,
) -> Result<Vec<PhaseResult>, String> {
    let keys = KeySpace::new(settings.records);
    let values = ValueSource::new(settings.values, settings.seed);
    let schema = match (settings.schema, settings.values) {
        (None, _) => None,
        (Some(layout), ValueShape::Fields { count, size }) => Some(
            RowSchema::open(target, layout, count, size)
                .map_err(|e| format!("{label}: the schema API ({layout}): {e}"))?,
        ),
        (Some(_), ValueShape::Bytes(_)) => {
            return Err("--schema needs records of fields (--fields)".to_owned());
        }
    };
    let setup = PhaseSetup {
        target,
        keys: &keys,
        key_format: settings.keys,
        values: &values,
        threads: settings.threads,
        seed: settings.seed,
        schema: schema.as_ref(),
    };
    let mut results = Vec::with_capacity(phases.len());
    let load = run_one(&setup, label, &Phase::Load, settings, progress)?;
    if settings.crash_after_load {
        crash_now(label, settings.records, &load);
    }
    if phases.contains(&Phase::Load) {
        results.push(load);
    }
    for phase in phases.iter().filter(|p| **p != Phase::Load) {
        results.push(run_one(&setup, label, phase, settings, progress)?);
    }
    Ok(results)
}

/// Kills this process with SIGKILL, so that the store under test is left exactly as a crash
/// leaves it: no close, no flush, no destructor.
#[expect(
    unsafe_code,
    reason = "kill(2): the one way to die exactly as a crash does"
)]
fn crash_now(label: &str, records: u64, load: &PhaseResult) -> ! {
    use std::io::Write as _;
    println!(
        "{label}: load of {} records done in {:.2} s ({:.0} ops/s); killing this process with SIGKILL",
        records,
        load.duration.as_secs_f64(),
        load.ops_per_sec()
    );
    let _ = std::io::stdout().flush();
    // SAFETY: kill(2) with our own pid and a valid signal number has no memory effects.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
    // SIGKILL cannot be caught; should it somehow return, abort (no destructors either).
    std::process::abort()
}

fn run_one(
    setup: &PhaseSetup<'_>,
    label: &str,
    phase: &Phase,
    settings: &RunSettings,
    progress: Progress,
) -> Result<PhaseResult, String> {
    let distribution = settings.distribution_of(phase);
    let (work, warmup, quota) = match (phase, distribution) {
        (Phase::Run(w), Some(d)) => {
            let chooser = KeyChooser::new(
                d,
                setup.keys.acknowledged(),
                settings.expected_inserts(phase),
            );
            (PhaseWork::Mix(*w, chooser), settings.warmup, settings.quota)
        }
        _ => (PhaseWork::Load, Quota::NONE, Quota::default()),
    };
    let bar = progress.bar(label, phase.name(), quota, settings.records);
    let out = run_phase(setup, &work, warmup, quota, &bar)?;
    bar.finish_and_clear();
    let settled = match (phase, settings.settle_load) {
        (Phase::Load, Some(max)) => Some(settle(setup.target, &out.before, max)),
        _ => None,
    };
    let status = match (out.unsupported, out.first_error) {
        (Some(why), _) => PhaseStatus::Unsupported(why),
        (None, Some(first)) => PhaseStatus::Failed(first),
        (None, None) => PhaseStatus::Ok,
    };
    Ok(PhaseResult {
        engine: label.to_owned(),
        phase: *phase,
        distribution,
        status,
        duration: out.duration,
        ops: out.hist,
        counters: out.counters,
        settled,
        round: 1,
    })
}
