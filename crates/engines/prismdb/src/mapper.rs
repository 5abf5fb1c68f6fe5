//! The mapper: enforcing the pinning threshold (PrismDB §4.3 "Mapper", "Pinning
//! threshold algorithm").
//!
//! From the histogram of clock values of the tracked keys, [`pin_probabilities`] gives for
//! each clock value the probability that a compaction keeps (pins) an object with that
//! value on the fast tier: the highest values are pinned wholly while they fit under the
//! threshold, the value where the threshold falls is sampled with the fraction that still
//! fits, lower values (and clock 0, and untracked keys) are demoted. The paper's worked
//! example — 10% / 10% / 30% / 50% of keys at 3 / 2 / 1 / 0 and a 15% threshold — gives
//! P(3) = 1, P(2) = 0.5 (`papers_worked_example`).
//!
//! Thread safety: pure functions.

/// Probability of pinning an object per clock value (index = value), for a histogram of
/// tracked keys and a pinning threshold (a fraction of the tracked keys).
pub fn pin_probabilities(hist: [u64; 4], threshold: f64) -> [f64; 4] {
    let total: u64 = hist.iter().sum();
    let mut p = [0.0; 4];
    if total == 0 {
        return p;
    }
    let mut budget = threshold.clamp(0.0, 1.0) * total as f64;
    // NOTE: clock 0 is never pinned: a key at 0 is "cold" (§4.3: "an object with clock value
    // of 1 or 0 ... will be demoted" in the example; the authors' code skips 0 as well).
    for v in (1..4).rev() {
        let n = hist[v] as f64;
        if n == 0.0 {
            continue;
        }
        if budget >= n {
            p[v] = 1.0;
            budget -= n;
        } else {
            p[v] = (budget / n).max(0.0);
            budget = 0.0;
        }
    }
    p
}

/// A key's draw in [0, 1) for [`is_pinned`]: a hash of the key, the same at every
/// compaction. The paper's probabilistic boundary pins a fraction P(v) of the objects at
/// clock value v; a fresh draw per compaction pinned a different sample each time, so a
/// hot key lost the draw sooner or later (with most tracked keys at 3, P(3) < 1 and a
/// range compacted seven times in a run of YCSB-A kept only 0.875^7 = 40% of its hottest
/// keys). With a stable draw the same fraction is pinned, and the same keys.
pub fn pin_draw(key: &[u8]) -> f64 {
    let mut h = crate::table::bloom::hash64(key) ^ 0x9e37_79b9_7f4a_7c15;
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^= h >> 31;
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// Whether an object with clock value `clock` (`None`: untracked) is pinned, given the
/// probabilities and a uniform draw `u` in [0, 1) ([`pin_draw`]).
pub fn is_pinned(probs: &[f64; 4], clock: Option<u8>, u: f64) -> bool {
    clock
        .and_then(|c| probs.get(usize::from(c)))
        .is_some_and(|&p| u < p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn papers_worked_example() {
        // 10% at 3, 10% at 2, 30% at 1, 50% at 0; threshold 15%.
        let p = pin_probabilities([50, 30, 10, 10], 0.15);
        assert!((p[3] - 1.0).abs() < 1e-12, "{p:?}");
        assert!((p[2] - 0.5).abs() < 1e-12, "{p:?}");
        assert_eq!(p[1], 0.0);
        assert_eq!(p[0], 0.0);
    }

    #[test]
    fn pin_draws_are_stable_per_key_and_uniform_over_keys() {
        let keys: Vec<Vec<u8>> = (0..20_000)
            .map(|i| format!("user{i}").into_bytes())
            .collect();
        assert!(keys.iter().all(|k| pin_draw(k) == pin_draw(k)));
        assert!(keys.iter().all(|k| (0.0..1.0).contains(&pin_draw(k))));
        let p = [0.0, 0.0, 0.0, 0.875];
        let pinned = keys
            .iter()
            .filter(|k| is_pinned(&p, Some(3), pin_draw(k)))
            .count();
        let share = pinned as f64 / keys.len() as f64;
        assert!((share - 0.875).abs() < 0.01, "{share}");
    }

    #[test]
    fn threshold_bounds_and_untracked_keys() {
        assert_eq!(pin_probabilities([0, 0, 0, 0], 0.7), [0.0; 4]);
        let all = pin_probabilities([5, 5, 5, 5], 1.0);
        assert_eq!(all, [0.0, 1.0, 1.0, 1.0]);
        let p = pin_probabilities([0, 0, 0, 10], 0.5);
        assert!((p[3] - 0.5).abs() < 1e-12);
        assert!(!is_pinned(&all, None, 0.0));
        assert!(is_pinned(&all, Some(3), 0.99));
        assert!(!is_pinned(&all, Some(0), 0.0));
    }
}
