//! YCSB's `UniformLongGenerator`: every integer of `lb ..= ub` equally likely. Used for the
//! uniform request distribution (over the loaded records only, as in YCSB: inserts made
//! during a run are not drawn) and for scan lengths (`1 ..= 100` in workload E).
//!
//! Thread safety: a plain `Copy` value; the RNG is the caller's.

use rand::Rng;

/// A uniform draw over an inclusive range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Uniform {
    lb: u64,
    ub: u64,
}

impl Uniform {
    /// Draws over `lb ..= ub`; the bounds are swapped if given in the wrong order.
    pub fn new(lb: u64, ub: u64) -> Self {
        Uniform {
            lb: lb.min(ub),
            ub: lb.max(ub),
        }
    }

    /// The next draw.
    pub fn next_value<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        rng.random_range(self.lb..=self.ub)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn draws_pass_a_chi_square_test_for_uniformity() {
        let seed = 0x5eed_0030;
        println!("seed {seed:#x}");
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let bins = 100u64;
        let g = Uniform::new(0, bins - 1);
        let samples = 200_000u64;
        let mut counts = vec![0u64; bins as usize];
        for _ in 0..samples {
            counts[g.next_value(&mut rng) as usize] += 1;
        }
        let expected = samples as f64 / bins as f64;
        let chi2: f64 = counts
            .iter()
            .map(|&c| (c as f64 - expected).powi(2) / expected)
            .sum();
        // The 99.9th percentile of chi-square with 99 degrees of freedom is 148.23.
        assert!(
            chi2 < 148.23,
            "chi-square {chi2:.1} with 99 degrees of freedom"
        );
        // And it is not suspiciously perfect either (0.1th percentile: 63.04).
        assert!(
            chi2 > 63.04,
            "chi-square {chi2:.1} is too good to be random"
        );
    }

    #[test]
    fn scan_lengths_cover_one_to_a_hundred() {
        let mut rng = ChaCha8Rng::seed_from_u64(31);
        let g = Uniform::new(1, 100);
        let mut seen = [false; 101];
        for _ in 0..20_000 {
            let v = g.next_value(&mut rng);
            assert!((1..=100).contains(&v));
            seen[v as usize] = true;
        }
        assert!(seen[1..].iter().all(|s| *s), "every length 1..=100 drawn");
    }
}
