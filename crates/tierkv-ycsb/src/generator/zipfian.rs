//! YCSB's `ZipfianGenerator`: items `base ..= base + items - 1`, item `base` the most
//! popular, P(rank r) ∝ 1 / r^θ with θ = 0.99, drawn with the method of Gray et al.,
//! "Quickly Generating Billion-Record Synthetic Databases" (SIGMOD '94), as YCSB draws it.
//!
//! The draw is exact for the two hottest items and Gray's closed-form approximation for the
//! rest; `zeta(n, θ) = Σ_{i=1..n} 1/i^θ` is summed once at construction (O(n)) and extended
//! incrementally when the item count grows (the "latest" distribution grows it with every
//! acknowledged insert).
//!
//! Deviations from YCSB, both invisible in practice: a draw is clamped to the last item (Gray's
//! formula can round up to `items` when `u` is within 2^-53 of 1), and YCSB's quirk of
//! recomputing `eta` from the *construction-time* item count after growth is kept on purpose
//! so that streams match YCSB's.
//!
//! Thread safety: a plain value; clone one per client thread.

use rand::Rng;

/// YCSB's zipfian constant θ.
pub const ZIPFIAN_CONSTANT: f64 = 0.99;

/// `Σ_{i=st+1..=n} 1/i^θ + initial`: zeta extended from `st` items to `n` (YCSB
/// `zetastatic`).
pub fn zeta(st: u64, n: u64, theta: f64, initial: f64) -> f64 {
    (st..n).fold(initial, |sum, i| sum + 1.0 / ((i + 1) as f64).powf(theta))
}

/// A zipfian draw over a range of integers.
#[derive(Clone, Debug)]
pub struct Zipfian {
    items: u64,
    base: u64,
    theta: f64,
    zeta2theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
    count_for_zeta: u64,
}

impl Zipfian {
    /// Items `0 .. items` with θ = [`ZIPFIAN_CONSTANT`].
    pub fn new(items: u64) -> Self {
        Self::with_range(0, items.saturating_sub(1), ZIPFIAN_CONSTANT)
    }

    /// Items `min ..= max` with constant `theta` (sums zeta over the range: O(max - min)).
    pub fn with_range(min: u64, max: u64, theta: f64) -> Self {
        let items = max - min + 1;
        Self::with_zetan(min, max, theta, zeta(0, items, theta, 0.0))
    }

    /// Items `min ..= max` with a precomputed `zetan` for that item count.
    pub fn with_zetan(min: u64, max: u64, theta: f64, zetan: f64) -> Self {
        let items = max - min + 1;
        let zeta2theta = zeta(0, 2, theta, 0.0);
        Zipfian {
            items,
            base: min,
            theta,
            zeta2theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta: eta(items, theta, zeta2theta, zetan),
            count_for_zeta: items,
        }
    }

    /// The number of items given at construction.
    pub fn items(&self) -> u64 {
        self.items
    }

    /// `zeta(items, θ)` as currently computed.
    pub fn zetan(&self) -> f64 {
        self.zetan
    }

    /// The next draw over the construction-time item count.
    pub fn next_value<R: Rng + ?Sized>(&mut self, rng: &mut R) -> u64 {
        self.next_long(self.items, rng)
    }

    /// The next draw over `item_count` items (YCSB `nextLong(itemcount)`): a larger count
    /// than last time extends zeta incrementally; a smaller one keeps the larger zeta, as
    /// YCSB does when decreases are not allowed.
    pub fn next_long<R: Rng + ?Sized>(&mut self, item_count: u64, rng: &mut R) -> u64 {
        if item_count > self.count_for_zeta {
            self.zetan = zeta(self.count_for_zeta, item_count, self.theta, self.zetan);
            self.count_for_zeta = item_count;
            // NOTE: YCSB recomputes eta from the construction-time `items`, not from
            // `item_count`; kept so that the stream is YCSB's.
            self.eta = eta(self.items, self.theta, self.zeta2theta, self.zetan);
        }
        let u: f64 = rng.random();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return self.base;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return self.base + 1;
        }
        let spread = (item_count as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        self.base + spread.min(item_count.saturating_sub(1))
    }
}

fn eta(items: u64, theta: f64, zeta2theta: f64, zetan: f64) -> f64 {
    (1.0 - (2.0 / items as f64).powf(1.0 - theta)) / (1.0 - zeta2theta / zetan)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    /// The generalized harmonic number H(n, θ) = Σ_{i=1..n} 1/i^θ.
    pub(crate) fn harmonic(n: u64, theta: f64) -> f64 {
        zeta(0, n, theta, 0.0)
    }

    #[test]
    fn hottest_one_percent_gets_the_closed_form_share() {
        let seed = 0x5eed_0001;
        println!("seed {seed:#x}");
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let n = 10_000u64;
        let hot = n / 100;
        let mut z = Zipfian::new(n);
        let samples = 400_000;
        let mut in_hot = 0u64;
        for _ in 0..samples {
            let v = z.next_value(&mut rng);
            assert!(v < n, "draw {v} out of range");
            in_hot += u64::from(v < hot);
        }
        let measured = in_hot as f64 / samples as f64;
        // The ideal zipfian share, H(k, θ) / H(n, θ) (about 0.518 here): Gray's method
        // approximates the tail, and lands within 3% of it.
        let ideal = harmonic(hot, ZIPFIAN_CONSTANT) / harmonic(n, ZIPFIAN_CONSTANT);
        assert!(
            (measured - ideal).abs() / ideal < 0.03,
            "hot share {measured:.4}, ideal closed form {ideal:.4}"
        );
        // Gray's own closed form: X < k exactly when u < 1 - (1 - (k/n)^(1-θ)) / eta.
        let theta = ZIPFIAN_CONSTANT;
        let eta = eta(n, theta, zeta(0, 2, theta, 0.0), harmonic(n, theta));
        let gray = 1.0 - (1.0 - (hot as f64 / n as f64).powf(1.0 - theta)) / eta;
        assert!(
            (measured - gray).abs() < 0.004,
            "hot share {measured:.4}, Gray's closed form {gray:.4}"
        );
    }

    #[test]
    fn the_two_hottest_items_are_drawn_exactly() {
        let seed = 0x5eed_0002;
        println!("seed {seed:#x}");
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let n = 1_000u64;
        let mut z = Zipfian::new(n);
        let samples = 400_000u64;
        let mut counts = [0u64; 2];
        for _ in 0..samples {
            let v = z.next_value(&mut rng);
            if v < 2 {
                counts[v as usize] += 1;
            }
        }
        let h = harmonic(n, ZIPFIAN_CONSTANT);
        for (rank, count) in counts.iter().enumerate() {
            let p = 1.0 / ((rank + 1) as f64).powf(ZIPFIAN_CONSTANT) / h;
            let got = *count as f64 / samples as f64;
            // Binomial standard deviation is under 0.001 here; allow 5 of them.
            assert!((got - p).abs() < 0.005, "rank {rank}: {got:.4} vs {p:.4}");
        }
    }

    #[test]
    fn growing_the_item_count_extends_zeta_incrementally() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut z = Zipfian::new(1_000);
        z.next_long(5_000, &mut rng);
        let fresh = harmonic(5_000, ZIPFIAN_CONSTANT);
        assert!((z.zetan() - fresh).abs() < 1e-9, "{} vs {fresh}", z.zetan());
    }

    #[test]
    fn ranges_start_at_their_minimum() {
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        let mut z = Zipfian::with_range(100, 199, ZIPFIAN_CONSTANT);
        for _ in 0..10_000 {
            let v = z.next_value(&mut rng);
            assert!((100..200).contains(&v), "{v}");
        }
    }
}
