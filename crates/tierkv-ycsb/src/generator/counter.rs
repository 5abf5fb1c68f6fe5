//! Insert ordinals shared by all client threads: YCSB's `CounterGenerator` (the Load phase's
//! key sequence) and `AcknowledgedCounterGenerator` (the transaction phase's inserts, which
//! "latest" and the key choosers read back).
//!
//! # Invariants of [`AcknowledgedCounter`]
//! 1. [`AcknowledgedCounter::acknowledged`] is `n` only when every ordinal below `n` was
//!    handed out *and* acknowledged: a reader that picks keys below it only picks keys whose
//!    insert has returned (YCSB's "latest" semantics, so reads never race their insert).
//! 2. An ordinal is acknowledged by setting its slot in a window of 2^20 flags; whoever wins
//!    a `try_lock` moves the contiguous run of set flags over to the acknowledged count. A
//!    thread that loses the race leaves its flag for the winner or for the next
//!    acknowledgement, as in YCSB; [`AcknowledgedCounter::settle`] (blocking) moves whatever
//!    is left once the clients have stopped, so the next phase starts from every insert.
//! 3. More than 2^20 ordinals outstanding at once is an error (YCSB throws); with one
//!    outstanding insert per client thread it cannot happen below 2^20 threads.
//!
//! Thread safety: all methods take `&self` and may be called from any thread.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// YCSB's acknowledgement window: 2^20 slots.
pub const ACK_WINDOW: u64 = 1 << 20;
const ACK_MASK: u64 = ACK_WINDOW - 1;

/// A shared counter handing out consecutive ordinals (YCSB `CounterGenerator`).
#[derive(Debug)]
pub struct Counter {
    next: AtomicU64,
}

impl Counter {
    /// A counter whose first ordinal is `start`.
    pub fn new(start: u64) -> Self {
        Counter {
            next: AtomicU64::new(start),
        }
    }

    /// The next ordinal.
    pub fn next_value(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }
}

/// Too many inserts handed out and not yet acknowledged (more than [`ACK_WINDOW`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowFull {
    /// The ordinal whose slot was still taken.
    pub ordinal: u64,
}

impl std::fmt::Display for WindowFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "too many unacknowledged inserts: the slot of ordinal {} is still taken \
             (at most {ACK_WINDOW} may be outstanding)",
            self.ordinal
        )
    }
}

impl std::error::Error for WindowFull {}

/// A counter whose readers see only acknowledged ordinals (YCSB
/// `AcknowledgedCounterGenerator`).
#[derive(Debug)]
pub struct AcknowledgedCounter {
    next: AtomicU64,
    /// Count of contiguous acknowledged ordinals from 0 (YCSB's `limit + 1`).
    acknowledged: AtomicU64,
    window: Box<[AtomicBool]>,
    /// Held while moving flags from the window over to `acknowledged`.
    advance: Mutex<()>,
}

impl AcknowledgedCounter {
    /// A counter whose first ordinal is `start`; ordinals below it count as acknowledged
    /// (they were loaded).
    pub fn new(start: u64) -> Self {
        AcknowledgedCounter {
            next: AtomicU64::new(start),
            acknowledged: AtomicU64::new(start),
            window: (0..ACK_WINDOW).map(|_| AtomicBool::new(false)).collect(),
            advance: Mutex::new(()),
        }
    }

    /// The next ordinal to insert; acknowledge it once its insert has returned.
    pub fn next_value(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// How many ordinals, from 0, are acknowledged: every key below this exists.
    pub fn acknowledged(&self) -> u64 {
        self.acknowledged.load(Ordering::Acquire)
    }

    /// YCSB's `lastValue()`: the highest acknowledged ordinal (0 when none is).
    pub fn last_value(&self) -> u64 {
        self.acknowledged().saturating_sub(1)
    }

    /// Marks `ordinal`'s insert as returned (successfully or not, as YCSB does).
    pub fn acknowledge(&self, ordinal: u64) -> Result<(), WindowFull> {
        let slot = self.slot(ordinal);
        if slot.swap(true, Ordering::AcqRel) {
            return Err(WindowFull { ordinal });
        }
        if let Ok(_guard) = self.advance.try_lock() {
            self.advance_locked();
        }
        Ok(())
    }

    /// Moves every contiguous acknowledged ordinal over, waiting for the lock: call it when
    /// the clients have stopped so that the next phase sees all of their inserts.
    pub fn settle(&self) {
        // A poisoned lock only means a client panicked mid-advance; the flags are still
        // consistent (each is set or cleared atomically), so carry on.
        let _guard = self
            .advance
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.advance_locked();
    }

    fn slot(&self, ordinal: u64) -> &AtomicBool {
        // The window has ACK_WINDOW entries and the mask keeps the index below it (20 bits,
        // so the cast is lossless).
        &self.window[(ordinal & ACK_MASK) as usize]
    }

    /// Caller holds `advance`.
    fn advance_locked(&self) {
        let start = self.acknowledged.load(Ordering::Acquire);
        let mut idx = start;
        while idx - start < ACK_WINDOW {
            let slot = self.slot(idx);
            if !slot.load(Ordering::Acquire) {
                break;
            }
            slot.store(false, Ordering::Release);
            idx += 1;
        }
        self.acknowledged.store(idx, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn counter_hands_out_consecutive_ordinals() {
        let c = Counter::new(5);
        assert_eq!((c.next_value(), c.next_value()), (5, 6));
    }

    #[test]
    fn acknowledged_count_waits_for_the_gap_to_close() {
        let c = AcknowledgedCounter::new(10);
        assert_eq!((c.acknowledged(), c.last_value()), (10, 9));
        let a = c.next_value();
        let b = c.next_value();
        c.acknowledge(b).unwrap();
        assert_eq!(c.acknowledged(), 10, "ordinal {a} is still outstanding");
        c.acknowledge(a).unwrap();
        assert_eq!(c.acknowledged(), 12);
    }

    #[test]
    fn acknowledging_twice_without_advance_reports_a_full_window() {
        let c = AcknowledgedCounter::new(1);
        // Ordinal 2 is acknowledged but cannot advance past the missing 1; ordinal
        // 2 + ACK_WINDOW maps to the same slot.
        c.acknowledge(2).unwrap();
        let e = c.acknowledge(2 + ACK_WINDOW).unwrap_err();
        assert_eq!(e.ordinal, 2 + ACK_WINDOW);
    }

    #[test]
    fn concurrent_inserts_are_all_acknowledged_after_settle() {
        let c = Arc::new(AcknowledgedCounter::new(100));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        let o = c.next_value();
                        assert!(c.acknowledged() <= o, "ordinal {o} seen before its ack");
                        c.acknowledge(o).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        c.settle();
        assert_eq!(c.acknowledged(), 100 + 40_000);
    }
}
