//! The Thread Combining Queue, TCQ (PRISM §5.3, Figure 5): opportunistic combining of the
//! flash reads of concurrent threads into one I/O batch, in the style of the MCS queue lock.
//!
//! # Algorithm
//! A reading thread puts a queue node on its stack holding its request and the
//! [`Completer`] of its result, and enqueues it with an atomic swap on `tail`.
//! - If the previous tail was null the thread is the **leader** (①). Otherwise it links
//!   itself behind the previous tail and is a **follower** (②): it waits until either its
//!   result arrives (its request was coalesced into a batch) or it is made leader.
//! - The leader takes its own request and walks the queue through the `next` links,
//!   taking each follower's request, until it has `limit` requests (the queue depth) or
//!   finds no further follower, and submits the batch (③). Like the holder of an MCS lock
//!   it keeps the queue while it submits (see "Hand-off" below), so threads arriving
//!   during the submission line up for the next batch. Then it *hands off*: if no one
//!   queued behind the last node it took, it resets `tail` to null (CAS); otherwise it
//!   waits for the newcomer's link and
//!   makes that node the next leader, and waits for its own result. A follower may leave
//!   only once the leader has *released* it (after the leader's last look at its node);
//!   completions (④) come from the flash tier's completion thread and wake each thread
//!   through its [`Completer`].
//!
//! So the batch size follows the concurrency: alone, a thread submits a batch of one at
//! once (low latency); with many readers, batches grow up to the queue depth (bandwidth,
//! fewer system calls). Followers park; they never touch the device.
//!
//! # Hand-off
//! A leader that gathered followers keeps the queue while it submits, so the readers that
//! arrive meanwhile form the next, larger batch. A leader's submit function may hand the
//! queue on earlier: the Value Storage reader (`value_storage::reader`) does so for a
//! batch of the leader's own request alone, once it holds a ring and only the system call
//! is left.
//!
//! # Invariants (the SAFETY comments refer to these)
//! 1. A node lives on its owner's stack and is not moved while enqueued. A follower whose
//!    request was taken leaves `execute` only after its result arrived *and* its leader
//!    released it; the leader releases a follower only after its last access to that node
//!    (right after reading its link, or — for the last node taken — after the hand-off,
//!    which reads that link again). A node not taken stays until it is made leader and
//!    leads. Hence every node a leader dereferences is alive.
//! 2. Segments of the queue are owned by exactly one leader: the nodes from a leader's own
//!    node up to the node before its hand-off target. Only that leader takes their
//!    requests, so the `UnsafeCell` holding a request has one writer (the owner, before it
//!    publishes the node with the Release swap/link) and then one reader (the leader, after
//!    an Acquire load of the link).
//! 3. The thread handle of a node is cloned *before* the node is made leader, since the
//!    new leader may run to completion and free its node at once.
//!
//! Thread safety: `Send + Sync`; any number of threads may call `execute` at once.

use std::cell::UnsafeCell;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::thread::Thread;

use tierkv_core::Result;

use super::completion::{Completer, pair};

/// A batch handed to the submit function: each request with the completer of its result.
pub type Batch<R, T> = Vec<(R, Completer<T>)>;

/// A leader's submit-and-reap function: it gets the batch and the hand-off callback (see
/// [`ThreadCombiningQueue::execute_then`]).
pub type LeadFn<'a, R, T> = dyn Fn(Batch<R, T>, &mut dyn FnMut()) + Sync + 'a;

/// What a leader gathered: the batch and the last node taken.
type Gathered<R, T> = (Batch<R, T>, *mut Node<R, T>);

/// Lets a follower whose request was taken leave once its result arrives.
fn release<R, T>(follower: *mut Node<R, T>) {
    // SAFETY: `follower` was taken by the calling leader and is not released yet, so it is
    // alive (invariant 1); after this store the leader never touches it again.
    #[expect(unsafe_code, reason = "leader releases a follower node")]
    unsafe { &*follower }
        .released
        .store(true, Ordering::Release);
}

struct Node<R, T> {
    next: AtomicPtr<Node<R, T>>,
    leader: AtomicBool,
    released: AtomicBool,
    request: UnsafeCell<Option<(R, Completer<T>)>>,
    thread: Thread,
}

/// The queue. `R` is a request, `T` the result a request completes with.
pub struct ThreadCombiningQueue<R, T> {
    tail: AtomicPtr<Node<R, T>>,
    limit: usize,
}

// SAFETY: the queue holds only raw pointers to nodes that are shared between threads
// following invariants 1-2 (requests move from the owner to the leader, across threads, so
// `R` and `T` must be `Send`); the pointers themselves are just addresses.
#[expect(unsafe_code, reason = "the TCQ shares stack nodes between threads")]
unsafe impl<R: Send, T: Send> Send for ThreadCombiningQueue<R, T> {}
// SAFETY: as above; all shared state is reached through atomics or under invariant 2.
#[expect(unsafe_code, reason = "the TCQ shares stack nodes between threads")]
unsafe impl<R: Send, T: Send> Sync for ThreadCombiningQueue<R, T> {}

impl<R: Send, T: Send> ThreadCombiningQueue<R, T> {
    /// An empty queue whose leaders coalesce at most `limit` requests (at least 1).
    pub fn new(limit: usize) -> Self {
        ThreadCombiningQueue {
            tail: AtomicPtr::new(ptr::null_mut()),
            limit: limit.max(1),
        }
    }

    /// The coalescing limit.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Runs `request` through the queue and returns its result. If this thread becomes a
    /// leader, it calls `submit` with the batch it gathered (its own request first);
    /// `submit` must arrange for every completer to be completed (or dropped).
    pub fn execute(&self, request: R, submit: &(dyn Fn(Batch<R, T>) + Sync)) -> Result<T> {
        self.execute_then(request, &|batch, hand_off| {
            submit(batch);
            hand_off();
        })
    }

    /// As [`ThreadCombiningQueue::execute`], for a leader that reaps its own batch:
    /// `submit` gets the batch and a `hand_off` callback, which it must call once the
    /// requests are with the device and before it waits for them, so that the next leader
    /// can submit the next batch meanwhile; it then completes every completer itself.
    /// (Called later or not at all, `hand_off` runs when `submit` returns.)
    pub fn execute_then(&self, request: R, submit: &LeadFn<'_, R, T>) -> Result<T> {
        let (completer, waiter) = pair();
        let node = Node {
            next: AtomicPtr::new(ptr::null_mut()),
            leader: AtomicBool::new(false),
            released: AtomicBool::new(false),
            request: UnsafeCell::new(Some((request, completer))),
            thread: std::thread::current(),
        };
        let me = ptr::from_ref(&node).cast_mut();
        let prev = self.tail.swap(me, Ordering::AcqRel);
        if prev.is_null() {
            node.leader.store(true, Ordering::Relaxed);
        } else {
            // SAFETY: `prev` was the tail, so its owner is still in `execute`: if its
            // request was taken, nothing was linked behind it then, so it is the last node
            // its leader took, and the hand-off waits for this very link before releasing
            // it; if not, it waits to lead (invariant 1).
            #[expect(unsafe_code, reason = "MCS link to the predecessor node")]
            unsafe { &*prev }.next.store(me, Ordering::Release);
        }
        if let Some(r) = waiter.wait_or(|| node.leader.load(Ordering::Acquire)) {
            // Taken by a leader, which may still read this node until it releases it.
            while !node.released.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
            return r;
        }
        // This thread leads: its own request has not been taken (invariant 2).
        let (batch, last) = self.gather(&node);
        let mut handed = false;
        let mut hand_off = || {
            if !handed {
                handed = true;
                self.hand_off(last);
                if !ptr::eq(last, me) {
                    release(last);
                }
            }
        };
        submit(batch, &mut hand_off);
        hand_off();
        waiter.wait()
    }

    /// Takes the requests of up to `limit` nodes from the leader's own node on. Returns
    /// the batch and the last node taken. Every follower but the last is released as soon
    /// as its link has been read (the leader never touches it again); the last one is
    /// released after the hand-off, which reads its link once more.
    fn gather(&self, head: &Node<R, T>) -> Gathered<R, T> {
        let mut batch = Vec::with_capacity(self.limit.min(64));
        let mut cur = ptr::from_ref(head).cast_mut();
        loop {
            // SAFETY: `cur` is the leader's own node or a node reached through an Acquire
            // load of a link, alive by invariant 1 and owned by this leader (invariant 2).
            #[expect(unsafe_code, reason = "leader reads a node of its segment")]
            let node = unsafe { &*cur };
            // SAFETY: invariant 2: this leader is the only reader of the request cell, and
            // the owner's write happened before its Release publication of the node.
            #[expect(unsafe_code, reason = "leader takes a follower's request")]
            if let Some(r) = unsafe { (*node.request.get()).take() } {
                batch.push(r);
            }
            let next = node.next.load(Ordering::Acquire);
            if batch.len() >= self.limit || next.is_null() {
                return (batch, cur);
            }
            if !ptr::eq(cur, head) {
                release(cur);
            }
            cur = next;
        }
    }

    /// Passes the queue on after `last`, the last node taken: resets the tail if no one
    /// queued behind it, else makes the next node leader.
    fn hand_off(&self, last: *mut Node<R, T>) {
        // SAFETY: `last` is the leader's own node or a follower it has not released yet
        // (invariant 1).
        #[expect(unsafe_code, reason = "leader reads the last node of its segment")]
        let node = unsafe { &*last };
        let mut next = node.next.load(Ordering::Acquire);
        if next.is_null() {
            if self
                .tail
                .compare_exchange(last, ptr::null_mut(), Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return;
            }
            // A newcomer swapped itself in behind `last` and is about to link.
            loop {
                next = node.next.load(Ordering::Acquire);
                if !next.is_null() {
                    break;
                }
                std::thread::yield_now();
            }
        }
        // SAFETY: `next` is linked behind this leader's segment and waits to lead, so it
        // is alive (invariant 1).
        #[expect(unsafe_code, reason = "leader signals the next leader")]
        let successor = unsafe { &*next };
        let thread = successor.thread.clone(); // invariant 3
        successor.leader.store(true, Ordering::Release);
        thread.unpark();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Completes every request with its own value times 2, on a separate thread, and
    /// records the batch sizes.
    fn doubling(sizes: &Mutex<Vec<usize>>) -> impl Fn(Batch<u64, u64>) + Sync + '_ {
        move |batch: Batch<u64, u64>| {
            sizes.lock().unwrap().push(batch.len());
            std::thread::spawn(move || {
                for (r, c) in batch {
                    c.complete(Ok(r * 2));
                }
            });
        }
    }

    #[test]
    fn lone_reader_leads_a_batch_of_one() {
        let q = ThreadCombiningQueue::new(64);
        let sizes = Mutex::new(Vec::new());
        assert_eq!(q.execute(21, &doubling(&sizes)).unwrap(), 42);
        assert_eq!(*sizes.lock().unwrap(), vec![1]);
        assert!(q.tail.load(Ordering::Relaxed).is_null());
    }

    #[test]
    fn many_threads_each_get_their_own_result_and_batches_respect_the_limit() {
        for limit in [1, 4, 64] {
            let q = ThreadCombiningQueue::new(limit);
            let sizes = Mutex::new(Vec::new());
            let submit = doubling(&sizes);
            std::thread::scope(|s| {
                for t in 0..32u64 {
                    let (q, submit) = (&q, &submit);
                    s.spawn(move || {
                        for i in 0..200u64 {
                            let r = t * 1_000_000 + i;
                            assert_eq!(q.execute(r, submit).unwrap(), r * 2);
                        }
                    });
                }
            });
            drop(submit);
            let sizes = sizes.into_inner().unwrap();
            assert_eq!(sizes.iter().sum::<usize>(), 32 * 200);
            assert!(
                sizes.iter().all(|&n| (1..=limit).contains(&n)),
                "limit {limit}: {sizes:?}"
            );
            assert!(q.tail.load(Ordering::Relaxed).is_null());
        }
    }

    #[test]
    fn submit_that_drops_the_batch_fails_every_request_without_hanging() {
        let q = ThreadCombiningQueue::<u64, u64>::new(8);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for i in 0..50 {
                        assert!(q.execute(i, &|b| drop(b)).is_err());
                    }
                });
            }
        });
    }

    #[test]
    fn a_submit_that_hands_off_first_frees_the_queue_before_its_batch_completes() {
        let q = ThreadCombiningQueue::<u64, u64>::new(8);
        let early = |b: Batch<u64, u64>, hand_off: &mut dyn FnMut()| {
            hand_off();
            // Handed on: a lone leader's queue is free for the next reader already.
            if b.len() == 1 {
                assert!(q.tail.load(Ordering::Acquire).is_null());
            }
            for (r, c) in b {
                c.complete(Ok(r));
            }
        };
        for i in 0..10 {
            assert_eq!(q.execute_then(i, &early).unwrap(), i);
        }
    }

    #[test]
    fn completions_may_arrive_inside_submit() {
        let q = ThreadCombiningQueue::<u64, u64>::new(8);
        let inline = |b: Batch<u64, u64>| {
            for (r, c) in b {
                c.complete(Ok(r + 1));
            }
        };
        std::thread::scope(|s| {
            for t in 0..16u64 {
                let (q, inline) = (&q, &inline);
                s.spawn(move || {
                    for i in 0..300 {
                        assert_eq!(q.execute(t * 1000 + i, inline).unwrap(), t * 1000 + i + 1);
                    }
                });
            }
        });
    }
}
