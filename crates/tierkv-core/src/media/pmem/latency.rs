//! Emulated persistent-memory latency (DESIGN §4): extra nanoseconds per 64-byte line read
//! through `read`/`read_into` and per `persist`, so that DRAM (or tmpfs) can approximate
//! Optane's slower media. Off by default; a pool with latency off pays one predictable
//! branch per call and nothing else.
//!
//! The delay is a *calibrated spin*: it spins (`spin_loop`, no syscall, no sleep, so sub-
//! microsecond delays are possible) in batches of iterations calibrated once per process
//! to last about [`BATCH_NS`], and reads the monotonic clock between batches until the
//! deadline has passed. So a delay is never shorter than asked, whatever the load (a
//! calibration slowed by preemption only makes batches shorter and clock reads more
//! frequent); it overshoots by at most about one batch plus a clock read, and more when
//! the thread is preempted, as a real slow medium would not be.
//!
//! Every delay is accounted in [`LatencyEmulator::injected_ns`] (exact: what was asked)
//! and [`LatencyEmulator::spins`] (iterations run), so tests can check the emulation
//! without timing assertions.
//!
//! Thread safety: `Send + Sync`; counters are relaxed atomics.

use std::hint::{black_box, spin_loop};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::api::options::EmulatedLatency;
use crate::api::stats::Counter;

/// The intended length of one batch of spins between clock reads.
pub(super) const BATCH_NS: u64 = 100;
/// Iterations per calibration round.
const CALIBRATION_ITERS: u64 = 1 << 14;
/// Rounds; the fastest counts.
const CALIBRATION_ROUNDS: usize = 5;

/// Injects the configured latency and accounts for it.
#[derive(Debug, Default)]
pub(super) struct LatencyEmulator {
    cfg: EmulatedLatency,
    injected_ns: Counter,
    spins: Counter,
}

impl LatencyEmulator {
    pub(super) fn new(cfg: EmulatedLatency) -> Self {
        if cfg.is_on() {
            // Calibrate at open, not inside the first timed operation.
            let _ = spins_per_batch();
        }
        LatencyEmulator {
            cfg,
            ..LatencyEmulator::default()
        }
    }

    pub(super) fn config(&self) -> EmulatedLatency {
        self.cfg
    }

    /// Called after reading `lines` cache lines.
    #[inline]
    pub(super) fn on_read(&self, lines: u64) {
        if self.cfg.read_ns_per_line != 0 {
            self.delay(lines.saturating_mul(u64::from(self.cfg.read_ns_per_line)));
        }
    }

    /// Called once per persist.
    #[inline]
    pub(super) fn on_persist(&self) {
        if self.cfg.persist_ns != 0 {
            self.delay(u64::from(self.cfg.persist_ns));
        }
    }

    /// Total delay asked for so far, in nanoseconds.
    pub(super) fn injected_ns(&self) -> u64 {
        self.injected_ns.get()
    }

    /// Spin iterations run so far.
    pub(super) fn spins(&self) -> u64 {
        self.spins.get()
    }

    #[cold]
    fn delay(&self, ns: u64) {
        self.injected_ns.add(ns);
        let deadline = Instant::now() + Duration::from_nanos(ns);
        let batch = spins_per_batch();
        let mut spins = 0;
        loop {
            spin(batch);
            spins += batch;
            if Instant::now() >= deadline {
                break;
            }
        }
        self.spins.add(spins);
    }
}

/// Lines of 64 bytes that `[off, off + len)` touches.
pub(super) fn lines_touched(off: u64, len: usize) -> u64 {
    if len == 0 {
        return 0;
    }
    let end = off.saturating_add(len as u64);
    end.div_ceil(64) - off / 64
}

fn spin(iters: u64) {
    for _ in 0..black_box(iters) {
        spin_loop();
    }
}

/// Spin iterations lasting about [`BATCH_NS`], measured once (fastest of several rounds).
fn spins_per_batch() -> u64 {
    static BATCH: OnceLock<u64> = OnceLock::new();
    *BATCH.get_or_init(|| {
        let fastest_ns = (0..CALIBRATION_ROUNDS)
            .map(|_| {
                let t = Instant::now();
                spin(CALIBRATION_ITERS);
                t.elapsed().as_nanos().max(1)
            })
            .min()
            .unwrap_or(1);
        let batch = u128::from(CALIBRATION_ITERS) * u128::from(BATCH_NS) / fastest_ns;
        u64::try_from(batch).unwrap_or(u64::MAX).max(1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_injects_nothing() {
        let l = LatencyEmulator::new(EmulatedLatency::default());
        l.on_read(1000);
        l.on_persist();
        assert_eq!((l.injected_ns(), l.spins()), (0, 0));
    }

    #[test]
    fn on_accounts_exactly_and_spins() {
        let l = LatencyEmulator::new(EmulatedLatency {
            read_ns_per_line: 300,
            persist_ns: 2_000,
        });
        l.on_read(10);
        l.on_persist();
        assert_eq!(l.injected_ns(), 10 * 300 + 2_000);
        assert!(l.spins() > 0);
    }

    #[test]
    fn delay_lasts_at_least_about_as_long_as_asked() {
        let l = LatencyEmulator::new(EmulatedLatency {
            read_ns_per_line: 0,
            persist_ns: 2_000_000,
        });
        let t = Instant::now();
        l.on_persist();
        // The spin runs to a deadline on the monotonic clock: never shorter than asked.
        assert!(t.elapsed().as_nanos() >= 2_000_000, "{:?}", t.elapsed());
    }

    #[test]
    fn lines_touched_counts_partial_lines() {
        assert_eq!(lines_touched(0, 0), 0);
        assert_eq!(lines_touched(0, 1), 1);
        assert_eq!(lines_touched(0, 64), 1);
        assert_eq!(lines_touched(63, 2), 2);
        assert_eq!(lines_touched(64, 128), 2);
        assert_eq!(lines_touched(10, 128), 3);
    }
}
