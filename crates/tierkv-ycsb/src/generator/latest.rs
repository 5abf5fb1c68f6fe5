//! YCSB's `SkewedLatestGenerator`: the newest acknowledged insert is the most popular key,
//! and popularity falls off zipfian-like with the distance back from it:
//! `next = last - zipfian(last)`, where `last` is the highest acknowledged ordinal
//! ([`AcknowledgedCounter::last_value`]) read at every draw. Workload D uses it so that
//! reads follow the inserts that run concurrently with them.
//!
//! So the share of draws that land within the `k` newest items is about
//! `H(k, θ) / H(last, θ)`, and it moves with every acknowledged insert.
//!
//! Thread safety: a plain value; clone one per client thread. The counter it reads is
//! shared.
//!
//! [`AcknowledgedCounter::last_value`]: super::counter::AcknowledgedCounter::last_value

use rand::Rng;

use super::zipfian::Zipfian;

/// A draw skewed towards the latest acknowledged insert.
#[derive(Clone, Debug)]
pub struct SkewedLatest {
    zipfian: Zipfian,
}

impl SkewedLatest {
    /// A generator whose zipfian is sized for `last_value` items (YCSB sizes it with the
    /// counter's `lastValue()` at construction).
    pub fn new(last_value: u64) -> Self {
        SkewedLatest {
            zipfian: Zipfian::new(last_value),
        }
    }

    /// The next draw, given the counter's current `last_value`: an ordinal in
    /// `0 ..= last_value`.
    pub fn next_value<R: Rng + ?Sized>(&mut self, last_value: u64, rng: &mut R) -> u64 {
        last_value - self.zipfian.next_long(last_value, rng).min(last_value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generator::zipfian::ZIPFIAN_CONSTANT;
    use crate::generator::zipfian::tests::harmonic;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn most_draws_land_near_the_newest_insert() {
        let seed = 0x5eed_0020;
        println!("seed {seed:#x}");
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let last = 9_999u64;
        let mut g = SkewedLatest::new(last);
        let (samples, k) = (400_000u64, 100u64);
        let mut near = 0u64;
        for _ in 0..samples {
            let v = g.next_value(last, &mut rng);
            assert!(v <= last);
            near += u64::from(last - v < k);
        }
        let measured = near as f64 / samples as f64;
        let expected = harmonic(k, ZIPFIAN_CONSTANT) / harmonic(last, ZIPFIAN_CONSTANT);
        assert!(
            (measured - expected).abs() / expected < 0.03,
            "share within the newest {k}: {measured:.4}, closed form {expected:.4}"
        );
        assert!(measured > 0.5, "most draws are near the newest insert");
    }

    #[test]
    fn the_hot_spot_follows_new_inserts() {
        let mut rng = ChaCha8Rng::seed_from_u64(0x5eed_0021);
        let mut g = SkewedLatest::new(999);
        let mut newest = 0u64;
        let samples = 100_000u64;
        for _ in 0..samples {
            // 500 more keys were acknowledged since construction.
            newest += u64::from(g.next_value(1_499, &mut rng) == 1_499);
        }
        let share = newest as f64 / samples as f64;
        let expected = 1.0 / harmonic(1_499, ZIPFIAN_CONSTANT);
        assert!(
            (share - expected).abs() < 0.01,
            "share of the newest key {share:.4} vs {expected:.4}"
        );
    }
}
