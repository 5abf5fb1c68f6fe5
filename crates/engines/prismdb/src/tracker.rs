//! The clock popularity tracker (PrismDB §4.3 "Tracker", §6 "Tracker and mapper").
//!
//! A bounded map from key to a 2-bit clock value. A key seen for the first time enters
//! with 0; every later read or write sets it to 3. When the tracker is full, inserting
//! sweeps the clock hand: nonzero values are decremented, the first key found at 0 is
//! evicted and its entry reused. The histogram of clock values (the mapper's input,
//! [`crate::mapper`]) is kept exact with every change.
//!
//! Deviation: the paper uses TBB's concurrent hash map with atomic clock bytes; here each
//! partition has its own tracker behind a mutex (partitions already spread the contention).
//!
//! Thread safety: not synchronized; the owner wraps it in a mutex.

use std::collections::HashMap;

use crate::key::{DramKey, dram_key};

/// Highest clock value (2 bits).
pub const CLOCK_MAX: u8 = 3;

/// What [`Tracker::touch`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Touch {
    /// True when the key was not tracked before.
    pub inserted: bool,
    /// The key evicted to make room, if its clock was raised while it was tracked (a key
    /// never raised was never popular, so its eviction changes no popular flag; approx-MSC,
    /// `msc.rs`). Keys evicted at their first access's 0 are not reported.
    pub evicted: Option<DramKey>,
    /// True when the key was tracked at clock 0 and is now at [`CLOCK_MAX`]: an access
    /// after its first while tracked (approx-MSC's popular bit is set then, `msc.rs`).
    pub raised: bool,
}

/// One tracked key.
#[derive(Debug)]
struct Slot {
    key: DramKey,
    clock: u8,
    /// The clock was raised from 0 since the key entered the tracker.
    raised: bool,
}

/// A clock tracker.
#[derive(Debug, Default)]
pub struct Tracker {
    /// Key -> its slot. A fast seeded hash (foldhash): the tracker is looked up at every
    /// read and write.
    map: HashMap<DramKey, u32, foldhash::fast::RandomState>,
    slots: Vec<Slot>,
    hand: usize,
    capacity: usize,
    hist: [u64; 4],
}

impl Tracker {
    /// An empty tracker of `capacity` keys (at least 1).
    pub fn new(capacity: usize) -> Tracker {
        Tracker {
            capacity: capacity.clamp(1, u32::MAX as usize),
            ..Tracker::default()
        }
    }

    /// Keys tracked.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// True when no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The capacity.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Changes the capacity (it follows the partition's key count); shrinking evicts. Returns
    /// the evicted keys whose clock was raised while tracked (see [`Touch::evicted`]).
    pub fn set_capacity(&mut self, capacity: usize) -> Vec<DramKey> {
        self.capacity = capacity.clamp(1, u32::MAX as usize);
        let mut out = Vec::new();
        while self.slots.len() > self.capacity {
            let Some(gone) = self.evict_one() else {
                break;
            };
            // The hole is at the hand: the last slot moves into it.
            let hole = self.hand;
            if let Some(last) = self.slots.pop()
                && hole < self.slots.len()
            {
                self.map.insert(last.key.clone(), hole as u32);
                if let Some(s) = self.slots.get_mut(hole) {
                    *s = last;
                }
            }
            self.hand = 0;
            if gone.raised {
                out.push(gone.key);
            }
        }
        out
    }

    /// The clock value of `key`, if tracked.
    pub fn clock(&self, key: &[u8]) -> Option<u8> {
        self.map
            .get(key)
            .and_then(|&i| self.slots.get(i as usize))
            .map(|s| s.clock)
    }

    /// Every tracked key with its clock value, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], u8)> {
        self.slots.iter().map(|s| (s.key.as_slice(), s.clock))
    }

    /// The histogram of clock values (index = value).
    pub fn histogram(&self) -> [u64; 4] {
        self.hist
    }

    /// Records an access to `key` (a read or a write).
    pub fn touch(&mut self, key: &[u8]) -> Touch {
        if let Some(&i) = self.map.get(key) {
            if let Some(s) = self.slots.get_mut(i as usize) {
                let raised = s.clock == 0;
                self.hist[usize::from(s.clock)] -= 1;
                s.clock = CLOCK_MAX;
                s.raised |= raised;
                self.hist[usize::from(CLOCK_MAX)] += 1;
                return Touch {
                    raised,
                    ..Touch::default()
                };
            }
            return Touch::default();
        }
        self.hist[0] += 1;
        let key = dram_key(key);
        if self.slots.len() < self.capacity {
            self.map.insert(key.clone(), self.slots.len() as u32);
            self.slots.push(Slot {
                key,
                clock: 0,
                raised: false,
            });
            return Touch {
                inserted: true,
                ..Touch::default()
            };
        }
        let evicted = self.evict_one();
        let i = self.hand;
        self.map.insert(key.clone(), i as u32);
        if let Some(s) = self.slots.get_mut(i) {
            *s = Slot {
                key,
                clock: 0,
                raised: false,
            };
        }
        self.hand = (i + 1) % self.slots.len().max(1);
        Touch {
            inserted: true,
            evicted: evicted.filter(|e| e.raised).map(|e| e.key),
            raised: false,
        }
    }

    /// Sweeps until the hand rests on a key at 0 and evicts it: its map entry goes, its
    /// slot (at the hand) is left for the caller to reuse or remove; returns the key taken
    /// out of the slot and whether it had been raised.
    fn evict_one(&mut self) -> Option<Slot> {
        let n = self.slots.len();
        if n == 0 {
            return None;
        }
        for _ in 0..=(n * usize::from(CLOCK_MAX + 1)) {
            self.hand %= n;
            let s = self.slots.get_mut(self.hand)?;
            if s.clock == 0 {
                self.hist[0] -= 1;
                self.map.remove(s.key.as_slice());
                return Some(Slot {
                    key: std::mem::take(&mut s.key),
                    clock: 0,
                    raised: s.raised,
                });
            }
            self.hist[usize::from(s.clock)] -= 1;
            s.clock -= 1;
            self.hist[usize::from(s.clock)] += 1;
            self.hand += 1;
        }
        None
    }

    /// DRAM held (keys, map and slots, estimated).
    pub fn dram_bytes(&self) -> usize {
        self.slots
            .iter()
            .map(|s| {
                let heap = if s.key.spilled() { s.key.len() } else { 0 };
                2 * (std::mem::size_of::<DramKey>() + heap) + 24
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn the_eviction_of_a_key_raised_while_tracked_is_reported() {
        let mut t = Tracker::new(2);
        t.touch(b"a");
        t.touch(b"a"); // raised: 3
        t.touch(b"b");
        // The sweep takes a down to 0 after b (at 0) is evicted.
        assert_eq!(t.touch(b"c").evicted, None);
        let mut reported = Vec::new();
        for k in [b"d", b"e", b"f", b"g"] {
            reported.extend(t.touch(k).evicted);
        }
        assert_eq!(reported, vec![dram_key(b"a")], "a's clock had been raised");
        assert_eq!(t.histogram().iter().sum::<u64>(), 2);
        // Shrinking: f (never raised) goes unreported, g (raised) moves into its slot; then
        // g goes, reported.
        t.touch(b"g");
        assert!(t.set_capacity(1).is_empty());
        assert_eq!((t.len(), t.clock(b"g")), (1, Some(3)));
        assert_eq!(t.touch(b"h").evicted, Some(dram_key(b"g")));
        assert_eq!(t.clock(b"g"), None);
        assert_eq!(t.histogram().iter().sum::<u64>(), 1);
    }

    #[test]
    fn clock_values_follow_the_papers_rules() {
        let mut t = Tracker::new(3);
        let first = t.touch(b"a");
        assert!(first.inserted && !first.raised);
        assert_eq!(t.clock(b"a"), Some(0));
        assert!(t.touch(b"a").raised);
        assert_eq!(t.clock(b"a"), Some(3));
        assert!(!t.touch(b"a").raised, "already at 3");
        t.touch(b"b");
        t.touch(b"c");
        assert_eq!(t.histogram(), [2, 0, 0, 1]);
        // Full: inserting sweeps; b (0) is evicted before a (3) reaches 0.
        let touch = t.touch(b"d");
        assert!(touch.inserted);
        assert_eq!(
            touch.evicted, None,
            "b was never raised: no popular flag to clear"
        );
        assert_eq!(t.len(), 3);
        assert_eq!(t.clock(b"b"), None);
        assert_eq!(t.histogram().iter().sum::<u64>(), 3);
    }

    #[test]
    fn a_hot_key_survives_a_scan_of_cold_ones_longer_than_one_sweep() {
        let mut t = Tracker::new(8);
        t.touch(b"hot");
        for i in 0..20u32 {
            t.touch(b"hot");
            t.touch(format!("cold{i}").as_bytes());
        }
        assert_eq!(t.clock(b"hot"), Some(3));
        assert_eq!(t.len(), 8);
        let h = t.histogram();
        assert_eq!(h.iter().sum::<u64>(), 8);
        let evicted = t.set_capacity(4);
        assert!(
            evicted.is_empty(),
            "cold keys never raised are not reported"
        );
        assert_eq!(t.len(), 4);
        assert_eq!(t.histogram().iter().sum::<u64>(), 4);
        assert!(t.clock(b"hot").is_some());
    }
}
