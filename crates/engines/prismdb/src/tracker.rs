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

/// Highest clock value (2 bits).
pub const CLOCK_MAX: u8 = 3;

/// What [`Tracker::touch`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Touch {
    /// True when the key was not tracked before.
    pub inserted: bool,
    /// The key evicted to make room, if any.
    pub evicted: Option<Vec<u8>>,
    /// True when the key was tracked at clock 0 and is now at [`CLOCK_MAX`]: an access
    /// after its first while tracked (approx-MSC's popular bit is set then, `msc.rs`).
    pub raised: bool,
}

/// A clock tracker.
#[derive(Debug, Default)]
pub struct Tracker {
    map: HashMap<Vec<u8>, usize>,
    slots: Vec<(Vec<u8>, u8)>,
    hand: usize,
    capacity: usize,
    hist: [u64; 4],
}

impl Tracker {
    /// An empty tracker of `capacity` keys (at least 1).
    pub fn new(capacity: usize) -> Tracker {
        Tracker {
            capacity: capacity.max(1),
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

    /// Changes the capacity (it follows the partition's key count); shrinking evicts.
    pub fn set_capacity(&mut self, capacity: usize) -> Vec<Vec<u8>> {
        self.capacity = capacity.max(1);
        let mut out = Vec::new();
        while self.slots.len() > self.capacity {
            if let Some(k) = self.evict_one() {
                if let Some(last) = self.slots.pop() {
                    self.remove_slot_of_last(k.clone(), last);
                }
                out.push(k);
            }
        }
        out
    }

    /// Moves the last slot into the hole left by evicted key `gone` (at `self.hand`).
    fn remove_slot_of_last(&mut self, _gone: Vec<u8>, last: (Vec<u8>, u8)) {
        let hole = self.hand;
        if hole < self.slots.len() {
            self.map.insert(last.0.clone(), hole);
            if let Some(s) = self.slots.get_mut(hole) {
                *s = last;
            }
        }
        self.hand = 0;
    }

    /// The clock value of `key`, if tracked.
    pub fn clock(&self, key: &[u8]) -> Option<u8> {
        self.map
            .get(key)
            .and_then(|&i| self.slots.get(i))
            .map(|s| s.1)
    }

    /// Every tracked key with its clock value, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], u8)> {
        self.slots.iter().map(|(k, c)| (k.as_slice(), *c))
    }

    /// The histogram of clock values (index = value).
    pub fn histogram(&self) -> [u64; 4] {
        self.hist
    }

    /// Records an access to `key` (a read or a write).
    pub fn touch(&mut self, key: &[u8]) -> Touch {
        if let Some(&i) = self.map.get(key) {
            if let Some(s) = self.slots.get_mut(i) {
                let raised = s.1 == 0;
                self.hist[usize::from(s.1)] -= 1;
                s.1 = CLOCK_MAX;
                self.hist[usize::from(CLOCK_MAX)] += 1;
                return Touch {
                    raised,
                    ..Touch::default()
                };
            }
            return Touch::default();
        }
        self.hist[0] += 1;
        if self.slots.len() < self.capacity {
            self.map.insert(key.to_vec(), self.slots.len());
            self.slots.push((key.to_vec(), 0));
            return Touch {
                inserted: true,
                ..Touch::default()
            };
        }
        let evicted = self.evict_one();
        let i = self.hand;
        self.map.insert(key.to_vec(), i);
        if let Some(s) = self.slots.get_mut(i) {
            *s = (key.to_vec(), 0);
        }
        self.hand = (i + 1) % self.slots.len().max(1);
        Touch {
            inserted: true,
            evicted,
            raised: false,
        }
    }

    /// Sweeps until the hand rests on a key at 0, evicts it (leaving its slot at the hand).
    fn evict_one(&mut self) -> Option<Vec<u8>> {
        let n = self.slots.len();
        if n == 0 {
            return None;
        }
        for _ in 0..=(n * usize::from(CLOCK_MAX + 1)) {
            self.hand %= n;
            let s = self.slots.get_mut(self.hand)?;
            if s.1 == 0 {
                self.hist[0] -= 1;
                let k = s.0.clone();
                self.map.remove(&k);
                return Some(k);
            }
            self.hist[usize::from(s.1)] -= 1;
            s.1 -= 1;
            self.hist[usize::from(s.1)] += 1;
            self.hand += 1;
        }
        None
    }

    /// DRAM held (keys, map and slots, estimated).
    pub fn dram_bytes(&self) -> usize {
        self.slots.iter().map(|s| 2 * s.0.len() + 64).sum()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

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
        assert_eq!(touch.evicted, Some(b"b".to_vec()));
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
        assert_eq!(evicted.len(), 4);
        assert_eq!(t.len(), 4);
        assert_eq!(t.histogram().iter().sum::<u64>(), 4);
        assert!(t.clock(b"hot").is_some());
    }
}
