//! The background thread of the Scan-aware Value Cache (PRISM §4.4: "a background thread is
//! in charge of managing the cache"): drains the bounded queue in batches, applies each
//! message to the [`TwoQueue`], rebalances (demotion and eviction) once per batch, hands the
//! evictions to the callback and publishes the gauges.
//!
//! Point-read touches also reach it through per-thread-shard buffers (`Shared::touches`),
//! which it empties whenever its queue is empty.
//!
//! Pacing: while messages come, the thread drains the queue, then sleeps for a [`TICK`] so
//! the next ones gather into a batch; senders do not wake it. With every read of a small
//! machine sending a message, a thread woken per message cost a futex wake-up in the
//! reader and two context switches (YCSB-C at 4 threads on 2 cores: 125k context switches
//! a second). After [`IDLE_TICKS`] empty ticks it sleeps until a sender wakes it (or for
//! at most [`IDLE_SLEEP`]), so an idle store does not poll. A full queue, a barrier and
//! `Stop` wake it at once. Lateness costs nothing but a slightly staler 2Q order: admitted
//! values are already reachable through HSIT, and the bounded queue bounds how far the
//! cache can run over its capacity in the meantime.
//!
//! Thread safety: the thread owns the `TwoQueue`; it shares only atomic counters and two
//! small mutexes (list sizes, poison message) with the cache handle. A panic anywhere in a
//! batch (in practice: in the eviction callback) is caught, recorded as the poison message
//! and ends the thread, which drops the queue's receiver so that senders fail fast
//! instead of blocking.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crossbeam::channel::{Receiver, Sender};

use super::lists::TwoQueue;
use super::{CachedValue, EvictFn, ScanChainId, Shared};

/// Messages from the cache handle to its thread.
pub(crate) enum Msg {
    Admit(Arc<CachedValue>),
    /// Point-read touches (a full buffer, or every buffer when the queue was empty).
    Touches(Vec<Arc<CachedValue>>),
    /// One scan's hits.
    TouchInScan(Vec<Arc<CachedValue>>, ScanChainId),
    Remove(Arc<CachedValue>),
    Barrier(Sender<()>),
    Stop,
}

/// Messages applied per batch before the lists are rebalanced.
const BATCH: usize = 256;

/// How long the thread lets messages gather while there is traffic.
pub(crate) const TICK: Duration = Duration::from_micros(500);
/// Empty ticks after which the thread sleeps until woken.
pub(crate) const IDLE_TICKS: u32 = 20;
/// The longest sleep of an idle thread (a safety net; senders wake it).
pub(crate) const IDLE_SLEEP: Duration = Duration::from_millis(100);

pub(crate) fn run(rx: Receiver<Msg>, capacity: u64, evict: EvictFn, shared: Arc<Shared>) {
    let mut q = TwoQueue::new(capacity);
    let mut empty_ticks = 0;
    loop {
        let mut drained = false;
        // The buffered touches are taken once per tick, when the queue is empty, so that a
        // touch seldom overtakes the admission of its value (it would be ignored: a hint
        // lost) and a trickle of touches does not keep the thread from sleeping.
        let mut touches_taken = false;
        let mut next = || {
            rx.try_recv().ok().or_else(|| {
                if touches_taken {
                    return None;
                }
                touches_taken = true;
                shared.take_touches().map(Msg::Touches)
            })
        };
        while let Some(first) = next() {
            drained = true;
            let batch = std::iter::once(first).chain(rx.try_iter().take(BATCH - 1));
            let mut barriers = Vec::new();
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                step(&mut q, batch, &evict, &shared, &mut barriers)
            }));
            if let Err(panic) = &outcome {
                let why = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "panic".to_owned());
                *shared.poisoned.lock() = Some(why);
            }
            // NOTE: barriers are answered only now, so a waiter sees the poison it waited for.
            for b in barriers {
                let _ = b.send(());
            }
            if !matches!(outcome, Ok(true)) {
                return;
            }
        }
        if drained {
            empty_ticks = 0;
        } else {
            empty_ticks += 1;
        }
        if empty_ticks < IDLE_TICKS {
            std::thread::park_timeout(TICK);
            continue;
        }
        shared.asleep.store(true, Ordering::Relaxed);
        // IMPORTANT: pairs with the fence in `ScanAwareValueCache::send` (after its push,
        // before it reads `asleep`): a message pushed before this fence is seen below; one
        // pushed after it finds `asleep` set and unparks this thread.
        std::sync::atomic::fence(Ordering::SeqCst);
        if rx.is_empty() {
            std::thread::park_timeout(IDLE_SLEEP);
        }
        shared.asleep.store(false, Ordering::Relaxed);
        // Back to ticking only if this wake-up brought messages.
        empty_ticks = IDLE_TICKS;
    }
}

/// Applies one batch, collecting its barriers; false when the batch held `Stop`.
fn step(
    q: &mut TwoQueue,
    batch: impl Iterator<Item = Msg>,
    evict: &EvictFn,
    shared: &Shared,
    barriers: &mut Vec<Sender<()>>,
) -> bool {
    let mut keep_going = true;
    for m in batch {
        match m {
            Msg::Admit(v) => q.admit(v),
            Msg::Touches(vs) => {
                for v in vs {
                    // Release the flag first: a touch after this point is buffered again.
                    v.touch_queued
                        .store(false, std::sync::atomic::Ordering::Release);
                    q.access(&v);
                }
            }
            Msg::TouchInScan(vs, c) => {
                for v in vs {
                    q.join_chain(&v, c);
                }
            }
            Msg::Remove(v) => {
                q.remove(&v);
                shared.removals.incr();
            }
            Msg::Barrier(tx) => barriers.push(tx),
            Msg::Stop => keep_going = false,
        }
    }
    for b in q.rebalance() {
        shared.evictions.incr();
        shared.evicted_bytes.add(b.evicted.charge());
        if !b.chain.is_empty() {
            shared.chain_writebacks.incr();
            shared.chain_values.add(b.chain.len() as u64);
        }
        evict(b);
    }
    let sizes = q.sizes();
    shared.bytes.set(sizes.inactive_bytes + sizes.active_bytes);
    shared
        .entries
        .set((sizes.inactive_len + sizes.active_len) as u64);
    *shared.lists.lock() = sizes;
    keep_going
}
