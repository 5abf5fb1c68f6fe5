//! Space mode's watch over its worker threads: a worker that stops making progress is a
//! hang, which ends the run with the report printed (issue 23: "a hang -> FAIL"; a stuck
//! thread cannot be stopped, so the process exits).
//!
//! Thread safety: called on the mode's thread while scoped workers run.

use std::thread::ScopedJoinHandle;
use std::time::{Duration, Instant};

use super::super::RunConfig;
use crate::report::RunReport;

/// Notices a counter that stopped moving.
pub(super) struct Watchdog {
    last: u64,
    since: Instant,
    stall: Duration,
}

impl Watchdog {
    pub(super) fn new(stall: Duration) -> Self {
        Watchdog {
            last: 0,
            since: Instant::now(),
            stall,
        }
    }

    /// True when `progress` has not changed for the stall time.
    pub(super) fn stalled(&mut self, progress: u64) -> bool {
        if progress != self.last {
            self.last = progress;
            self.since = Instant::now();
        }
        self.since.elapsed() > self.stall
    }
}

/// Waits for the scoped thread `h`; a hang (no `progress` for `stall`) ends the run.
pub(super) fn watch<T>(
    h: &ScopedJoinHandle<'_, T>,
    progress: impl Fn() -> u64,
    stall: Duration,
    cfg: &RunConfig,
    report: &RunReport,
    what: &str,
) {
    let mut dog = Watchdog::new(stall);
    while !h.is_finished() {
        if dog.stalled(progress()) {
            hang(cfg, report, what);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Ends the run on a hang: prints the report with the failure and exits with status 1.
pub(super) fn hang(cfg: &RunConfig, report: &RunReport, what: &str) -> ! {
    // The threads' stacks, for a hang that shows only under load (README, space mode).
    if std::env::var_os("TIERKV_STRESS_GDB_ON_HANG").is_some() {
        println!("{}", tierkv_testkit::rig::thread_stacks(std::process::id()));
    }
    let mut r = report.clone();
    r.fail(format!(
        "{what} made no progress for {:.0} s: the engine hangs (or a write took that long)",
        (cfg.space_mode.write_bound + cfg.space_mode.gc_wait + Duration::from_secs(5))
            .as_secs_f64()
    ));
    r.elapsed = cfg.budget.start.elapsed();
    print!("{}", r.render(cfg.seed));
    println!("data kept in {}", cfg.work_dir.display());
    std::process::exit(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watchdog_fires_only_when_progress_stops() {
        let mut dog = Watchdog::new(Duration::from_millis(30));
        for i in 1..=5 {
            assert!(!dog.stalled(i));
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(40));
        assert!(dog.stalled(5));
    }
}
