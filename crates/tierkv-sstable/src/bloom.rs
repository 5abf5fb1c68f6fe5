//! Bloom filter of a flash table (PrismDB §4.1: "a bloom filter for each file on flash to
//! prevent issuing expensive flash I/Os for non-existent objects").
//!
//! `bits_per_key` bits per key, `k = round(bits_per_key * ln 2)` probes by double hashing
//! (Kirsch-Mitzenmacher) of one 64-bit hash. Encoded as `u32 k | bit bytes`.
//!
//! Thread safety: immutable once built.

/// 64-bit FNV-1a of `key`, finished with a multiply-xorshift mix.
pub fn hash64(key: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

/// A built or decoded filter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bloom {
    k: u32,
    bits: Vec<u8>,
}

impl Bloom {
    /// A filter over `hashes` (from [`hash64`]).
    pub fn build(hashes: &[u64], bits_per_key: u32) -> Bloom {
        let nbits = (hashes.len() * bits_per_key as usize).max(64);
        let k = ((f64::from(bits_per_key) * 0.69).round() as u32).clamp(1, 30);
        let mut bloom = Bloom {
            k,
            bits: vec![0; nbits.div_ceil(8)],
        };
        for &h in hashes {
            for bit in bloom.probes(h) {
                if let Some(b) = bloom.bits.get_mut(bit / 8) {
                    *b |= 1 << (bit % 8);
                }
            }
        }
        bloom
    }

    fn probes(&self, h: u64) -> impl Iterator<Item = usize> + use<> {
        let nbits = (self.bits.len() * 8).max(1) as u64;
        let delta = h.rotate_right(17) | 1;
        (0..u64::from(self.k))
            .map(move |i| (h.wrapping_add(i.wrapping_mul(delta)) % nbits) as usize)
    }

    /// False only if the key is certainly absent.
    pub fn may_contain(&self, h: u64) -> bool {
        if self.bits.is_empty() {
            return true;
        }
        self.probes(h).all(|bit| {
            self.bits
                .get(bit / 8)
                .is_some_and(|b| b & (1 << (bit % 8)) != 0)
        })
    }

    /// Encoded bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = self.k.to_le_bytes().to_vec();
        b.extend_from_slice(&self.bits);
        b
    }

    /// Decodes (`None` if malformed).
    pub fn decode(b: &[u8]) -> Option<Bloom> {
        let k = u32::from_le_bytes(b.get(..4)?.try_into().ok()?);
        if !(1..=30).contains(&k) {
            return None;
        }
        Some(Bloom {
            k,
            bits: b.get(4..)?.to_vec(),
        })
    }

    /// DRAM bytes held.
    pub fn dram_bytes(&self) -> usize {
        self.bits.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bloom_has_no_false_negatives_and_few_false_positives() {
        let keys: Vec<u64> = (0..5000u32)
            .map(|i| hash64(format!("key{i}").as_bytes()))
            .collect();
        let b = Bloom::build(&keys, 10);
        assert!(keys.iter().all(|&h| b.may_contain(h)));
        let fp = (0..10_000u32)
            .filter(|i| b.may_contain(hash64(format!("other{i}").as_bytes())))
            .count();
        assert!(fp < 300, "false positive rate {fp}/10000");
        let d = Bloom::decode(&b.encode());
        assert_eq!(d.as_ref(), Some(&b));
    }
}
