//! The io_uring back end, asynchronous side: one ring per device, fed by any thread, with a
//! completion thread (`tierkv:flash-reap`) that polls its completion queue and hands each
//! finished request to its [`super::CompletionNotifier`] — the shape PRISM's thread combining
//! needs (PRISM §4.3: a leader submits the reads of the waiting threads in one batch, a
//! completion thread wakes each waiter as its read finishes).
//!
//! Invariants:
//! 1. every request admitted by [`AsyncRing::submit`] gets a slot that owns it (buffer and
//!    notifier) until the completion thread has delivered it; a slot is in `backlog` (not
//!    yet pushed) or counted in `in_flight` (SQE pushed, CQE not yet processed), never both;
//! 2. at most `limit` (the ring's submission entries) requests are in flight, so the
//!    completion queue (twice as large) cannot overflow; the rest wait in `backlog`, and
//!    `submit` never blocks;
//! 3. the submission queue is only touched under the state mutex; the completion queue only
//!    by the completion thread;
//! 4. the completion thread exits only when asked to stop *and* nothing is in flight or
//!    waiting, so no buffer is freed while the kernel may use it; it delivers outside the
//!    mutex, so a notifier may submit more requests.
//!
//! Thread safety: `Send + Sync`. Dropping the [`AsyncRing`] stops and joins the thread
//! after the requests in flight complete and are delivered.

use std::collections::VecDeque;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use io_uring::{IoUring, opcode, squeue};
use parking_lot::Mutex;

use super::request::{IoCompletion, IoRequest, Notifier, RawOp, Step, deliver};
use super::uring::{SUBMIT_BATCH, enter, new_uring, sqe};
use crate::api::error::{Error, Result};

/// The user data of the no-op that wakes the completion thread.
const WAKE: u64 = u64::MAX;

/// One request owned by the asynchronous ring.
struct AsyncSlot {
    req: IoRequest,
    raw: RawOp,
    notifier: Notifier,
}

#[derive(Default)]
struct State {
    slots: Vec<Option<AsyncSlot>>,
    free: Vec<usize>,
    backlog: VecDeque<usize>,
    in_flight: usize,
    /// Requests refused at admission, to be delivered by the completion thread.
    refused: Vec<(IoCompletion, Notifier)>,
}

struct Shared {
    uring: IoUring,
    state: Mutex<State>,
    limit: usize,
    stop: AtomicBool,
}

/// The asynchronous ring of one device and its completion thread.
pub(crate) struct AsyncRing {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// The device's directory, for errors.
    dir: PathBuf,
}

impl std::fmt::Debug for AsyncRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncRing")
            .field("limit", &self.shared.limit)
            .finish()
    }
}

impl State {
    fn insert(&mut self, slot: AsyncSlot) -> usize {
        match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(slot);
                i
            }
            None => {
                self.slots.push(Some(slot));
                self.slots.len() - 1
            }
        }
    }

    fn remove(&mut self, i: usize) -> Option<AsyncSlot> {
        let s = self.slots.get_mut(i)?.take()?;
        self.free.push(i);
        Some(s)
    }
}

impl Shared {
    /// Pushes backlog entries while there is room (invariant 2), plus a wake-up no-op if
    /// asked, submitting every [`SUBMIT_BATCH`] entries and at the end. Called with the
    /// state locked (invariant 3).
    fn pump(&self, st: &mut State, wake: bool) -> io::Result<()> {
        let mut queued = 0;
        while st.in_flight < self.limit {
            let Some(i) = st.backlog.pop_front() else {
                break;
            };
            let Some(slot) = st.slots.get(i).and_then(Option::as_ref) else {
                continue;
            };
            let e = sqe(&slot.raw, i as u64);
            // SAFETY: the buffer is owned by slot `i` until its completion is delivered
            // (invariant 1).
            #[expect(unsafe_code, reason = "io_uring submission of an owned request")]
            let ok = unsafe { self.push_one(&e) };
            if !ok {
                st.backlog.push_front(i);
                enter(&self.uring, 0)?;
                queued = 0;
                continue;
            }
            st.in_flight += 1;
            queued += 1;
            if queued == SUBMIT_BATCH {
                enter(&self.uring, 0)?;
                queued = 0;
            }
        }
        if wake {
            let nop = opcode::Nop::new().build().user_data(WAKE);
            // SAFETY: a no-op references no memory.
            #[expect(unsafe_code, reason = "io_uring no-op")]
            while !unsafe { self.push_one(&nop) } {
                enter(&self.uring, 0)?;
            }
            queued += 1;
        }
        if queued > 0 {
            enter(&self.uring, 0)?;
        }
        Ok(())
    }

    /// Queues one entry; false if the submission queue is full.
    ///
    /// # Safety
    /// As for `SubmissionQueue::push`; and the state mutex must be held (invariant 3).
    #[expect(unsafe_code, reason = "shared submission queue under a mutex")]
    unsafe fn push_one(&self, e: &squeue::Entry) -> bool {
        // SAFETY: invariant 3: the caller holds the state mutex, so no other
        // SubmissionQueue exists; dropping `sq` publishes the entry.
        let mut sq = unsafe { self.uring.submission_shared() };
        // SAFETY: forwarded to our caller.
        unsafe { sq.push(e) }.is_ok()
    }

    /// Applies completions; returns what is ready to deliver.
    fn process(&self, cqes: &[(u64, i32)], done: &mut Vec<(IoCompletion, Notifier)>) {
        let mut st = self.state.lock();
        for &(user_data, res) in cqes {
            if user_data == WAKE {
                continue;
            }
            let i = usize::try_from(user_data).unwrap_or(usize::MAX);
            let Some(slot) = st.slots.get_mut(i).and_then(Option::as_mut) else {
                continue;
            };
            let outcome = match slot.raw.advance(i64::from(res)) {
                Step::Done => Ok(()),
                Step::Failed(e) => Err(e),
                Step::Again => {
                    st.in_flight -= 1;
                    st.backlog.push_front(i);
                    continue;
                }
            };
            st.in_flight -= 1;
            if let Some(AsyncSlot { req, notifier, .. }) = st.remove(i) {
                let result = req.file.complete(req.op, req.buf.len(), outcome);
                done.push((
                    IoCompletion {
                        request: req,
                        result,
                    },
                    notifier,
                ));
            }
        }
        done.append(&mut st.refused);
        // NOTE: a failed submit leaves the entries queued; the next io_uring_enter of this
        // thread (which submits what is queued) or of a submitter retries them.
        let _ = self.pump(&mut st, false);
    }

    fn finished(&self) -> bool {
        let st = self.state.lock();
        self.stop.load(Ordering::Acquire)
            && st.in_flight == 0
            && st.backlog.is_empty()
            && st.refused.is_empty()
    }
}

/// The completion thread.
fn reap_loop(shared: &Shared) {
    let mut cqes = Vec::new();
    let mut done = Vec::new();
    while !shared.finished() {
        if let Err(e) = enter(&shared.uring, 1) {
            // NOTE: in-flight buffers must not be freed, so keep polling; a healthy ring
            // never gets here.
            eprintln!("tierkv: flash completion thread: io_uring_enter failed: {e}");
            std::thread::sleep(Duration::from_millis(10));
        }
        // SAFETY: invariant 3: only this thread uses the completion queue.
        #[expect(unsafe_code, reason = "completion queue owned by this thread")]
        let cq = unsafe { shared.uring.completion_shared() };
        cqes.extend(cq.map(|c| (c.user_data(), c.result())));
        shared.process(&cqes, &mut done);
        cqes.clear();
        for (c, n) in done.drain(..) {
            deliver(&n, c);
        }
    }
}

impl AsyncRing {
    /// Sets up the ring (`entries` deep) and starts its completion thread.
    pub(crate) fn start(entries: u32, dir: &Path) -> io::Result<AsyncRing> {
        // NOTE: no COOP_TASKRUN here: the submitting thread is not the one that waits.
        let uring = new_uring(entries, false)?;
        let limit = uring.params().sq_entries() as usize;
        let shared = Arc::new(Shared {
            uring,
            state: Mutex::new(State::default()),
            limit,
            stop: AtomicBool::new(false),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("tierkv:flash-reap".into())
            .spawn(move || reap_loop(&s))?;
        Ok(AsyncRing {
            shared,
            thread: Some(thread),
            dir: dir.to_owned(),
        })
    }

    /// Admits and queues `requests`; never blocks on I/O. Each request is delivered to
    /// `notifier` exactly once, from the completion thread. `Err` means the kernel refused
    /// the submission for now (the requests stay queued and go with the next submission).
    pub(crate) fn submit(&self, requests: Vec<IoRequest>, notifier: &Notifier) -> Result<()> {
        if self.shared.stop.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        let mut st = self.shared.state.lock();
        for mut req in requests {
            if let Err(e) = req.file.admit(req.op, req.offset, req.buf.len()) {
                let c = IoCompletion {
                    request: req,
                    result: Err(e),
                };
                st.refused.push((c, notifier.clone()));
                continue;
            }
            let raw = req.raw();
            let i = st.insert(AsyncSlot {
                req,
                raw,
                notifier: notifier.clone(),
            });
            st.backlog.push_back(i);
        }
        let wake = !st.refused.is_empty();
        self.shared
            .pump(&mut st, wake)
            .map_err(|e| Error::io("io_uring_enter", &self.dir, e))
    }
}

impl Drop for AsyncRing {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        {
            let mut st = self.shared.state.lock();
            let _ = self.shared.pump(&mut st, true);
        }
        if let Some(t) = self.thread.take() {
            if t.thread().id() == std::thread::current().id() {
                // NOTE: the last handle was dropped by a notifier on the completion thread
                // itself; it cannot join itself. It exits by itself once drained (stop set).
                return;
            }
            let _ = t.join();
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let st = self.state.get_mut();
        if st.in_flight > 0 {
            // IMPORTANT: only reachable if the completion thread died; the kernel may
            // still write into these buffers, so leak them.
            for s in st.slots.drain(..) {
                std::mem::forget(s);
            }
        }
    }
}
