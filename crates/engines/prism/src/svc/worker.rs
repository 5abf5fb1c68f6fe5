//! The background thread of the Scan-aware Value Cache (PRISM §4.4: "a background thread is
//! in charge of managing the cache"): drains the bounded queue in batches, applies each
//! message to the [`TwoQueue`], rebalances (demotion and eviction) once per batch, hands the
//! evictions to the callback and publishes the gauges.
//!
//! Thread safety: the thread owns the `TwoQueue`; it shares only atomic counters and two
//! small mutexes (list sizes, poison message) with the cache handle. A panic anywhere in a
//! batch (in practice: in the eviction callback) is caught, recorded as the poison message
//! and ends the thread, which drops the queue's receiver so that senders fail fast
//! instead of blocking.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use crossbeam::channel::{Receiver, Sender};

use super::lists::TwoQueue;
use super::{CachedValue, EvictFn, ScanChainId, Shared};

/// Messages from the cache handle to its thread.
pub(crate) enum Msg {
    Admit(Arc<CachedValue>),
    Touch(Arc<CachedValue>),
    TouchInScan(Arc<CachedValue>, ScanChainId),
    Remove(Arc<CachedValue>),
    Barrier(Sender<()>),
    Stop,
}

/// Messages applied per batch before the lists are rebalanced.
const BATCH: usize = 256;

pub(crate) fn run(rx: Receiver<Msg>, capacity: u64, evict: EvictFn, shared: Arc<Shared>) {
    let mut q = TwoQueue::new(capacity);
    loop {
        let Ok(first) = rx.recv() else { return };
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
            Msg::Touch(v) => q.access(&v),
            Msg::TouchInScan(v, c) => q.join_chain(&v, c),
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
