//! Multi-tiered storage compaction metric (PrismDB §5.2, Eq. 1) and its approximation with
//! buckets and power-of-k choices (§5.3, §6 "MSC metric", Fig. 8).
//!
//! `MSC = benefit / cost`, benefit = Σ coldness over the NVM objects of a key range
//! (coldness = 1 / (clock + 1), untracked = 1), cost = flash I/O per migrated object
//! = `F · (2 − o) / (1 − p) + 1`, with `F` the fanout (flash objects of the range's tables
//! over its NVM objects), `o` the fraction of the table's objects also on NVM, `p` the
//! fraction of popular NVM objects.
//!
//! Buckets: arbitrary byte keys have no integer positions, so a key's position is the
//! number formed by its 8 bytes after the partition's common prefix ([`key_pos`]); a
//! partition's position span is cut into equal buckets, each with counters of NVM keys,
//! popular NVM keys and NVM keys also on flash. A candidate range's statistics are the sum
//! of each overlapped bucket's counters weighted by the overlapped fraction of the bucket
//! ([`weighted_sum`]; Fig. 8: 0.75·400 + 0.25·100 = 325). The bucket edges include the
//! candidates' first keys ([`Buckets::cut_at`]), so a candidate's estimate is a sum of
//! whole buckets.
//!
//! A key counts as popular (§6's `pop_bitmap`) once its clock has been raised from 0 (an
//! access after the one that entered it into the tracker), until the tracker evicts it;
//! approx-MSC's coldness is then 1 per unpopular object, 0 per popular one. The paper sets
//! the bit on gets; counting every tracked key instead (a write enters a key at clock 0,
//! which the mapper never pins) made a freshly loaded range look wholly popular (`p` = 1,
//! score 0 everywhere, so the random fallback chose).
//!
//! Thread safety: pure functions and plain data; the owner synchronizes.

/// A key's position for bucketing: its bytes `skip..skip + 8` as a big-endian fraction.
pub fn key_pos(key: &[u8], skip: usize) -> f64 {
    let mut acc = 0.0f64;
    let mut scale = 1.0f64;
    for i in 0..8 {
        scale /= 256.0;
        acc += f64::from(key.get(skip + i).copied().unwrap_or(0)) * scale;
    }
    acc
}

/// The length of the common prefix of `a` and `b`.
pub fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Statistics of a candidate key range.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RangeStats {
    /// NVM objects in the range (`t_n`).
    pub nvm: f64,
    /// Popular ones among them.
    pub pop: f64,
    /// NVM objects whose key is also on flash.
    pub overlap: f64,
    /// Σ coldness of the NVM objects (benefit).
    pub coldness: f64,
    /// Objects of the range's flash tables (`t_f`).
    pub flash: f64,
}

/// Eq. 1: the MSC score of a range (0 when nothing can move).
pub fn msc(s: &RangeStats) -> f64 {
    if s.nvm <= 0.0 {
        return 0.0;
    }
    let p = (s.pop / s.nvm).clamp(0.0, 1.0);
    if p >= 1.0 {
        return 0.0;
    }
    let o = if s.flash > 0.0 {
        (s.overlap / s.flash).clamp(0.0, 1.0)
    } else {
        0.0
    };
    let fanout = s.flash / s.nvm;
    let cost = fanout * (2.0 - o) / (1.0 - p) + 1.0;
    s.coldness / cost
}

/// Counters of one bucket.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Bucket {
    /// NVM keys.
    pub nvm: f64,
    /// Popular NVM keys.
    pub pop: f64,
    /// NVM keys also on flash.
    pub overlap: f64,
}

/// Buckets over key positions: bucket `i` covers positions `[edges[i], edges[i + 1])` (the
/// last one is closed). Built with about the same number of keys in each
/// ([`Buckets::from_positions`]), since byte keys are not spread evenly over positions.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Buckets {
    /// The keys' common prefix when the buckets were built: a key's position is taken
    /// from the bytes after it; a key below (above) it is at −∞ (+∞).
    pub prefix: Vec<u8>,
    /// `n + 1` ascending edges.
    pub edges: Vec<f64>,
    /// The buckets.
    pub b: Vec<Bucket>,
}

impl Buckets {
    /// `n` empty equal-width buckets over `[lo, hi)`.
    pub fn new(lo: f64, hi: f64, n: usize) -> Buckets {
        let n = n.max(1);
        let hi = if hi > lo { hi } else { lo + 1.0 };
        let edges = (0..=n)
            .map(|i| lo + (hi - lo) * i as f64 / n as f64)
            .collect();
        Buckets {
            prefix: Vec::new(),
            edges,
            b: vec![Bucket::default(); n],
        }
    }

    /// Empty buckets of about `per_bucket` positions each over `sorted` positions (keys
    /// taken after `prefix`).
    pub fn from_positions(prefix: &[u8], sorted: &[f64], per_bucket: usize) -> Buckets {
        let per = per_bucket.max(1);
        let mut edges: Vec<f64> = sorted.iter().step_by(per).copied().collect();
        match (edges.first().copied(), sorted.last().copied()) {
            (Some(_), Some(last)) => edges.push(last),
            _ => edges = vec![0.0, 1.0],
        }
        let n = edges.len() - 1;
        Buckets {
            prefix: prefix.to_vec(),
            edges,
            b: vec![Bucket::default(); n.max(1)],
        }
    }

    /// Adds `cuts` as bucket edges (empty buckets again), so that ranges starting at the
    /// cuts are sums of whole buckets: the candidate ranges are the tables' spans, and a
    /// bucket straddling a table boundary spread its counts over both sides (a nearly
    /// empty range beside a full one was credited with part of its objects).
    pub fn cut_at(&mut self, cuts: impl IntoIterator<Item = f64>) {
        let lo = self.edges.first().copied().unwrap_or(0.0);
        let hi = self.edges.last().copied().unwrap_or(lo);
        self.edges
            .extend(cuts.into_iter().filter(|c| *c > lo && *c < hi));
        self.edges.sort_by(f64::total_cmp);
        self.edges.dedup();
        let n = self.edges.len().saturating_sub(1).max(1);
        self.b = vec![Bucket::default(); n];
    }

    /// The position of `key`: −∞ or +∞ when it sorts below or above every key with the
    /// buckets' prefix. NOTE: the partition's bounds (a candidate's `lo` or `hi`) seldom
    /// share the prefix of its keys; read after the prefix, the bound `user2` of a partition
    /// of keys `user1…` was at 0, so the last candidate range, `[last table, user2)`, was
    /// estimated empty, and it is the one that collects a load's new keys (2M load: 2,737
    /// compactions of ~600 objects against precise-MSC's 139).
    pub fn pos(&self, key: &[u8]) -> f64 {
        let head = key.get(..self.prefix.len()).unwrap_or(key);
        match head.cmp(self.prefix.as_slice()) {
            std::cmp::Ordering::Less => f64::NEG_INFINITY,
            std::cmp::Ordering::Greater => f64::INFINITY,
            std::cmp::Ordering::Equal => key_pos(key, self.prefix.len()),
        }
    }

    /// The bucket of position `pos`.
    pub fn index(&self, pos: f64) -> usize {
        self.edges
            .partition_point(|e| *e <= pos)
            .saturating_sub(1)
            .min(self.b.len().saturating_sub(1))
    }

    /// The bucket of `key`, to update.
    pub fn at(&mut self, key: &[u8]) -> Option<&mut Bucket> {
        let i = self.index(self.pos(key));
        self.b.get_mut(i)
    }

    /// The weighted sums of the bucket counters over positions `[lo, hi)` (Fig. 8).
    pub fn estimate(&self, lo: f64, hi: f64) -> Bucket {
        let spans: Vec<(f64, f64, Bucket)> = self
            .b
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let a = self.edges.get(i).copied().unwrap_or(0.0);
                (a, self.edges.get(i + 1).copied().unwrap_or(a), *b)
            })
            .collect();
        Bucket {
            nvm: weighted_sum(&spans, lo, hi, |b| b.nvm),
            pop: weighted_sum(&spans, lo, hi, |b| b.pop),
            overlap: weighted_sum(&spans, lo, hi, |b| b.overlap),
        }
    }
}

/// Σ over buckets `[a, b)` of `field · |[a, b) ∩ [lo, hi)| / (b − a)`.
pub fn weighted_sum<T>(
    buckets: &[(f64, f64, T)],
    lo: f64,
    hi: f64,
    field: impl Fn(&T) -> f64,
) -> f64 {
    buckets
        .iter()
        .map(|(a, b, x)| {
            let overlap = (hi.min(*b) - lo.max(*a)).max(0.0);
            if *b > *a {
                field(x) * overlap / (b - a)
            } else {
                0.0
            }
        })
        .sum()
}

/// Power-of-k choice: among `k` candidates drawn by `draw` (indexes), the one with the
/// highest score (`None` when there is no candidate or every score is 0).
pub fn power_of_k(
    n: usize,
    k: usize,
    mut draw: impl FnMut(usize) -> usize,
    score: impl Fn(usize) -> f64,
) -> Option<usize> {
    if n == 0 {
        return None;
    }
    let picks: Vec<usize> = if k >= n {
        (0..n).collect()
    } else {
        (0..k).map(|_| draw(n)).collect()
    };
    best(picks.into_iter(), score)
}

/// The index with the highest positive score.
pub fn best(it: impl Iterator<Item = usize>, score: impl Fn(usize) -> f64) -> Option<usize> {
    let mut top: Option<(usize, f64)> = None;
    for i in it {
        let s = score(i);
        if s > 0.0 && top.is_none_or(|(_, t)| s > t) {
            top = Some((i, s));
        }
    }
    top.map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fig8_bucket_arithmetic() {
        // Buckets of 100 keys: [0, 100) with 400 NVM keys, [100, 200) with 100; the candidate
        // range [25, 125) overlaps 75% of the first and 25% of the second.
        let spans = [(0.0, 100.0, 400.0), (100.0, 200.0, 100.0)];
        let est = weighted_sum(&spans, 25.0, 125.0, |x| *x);
        assert!((est - 325.0).abs() < 1e-9, "{est}");
        let mut b = Buckets::new(0.0, 200.0, 2);
        b.b[0].nvm = 400.0;
        b.b[1].nvm = 100.0;
        assert!((b.estimate(25.0, 125.0).nvm - 325.0).abs() < 1e-9);
        assert_eq!(b.index(150.0), 1);
        assert_eq!(b.index(-3.0), 0);
        assert_eq!(b.index(1e9), 1);
    }

    #[test]
    fn buckets_from_positions_hold_equal_key_counts() {
        let pos: Vec<f64> = (0..100)
            .map(|i| {
                if i < 90 {
                    f64::from(i) * 0.001
                } else {
                    0.5 + f64::from(i)
                }
            })
            .collect();
        let b = Buckets::from_positions(b"", &pos, 10);
        assert_eq!(b.b.len(), 10);
        assert_eq!(b.index(0.0), 0);
        assert_eq!(b.index(0.0895), 8);
        assert_eq!(b.index(95.0), 9);
        assert_eq!(Buckets::from_positions(b"", &[], 10).b.len(), 1);
    }

    #[test]
    fn keys_outside_the_prefix_sort_to_the_ends() {
        let mut b = Buckets::from_positions(b"user1", &[0.1, 0.5, 0.9], 1);
        let cut = b.pos(b"user13");
        b.cut_at([cut]);
        assert_eq!(b.pos(b"user2"), f64::INFINITY);
        assert_eq!(b.pos(b"user"), f64::NEG_INFINITY);
        assert_eq!(b.pos(b"user0999"), f64::NEG_INFINITY);
        assert!((b.pos(b"user1") - 0.0).abs() < 1e-12);
        assert!(b.pos(b"user15") > b.pos(b"user1"));
        for x in [0.1, 0.4, 0.9] {
            let i = b.index(x);
            if let Some(c) = b.b.get_mut(i) {
                c.nvm += 1.0;
            }
        }
        // A partition's last range, [first key of its last table, next partition's bound).
        let (lo, hi) = (b.pos(b"user13"), b.pos(b"user2"));
        assert!(
            (b.estimate(lo, hi).nvm - 2.0).abs() < 1e-9,
            "{:?}",
            b.estimate(lo, hi)
        );
        assert!((b.estimate(b.pos(b"user"), hi).nvm - 3.0).abs() < 1e-9);
    }

    #[test]
    fn cuts_make_a_range_between_cuts_a_sum_of_whole_buckets() {
        let pos: Vec<f64> = (0..100).map(f64::from).collect();
        let mut b = Buckets::from_positions(b"", &pos, 10);
        b.cut_at([15.0, 37.5, 500.0, -1.0, 20.0]);
        assert_eq!(b.b.len(), 12, "20 is an edge already: {:?}", b.edges);
        for i in 0..100u32 {
            let j = b.index(f64::from(i));
            if let Some(x) = b.b.get_mut(j) {
                x.nvm += 1.0;
            }
        }
        // [15, 37.5) holds 15..=37: 23 keys, exactly.
        assert!((b.estimate(15.0, 37.5).nvm - 23.0).abs() < 1e-9);
        assert!((b.estimate(0.0, 15.0).nvm - 15.0).abs() < 1e-9);
    }

    #[test]
    fn eq1_prefers_cold_ranges_with_little_flash_to_rewrite() {
        let cold = RangeStats {
            nvm: 100.0,
            pop: 0.0,
            overlap: 0.0,
            coldness: 100.0,
            flash: 100.0,
        };
        // cost = 1 * 2 / 1 + 1 = 3
        assert!((msc(&cold) - 100.0 / 3.0).abs() < 1e-9);
        let hot = RangeStats {
            pop: 50.0,
            coldness: 60.0,
            ..cold
        };
        assert!(msc(&hot) < msc(&cold));
        let overlapping = RangeStats {
            overlap: 100.0,
            ..cold
        };
        assert!(msc(&overlapping) > msc(&cold));
        let wide = RangeStats {
            flash: 1000.0,
            ..cold
        };
        assert!(msc(&wide) < msc(&cold));
        assert_eq!(msc(&RangeStats { pop: 100.0, ..cold }), 0.0);
        assert_eq!(msc(&RangeStats::default()), 0.0);
    }

    #[test]
    fn positions_are_monotone_and_power_of_k_picks_the_best_drawn() {
        assert!(key_pos(b"user1", 4) < key_pos(b"user2", 4));
        assert!(key_pos(b"user19", 4) < key_pos(b"user2", 4));
        assert_eq!(common_prefix(b"user20", b"user30"), 4);
        let scores = [1.0, 5.0, 3.0, 0.0];
        let mut seq = [2usize, 0, 2].into_iter();
        assert_eq!(
            power_of_k(4, 3, |_| seq.next().unwrap_or(0), |i| scores[i]),
            Some(2)
        );
        assert_eq!(power_of_k(4, 8, |_| 0, |i| scores[i]), Some(1));
        assert_eq!(power_of_k(0, 8, |_| 0, |_| 1.0), None);
    }
}
