//! Opportunistic thread combining for flash reads (PRISM §5.3, Figure 5) and the two
//! baselines of its evaluation (§7.6, Figure 11), behind one [`ThreadCombiner`]:
//!
//! - [`CombiningMode::Combining`] (default): the MCS-style Thread Combining Queue
//!   ([`tcq`]): concurrent readers line up, a leader coalesces up to the queue depth and
//!   submits one batch;
//! - [`CombiningMode::Single`]: every read is its own batch of one ("QD 1");
//! - [`CombiningMode::Timeout`]: timeout-based batching ([`timeout`], "TA").
//!
//! The combiner is generic over the request `R` and its result `T`; the I/O itself is the
//! function it is given: a [`ReapFn`] with which the leader submits its batch, hands the
//! queue on and reaps the batch itself (combining and single modes, see
//! `value_storage::reader`), or a [`SubmitFn`] that submits asynchronously to the flash
//! tier, whose completion thread completes each request (timeout batching, multi-reads).
//! Completion hand-off is in [`completion`].
//!
//! Statistics: a histogram of batch sizes (count per size), from which the mean batch
//! size follows.
//!
//! Thread safety: `Send + Sync`; `execute` may be called from any number of threads. The
//! only `unsafe` code of the crate's flash path is in [`tcq`], with its invariants there.

#![deny(unsafe_code)]

pub mod completion;
pub mod tcq;
pub mod timeout;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use tierkv_core::{Counter, Error, Result};

use tcq::{Batch, ThreadCombiningQueue};
use timeout::TimeoutBatcher;

/// The function that submits a batch; it must complete (or drop) every completer.
pub type SubmitFn<R, T> = Arc<dyn Fn(Batch<R, T>) + Send + Sync>;

/// The function a leader runs to submit a batch *and reap it*: it submits, calls the
/// hand-off callback (the next leader may then submit its own batch), waits for the
/// batch's completions and completes every completer itself. A leader that reaps skips the
/// hop through a completion thread (and the wake-ups of threads that are neither the
/// reader nor the one that submitted), which on a machine with few cores costs more than
/// the combining saves; see [`ThreadCombiner::with_reaping`].
pub type ReapFn<R, T> = Arc<dyn Fn(Batch<R, T>, &mut dyn FnMut()) + Send + Sync>;

/// How concurrent reads are batched.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CombiningMode {
    /// Opportunistic thread combining (§5.3): batches follow the concurrency, up to the
    /// queue depth.
    #[default]
    Combining,
    /// One read per batch.
    Single,
    /// Timeout batching (§7.6 "TA"): wait up to `micros` µs for more reads before
    /// submitting.
    Timeout {
        /// The idle gap that closes a batch, in microseconds (the paper uses 100).
        micros: u32,
    },
}

/// The paper's TA timeout (§7.6).
pub const DEFAULT_TIMEOUT_MICROS: u32 = 100;

impl fmt::Display for CombiningMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CombiningMode::Combining => f.write_str("combining"),
            CombiningMode::Single => f.write_str("single"),
            CombiningMode::Timeout { micros } => write!(f, "timeout:{micros}"),
        }
    }
}

impl FromStr for CombiningMode {
    type Err = Error;
    /// `combining`, `single`, `timeout` (100 µs) or `timeout:<micros>`.
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "combining" | "tc" => Ok(CombiningMode::Combining),
            "single" | "none" => Ok(CombiningMode::Single),
            "timeout" | "ta" => Ok(CombiningMode::Timeout { micros: DEFAULT_TIMEOUT_MICROS }),
            _ => s
                .strip_prefix("timeout:")
                .and_then(|m| m.parse().ok())
                .map(|micros| CombiningMode::Timeout { micros })
                .ok_or_else(|| Error::invalid(format!("read batching {s:?}: expected combining, single, timeout or timeout:<micros>"))),
        }
    }
}

/// Batch-size statistics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CombiningStats {
    /// `histogram[n]` = batches of `n` requests (index 0 is unused).
    pub histogram: Vec<u64>,
}

impl CombiningStats {
    /// Batches submitted.
    pub fn batches(&self) -> u64 {
        self.histogram.iter().sum()
    }
    /// Requests submitted.
    pub fn requests(&self) -> u64 {
        self.histogram
            .iter()
            .enumerate()
            .map(|(n, c)| n as u64 * c)
            .sum()
    }
    /// Mean batch size (0 without batches).
    pub fn mean_batch(&self) -> f64 {
        let b = self.batches();
        if b == 0 {
            0.0
        } else {
            self.requests() as f64 / b as f64
        }
    }
}

enum Engine<R, T> {
    Combining(ThreadCombiningQueue<R, T>),
    Single,
    Timeout(TimeoutBatcher<R, T>),
}

/// Batches concurrent requests according to a [`CombiningMode`].
pub struct ThreadCombiner<R, T> {
    mode: CombiningMode,
    engine: Engine<R, T>,
    submit: SubmitFn<R, T>,
    reap: Option<ReapFn<R, T>>,
    histogram: Arc<[Counter]>,
}

impl<R: Send + 'static, T: Send + 'static> ThreadCombiner<R, T> {
    /// A combiner batching up to `queue_depth` requests (at least 1) and submitting them
    /// with `submit`. Starts a thread in `Timeout` mode.
    pub fn new(mode: CombiningMode, queue_depth: u32, submit: SubmitFn<R, T>) -> Result<Self> {
        let limit = queue_depth.max(1) as usize;
        let histogram: Arc<[Counter]> = (0..=limit).map(|_| Counter::default()).collect();
        let h = histogram.clone();
        let inner = submit;
        let submit: SubmitFn<R, T> = Arc::new(move |b: Batch<R, T>| {
            if let Some(c) = h.get(b.len()) {
                c.incr();
            }
            inner(b);
        });
        let engine = match mode {
            CombiningMode::Combining => Engine::Combining(ThreadCombiningQueue::new(limit)),
            CombiningMode::Single => Engine::Single,
            CombiningMode::Timeout { micros } => {
                Engine::Timeout(TimeoutBatcher::new(limit, micros, submit.clone())?)
            }
        };
        Ok(ThreadCombiner {
            mode,
            engine,
            submit,
            reap: None,
            histogram,
        })
    }

    /// As [`ThreadCombiner::new`], with leaders that reap their own batches (`reap`) in the
    /// combining and single modes. Timeout batching and [`ThreadCombiner::execute_batch`]
    /// keep the asynchronous `submit` (their submitter must not wait for each batch).
    pub fn with_reaping(
        mode: CombiningMode,
        queue_depth: u32,
        submit: SubmitFn<R, T>,
        reap: ReapFn<R, T>,
    ) -> Result<Self> {
        let mut c = Self::new(mode, queue_depth, submit)?;
        let h = c.histogram.clone();
        c.reap = Some(Arc::new(
            move |b: Batch<R, T>, hand_off: &mut dyn FnMut()| {
                if let Some(n) = h.get(b.len()) {
                    n.incr();
                }
                reap(b, hand_off);
            },
        ));
        Ok(c)
    }

    /// The mode.
    pub fn mode(&self) -> CombiningMode {
        self.mode
    }

    /// Runs one request and returns its result.
    pub fn execute(&self, request: R) -> Result<T> {
        match (&self.engine, &self.reap) {
            (Engine::Combining(q), Some(reap)) => q.execute_then(request, &**reap),
            (Engine::Combining(q), None) => q.execute(request, &*self.submit),
            (Engine::Single, reap) => {
                let (c, w) = completion::pair();
                match reap {
                    Some(reap) => reap(vec![(request, c)], &mut || {}),
                    None => (self.submit)(vec![(request, c)]),
                }
                w.wait()
            }
            (Engine::Timeout(t), _) => t.execute(request),
        }
    }

    /// Submits `requests` as batches of at most the queue depth, bypassing the queue
    /// (scans and GC already hold a batch), and returns their results in order.
    pub fn execute_batch(&self, requests: Vec<R>) -> Vec<Result<T>> {
        let limit = self.histogram.len() - 1;
        let mut waiters = Vec::with_capacity(requests.len());
        let mut batch = Vec::with_capacity(limit.min(requests.len()));
        for r in requests {
            let (c, w) = completion::pair();
            waiters.push(w);
            batch.push((r, c));
            if batch.len() == limit {
                (self.submit)(std::mem::take(&mut batch));
            }
        }
        if !batch.is_empty() {
            (self.submit)(batch);
        }
        waiters.into_iter().map(completion::Waiter::wait).collect()
    }

    /// The batch-size histogram.
    pub fn stats(&self) -> CombiningStats {
        CombiningStats {
            histogram: self.histogram.iter().map(Counter::get).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn echo_on_thread() -> SubmitFn<u64, u64> {
        Arc::new(|batch: Batch<u64, u64>| {
            std::thread::spawn(move || {
                for (r, c) in batch {
                    c.complete(Ok(r));
                }
            });
        })
    }

    #[test]
    fn modes_parse_and_print() {
        for (s, m) in [
            ("combining", CombiningMode::Combining),
            ("single", CombiningMode::Single),
            ("timeout", CombiningMode::Timeout { micros: 100 }),
            ("timeout:5", CombiningMode::Timeout { micros: 5 }),
        ] {
            assert_eq!(s.parse::<CombiningMode>().unwrap(), m);
        }
        assert_eq!(
            CombiningMode::Timeout { micros: 7 }
                .to_string()
                .parse::<CombiningMode>()
                .unwrap(),
            CombiningMode::Timeout { micros: 7 }
        );
        assert!("fast".parse::<CombiningMode>().is_err());
    }

    #[test]
    fn every_mode_returns_each_thread_its_own_result_from_32_threads() {
        for mode in [
            CombiningMode::Combining,
            CombiningMode::Single,
            CombiningMode::Timeout { micros: 50 },
        ] {
            let c = ThreadCombiner::new(mode, 16, echo_on_thread()).unwrap();
            std::thread::scope(|s| {
                for t in 0..32u64 {
                    let c = &c;
                    s.spawn(move || {
                        for i in 0..100 {
                            let r = t << 32 | i;
                            assert_eq!(c.execute(r).unwrap(), r);
                        }
                    });
                }
            });
            let st = c.stats();
            assert_eq!(st.requests(), 3200, "{mode}");
            assert!(st.histogram.len() == 17);
            if mode == CombiningMode::Single {
                assert_eq!(st.batches(), 3200);
            }
        }
    }

    /// Submits nothing anywhere: hands off, then completes the batch on the leader's own
    /// thread, as the Value Storage's ring-reaping leader does.
    fn echo_reaped_by_leader() -> ReapFn<u64, u64> {
        Arc::new(|batch: Batch<u64, u64>, hand_off: &mut dyn FnMut()| {
            hand_off();
            std::thread::yield_now();
            for (r, c) in batch {
                c.complete(Ok(r));
            }
        })
    }

    #[test]
    fn leaders_that_reap_their_batches_return_each_thread_its_own_result() {
        for mode in [
            CombiningMode::Combining,
            CombiningMode::Single,
            CombiningMode::Timeout { micros: 50 },
        ] {
            let c =
                ThreadCombiner::with_reaping(mode, 8, echo_on_thread(), echo_reaped_by_leader())
                    .unwrap();
            std::thread::scope(|s| {
                for t in 0..16u64 {
                    let c = &c;
                    s.spawn(move || {
                        for i in 0..200 {
                            let r = t << 32 | i;
                            assert_eq!(c.execute(r).unwrap(), r);
                        }
                    });
                }
            });
            let st = c.stats();
            assert_eq!(st.requests(), 3200, "{mode}");
            assert!(st.histogram.iter().skip(9).all(|&n| n == 0), "{mode}");
        }
    }

    #[test]
    fn a_reaping_leader_that_never_hands_off_still_passes_the_queue_on() {
        let reap: ReapFn<u64, u64> = Arc::new(|batch: Batch<u64, u64>, _: &mut dyn FnMut()| {
            for (r, c) in batch {
                c.complete(Ok(r + 1));
            }
        });
        let c = ThreadCombiner::with_reaping(CombiningMode::Combining, 4, echo_on_thread(), reap)
            .unwrap();
        std::thread::scope(|s| {
            for t in 0..8u64 {
                let c = &c;
                s.spawn(move || {
                    for i in 0..100 {
                        assert_eq!(c.execute(t * 1000 + i).unwrap(), t * 1000 + i + 1);
                    }
                });
            }
        });
        assert_eq!(c.stats().requests(), 800);
    }

    #[test]
    fn execute_batch_splits_at_the_queue_depth_and_keeps_order() {
        let c = ThreadCombiner::new(CombiningMode::Combining, 4, echo_on_thread()).unwrap();
        let out: Vec<u64> = c
            .execute_batch((0..10).collect())
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(out, (0..10).collect::<Vec<_>>());
        assert_eq!(c.stats().histogram, vec![0, 0, 1, 0, 2]);
    }

    #[test]
    fn timeout_mode_joins_its_thread_on_drop() {
        let c = ThreadCombiner::new(CombiningMode::Timeout { micros: 10 }, 8, echo_on_thread())
            .unwrap();
        assert_eq!(c.execute(5).unwrap(), 5);
        drop(c);
    }
}
