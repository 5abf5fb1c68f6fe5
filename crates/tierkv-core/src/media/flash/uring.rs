//! The io_uring back end, synchronous side: a [`RingPool`] of rings that threads check out
//! for the duration of one batch ([`UringQueue`]) or one transfer ([`RingPool::run_one`]),
//! submitting and reaping their own completions (DESIGN §4; issue 3 item 3, "completions
//! reaped by the caller").
//!
//! Ring choice: a small pool behind locks rather than one ring per thread. A thread prefers
//! "its" ring (chosen round-robin the first time it does I/O), takes any free ring if that
//! one is busy, creates rings lazily up to the pool's size, and blocks only when every ring
//! is in use and it holds no ring itself (a thread that already holds a ring, of any
//! device, never blocks on another: it runs the transfer with pread/pwrite instead, so
//! nested use cannot deadlock). A ring serves any file of its device. Rings are set up with
//! `IORING_SETUP_COOP_TASKRUN` where the kernel has it (5.19+): the thread that submits is
//! the thread that waits, so completions need no inter-processor interrupt.
//!
//! Invariants of a [`Ring`]:
//! 1. every request whose SQE was pushed is owned by a slot (`slots[user_data]`) until its
//!    CQE is processed, so its buffer outlives the kernel's use of it; `in_flight` counts
//!    those slots, and there are `cq_entries` slots, so the completion queue cannot overflow;
//! 2. a ring goes back to the pool only with nothing in flight (a [`UringQueue`] drains on
//!    drop); if draining fails, the ring is marked broken and its slots are leaked, never
//!    freed, and the pool replaces the ring;
//! 3. a one-shot transfer over a borrowed buffer ([`RingPool::run_one`]) returns only after
//!    its CQE arrived. If the kernel refuses to report it (an `io_uring_enter` error other
//!    than EINTR/EAGAIN/EBUSY, which a healthy ring never returns), the process aborts:
//!    returning would let the kernel write into memory the caller may reuse.
//!
//! Thread safety: [`RingPool`] is `Send + Sync`; a checked-out ring ([`RingGuard`]) is
//! `!Send` and used by one thread.

use std::cell::Cell;
use std::collections::VecDeque;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use io_uring::{IoUring, opcode, squeue, types};
use parking_lot::{MappedMutexGuard, Mutex, MutexGuard};

use super::request::{IoCompletion, IoOp, IoRequest, RawOp, Step};
use super::threads;
use crate::api::error::{Error, Result};

/// The user data of a one-shot transfer (slot indices are far smaller).
const ONE_SHOT: u64 = u64::MAX;

/// Queued entries are handed to the kernel as soon as this many are waiting, rather than all
/// at once when the caller submits or waits.
///
/// NOTE: the kernel plugs one `io_uring_enter`'s requests and dispatches them to the device
/// together, after it has prepared the last one. Refilling a queue of 64 in one call left
/// the device idle meanwhile and cost ~18% of 4 KiB random-read IOPS at queue depth 64 on
/// the virtio disk we measured (issue 4); chunks of 8 matched fio, which submits each
/// request as it is queued.
pub(crate) const SUBMIT_BATCH: usize = 8;

/// The SQE for (the remaining part of) `raw`.
pub(crate) fn sqe(raw: &RawOp, user_data: u64) -> squeue::Entry {
    // NOTE: requests are at most MAX_IO_LEN (1 GiB) long (checked at admission).
    let len = u32::try_from(raw.remaining).unwrap_or(u32::MAX);
    let fd = types::Fd(raw.fd);
    let e = match raw.op {
        IoOp::Read => opcode::Read::new(fd, raw.ptr, len)
            .offset(raw.offset)
            .build(),
        IoOp::Write => opcode::Write::new(fd, raw.ptr.cast_const(), len)
            .offset(raw.offset)
            .build(),
    };
    e.user_data(user_data)
}

/// Sets up a ring of `entries` submission entries for one submitting-and-reaping thread.
pub(crate) fn new_uring(entries: u32, coop: bool) -> io::Result<IoUring> {
    if coop {
        match IoUring::builder().setup_coop_taskrun().build(entries) {
            Ok(r) => return Ok(r),
            // Older kernels do not know the flag.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            Err(e) => return Err(e),
        }
    }
    IoUring::new(entries)
}

/// `io_uring_enter`: submits what is queued and waits for `want` completions, retrying
/// the transient failures.
pub(crate) fn enter(uring: &IoUring, want: usize) -> io::Result<()> {
    loop {
        match uring.submit_and_wait(want) {
            Ok(_) => return Ok(()),
            Err(e) => match e.raw_os_error() {
                Some(libc::EINTR) => {}
                Some(libc::EAGAIN | libc::EBUSY) => std::thread::yield_now(),
                _ => return Err(e),
            },
        }
    }
}

/// One request in flight on a ring.
#[derive(Debug)]
struct Slot {
    req: IoRequest,
    raw: RawOp,
}

/// One io_uring instance and the requests it has in flight (see the module invariants).
pub(crate) struct Ring {
    uring: IoUring,
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    in_flight: usize,
    ready: VecDeque<IoCompletion>,
    cqes: Vec<(u64, i32)>,
    broken: bool,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("slots", &self.slots.len())
            .field("in_flight", &self.in_flight)
            .field("broken", &self.broken)
            .finish()
    }
}

impl Ring {
    fn new(entries: u32) -> io::Result<Ring> {
        let uring = new_uring(entries, true)?;
        let n = uring.params().cq_entries() as usize;
        Ok(Ring {
            uring,
            slots: (0..n).map(|_| None).collect(),
            free: (0..n).rev().collect(),
            in_flight: 0,
            ready: VecDeque::new(),
            cqes: Vec::with_capacity(n),
            broken: false,
        })
    }

    /// Queues an SQE, submitting what is queued first if the submission queue is full, and
    /// submits once [`SUBMIT_BATCH`] entries are waiting. `Err` means the entry was not
    /// queued.
    ///
    /// # Safety
    /// The memory the entry points to must stay valid (and, for a read, unaliased) until
    /// its completion has been taken from the completion queue.
    #[expect(unsafe_code, reason = "io_uring submission")]
    unsafe fn push(&mut self, e: &squeue::Entry) -> io::Result<()> {
        loop {
            let mut sq = self.uring.submission();
            // SAFETY: forwarded to our caller (see `# Safety`).
            if unsafe { sq.push(e) }.is_ok() {
                let waiting = sq.len();
                drop(sq);
                if waiting >= SUBMIT_BATCH {
                    // NOTE: the entry is queued either way; if this submit fails, the next
                    // wait submits it again and reports the error.
                    let _ = enter(&self.uring, 0);
                }
                return Ok(());
            }
            drop(sq);
            enter(&self.uring, 0)?;
        }
    }

    /// Moves every available completion into `self.cqes`.
    fn drain_cq(&mut self) {
        let cqes = &mut self.cqes;
        cqes.extend(self.uring.completion().map(|c| (c.user_data(), c.result())));
    }

    /// Submits, waits for `want` completions and processes them.
    fn reap(&mut self, want: usize) -> io::Result<()> {
        enter(&self.uring, want)?;
        self.drain_cq();
        self.process();
        Ok(())
    }

    /// Applies the collected completions to their slots.
    fn process(&mut self) {
        let mut cqes = std::mem::take(&mut self.cqes);
        for &(user_data, res) in &cqes {
            let idx = usize::try_from(user_data).unwrap_or(usize::MAX);
            let Some(slot) = self.slots.get_mut(idx).and_then(Option::as_mut) else {
                continue;
            };
            match slot.raw.advance(i64::from(res)) {
                Step::Done => self.finish(idx, Ok(())),
                Step::Failed(e) => self.finish(idx, Err(e)),
                Step::Again => {
                    let e = sqe(&slot.raw, user_data);
                    // SAFETY: the buffer is owned by slot `idx` until it finishes
                    // (invariant 1).
                    #[expect(unsafe_code, reason = "resubmitting the rest of a short transfer")]
                    let pushed = unsafe { self.push(&e) };
                    if let Err(err) = pushed {
                        self.finish(idx, Err(err));
                    }
                }
            }
        }
        cqes.clear();
        self.cqes = cqes;
    }

    /// Ends the request in slot `idx`.
    fn finish(&mut self, idx: usize, outcome: io::Result<()>) {
        let Some(Slot { req, .. }) = self.slots.get_mut(idx).and_then(Option::take) else {
            return;
        };
        self.free.push(idx);
        self.in_flight -= 1;
        let result = req.file.complete(req.op, req.buf.len(), outcome);
        self.ready.push_back(IoCompletion {
            request: req,
            result,
        });
    }

    /// Runs one transfer over a borrowed buffer to completion (module invariant 3).
    fn run_one(&mut self, raw: &mut RawOp) -> io::Result<()> {
        loop {
            let e = sqe(raw, ONE_SHOT);
            // SAFETY: the caller keeps the buffer alive until we return, and we return
            // only after this entry's completion was taken (or it was never queued).
            #[expect(unsafe_code, reason = "one-shot io_uring transfer")]
            unsafe {
                self.push(&e)?;
            }
            let res = self.wait_one_shot();
            match raw.advance(res) {
                Step::Done => return Ok(()),
                Step::Again => {}
                Step::Failed(e) => return Err(e),
            }
        }
    }

    fn wait_one_shot(&mut self) -> i64 {
        loop {
            if let Some(pos) = self.cqes.iter().position(|c| c.0 == ONE_SHOT) {
                let (_, res) = self.cqes.swap_remove(pos);
                return i64::from(res);
            }
            if let Err(e) = enter(&self.uring, 1) {
                // IMPORTANT: the kernel may still own the caller's buffer (invariant 3).
                eprintln!("tierkv: io_uring_enter failed with a transfer in flight: {e}");
                std::process::abort();
            }
            self.drain_cq();
        }
    }

    /// Waits until nothing is in flight; on failure marks the ring broken (invariant 2).
    fn quiesce(&mut self) {
        while self.in_flight > 0 {
            if self.reap(self.in_flight).is_err() {
                self.broken = true;
                return;
            }
        }
        self.ready.clear();
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        if self.in_flight > 0 {
            // IMPORTANT: the kernel may still write into these buffers: leak them.
            for s in self.slots.drain(..) {
                std::mem::forget(s);
            }
        }
    }
}

/// The index of the ring this thread tries first (threads are spread round-robin).
fn preferred_ring(n: usize) -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static HINT: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    HINT.with(|h| *h) % n
}

thread_local! {
    /// How many rings (of any pool) this thread holds now.
    static RINGS_HELD: Cell<usize> = const { Cell::new(0) };
}

/// A bounded pool of rings (see the module doc).
#[derive(Debug)]
pub(crate) struct RingPool {
    rings: Box<[Mutex<Option<Ring>>]>,
    entries: u32,
}

/// A ring checked out of the pool by the current thread.
pub(crate) struct RingGuard<'a> {
    ring: MappedMutexGuard<'a, Ring>,
}

impl<'a> RingGuard<'a> {
    fn new(ring: MappedMutexGuard<'a, Ring>) -> RingGuard<'a> {
        RINGS_HELD.with(|h| h.set(h.get() + 1));
        RingGuard { ring }
    }
}

impl Drop for RingGuard<'_> {
    fn drop(&mut self) {
        RINGS_HELD.with(|h| h.set(h.get().saturating_sub(1)));
    }
}

impl RingPool {
    /// A pool of up to `size` rings of `entries` entries; sets up the first ring now, so
    /// that a kernel that refuses io_uring is found at open.
    pub(crate) fn new(entries: u32, size: usize) -> io::Result<RingPool> {
        let first = Ring::new(entries)?;
        let size = size.max(1);
        let mut first = Some(first);
        Ok(RingPool {
            rings: (0..size).map(|_| Mutex::new(first.take())).collect(),
            entries,
        })
    }

    /// The default pool size: two rings per CPU, at least 4, at most 64.
    pub(crate) fn default_size() -> usize {
        let cpus = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
        (2 * cpus).clamp(4, 64)
    }

    /// Checks a ring out for the current thread; `None` when every ring is busy and this
    /// thread already holds one (blocking could deadlock), or no ring can be set up.
    pub(crate) fn checkout(&self) -> Option<RingGuard<'_>> {
        let n = self.rings.len();
        let start = preferred_ring(n);
        let order = (0..n).map(|k| (start + k) % n);
        for i in order.clone() {
            if let Some(g) = self.rings[i].try_lock()
                && let Some(r) = self.prepare(g)
            {
                return Some(r);
            }
        }
        if RINGS_HELD.with(Cell::get) > 0 {
            return None;
        }
        order
            .into_iter()
            .find_map(|i| self.prepare(self.rings[i].lock()))
    }

    /// Makes sure the slot holds a usable ring and hands it out.
    fn prepare<'a>(&'a self, mut g: MutexGuard<'a, Option<Ring>>) -> Option<RingGuard<'a>> {
        if g.as_ref().is_some_and(|r| r.broken) {
            *g = None; // Ring::drop leaks what the broken ring had in flight
        }
        if g.is_none() {
            *g = Ring::new(self.entries).ok();
        }
        MutexGuard::try_map(g, Option::as_mut)
            .ok()
            .map(RingGuard::new)
    }

    /// Runs one transfer over a borrowed buffer through a ring (or with pread/pwrite when
    /// no ring can be had without blocking while this thread holds one).
    pub(crate) fn run_one(&self, raw: &mut RawOp) -> io::Result<()> {
        match self.checkout() {
            Some(mut g) => g.ring.run_one(raw),
            None => threads::execute(raw),
        }
    }
}

/// A caller-reaped queue over a checked-out ring: requests are pushed, submitted together,
/// and their completions collected by the same thread.
pub(crate) struct UringQueue<'a> {
    ring: RingGuard<'a>,
    dir: &'a Path,
}

impl<'a> UringQueue<'a> {
    pub(crate) fn new(ring: RingGuard<'a>, dir: &'a Path) -> UringQueue<'a> {
        UringQueue { ring, dir }
    }

    fn enter_error(&self, e: io::Error) -> Error {
        Error::io("io_uring_enter", self.dir, e)
    }

    /// Admits and queues a request; a request that cannot be queued completes with its
    /// error (every request gets exactly one completion).
    pub(crate) fn push(&mut self, mut req: IoRequest) {
        let r = &mut *self.ring.ring;
        if let Err(e) = req.file.admit(req.op, req.offset, req.buf.len()) {
            r.ready.push_back(IoCompletion {
                request: req,
                result: Err(e),
            });
            return;
        }
        let idx = loop {
            if let Some(i) = r.free.pop() {
                break i;
            }
            if let Err(e) = r.reap(1) {
                let result = req.file.complete(req.op, req.buf.len(), Err(e));
                r.ready.push_back(IoCompletion {
                    request: req,
                    result,
                });
                return;
            }
        };
        let raw = req.raw();
        let e = sqe(&raw, idx as u64);
        r.slots[idx] = Some(Slot { req, raw });
        r.in_flight += 1;
        // SAFETY: the buffer is owned by slot `idx` until its completion is processed
        // (invariant 1).
        #[expect(unsafe_code, reason = "io_uring submission of an owned request")]
        let pushed = unsafe { r.push(&e) };
        if let Err(err) = pushed {
            r.finish(idx, Err(err));
        }
    }

    /// Submits everything queued.
    pub(crate) fn submit(&mut self) -> Result<()> {
        enter(&self.ring.ring.uring, 0).map_err(|e| self.enter_error(e))
    }

    /// Submits what is queued and moves completions to `out` until at least `min` were
    /// moved or nothing is left in flight; returns how many were moved. Submitting and
    /// waiting take one `io_uring_enter` together.
    pub(crate) fn wait(&mut self, min: usize, out: &mut Vec<IoCompletion>) -> Result<usize> {
        let mut got = 0;
        loop {
            let r = &mut *self.ring.ring;
            got += r.ready.len();
            out.extend(r.ready.drain(..));
            if got >= min || r.in_flight == 0 {
                if !r.uring.submission().is_empty() {
                    self.submit()?;
                }
                return Ok(got);
            }
            let want = (min - got).min(r.in_flight);
            if let Err(e) = r.reap(want) {
                return Err(self.enter_error(e));
            }
        }
    }

    /// Requests pushed and not yet handed out by `wait`.
    pub(crate) fn outstanding(&self) -> usize {
        self.ring.ring.in_flight + self.ring.ring.ready.len()
    }

    /// How many requests can be in flight at once.
    pub(crate) fn capacity(&self) -> usize {
        self.ring.ring.slots.len()
    }
}

impl Drop for UringQueue<'_> {
    fn drop(&mut self) {
        self.ring.ring.quiesce();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ring of 64 entries, or `None` where the kernel refuses io_uring.
    fn ring() -> Option<Ring> {
        match Ring::new(64) {
            Ok(r) => Some(r),
            Err(e) => {
                eprintln!("io_uring refused here ({e}); nothing to check");
                None
            }
        }
    }

    fn queued(r: &mut Ring) -> usize {
        r.uring.submission().len()
    }

    #[test]
    fn entries_are_handed_to_the_kernel_every_submit_batch() {
        let Some(mut r) = ring() else { return };
        let nop = opcode::Nop::new().build().user_data(ONE_SHOT - 1);
        for i in 1..=SUBMIT_BATCH * 2 + 3 {
            // SAFETY: a no-op references no memory.
            #[expect(unsafe_code, reason = "io_uring no-op in a test")]
            unsafe {
                r.push(&nop).unwrap();
            }
            assert_eq!(queued(&mut r), i % SUBMIT_BATCH, "after {i} pushes");
        }
        enter(&r.uring, SUBMIT_BATCH * 2 + 3).unwrap();
        r.drain_cq();
        assert_eq!(r.cqes.len(), SUBMIT_BATCH * 2 + 3, "every no-op completed");
    }
}
