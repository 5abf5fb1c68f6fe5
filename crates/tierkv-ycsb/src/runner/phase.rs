//! One phase (the load, or one workload) over N client threads: warm-up, then the measured
//! operations, then the merged histograms, the wall-clock time and the target's counters as
//! deltas over the measured part.
//!
//! # Protocol
//! 1. The workers are built on the calling thread, then each moves to its own thread and
//!    runs its share of the warm-up.
//! 2. Rendezvous: every worker has warmed up. The calling thread snapshots the counters
//!    (`stats()` before) and the start time.
//! 3. Rendezvous: the workers run their share of the operations (or until the deadline);
//!    each remembers when its last operation finished.
//! 4. The calling thread draws progress until every worker has finished, joins them, and
//!    snapshots the counters again. The phase lasted from the start time to the latest
//!    finish.
//!
//! A worker that panics still passes both rendezvous (a drop guard does), so a panicking
//! engine fails the phase instead of hanging it.
//!
//! Thread safety: scoped threads borrow the target, the key space and the values; nothing
//! outlives the call.

use std::sync::Barrier;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use tierkv::Stats;

use super::worker::{OpSource, Shared, Worker};
use crate::histogram::OpHistograms;
use crate::keys::KeyFormat;
use crate::peer::BenchTarget;
use crate::schema::RowSchema;
use crate::values::ValueSource;
use crate::workload::{KeyChooser, KeySpace, OpStream, Workload};

/// How often the calling thread redraws progress while the workers run.
const PROGRESS_TICK: Duration = Duration::from_millis(50);

/// How much of something to do: a number of operations, a time, both (whichever ends
/// first) or neither (until the source is exhausted: the load).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Quota {
    /// Operations, over all threads.
    pub ops: Option<u64>,
    /// Wall-clock time.
    pub time: Option<Duration>,
}

impl Quota {
    /// Nothing at all.
    pub const NONE: Quota = Quota {
        ops: Some(0),
        time: None,
    };

    /// Thread `thread`'s share of the operations (the first `ops % threads` threads take one
    /// more, as YCSB splits `operationcount`).
    fn ops_share(&self, threads: usize, thread: usize) -> Option<u64> {
        self.ops.map(|total| {
            let t = threads.max(1) as u64;
            total / t + u64::from((thread as u64) < total % t)
        })
    }
}

/// What a phase runs.
#[derive(Clone, Debug)]
pub enum PhaseWork {
    /// Load the key space's records.
    Load,
    /// Run a mix; the chooser is cloned into every thread.
    Mix(Workload, KeyChooser),
}

/// Everything a phase runs with.
pub struct PhaseSetup<'a> {
    /// The target.
    pub target: &'a dyn BenchTarget,
    /// The key space of this target's run.
    pub keys: &'a KeySpace,
    /// How keys are spelt.
    pub key_format: KeyFormat,
    /// Where values come from.
    pub values: &'a ValueSource,
    /// Client threads.
    pub threads: usize,
    /// The run's seed.
    pub seed: u64,
    /// The schema of a schema run (`--schema`).
    pub schema: Option<&'a RowSchema>,
}

/// What a phase measured.
#[derive(Debug)]
pub struct PhaseOutcome {
    /// Latencies and failures per operation kind.
    pub hist: OpHistograms,
    /// From the start of the measured part to the last operation's end.
    pub duration: Duration,
    /// The target's counters over the measured part.
    pub counters: Stats,
    /// The target's counters when the measured part began.
    pub before: Stats,
    /// Why the target could not run the phase, if it could not.
    pub unsupported: Option<String>,
    /// The first failure's message, if any operation failed.
    pub first_error: Option<String>,
}

/// Passes a barrier a fixed number of times, the remaining ones on drop (so a panicking
/// worker does not leave the others waiting).
struct Rendezvous<'a> {
    barrier: &'a Barrier,
    left: u8,
}

impl Rendezvous<'_> {
    fn pass(&mut self) {
        if self.left > 0 {
            self.left -= 1;
            self.barrier.wait();
        }
    }
}

impl Drop for Rendezvous<'_> {
    fn drop(&mut self) {
        while self.left > 0 {
            self.pass();
        }
    }
}

/// Runs `work` with `warmup` then `quota`, drawing progress on `bar`.
pub fn run_phase(
    setup: &PhaseSetup<'_>,
    work: &PhaseWork,
    warmup: Quota,
    quota: Quota,
    bar: &ProgressBar,
) -> Result<PhaseOutcome, String> {
    let shared = Shared::default();
    let threads = setup.threads.max(1);
    let workers = (0..threads)
        .map(|i| {
            let source = match work {
                PhaseWork::Load => OpSource::load(setup.keys, setup.seed, i),
                PhaseWork::Mix(w, chooser) => OpSource::Mix(OpStream::new(
                    *w,
                    setup.keys,
                    chooser.clone(),
                    setup.seed,
                    i,
                )),
            };
            Worker::new(
                setup.target,
                source,
                setup.key_format,
                setup.values,
                &shared,
                setup.schema,
            )
        })
        .collect::<Result<Vec<_>, String>>()?;
    let barrier = Barrier::new(threads + 1);
    // Every worker holds a sender and drops it when its thread ends (normally or by a
    // panic): the receiver's disconnection wakes the calling thread at once.
    let (running, all_done) = mpsc::channel::<()>();
    let (hists, before, start, finished) = thread::scope(|s| {
        let handles: Vec<_> = workers
            .into_iter()
            .enumerate()
            .map(|(i, worker)| {
                let barrier = &barrier;
                let running = running.clone();
                s.spawn(move || {
                    let out = client(worker, barrier, warmup, quota, threads, i);
                    drop(running);
                    out
                })
            })
            .collect();
        drop(running);
        let mut me = Rendezvous {
            barrier: &barrier,
            left: 2,
        };
        me.pass();
        let before = setup.target.stats();
        let start = Instant::now();
        me.pass();
        while let Err(RecvTimeoutError::Timeout) = all_done.recv_timeout(PROGRESS_TICK) {
            draw(bar, &shared, quota, start);
        }
        // Join every thread before judging, so that no panic is left unjoined.
        let joined: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
        let mut hists = Vec::with_capacity(threads);
        let mut finished = start;
        for j in joined {
            let (hist, end) =
                j.map_err(|_| "a client thread panicked (see the message above)".to_owned())?;
            finished = finished.max(end);
            hists.push(hist);
        }
        Ok::<_, String>((hists, before, start, finished))
    })?;
    let counters = setup.target.stats().delta_since(&before);
    setup.keys.settle();
    let mut hist = OpHistograms::new()?;
    for h in &hists {
        hist.merge(h)?;
    }
    Ok(PhaseOutcome {
        hist,
        duration: finished.saturating_duration_since(start),
        counters,
        before,
        unsupported: shared.unsupported(),
        first_error: shared.first_error(),
    })
}

/// One client thread: warm up, meet, go, run its share; returns its histograms and when its
/// last operation ended.
fn client(
    mut worker: Worker<'_, '_>,
    barrier: &Barrier,
    warmup: Quota,
    quota: Quota,
    threads: usize,
    me: usize,
) -> (OpHistograms, Instant) {
    let mut meet = Rendezvous { barrier, left: 2 };
    drive(
        &mut worker,
        warmup.ops_share(threads, me),
        warmup.time,
        false,
    );
    meet.pass();
    meet.pass();
    let last = drive(&mut worker, quota.ops_share(threads, me), quota.time, true);
    (worker.into_histograms(), last)
}

/// Steps `worker` until `ops` are done, `time` has passed or the source is exhausted;
/// returns when the last operation ended.
fn drive(
    worker: &mut Worker<'_, '_>,
    ops: Option<u64>,
    time: Option<Duration>,
    measure: bool,
) -> Instant {
    let start = Instant::now();
    let deadline = time.map(|t| start + t);
    let mut last = start;
    let mut n = 0u64;
    while ops.is_none_or(|q| n < q) {
        let Some(end) = worker.step(measure) else {
            break;
        };
        n += 1;
        last = end;
        if deadline.is_some_and(|d| end >= d) {
            break;
        }
    }
    last
}

fn draw(bar: &ProgressBar, shared: &Shared, quota: Quota, start: Instant) {
    match (quota.ops, quota.time) {
        (None, Some(t)) => {
            let pos = start.elapsed().as_millis().min(t.as_millis());
            bar.set_position(u64::try_from(pos).unwrap_or(u64::MAX));
        }
        _ => bar.set_position(shared.done.load(Ordering::Relaxed)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_are_split_like_ycsb_splits_them() {
        let q = Quota {
            ops: Some(10),
            time: None,
        };
        let shares: Vec<u64> = (0..4).map(|i| q.ops_share(4, i).unwrap()).collect();
        assert_eq!(shares, [3, 3, 2, 2]);
        assert_eq!(Quota::default().ops_share(4, 0), None);
    }
}
