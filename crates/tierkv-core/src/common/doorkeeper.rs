//! TinyLFU's doorkeeper (Einziger et al., "TinyLFU: A Highly Efficient Cache Admission
//! Policy", 2017), counting: a cache's admission filter. A 4-bit counter per hashed key is
//! raised each time a miss asks for the key; only a key asked for `sightings` times before
//! passes (to be admitted, or to the cache's own admission policy). The counters (8 per
//! entry of the cache) are cleared after as many first sightings as a quarter of them, so
//! "asked for before" means "within the last two cache-fulls of distinct requests".
//!
//! Why: under a skewed load with a long tail (YCSB's scrambled zipfian) most misses are to
//! keys read once in a long while; a cache that admits every miss spends its work filling
//! entries that are evicted unread and pushes out the entries that are read again. The
//! doorkeeper keeps those out at the price of `sightings` extra misses for an entry that is
//! read often. Used by FOCUS's SeaCache (`tierkv-focus` `seacache.rs`), whose paper does
//! not have it. In front of PRISM's SVC it did not help (2026-11-29, YCSB C, 1M records,
//! 4 threads: 61,912 and 59,283 ops/s with one and two sightings against 63,367 without,
//! fewer DRAM hits each): the SVC's 2Q already keeps one-time reads in its inactive list,
//! where SeaCache's idle-time eviction let them push out rows read again.
//!
//! Cost: a sighting is one compare-and-swap on a random word; a key already past costs a
//! load. Approximate by design: a clearing that races a sighting may forget or keep one
//! count; racing raises never carry into a neighbouring counter.
//!
//! Thread safety: atomics only.

use std::sync::atomic::{AtomicU64, Ordering};

/// The counting doorkeeper (module doc).
pub struct Doorkeeper {
    counters: Box<[AtomicU64]>,
    sightings: u64,
    first_sightings: AtomicU64,
}

/// The most sightings a doorkeeper takes (its counters are 4 bits; more would only delay
/// admission past any use).
pub const MAX_SIGHTINGS: u8 = 7;

impl Doorkeeper {
    /// A doorkeeper of about `8 * window` counters (a power of two, at least 2^16) that
    /// passes a key asked for `sightings` (1..=[`MAX_SIGHTINGS`]) times before; `window`
    /// is about the number of entries the cache it guards holds.
    pub fn new(window: u64, sightings: u8) -> Doorkeeper {
        let n = (window.saturating_mul(8))
            .clamp(1 << 16, 1 << 30)
            .next_power_of_two();
        Doorkeeper {
            counters: (0..n / 16).map(|_| AtomicU64::new(0)).collect(),
            sightings: u64::from(sightings.clamp(1, MAX_SIGHTINGS)),
            first_sightings: AtomicU64::new(0),
        }
    }

    /// Counters held.
    pub fn counters(&self) -> u64 {
        self.counters.len() as u64 * 16
    }

    /// True when `hash` was asked for `sightings` times since the last clearing; counts
    /// this sighting when it was not.
    pub fn seen_before(&self, hash: u64) -> bool {
        self.raise(hash, |count| count + 1)
    }

    /// Counts `hash` as asked for `sightings` times (an inserted row: its first read
    /// passes).
    pub fn pass_next(&self, hash: u64) {
        let s = self.sightings;
        self.raise(hash, |_| s);
    }

    /// Raises the counter of `hash` to `to(count)` unless it is at `sightings` already;
    /// returns whether it was.
    fn raise(&self, hash: u64, to: impl Fn(u64) -> u64) -> bool {
        let n = self.counters();
        let c = hash % n;
        let Some(w) = self.counters.get((c / 16) as usize) else {
            return false;
        };
        let shift = (c % 16) * 4;
        let mut cur = w.load(Ordering::Relaxed);
        loop {
            let count = (cur >> shift) & 0xf;
            if count >= self.sightings {
                return true;
            }
            let raised = (cur & !(0xf << shift)) | (to(count).min(0xf) << shift);
            match w.compare_exchange_weak(cur, raised, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) if count > 0 => return false,
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        if self.first_sightings.fetch_add(1, Ordering::Relaxed) + 1 >= n / 4 {
            self.first_sightings.store(0, Ordering::Relaxed);
            for w in &self.counters {
                w.store(0, Ordering::Relaxed);
            }
        }
        false
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.counters.len() as u64 * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn one_sighting_passes_a_key_seen_before_and_forgets_it_after_its_window() {
        let d = Doorkeeper::new(1, 1);
        let n = d.counters();
        assert_eq!(n, 1 << 16);
        assert!(!d.seen_before(7), "first sighting");
        assert!(d.seen_before(7), "second");
        assert!(d.seen_before(7 + n), "the same counter");
        // A quarter of the counters' first sightings clears them.
        for h in 100..100 + n / 4 - 1 {
            assert!(!d.seen_before(h));
        }
        assert!(!d.seen_before(7), "forgotten after the window");
    }

    #[test]
    fn with_two_sightings_a_key_passes_at_its_third_request_and_a_passed_one_at_once() {
        let d = Doorkeeper::new(1, 2);
        assert!(!d.seen_before(7), "first");
        assert!(!d.seen_before(7), "second");
        assert!(d.seen_before(7), "third: asked for twice before");
        assert!(d.seen_before(7), "and after");
        assert!(!d.seen_before(8), "its neighbour counter is its own");
        d.pass_next(9);
        assert!(
            d.seen_before(9),
            "a key marked to pass passes at its first request"
        );
    }

    #[test]
    fn racing_sightings_of_one_key_never_carry_into_its_neighbours() {
        let d = Arc::new(Doorkeeper::new(1, MAX_SIGHTINGS));
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let d = d.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        d.seen_before(16 * 5 + 3);
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().expect("worker");
        }
        assert!(d.seen_before(16 * 5 + 3));
        for c in (16 * 5..16 * 6).filter(|&c| c != 16 * 5 + 3) {
            assert!(!d.seen_before(c), "counter {c} untouched");
        }
    }

    #[test]
    fn sightings_are_clamped_to_the_counters_range() {
        let d = Doorkeeper::new(1, 0);
        assert!(!d.seen_before(1));
        assert!(d.seen_before(1), "0 counts as 1");
        let d = Doorkeeper::new(1, 200);
        for _ in 0..MAX_SIGHTINGS {
            assert!(!d.seen_before(2));
        }
        assert!(d.seen_before(2), "200 counts as MAX_SIGHTINGS");
    }
}
