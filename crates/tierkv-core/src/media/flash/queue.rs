//! [`IoQueue`]: a submission/completion queue checked out by one thread, the caller-reaped
//! way to keep many requests in flight (DESIGN §4; the flash microbenchmark keeps its
//! queue depth full with it, as fio does).
//!
//! Push requests, [`IoQueue::submit`] them (or let [`IoQueue::wait`] submit), and collect
//! completions with [`IoQueue::wait`] as they finish, pushing new requests meanwhile. On
//! io_uring the queue holds one ring of the device's pool for its lifetime; on the
//! pread/pwrite back end, requests run on this thread when submitted.
//!
//! Invariants: every pushed request comes back exactly once from `wait` (with its buffer and
//! result), unless the queue is dropped first: then the drop waits for the requests in
//! flight and discards their completions, so no buffer is freed while the kernel uses it.
//!
//! Thread safety: an `IoQueue` is `!Send`: the thread that submits is the one that reaps.

use super::request::{IoCompletion, IoRequest};
use super::threads::ThreadQueue;
use super::uring::UringQueue;
use crate::api::error::Result;

/// A queue of flash requests owned by one thread (see the module doc).
pub struct IoQueue<'d> {
    inner: Inner<'d>,
    depth: usize,
}

enum Inner<'d> {
    Uring(UringQueue<'d>),
    Threads(ThreadQueue),
}

impl std::fmt::Debug for IoQueue<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoQueue")
            .field("uring", &matches!(self.inner, Inner::Uring(_)))
            .field("outstanding", &self.outstanding())
            .finish()
    }
}

impl<'d> IoQueue<'d> {
    pub(crate) fn uring(q: UringQueue<'d>) -> IoQueue<'d> {
        let depth = q.capacity();
        IoQueue {
            inner: Inner::Uring(q),
            depth,
        }
    }

    pub(crate) fn threads(depth: usize) -> IoQueue<'d> {
        IoQueue {
            inner: Inner::Threads(ThreadQueue::default()),
            depth,
        }
    }

    /// Queues a request. A request that fails its checks (alignment, bounds, poison,
    /// injected fault) is not submitted and comes back from `wait` with its error. May reap
    /// completions to make room when the queue is full.
    pub fn push(&mut self, request: IoRequest) {
        match &mut self.inner {
            Inner::Uring(q) => q.push(request),
            Inner::Threads(q) => q.push(request),
        }
    }

    /// Hands every queued request to the kernel.
    pub fn submit(&mut self) -> Result<()> {
        match &mut self.inner {
            Inner::Uring(q) => q.submit(),
            Inner::Threads(q) => {
                q.submit();
                Ok(())
            }
        }
    }

    /// Submits what is queued, then moves completions into `out` until at least `min` were
    /// moved or none is outstanding; returns how many were moved. `wait(0, ..)` collects
    /// what has finished without blocking.
    pub fn wait(&mut self, min: usize, out: &mut Vec<IoCompletion>) -> Result<usize> {
        match &mut self.inner {
            Inner::Uring(q) => q.wait(min, out),
            Inner::Threads(q) => Ok(q.wait(out)),
        }
    }

    /// Requests pushed and not yet returned by `wait`.
    pub fn outstanding(&self) -> usize {
        match &self.inner {
            Inner::Uring(q) => q.outstanding(),
            Inner::Threads(q) => q.outstanding(),
        }
    }

    /// How many requests the queue keeps in flight at most (pushing more first reaps).
    pub fn depth(&self) -> usize {
        self.depth
    }
}
