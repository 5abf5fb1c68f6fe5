//! The engine's background threads (MioDB §4.5): one flush thread and one compaction
//! thread per buffer level (and with `mio:flash` one flash compaction thread), started at
//! open and joined at close. Each loops: run its step
//! (`flush_step`, `compact_step(level)`) while there is work, otherwise wait for a change
//! (or 100 ms). A step that fails for lack of space waits for other levels to free some
//! (back-pressure: stalled writers time out with `NoSpace`); any other failure poisons the
//! store (later writes are refused until it is reopened). A merge's moves and a lazy
//! copy's entries run in bursts of about 100 µs, each ended by a yield of the core
//! ([`Bursts`]), while their level holds fewer than three times the trigger's tables, and
//! yield after every step while writers wait for a flush. A flush copies flat out: in
//! bursts it took twice as long under load and writers waited for it (4 KiB values:
//! 1.1-1.6 s of stalls in a 4.4 s load, against 0.4-0.9 s flat out).
//!
//! Thread safety: the threads share `Inner`.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::Duration;

use tierkv_core::{Error, Result};

use crate::store::Inner;

/// One thread's step.
type Step = Box<dyn Fn(&Inner) -> Result<bool> + Send>;

/// Starts the flush thread and one compaction thread per buffer level.
pub(crate) fn start(inner: &Arc<Inner>) -> Result<Vec<JoinHandle<()>>> {
    let buffer_levels = inner.opts.levels - 1;
    let mut threads = Vec::with_capacity(buffer_levels + 1);
    let spawn = |name: String, job: Step| {
        let inner = inner.clone();
        std::thread::Builder::new()
            .name(name)
            .spawn(move || run(&inner, &*job))
            .map_err(|e| Error::io("spawn mio thread", "", e))
    };
    let stop_all = |threads: Vec<JoinHandle<()>>| {
        inner.stop.store(true, Ordering::Release);
        inner.notify();
        for t in threads {
            let _ = t.join();
        }
    };
    match spawn("mio:flush".into(), Box::new(|i: &Inner| i.flush_step())) {
        Ok(t) => threads.push(t),
        Err(e) => return Err(e),
    }
    if inner.flash.is_some() {
        match spawn(
            "mio:flash-compact".into(),
            Box::new(|i: &Inner| i.flash_compact_step()),
        ) {
            Ok(t) => threads.push(t),
            Err(e) => {
                stop_all(threads);
                return Err(e);
            }
        }
    }
    for level in 0..buffer_levels {
        match spawn(
            format!("mio:compact-{level}"),
            Box::new(move |i: &Inner| i.compact_step(level)),
        ) {
            Ok(t) => threads.push(t),
            Err(e) => {
                stop_all(threads);
                return Err(e);
            }
        }
    }
    Ok(threads)
}

fn run(inner: &Inner, step: &dyn Fn(&Inner) -> Result<bool>) {
    while !inner.stop.load(Ordering::Acquire) && inner.poisoned.get().is_none() {
        let seen = inner.signal_now();
        match step(inner) {
            Ok(true) => {}
            Ok(false) => inner.wait(seen, Duration::from_millis(100)),
            Err(Error::NoSpace { .. }) => inner.wait(seen, Duration::from_millis(50)),
            Err(e) => {
                inner.poison(&e);
                return;
            }
        }
    }
}

/// How long background work runs before it hands the core back ([`Bursts`]).
const BURST: Duration = Duration::from_micros(100);

/// Background work (a merge's moves, a lazy copy's entries) in bursts of about
/// `BURST`, each ended by a yield of the core: a foreground thread that the scheduler
/// took off its core to run this thread (a wakeup, or more runnable threads than cores)
/// then waits about a burst, not the rest of the scheduler's slice. On a machine with idle
/// cores the yield returns at once. Measured on YCSB A right after a 1M-record load, 2
/// cores, 4 client threads: a read's p99 was 142-158 µs while merges ran flat out, and
/// 18-25 µs in bursts. Writers use them too while a flush is pending
/// (`Inner::give_way`).
#[derive(Clone, Copy, Debug)]
pub struct Bursts {
    since: std::time::Instant,
}

impl Bursts {
    /// A burst starting now.
    pub fn start() -> Bursts {
        Bursts {
            since: std::time::Instant::now(),
        }
    }

    /// Called between two pieces of work: yields the core once the burst has run
    /// `BURST`, and starts the next.
    pub fn between(&mut self) {
        if self.since.elapsed() >= BURST {
            std::thread::yield_now();
            self.since = std::time::Instant::now();
        }
    }

    /// [`Bursts::between`] for a compaction: also yields the core after every step while
    /// writers wait for a flush (`Shared::flush_awaited`), whatever the level's backlog.
    pub fn between_steps(&mut self, in_bursts: bool, shared: &crate::table::Shared) {
        if shared
            .flush_awaited
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            std::thread::yield_now();
            self.restart();
        } else if in_bursts {
            self.between();
        }
    }

    /// Starts the next burst now (after the thread slept).
    pub fn restart(&mut self) {
        self.since = std::time::Instant::now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_ends_after_its_time_and_the_next_starts_then() {
        let mut b = Bursts::start();
        let first = b.since;
        b.between();
        assert_eq!(b.since, first, "a burst ended before its time");
        std::thread::sleep(BURST * 2);
        b.between();
        assert!(b.since > first, "a burst past its time did not end");
        let second = b.since;
        std::thread::sleep(BURST * 2);
        b.restart();
        assert!(b.since > second);
        let third = b.since;
        b.between();
        assert_eq!(b.since, third, "restart did not start a new burst");
    }
}
