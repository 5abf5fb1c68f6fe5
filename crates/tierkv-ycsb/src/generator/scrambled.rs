//! YCSB's `ScrambledZipfianGenerator`: a zipfian draw over [`ITEM_COUNT`] = 10^10 items
//! (θ = 0.99, with YCSB's precomputed [`ZETAN`]), hashed with [`fnvhash64`] and folded onto
//! `min ..= max`. The popular items are scattered over the key space instead of clustered at
//! its start, and the popularity of an item does not change when the key space grows.
//!
//! The hottest `k` items of the key space therefore receive about
//! `H(k, θ) / ZETAN + (1 - H(k, θ) / ZETAN) · k / n` of the draws: the head of the 10^10-item
//! distribution lands on (almost surely) distinct items, and its tail spreads evenly.
//!
//! NOTE: YCSB's current source declares `ITEM_COUNT = 10^16` but keeps the `ZETAN` of 10^10
//! items (26.469...), so its draws use a zeta that does not match its item count. We use
//! 10^10, the item count that constant was computed for (and YCSB's value before the change).
//!
//! Thread safety: a plain value; clone one per client thread.

use rand::Rng;

use super::fnvhash64;
use super::zipfian::{ZIPFIAN_CONSTANT, Zipfian};

/// The size of the underlying zipfian item space.
pub const ITEM_COUNT: u64 = 10_000_000_000;
/// `zeta(ITEM_COUNT + 1, 0.99)`, as YCSB precomputes it.
pub const ZETAN: f64 = 26.469_028_201_783_02;

/// A scrambled zipfian draw over `min ..= max`.
#[derive(Clone, Debug)]
pub struct ScrambledZipfian {
    min: u64,
    item_count: u64,
    zipfian: Zipfian,
}

impl ScrambledZipfian {
    /// Draws over `min ..= max` (requires `min <= max`).
    pub fn new(min: u64, max: u64) -> Self {
        ScrambledZipfian {
            min,
            item_count: max - min + 1,
            zipfian: Zipfian::with_zetan(0, ITEM_COUNT, ZIPFIAN_CONSTANT, ZETAN),
        }
    }

    /// The number of items drawn over.
    pub fn item_count(&self) -> u64 {
        self.item_count
    }

    /// The next draw.
    pub fn next_value<R: Rng + ?Sized>(&mut self, rng: &mut R) -> u64 {
        let r = self.zipfian.next_value(rng);
        self.min + fnvhash64(r) % self.item_count
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generator::zipfian::tests::harmonic;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn precomputed_zetan_is_zeta_of_ten_billion_items() {
        // Euler-Maclaurin: exact sum to 10^5, integral and two correction terms beyond.
        let (n, m, t) = (1e10_f64, 100_000u64, ZIPFIAN_CONSTANT);
        let head = harmonic(m, t);
        let mf = m as f64;
        let f = |x: f64| x.powf(-t);
        let df = |x: f64| -t * x.powf(-t - 1.0);
        let tail = (n.powf(1.0 - t) - mf.powf(1.0 - t)) / (1.0 - t)
            + (f(n) - f(mf)) / 2.0
            + (df(n) - df(mf)) / 12.0;
        let z = head + tail;
        assert!(
            (z - ZETAN).abs() < 1e-6,
            "zeta(1e10) = {z}, ZETAN = {ZETAN}"
        );
    }

    #[test]
    fn hottest_one_percent_gets_the_scrambled_closed_form_share() {
        let seed = 0x5eed_0010;
        println!("seed {seed:#x}");
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (n, k) = (2_000u64, 20usize);
        let mut z = ScrambledZipfian::new(0, n - 1);
        let samples = 400_000;
        let mut counts = vec![0u64; n as usize];
        for _ in 0..samples {
            let v = z.next_value(&mut rng);
            counts[v as usize] += 1;
        }
        counts.sort_unstable_by(|a, b| b.cmp(a));
        let measured = counts[..k].iter().sum::<u64>() as f64 / samples as f64;
        let head = harmonic(k as u64, ZIPFIAN_CONSTANT) / ZETAN;
        let expected = head + (1.0 - head) * k as f64 / n as f64;
        assert!(
            (measured - expected).abs() / expected < 0.05,
            "hot share {measured:.4}, closed form {expected:.4}"
        );
    }

    #[test]
    fn draws_stay_in_range_and_hot_items_are_scattered() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let mut z = ScrambledZipfian::new(1_000, 1_999);
        let mut hottest = std::collections::HashMap::new();
        for _ in 0..100_000 {
            let v = z.next_value(&mut rng);
            assert!((1_000..2_000).contains(&v), "{v}");
            *hottest.entry(v).or_insert(0u32) += 1;
        }
        let mut by_count: Vec<_> = hottest.into_iter().collect();
        by_count.sort_unstable_by_key(|(_, count)| std::cmp::Reverse(*count));
        let top: Vec<u64> = by_count.iter().take(5).map(|(k, _)| *k).collect();
        // Unscrambled, the five hottest would be 1000..1005.
        assert!(
            top.iter().any(|k| *k >= 1_005),
            "hot items clustered: {top:?}"
        );
    }
}
