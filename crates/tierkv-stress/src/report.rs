//! The run report: counters accumulated over the rounds of a run, the violations and other
//! failures, and the one-line verdict printed at the end (issue 5, item 4).
//!
//! Failures come in two kinds: [`Violation`]s (a key holds what it must not: named with its
//! expected and found value) and other failures (a store that cannot be reopened, an engine
//! error under a workload that injected none, a child that died on its own). Either makes
//! the verdict FAIL.
//!
//! Thread safety: plain data, owned by the mode's thread.

use std::fmt::Write as _;
use std::time::Duration;

use crate::verify::{VerifyOutcome, Violation};
use crate::workload::OpCounts;

/// The most violations a report keeps (the first ones explain the rest).
pub const MAX_KEPT_VIOLATIONS: usize = 50;

/// What space mode counted (all zero in the other modes).
#[derive(Clone, Debug, Default)]
pub struct SpaceCounters {
    /// The capacity the fills are measured against (pmem plus flash, where used), bytes.
    pub capacity: u64,
    /// Fills that ended with refused writes.
    pub fills: u64,
    /// Writes refused with `NoSpace` (fills, refills before they fit, children).
    pub refused: u64,
    /// Live bytes (keys and values) at the end of each fill, as shares of the capacity.
    pub full_shares: Vec<f64>,
    /// Deletes on full stores (every one must succeed).
    pub deletes: u64,
    /// New keys written after the deletes.
    pub refill_puts: u64,
    /// Of those, puts that were refused at least once before they fit.
    pub refill_retried: u64,
    /// The longest a new key waited for space after the deletes.
    pub gc_wait_max: Duration,
    /// The longest write or delete.
    pub write_max: Duration,
    /// Rounds that ended with a child SIGKILLed mid-fill.
    pub kills: u64,
}

impl SpaceCounters {
    fn render(&self) -> String {
        let shares = &self.full_shares;
        let (min, mean) = if shares.is_empty() {
            (0.0, 0.0)
        } else {
            (
                shares.iter().copied().fold(f64::INFINITY, f64::min),
                shares.iter().sum::<f64>() / shares.len() as f64,
            )
        };
        format!(
            ", space: {} fills, {} writes refused, live at refusal min {:.1}% mean {:.1}% of \
             {:.1} MiB, {} deletes on full stores, {} new keys after deletes ({} refused \
             before they fit, longest wait {:.0} ms), longest write {:.1} ms, {} mid-fill kills",
            self.fills,
            self.refused,
            min * 100.0,
            mean * 100.0,
            self.capacity as f64 / f64::from(1u32 << 20),
            self.deletes,
            self.refill_puts,
            self.refill_retried,
            ms(self.gc_wait_max),
            ms(self.write_max),
            self.kills
        )
    }
}

/// Everything a run counted.
#[derive(Clone, Debug, Default)]
pub struct RunReport {
    /// Rounds completed (a round ends with a crash and a verified recovery).
    pub rounds: u64,
    /// Acknowledged puts.
    pub puts: u64,
    /// Acknowledged deletes.
    pub deletes: u64,
    /// Checked gets.
    pub gets: u64,
    /// Checked scans.
    pub scans: u64,
    /// Acknowledged write batches.
    pub batches: u64,
    /// Keys written by acknowledged write batches.
    pub batch_keys: u64,
    /// Write batches checked for all-or-nothing after crashes.
    pub batches_checked: u64,
    /// Field workload ([`crate::fields`]): acknowledged put_row, delete_row,
    /// update_fields (of existing rows), fields those set, updates of absent rows, checked
    /// get_fields and scan_fields.
    pub field_ops: [u64; 7],
    /// Rows verified after recoveries.
    pub rows_verified: u64,
    /// Of those, rows with a field write in flight.
    pub rows_in_flight: u64,
    /// Keys verified after recoveries.
    pub keys_verified: u64,
    /// Keys with a write in flight at a crash.
    pub in_flight: u64,
    /// Of those, writes found applied after recovery.
    pub in_flight_applied: u64,
    /// Successful recoveries (reopens after a crash).
    pub recoveries: u64,
    /// Time spent in those reopens.
    pub recovery_total: Duration,
    /// The longest reopen.
    pub recovery_max: Duration,
    /// Recovery time as the engine reports it (`Stats::recovery_micros`), summed over the
    /// recoveries: the part of the reopen spent replaying the engine's structures, without
    /// opening the media (a Tracked pool copies its whole shadow at open).
    pub engine_recovery_total: Duration,
    /// Pmem crash images taken.
    pub crash_images: u64,
    /// persist-points: persists counted in the counting runs.
    pub persists_counted: u64,
    /// persist-points: points (persist numbers and named points) cut.
    pub crash_points: u64,
    /// persist-points: of those, named points of the engine.
    pub named_points: u64,
    /// persist-points: acknowledged writes found lost (or otherwise wrong) in their images.
    pub acked_lost: u64,
    /// Of those, with 8-byte word tearing.
    pub torn_images: u64,
    /// Flash crashes (unsynced writes dropped or torn).
    pub flash_crashes: u64,
    /// I/O errors injected (EIO / ENOSPC).
    pub faults_injected: u64,
    /// Writes that failed with an error (expected only where faults are injected).
    pub write_errors: u64,
    /// space mode: what the fills, deletes and refills did.
    pub space: SpaceCounters,
    /// Wall-clock time of the run.
    pub elapsed: Duration,
    /// Broken guarantees.
    pub violations: Vec<Violation>,
    /// Violations beyond [`MAX_KEPT_VIOLATIONS`], counted only.
    pub violations_dropped: u64,
    /// Other failures.
    pub failures: Vec<String>,
    /// Files of a failed run kept outside its working directory (pool files, flash
    /// directories), described.
    pub kept: Vec<String>,
}

impl RunReport {
    /// True when nothing went wrong.
    pub fn passed(&self) -> bool {
        self.violations.is_empty() && self.failures.is_empty()
    }

    /// All operations.
    pub fn operations(&self) -> u64 {
        let f = &self.field_ops;
        self.puts
            + self.deletes
            + self.gets
            + self.scans
            + self.batches
            + f[0]
            + f[1]
            + f[2]
            + f[4]
            + f[5]
            + f[6]
    }

    /// Adds a workload's counters.
    pub fn add_ops(&mut self, c: &OpCounts) {
        self.puts += c.puts.get();
        self.deletes += c.deletes.get();
        self.gets += c.gets.get();
        self.scans += c.scans.get();
        self.batches += c.batches.get();
        self.batch_keys += c.batch_keys.get();
        for (sum, n) in self.field_ops.iter_mut().zip(c.field_counts()) {
            *sum += n;
        }
    }

    /// Adds one recovery: the reopen took `took`, of which the engine reports
    /// `engine_micros` as its own recovery.
    pub fn add_recovery(&mut self, took: Duration, engine_micros: u64) {
        self.recoveries += 1;
        self.recovery_total += took;
        self.recovery_max = self.recovery_max.max(took);
        self.engine_recovery_total += Duration::from_micros(engine_micros);
    }

    /// Adds a verification's counters and violations.
    pub fn add_verify(&mut self, v: VerifyOutcome) {
        self.keys_verified += v.keys_verified;
        self.in_flight += v.in_flight;
        self.in_flight_applied += v.in_flight_applied;
        self.batches_checked += v.batches_checked;
        self.rows_verified += v.rows_verified;
        self.rows_in_flight += v.rows_in_flight;
        self.add_violations(v.violations);
    }

    /// Adds violations (keeping the first [`MAX_KEPT_VIOLATIONS`]).
    pub fn add_violations(&mut self, vs: Vec<Violation>) {
        for v in vs {
            if self.violations.len() < MAX_KEPT_VIOLATIONS {
                self.violations.push(v);
            } else {
                self.violations_dropped += 1;
            }
        }
    }

    /// Adds a failure that is not a violation.
    pub fn fail(&mut self, msg: impl Into<String>) {
        self.failures.push(msg.into());
    }

    /// The mean recovery time.
    pub fn recovery_mean(&self) -> Duration {
        self.mean(self.recovery_total)
    }

    fn mean(&self, total: Duration) -> Duration {
        u32::try_from(self.recoveries)
            .ok()
            .filter(|n| *n > 0)
            .map_or(Duration::ZERO, |n| total / n)
    }

    /// The failures, one per line, then the one-line verdict with the counters.
    pub fn render(&self, seed: u64) -> String {
        let mut s = String::new();
        for f in &self.failures {
            let _ = writeln!(s, "FAILURE: {f}");
        }
        for v in &self.violations {
            let _ = writeln!(s, "{v}");
        }
        if self.violations_dropped > 0 {
            let _ = writeln!(s, "... and {} more violations", self.violations_dropped);
        }
        let _ = writeln!(s, "{}", self.verdict_line(seed));
        s
    }

    /// `PASS: ...` or `FAIL (n violations, m failures, seed S): ...` with the counters.
    pub fn verdict_line(&self, seed: u64) -> String {
        let head = if self.passed() {
            "PASS".to_owned()
        } else {
            format!(
                "FAIL ({} violations, {} other failures; replay with --seed {seed})",
                self.violations.len() as u64 + self.violations_dropped,
                self.failures.len()
            )
        };
        let mut s = format!(
            "{head}: {} rounds, {} operations ({} puts, {} deletes, {} gets, {} scans), \
             {} keys verified ({} writes in flight at crashes, {} of them applied), \
             {} recoveries (mean {:.2} ms, max {:.2} ms; engine-reported mean {:.2} ms)",
            self.rounds,
            self.operations(),
            self.puts,
            self.deletes,
            self.gets,
            self.scans,
            self.keys_verified,
            self.in_flight,
            self.in_flight_applied,
            self.recoveries,
            ms(self.recovery_mean()),
            ms(self.recovery_max),
            ms(self.mean(self.engine_recovery_total)),
        );
        if self.batches > 0 || self.batches_checked > 0 {
            let _ = write!(
                s,
                ", {} write batches acknowledged ({} keys), {} batches checked all-or-nothing",
                self.batches, self.batch_keys, self.batches_checked
            );
        }
        if self.field_ops.iter().any(|n| *n > 0) || self.rows_verified > 0 {
            let f = &self.field_ops;
            let _ = write!(
                s,
                ", fields: {} put_row, {} update_fields ({} fields; {} of absent rows), {} \
                 delete_row, {} get_fields, {} scan_fields, {} rows verified ({} with a field \
                 write in flight)",
                f[0], f[2], f[3], f[4], f[1], f[5], f[6], self.rows_verified, self.rows_in_flight
            );
        }
        if self.crash_points > 0 || self.persists_counted > 0 {
            let _ = write!(
                s,
                ", {} persist points cut (of {} persists counted; {} named points), {} \
                 acknowledged writes lost",
                self.crash_points, self.persists_counted, self.named_points, self.acked_lost
            );
        }
        if self.crash_images > 0 {
            let _ = write!(
                s,
                ", {} pmem crash images ({} word-torn)",
                self.crash_images, self.torn_images
            );
        }
        if self.flash_crashes > 0 || self.faults_injected > 0 {
            let _ = write!(
                s,
                ", {} flash crashes, {} I/O faults injected, {} writes failed",
                self.flash_crashes, self.faults_injected, self.write_errors
            );
        }
        if self.space.capacity > 0 {
            s.push_str(&self.space.render());
        }
        let _ = write!(s, ", {:.1} s", self.elapsed.as_secs_f64());
        s
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clean_run_passes_and_prints_its_counters() {
        let mut r = RunReport {
            rounds: 3,
            puts: 10,
            gets: 5,
            keys_verified: 300,
            ..RunReport::default()
        };
        r.add_recovery(Duration::from_millis(2), 500);
        r.add_recovery(Duration::from_millis(4), 1500);
        assert!(r.passed());
        let line = r.verdict_line(7);
        assert!(line.starts_with("PASS: 3 rounds, 15 operations"), "{line}");
        assert!(line.contains("300 keys verified"), "{line}");
        assert!(
            line.contains("2 recoveries (mean 3.00 ms, max 4.00 ms; engine-reported mean 1.00 ms)"),
            "{line}"
        );
    }

    #[test]
    fn a_violation_fails_the_run_and_is_printed_with_the_seed() {
        let mut r = RunReport::default();
        r.add_violations(vec![Violation {
            context: "recovery after round 1".into(),
            key: "k00000001".into(),
            expected: "v#2 (acknowledged)".into(),
            found: "v#1 (older than acknowledged)".into(),
        }]);
        assert!(!r.passed());
        let text = r.render(42);
        assert!(text.starts_with(
            "VIOLATION (recovery after round 1) key k00000001: expected v#2 (acknowledged); \
             found v#1 (older than acknowledged)\n"
        ));
        assert!(text.contains("FAIL (1 violations, 0 other failures; replay with --seed 42)"));
    }

    #[test]
    fn violations_beyond_the_cap_are_counted_not_kept() {
        let mut r = RunReport::default();
        let v = Violation {
            context: String::new(),
            key: String::new(),
            expected: String::new(),
            found: String::new(),
        };
        r.add_violations(vec![v; MAX_KEPT_VIOLATIONS + 5]);
        assert_eq!(r.violations.len(), MAX_KEPT_VIOLATIONS);
        assert_eq!(r.violations_dropped, 5);
        assert!(r.render(1).contains("and 5 more violations"));
    }

    #[test]
    fn space_counters_appear_only_in_space_runs_with_min_and_mean_shares() {
        let mut r = RunReport::default();
        assert!(!r.verdict_line(1).contains("space:"));
        r.space = SpaceCounters {
            capacity: 16 << 20,
            fills: 2,
            refused: 40,
            full_shares: vec![0.30, 0.40],
            deletes: 900,
            refill_puts: 200,
            refill_retried: 3,
            gc_wait_max: Duration::from_millis(64),
            write_max: Duration::from_micros(2500),
            kills: 1,
        };
        let line = r.verdict_line(1);
        assert!(
            line.contains(
                "space: 2 fills, 40 writes refused, live at refusal min 30.0% mean 35.0% of \
                 16.0 MiB, 900 deletes on full stores, 200 new keys after deletes (3 refused \
                 before they fit, longest wait 64 ms), longest write 2.5 ms, 1 mid-fill kills"
            ),
            "{line}"
        );
    }
}
