//! The pread/pwrite back end ([`crate::IoBackend::Threads`], and the fallback of
//! [`crate::IoBackend::Auto`] where io_uring is refused).
//!
//! - Synchronous I/O ([`execute`], [`ThreadQueue`]) runs on the calling thread: a batch is
//!   executed request by request, in order, when it is submitted.
//! - The asynchronous path ([`WorkerPool`]) hands each request to one of a few named worker
//!   threads (`tierkv:flash-io-N`) fed by a channel; the worker executes it and calls the
//!   request's notifier, as the io_uring completion thread would.
//!
//! Both give every request exactly one completion, with the same checks and errors as the
//! io_uring back end (they share [`super::FlashFile::admit`] and
//! [`super::FlashFile::complete`]), so the same tests pass on both.
//!
//! Thread safety: [`ThreadQueue`] is used by one thread (`&mut`). [`WorkerPool`] is
//! `Send + Sync`; it owns its threads, and dropping it closes the channel, lets the workers
//! finish the queued requests, and joins them.

use std::collections::VecDeque;
use std::io;
use std::thread::JoinHandle;

use crossbeam::channel::{Receiver, Sender};

use super::request::{IoCompletion, IoOp, IoRequest, Notifier, RawOp, Step, deliver};
use crate::api::error::{Error, Result};

/// Executes `op` with pread/pwrite until every byte moved or it fails.
pub(crate) fn execute(op: &mut RawOp) -> io::Result<()> {
    loop {
        let Ok(off) = libc::off_t::try_from(op.offset) else {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        };
        // SAFETY: `op.ptr` points to `op.remaining` bytes that the op's owner keeps alive,
        // and for a read exclusively borrowed, until this call returns (RawOp contract).
        #[expect(unsafe_code, reason = "pread(2)/pwrite(2) into a checked buffer span")]
        let n = unsafe {
            match op.op {
                IoOp::Read => libc::pread(op.fd, op.ptr.cast(), op.remaining, off),
                IoOp::Write => libc::pwrite(op.fd, op.ptr.cast_const().cast(), op.remaining, off),
            }
        };
        let res = if n < 0 {
            -i64::from(
                io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EIO),
            )
        } else {
            i64::try_from(n).unwrap_or(i64::MAX)
        };
        match op.advance(res) {
            Step::Done => return Ok(()),
            Step::Again => {}
            Step::Failed(e) => return Err(e),
        }
    }
}

/// Admits, executes and completes one owned request on this thread.
pub(crate) fn run_request(req: &mut IoRequest) -> Result<()> {
    let len = req.buf.len();
    req.file.admit(req.op, req.offset, len)?;
    let mut raw = req.raw();
    let outcome = execute(&mut raw);
    req.file.complete(req.op, len, outcome)
}

/// A queue whose requests run on the calling thread when submitted.
#[derive(Debug, Default)]
pub(crate) struct ThreadQueue {
    pending: Vec<IoRequest>,
    ready: VecDeque<IoCompletion>,
}

impl ThreadQueue {
    pub(crate) fn push(&mut self, request: IoRequest) {
        self.pending.push(request);
    }

    /// Runs every pending request, in order.
    pub(crate) fn submit(&mut self) {
        for mut request in self.pending.drain(..) {
            let result = run_request(&mut request);
            self.ready.push_back(IoCompletion { request, result });
        }
    }

    /// Submits, then moves every completion to `out`; returns how many.
    pub(crate) fn wait(&mut self, out: &mut Vec<IoCompletion>) -> usize {
        self.submit();
        let n = self.ready.len();
        out.extend(self.ready.drain(..));
        n
    }

    /// Requests pushed and not yet handed out.
    pub(crate) fn outstanding(&self) -> usize {
        self.pending.len() + self.ready.len()
    }
}

/// One request for a worker, with the notifier of its completion.
type Job = (IoRequest, Notifier);

/// Worker threads executing asynchronous requests with pread/pwrite.
#[derive(Debug)]
pub(crate) struct WorkerPool {
    tx: Option<Sender<Job>>,
    workers: Vec<JoinHandle<()>>,
}

impl WorkerPool {
    /// Starts `n` workers.
    pub(crate) fn start(n: usize) -> io::Result<WorkerPool> {
        let (tx, rx) = crossbeam::channel::unbounded::<Job>();
        let mut pool = WorkerPool {
            tx: Some(tx),
            workers: Vec::with_capacity(n),
        };
        for i in 0..n.max(1) {
            let rx: Receiver<Job> = rx.clone();
            let h = std::thread::Builder::new()
                .name(format!("tierkv:flash-io-{i}"))
                .spawn(move || worker(&rx))?;
            pool.workers.push(h);
        }
        Ok(pool)
    }

    /// Queues the requests; never blocks.
    pub(crate) fn submit(&self, requests: Vec<IoRequest>, notifier: &Notifier) -> Result<()> {
        let Some(tx) = &self.tx else {
            return Err(Error::Closed);
        };
        for r in requests {
            tx.send((r, notifier.clone()))
                .map_err(|_| Error::Poisoned("the flash worker threads have stopped".into()))?;
        }
        Ok(())
    }
}

fn worker(rx: &Receiver<Job>) {
    while let Ok((mut request, notifier)) = rx.recv() {
        let result = run_request(&mut request);
        deliver(&notifier, IoCompletion { request, result });
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        drop(self.tx.take());
        let me = std::thread::current().id();
        for h in self.workers.drain(..) {
            if h.thread().id() == me {
                // NOTE: a notifier on this worker dropped the last handle of the device; a
                // thread cannot join itself. It exits on its own: the channel is closed.
                continue;
            }
            // A worker cannot panic (notifier panics are caught in `deliver`); if one did,
            // there is nothing left to clean up here.
            let _ = h.join();
        }
    }
}
