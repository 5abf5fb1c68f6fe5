//! The bookkeeping of a named-crash-point test (issue 17, item 2; `PmemPool::crash_point`):
//! how often each point was reached and how many crash images cut there were verified,
//! which reach to cut (the first few of each point, then a sample), the failures, and the
//! final assertions — every required point verified often enough, so that a renamed or
//! dead point fails the test, and no point the test does not know of.
//!
//! Test helper: [`PointTally::finish`] panics (failing the test) on what it finds.
//!
//! Thread safety: one mutex; handlers on several engine threads may share a tally.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

/// Per point: (reached, verified).
type Seen = BTreeMap<String, (u64, u64)>;

#[derive(Debug, Default)]
struct Inner {
    seen: Seen,
    skipped: u64,
    failures: Vec<String>,
}

/// Counts of a named-crash-point test (see the module doc).
#[derive(Debug)]
pub struct PointTally {
    first: u64,
    every: u64,
    max: u64,
    inner: Mutex<Inner>,
}

impl PointTally {
    /// Cuts a point until `first` of its images were verified, then one reach in `every`,
    /// and never more than `max` images of it.
    pub fn new(first: u64, every: u64, max: u64) -> Self {
        PointTally {
            first,
            every: every.max(1),
            max,
            inner: Mutex::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Counts a reach of `name`; true when this reach should be cut.
    pub fn reached(&self, name: &str) -> bool {
        let mut t = self.lock();
        let e = t.seen.entry(name.to_owned()).or_default();
        e.0 += 1;
        let (n, verified) = *e;
        (verified < self.first || n.is_multiple_of(self.every)) && verified < self.max
    }

    /// Counts a cut not taken (the test's own reason, say a pool short of room).
    pub fn skipped(&self) {
        self.lock().skipped += 1;
    }

    /// Records the outcome of a cut at `name`: verified, or a failure described by `what`
    /// (where it was cut: the point and the image seed, say) and the error.
    pub fn record<T>(&self, name: &str, outcome: Result<T, String>, what: &str) {
        let mut t = self.lock();
        match outcome {
            Ok(_) => t.seen.entry(name.to_owned()).or_default().1 += 1,
            Err(e) => t.failures.push(format!("crash at {name} ({what}): {e}")),
        }
    }

    /// True when every one of `names` has at least `min` verified images.
    pub fn all_verified(&self, names: &[&str], min: u64) -> bool {
        let t = self.lock();
        names
            .iter()
            .all(|n| t.seen.get(*n).is_some_and(|s| s.1 >= min))
    }

    /// Prints the counts and asserts: no failure; every `required` point verified at
    /// least `min` times; every `reached_only` point reached; no other point reached.
    pub fn finish(&self, required: &[&str], reached_only: &[&str], min: u64) {
        let t = self.lock();
        println!(
            "named points (reached, verified): {:?}; {} cuts skipped",
            t.seen, t.skipped
        );
        assert!(t.failures.is_empty(), "{:#?}", t.failures);
        for name in required {
            let (reached, verified) = t.seen.get(*name).copied().unwrap_or_default();
            assert!(
                verified >= min,
                "{name}: reached {reached}, verified {verified} (< {min}): {:?}",
                t.seen
            );
        }
        for name in reached_only {
            assert!(
                t.seen.contains_key(*name),
                "{name} never reached: {:?}",
                t.seen
            );
        }
        let unknown: Vec<&String> = t
            .seen
            .keys()
            .filter(|k| !required.contains(&k.as_str()) && !reached_only.contains(&k.as_str()))
            .collect();
        assert!(
            unknown.is_empty(),
            "points not listed by the test: {unknown:?}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_reaches_are_cut_then_a_sample_up_to_the_cap() {
        let t = PointTally::new(2, 3, 3);
        let mut cut = Vec::new();
        for i in 1..=12u64 {
            if t.reached("e.w.s") {
                cut.push(i);
                t.record("e.w.s", Ok::<(), String>(()), "test");
            }
        }
        // Reaches 1 and 2 (the first two verified), then 3 (a multiple of 3), then capped.
        assert_eq!(cut, vec![1, 2, 3]);
        assert!(t.all_verified(&["e.w.s"], 3));
        assert!(!t.all_verified(&["e.w.s", "e.w.t"], 1));
        t.finish(&["e.w.s"], &[], 3);
    }

    #[test]
    #[should_panic(expected = "never reached")]
    fn a_dead_point_fails_the_test() {
        let t = PointTally::new(1, 1, 10);
        t.reached("e.w.s");
        t.finish(&[], &["e.w.dead"], 0);
    }

    #[test]
    #[should_panic(expected = "crash at e.w.s")]
    fn a_failed_image_fails_the_test() {
        let t = PointTally::new(1, 1, 10);
        t.reached("e.w.s");
        t.record::<()>("e.w.s", Err("lost a write".into()), "image seed 3");
        t.finish(&["e.w.s"], &[], 0);
    }
}
