//! Timeout-based batching, the "TA" baseline of PRISM §7.6 (Figure 11): reads are queued to
//! a submitter thread that, after taking a first request, keeps collecting until the queue
//! depth is reached or no request arrived for `micros` microseconds, then submits the
//! batch. It exists to be compared with thread combining ([`super::tcq`]), which needs no
//! timer and no extra thread.
//!
//! Thread safety: `Send + Sync`; the submitter thread (`prism-read-batcher`) is owned:
//! dropping the batcher closes the queue, and the thread submits what it holds, exits and
//! is joined. A request that cannot be queued (the thread is gone) fails with an error.

use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam::channel::{self, Receiver, RecvTimeoutError, Sender};
use tierkv_core::{Error, Result};

use super::SubmitFn;
use super::completion::{Completer, pair};

/// The queue and submitter thread of timeout batching.
pub struct TimeoutBatcher<R, T> {
    tx: Option<Sender<(R, Completer<T>)>>,
    thread: Option<JoinHandle<()>>,
}

impl<R: Send + 'static, T: Send + 'static> TimeoutBatcher<R, T> {
    /// Starts the submitter thread: batches of at most `limit`, closed after `micros` µs
    /// without a new request.
    pub fn new(limit: usize, micros: u32, submit: SubmitFn<R, T>) -> Result<Self> {
        let limit = limit.max(1);
        let (tx, rx) = channel::bounded(limit * 4);
        let gap = Duration::from_micros(u64::from(micros));
        let thread = std::thread::Builder::new()
            .name("prism-read-batcher".into())
            .spawn(move || run(&rx, limit, gap, &*submit))
            .map_err(|e| Error::io("spawn", "prism-read-batcher thread", e))?;
        Ok(TimeoutBatcher {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// Queues `request` and waits for its result.
    pub fn execute(&self, request: R) -> Result<T> {
        let (completer, waiter) = pair();
        if let Some(tx) = &self.tx {
            // A failed send drops the completer, which fails the waiter.
            let _ = tx.send((request, completer));
        }
        waiter.wait()
    }
}

fn run<R, T>(
    rx: &Receiver<(R, Completer<T>)>,
    limit: usize,
    gap: Duration,
    submit: &(dyn Fn(Vec<(R, Completer<T>)>) + Send + Sync),
) {
    while let Ok(first) = rx.recv() {
        let mut batch = Vec::with_capacity(limit);
        batch.push(first);
        while batch.len() < limit {
            match rx.recv_timeout(gap) {
                Ok(r) => batch.push(r),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
            }
        }
        submit(batch);
    }
}

impl<R, T> Drop for TimeoutBatcher<R, T> {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            // NOTE: a panic in `submit` already failed its batch (the completers were
            // dropped); later requests fail because the queue is closed.
            let _ = t.join();
        }
    }
}
