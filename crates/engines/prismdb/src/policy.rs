//! Victim policies: which candidate key range a compaction takes (PrismDB §5.3, Fig. 6).
//!
//! - `approx` (default): power-of-k (k = 8) candidates scored with Eq. 1 from the bucket
//!   estimates ([`crate::msc::Buckets::estimate`]);
//! - `precise`: every candidate scored with Eq. 1 object by object (clock values from the
//!   tracker, pinning probabilities from the mapper, overlap from the tables' filters);
//! - `random`: a random candidate holding fast-tier objects (the paper's strawman);
//! - `unpopular`: the candidate with the most untracked fast-tier objects (what the
//!   authors' scripts mostly ran).
//!
//! A read-triggered compaction that must free room for its promotions chooses the same
//! way (the range whose demotion frees the most at the least cost).
//!
//! Thread safety: called with the partition's state lock held.

use rand::Rng;

use crate::key::{DramKey, range_from};
use crate::msc::{RangeStats, best, msc, power_of_k};
use crate::options::Victim;
use crate::partition::{Partition, State};
use crate::shared::Shared;

/// A candidate compaction key range `[lo, hi)` and the table it overlaps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// First key.
    pub lo: Vec<u8>,
    /// Exclusive end (`None`: the partition's end).
    pub hi: Option<Vec<u8>>,
    /// The overlapping table (index in the table set), if any.
    pub table: Option<usize>,
}

fn in_range<'a>(
    st: &'a State,
    c: &'a Candidate,
) -> impl Iterator<Item = (&'a DramKey, &'a crate::partition::Loc)> + 'a {
    range_from(&st.index, &c.lo)
        .take_while(move |(k, _)| c.hi.as_ref().is_none_or(|h| k.as_slice() < h.as_slice()))
}

fn table_entries(st: &State, c: &Candidate) -> f64 {
    c.table
        .and_then(|j| st.tables.tables.get(j))
        .map_or(0.0, |t| t.footer.entries as f64)
}

/// Eq. 1 computed object by object (precise-MSC).
pub fn precise_stats(part: &Partition, st: &State, c: &Candidate, probs: &[f64; 4]) -> RangeStats {
    let tracker = part.tracker.lock();
    let table = c.table.and_then(|j| st.tables.tables.get(j));
    let mut s = RangeStats {
        flash: table_entries(st, c),
        ..RangeStats::default()
    };
    for (k, _) in in_range(st, c) {
        let clock = tracker.clock(k);
        s.nvm += 1.0;
        s.coldness += 1.0 / (f64::from(clock.unwrap_or(0)) + 1.0);
        s.pop += clock
            .and_then(|v| probs.get(usize::from(v)))
            .copied()
            .unwrap_or(0.0);
        if table.is_some_and(|t| t.may_contain(k)) {
            s.overlap += 1.0;
        }
    }
    s
}

/// Eq. 1 from the buckets (approx-MSC).
pub fn approx_stats(part: &Partition, st: &State, c: &Candidate) -> RangeStats {
    let buckets = part.buckets.lock();
    let lo = buckets.pos(&c.lo);
    let hi = c.hi.as_ref().map_or(f64::INFINITY, |h| buckets.pos(h));
    let e = buckets.estimate(lo, hi);
    drop(buckets);
    RangeStats {
        nvm: e.nvm,
        pop: e.pop,
        overlap: e.overlap,
        coldness: (e.nvm - e.pop).max(0.0),
        flash: table_entries(st, c),
    }
}

/// The candidate a compaction takes, if any.
pub fn choose(
    sh: &Shared,
    part: &Partition,
    st: &State,
    cands: &[Candidate],
    probs: &[f64; 4],
) -> Option<usize> {
    let has_objects = |i: usize| {
        cands
            .get(i)
            .is_some_and(|c| in_range(st, c).next().is_some())
    };
    let mut rng = rand::rng();
    let picked = match sh.opts.victim {
        Victim::Approx => power_of_k(
            cands.len(),
            sh.opts.power_k,
            |n| rng.random_range(0..n),
            |i| {
                cands
                    .get(i)
                    .map_or(0.0, |c| msc(&approx_stats(part, st, c)))
            },
        ),
        Victim::Precise => best(0..cands.len(), |i| {
            cands
                .get(i)
                .map_or(0.0, |c| msc(&precise_stats(part, st, c, probs)))
        }),
        Victim::Random => None,
        Victim::Unpopular => {
            let tracker = part.tracker.lock();
            best(0..cands.len(), |i| {
                cands.get(i).map_or(0.0, |c| {
                    in_range(st, c)
                        .filter(|(k, _)| tracker.clock(k).is_none())
                        .count() as f64
                })
            })
        }
    };
    // Random selection, and the fallback when estimates see nothing to move.
    picked.filter(|&i| has_objects(i)).or_else(|| {
        let with: Vec<usize> = (0..cands.len()).filter(|&i| has_objects(i)).collect();
        if with.is_empty() {
            None
        } else {
            with.get(rng.random_range(0..with.len())).copied()
        }
    })
}
