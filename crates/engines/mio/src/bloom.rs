//! Mergeable Bloom filters (MioDB §4.6): every PMTable of the elastic buffer has a filter
//! of one fixed size, so that the filter of a merged table is the OR of its inputs' filters
//! (no key is re-hashed in a zero-copy compaction). Filters live in DRAM and are rebuilt
//! from the tables at recovery (they are not persisted). The repository has none.
//!
//! Thread safety: a filter is built by one thread, then shared read-only.

/// A Bloom filter of `bits.len() * 64` bits with `k` probes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bloom {
    bits: Vec<u64>,
    k: u32,
}

/// 64-bit FNV-1a, then a finaliser (so short keys spread over all bits).
fn hash(key: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h
}

/// Probe `i` of a key: the word and the bit in it.
fn probe(h: u64, delta: u64, mask: u64, i: u64) -> (usize, u64) {
    let bit = h.wrapping_add(i.wrapping_mul(delta)) & mask;
    ((bit / 64) as usize, 1u64 << (bit % 64))
}

impl Bloom {
    /// An empty filter sized for `keys` keys at `bits_per_key` (the size is a power of two
    /// of at least 512 bits, so every table's filter of one store has the same size).
    pub fn new(keys: u64, bits_per_key: u32) -> Bloom {
        let bits = (keys.saturating_mul(u64::from(bits_per_key)))
            .max(512)
            .next_power_of_two();
        let k = ((f64::from(bits_per_key) * std::f64::consts::LN_2).round() as u32).clamp(1, 30);
        Bloom {
            bits: vec![0; (bits / 64) as usize],
            k,
        }
    }

    /// The key's hash, the step between its probes and the mask of a bit index.
    fn hashes(&self, key: &[u8]) -> (u64, u64, u64) {
        let h = hash(key);
        (h, h.rotate_right(17) | 1, (self.bits.len() as u64 * 64) - 1)
    }

    fn probes(&self, key: &[u8]) -> impl Iterator<Item = (usize, u64)> + '_ {
        let (h, delta, mask) = self.hashes(key);
        (0..u64::from(self.k)).map(move |i| probe(h, delta, mask, i))
    }

    /// Adds a key.
    pub fn insert(&mut self, key: &[u8]) {
        let (h, delta, mask) = self.hashes(key);
        for i in 0..u64::from(self.k) {
            let (w, m) = probe(h, delta, mask, i);
            if let Some(x) = self.bits.get_mut(w) {
                *x |= m;
            }
        }
    }

    /// False only if the key was never inserted.
    pub fn may_contain(&self, key: &[u8]) -> bool {
        self.probes(key)
            .all(|(w, m)| self.bits.get(w).is_some_and(|x| x & m != 0))
    }

    /// The OR of two filters of the same size and probe count (§4.6); `None` otherwise.
    pub fn merged(&self, other: &Bloom) -> Option<Bloom> {
        if self.bits.len() != other.bits.len() || self.k != other.k {
            return None;
        }
        Some(Bloom {
            bits: self
                .bits
                .iter()
                .zip(&other.bits)
                .map(|(a, b)| a | b)
                .collect(),
            k: self.k,
        })
    }

    /// DRAM bytes of the filter.
    pub fn bytes(&self) -> usize {
        self.bits.len() * 8
    }

    /// The bit words (for tests).
    pub fn words(&self) -> &[u64] {
        &self.bits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_false_negatives_and_few_false_positives() {
        let mut b = Bloom::new(1000, 16);
        for i in 0..1000u32 {
            b.insert(format!("key{i}").as_bytes());
        }
        assert!((0..1000u32).all(|i| b.may_contain(format!("key{i}").as_bytes())));
        let fp = (0..10_000u32)
            .filter(|i| b.may_contain(format!("other{i}").as_bytes()))
            .count();
        assert!(fp < 100, "{fp} false positives in 10000");
    }

    #[test]
    fn merged_filter_is_the_or_of_its_inputs() {
        let (mut a, mut b) = (Bloom::new(100, 16), Bloom::new(100, 16));
        for i in 0..100u32 {
            a.insert(format!("a{i}").as_bytes());
            b.insert(format!("b{i}").as_bytes());
        }
        let m = a.merged(&b).unwrap();
        for ((x, y), z) in a.words().iter().zip(b.words()).zip(m.words()) {
            assert_eq!(x | y, *z);
        }
        assert!(
            (0..100u32).all(|i| m.may_contain(format!("a{i}").as_bytes())
                && m.may_contain(format!("b{i}").as_bytes()))
        );
        assert!(a.merged(&Bloom::new(100_000, 16)).is_none());
    }
}
