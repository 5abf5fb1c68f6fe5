//! Latency histograms (HDR, 3 significant digits, 1 ns to 1 hour) per operation kind, and
//! their summary in microseconds: count, mean, p50, p99, p99.9 (DESIGN §6).
//!
//! Each client thread records into its own [`OpHistograms`]; the runner merges them when the
//! threads have stopped, so recording never contends. Latencies above an hour are clamped
//! to an hour (saturating record) rather than dropped.
//!
//! Thread safety: plain values, owned by one thread at a time.

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::workload::OpKind;

/// The longest latency recorded exactly: one hour, in nanoseconds.
const MAX_LATENCY_NS: u64 = 3_600 * 1_000_000_000;
/// Significant decimal digits kept.
const SIGFIG: u8 = 3;

/// The summary of one histogram, in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct LatencySummary {
    /// Operations recorded.
    pub count: u64,
    /// Mean latency.
    pub mean_us: f64,
    /// Median latency.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
}

/// One latency histogram in nanoseconds.
#[derive(Clone, Debug)]
pub struct LatencyHistogram(Histogram<u64>);

impl LatencyHistogram {
    /// An empty histogram.
    pub fn new() -> Result<Self, String> {
        Histogram::new_with_bounds(1, MAX_LATENCY_NS, SIGFIG)
            .map(LatencyHistogram)
            .map_err(|e| format!("latency histogram: {e}"))
    }

    /// Records one latency.
    #[inline]
    pub fn record_ns(&mut self, ns: u64) {
        self.0.saturating_record(ns.max(1));
    }

    /// Adds every sample of `other`.
    pub fn merge(&mut self, other: &LatencyHistogram) -> Result<(), String> {
        self.0
            .add(&other.0)
            .map_err(|e| format!("merging latency histograms: {e}"))
    }

    /// Samples recorded.
    pub fn count(&self) -> u64 {
        self.0.len()
    }

    /// Count, mean and percentiles in microseconds.
    pub fn summary(&self) -> LatencySummary {
        if self.0.is_empty() {
            return LatencySummary::default();
        }
        let us = |ns: f64| ns / 1_000.0;
        LatencySummary {
            count: self.0.len(),
            mean_us: us(self.0.mean()),
            p50_us: us(self.0.value_at_quantile(0.50) as f64),
            p99_us: us(self.0.value_at_quantile(0.99) as f64),
            p999_us: us(self.0.value_at_quantile(0.999) as f64),
        }
    }
}

/// One histogram per operation kind, plus the counts of failed and not-found operations.
#[derive(Clone, Debug)]
pub struct OpHistograms {
    latencies: Vec<LatencyHistogram>,
    errors: [u64; OpKind::ALL.len()],
    not_found: [u64; OpKind::ALL.len()],
}

impl OpHistograms {
    /// Empty histograms.
    pub fn new() -> Result<Self, String> {
        let latencies = OpKind::ALL
            .iter()
            .map(|_| LatencyHistogram::new())
            .collect::<Result<_, _>>()?;
        Ok(OpHistograms {
            latencies,
            errors: [0; OpKind::ALL.len()],
            not_found: [0; OpKind::ALL.len()],
        })
    }

    /// Records a completed operation.
    #[inline]
    pub fn record(&mut self, kind: OpKind, ns: u64) {
        if let Some(h) = self.latencies.get_mut(kind.index()) {
            h.record_ns(ns);
        }
    }

    /// Counts a failed operation.
    pub fn record_error(&mut self, kind: OpKind) {
        self.errors[kind.index()] += 1;
    }

    /// Counts a read (or the read of a read-modify-write) that found no value.
    pub fn record_not_found(&mut self, kind: OpKind) {
        self.not_found[kind.index()] += 1;
    }

    /// Adds `other` into these.
    pub fn merge(&mut self, other: &OpHistograms) -> Result<(), String> {
        for (mine, theirs) in self.latencies.iter_mut().zip(&other.latencies) {
            mine.merge(theirs)?;
        }
        for i in 0..OpKind::ALL.len() {
            self.errors[i] += other.errors[i];
            self.not_found[i] += other.not_found[i];
        }
        Ok(())
    }

    /// The histogram of `kind`.
    pub fn latency(&self, kind: OpKind) -> Option<&LatencyHistogram> {
        self.latencies.get(kind.index())
    }

    /// Failed operations of `kind`.
    pub fn errors(&self, kind: OpKind) -> u64 {
        self.errors[kind.index()]
    }

    /// Not-found reads of `kind`.
    pub fn not_found(&self, kind: OpKind) -> u64 {
        self.not_found[kind.index()]
    }

    /// Every kind's samples in one histogram (the latency of the workload as a whole).
    pub fn all(&self) -> Result<LatencyHistogram, String> {
        let mut all = LatencyHistogram::new()?;
        for h in &self.latencies {
            all.merge(h)?;
        }
        Ok(all)
    }

    /// Operations completed (successful or not found), all kinds.
    pub fn completed(&self) -> u64 {
        self.latencies.iter().map(LatencyHistogram::count).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_reports_microseconds_at_three_significant_digits() {
        let mut h = LatencyHistogram::new().unwrap();
        for us in 1..=1_000u64 {
            h.record_ns(us * 1_000);
        }
        let s = h.summary();
        assert_eq!(s.count, 1_000);
        assert!((s.mean_us - 500.5).abs() < 1.0, "{s:?}");
        assert!((s.p50_us - 500.0).abs() <= 0.5, "{s:?}");
        assert!((s.p99_us - 990.0).abs() <= 1.0, "{s:?}");
        assert!((s.p999_us - 999.0).abs() <= 1.0, "{s:?}");
    }

    #[test]
    fn empty_histograms_summarize_to_zero() {
        assert_eq!(
            LatencyHistogram::new().unwrap().summary(),
            LatencySummary::default()
        );
    }

    #[test]
    fn merging_adds_samples_errors_and_misses() {
        let mut a = OpHistograms::new().unwrap();
        let mut b = OpHistograms::new().unwrap();
        a.record(OpKind::Read, 1_000);
        b.record(OpKind::Read, 3_000);
        b.record(OpKind::Update, 2_000);
        b.record_error(OpKind::Update);
        b.record_not_found(OpKind::Read);
        a.merge(&b).unwrap();
        assert_eq!(a.latency(OpKind::Read).unwrap().count(), 2);
        assert_eq!(a.errors(OpKind::Update), 1);
        assert_eq!(a.not_found(OpKind::Read), 1);
        assert_eq!(a.completed(), 3);
        assert_eq!(a.all().unwrap().count(), 3);
    }

    #[test]
    fn latencies_beyond_an_hour_are_clamped_not_lost() {
        let mut h = LatencyHistogram::new().unwrap();
        h.record_ns(u64::MAX);
        assert_eq!(h.count(), 1);
    }
}
