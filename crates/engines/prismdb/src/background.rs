//! The compaction threads, one per partition (PrismDB §6 "Compaction thread"), and the
//! read-trigger state machine (§5.3 "Read-triggered compactions": detection, invocation,
//! monitoring, cool-down).
//!
//! A thread compacts while its partition's fast-tier fullness
//! ([`Partition::fullness`]) is above the high watermark until it is below the low one
//! (write-triggered, §4.2), or at once when a writer of its partition waits for
//! space (then pinning is ignored if it must be). Otherwise it runs the read trigger (with
//! promotions on only: promoting is the point of a read-triggered compaction), and during an
//! active epoch compacts the most read table once it served 1% of an epoch from flash.
//! Threads are named `prismdb:compact-NN`, started at open and joined at close and drop.
//!
//! Thread safety: each thread owns its [`ReadTrigger`]; everything else is [`Shared`].

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::Duration;

use tierkv_core::{Error, Result};

use crate::compaction::{Trigger, compact};
use crate::partition::Partition;
use crate::shared::Shared;

/// Phase of the read trigger.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Phase {
    /// Watching for a read-dominated window with tracked keys on flash.
    Detect,
    /// Compacting until `until` operations; `base` is the fast-tier read share to beat.
    Active {
        /// Operation count that ends the epoch.
        until: u64,
        /// Fast-tier read share before the epoch.
        base: f64,
    },
    /// No read-triggered compaction until `until` operations.
    Cooldown {
        /// Operation count that ends the cool-down.
        until: u64,
    },
}

/// Counter snapshot the read trigger compares windows with.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Window {
    /// Operations (reads + writes).
    pub ops: u64,
    /// Reads.
    pub reads: u64,
    /// Reads from the fast tier.
    pub fast: u64,
    /// Reads from flash.
    pub flash: u64,
}

impl Window {
    fn share(&self, before: &Window) -> f64 {
        let f = self.fast.saturating_sub(before.fast) as f64;
        let s = self.flash.saturating_sub(before.flash) as f64;
        if f + s == 0.0 { 1.0 } else { f / (f + s) }
    }
}

/// The read trigger of one partition.
#[derive(Clone, Debug)]
pub struct ReadTrigger {
    /// Current phase.
    pub phase: Phase,
    mark: Window,
    epoch: u64,
    gain: f64,
    cooldown: u64,
}

impl ReadTrigger {
    /// A trigger with epochs of `epoch` operations, required gain `gain`, cool-down
    /// `cooldown` operations.
    pub fn new(epoch: u64, gain: f64, cooldown: u64) -> ReadTrigger {
        ReadTrigger {
            phase: Phase::Detect,
            mark: Window::default(),
            epoch: epoch.max(1),
            gain,
            cooldown,
        }
    }

    /// Advances with the counters `now` and the fraction of tracked keys not on the fast
    /// tier; true when a read-triggered compaction should run now.
    pub fn step(&mut self, now: Window, tracked_on_flash: f64) -> bool {
        let window = (self.epoch / 10).max(1);
        match self.phase {
            Phase::Detect => {
                if now.ops < self.mark.ops + window {
                    return false;
                }
                let ops = (now.ops - self.mark.ops) as f64;
                let reads = now.reads.saturating_sub(self.mark.reads) as f64;
                let share = now.share(&self.mark);
                self.mark = now;
                if reads / ops >= 0.95 && tracked_on_flash >= 0.1 && share < 1.0 {
                    self.phase = Phase::Active {
                        until: now.ops + self.epoch,
                        base: share,
                    };
                    return true;
                }
                false
            }
            Phase::Active { until, base } => {
                if now.ops < until {
                    return true;
                }
                let share = now.share(&self.mark);
                self.mark = now;
                self.phase = if share - base >= self.gain {
                    Phase::Active {
                        until: now.ops + self.epoch,
                        base: share,
                    }
                } else {
                    Phase::Cooldown {
                        until: now.ops + self.cooldown,
                    }
                };
                matches!(self.phase, Phase::Active { .. })
            }
            Phase::Cooldown { until } => {
                if now.ops >= until {
                    self.mark = now;
                    self.phase = Phase::Detect;
                }
                false
            }
        }
    }
}

fn window(p: &Partition) -> Window {
    let c = &p.counters;
    let reads = c.reads.load(Ordering::Relaxed);
    Window {
        ops: reads + c.writes.load(Ordering::Relaxed),
        reads,
        fast: c.fast_reads.load(Ordering::Relaxed),
        flash: c.flash_reads.load(Ordering::Relaxed),
    }
}

fn tracked_on_flash(p: &Partition) -> f64 {
    let tracked = p.tracker.lock().len() as f64;
    let pop_fast: f64 = p.buckets.lock().b.iter().map(|b| b.pop).sum();
    if tracked == 0.0 {
        0.0
    } else {
        ((tracked - pop_fast) / tracked).clamp(0.0, 1.0)
    }
}

/// Flash hits of the partition's most read table since it was written.
fn hottest_table_hits(p: &Partition) -> u64 {
    p.table_hits.lock().values().copied().max().unwrap_or(0)
}

/// The body of partition `i`'s compaction thread.
fn run(sh: &Shared, i: usize) {
    let Some(part) = sh.parts.get(i) else { return };
    let parts = sh.parts.len().max(1) as u64;
    let o = &sh.opts;
    let mut rt = ReadTrigger::new(o.read_epoch / parts, o.read_gain, o.read_cooldown / parts);
    // A read-triggered compaction rewrites a table: only for one that served at least 1% of
    // an epoch's operations from flash since it was written (at least 16).
    let min_hits = (o.read_epoch / parts / 100).max(16);
    let mut draining = false;
    let mut failures = 0u32;
    while !sh.stop.load(Ordering::Acquire) {
        let pressure = part.pressure.load(Ordering::Acquire) > 0;
        let u = part.fullness(sh);
        if u >= o.high_watermark {
            draining = true;
        } else if u < o.low_watermark {
            draining = false;
        }
        let result = if pressure || draining {
            compact(sh, part, Trigger::Write, pressure)
        } else if o.read_compactions
            && o.promotions
            && rt.step(window(part), tracked_on_flash(part))
            && hottest_table_hits(part) >= min_hits
        {
            compact(sh, part, Trigger::Read, false)
        } else {
            Ok(None)
        };
        if !matches!(result, Ok(None)) {
            sh.space_freed();
        }
        match result {
            Ok(Some(_)) => failures = 0,
            Ok(None) => {
                sh.wait_for_work(Duration::from_millis(10));
            }
            Err(_) => {
                failures = failures.saturating_add(1);
                sh.wait_for_work(Duration::from_millis(10u64 << failures.min(6)));
            }
        }
    }
}

/// The engine's compaction threads.
#[derive(Debug, Default)]
pub struct Background {
    handles: Vec<JoinHandle<()>>,
}

impl Background {
    /// Starts one thread per partition.
    pub fn start(sh: &Arc<Shared>) -> Result<Background> {
        let mut handles = Vec::new();
        for i in 0..sh.parts.len() {
            let s = sh.clone();
            let h = std::thread::Builder::new()
                .name(format!("prismdb:compact-{i:02}"))
                .spawn(move || run(&s, i))
                .map_err(|e| Error::io("spawn compaction thread", "prismdb", e))?;
            handles.push(h);
        }
        Ok(Background { handles })
    }

    /// Signals and joins every thread.
    pub fn stop(&mut self, sh: &Shared) {
        sh.stop.store(true, Ordering::Release);
        sh.wake_compactors();
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(ops: u64, reads: u64, fast: u64, flash: u64) -> Window {
        Window {
            ops,
            reads,
            fast,
            flash,
        }
    }

    #[test]
    fn read_trigger_detects_runs_an_epoch_and_cools_down_without_gain() {
        let mut t = ReadTrigger::new(100, 0.01, 1000);
        assert!(!t.step(w(5, 5, 1, 4), 0.5), "window not full yet");
        // A read-only window, half the reads from flash, tracked keys on flash: start.
        assert!(t.step(w(10, 10, 5, 5), 0.5));
        assert!(matches!(t.phase, Phase::Active { until: 110, .. }));
        assert!(t.step(w(50, 50, 30, 20), 0.5));
        // Epoch over, share went from 0.5 to 0.9 over the epoch: continue.
        assert!(t.step(w(110, 110, 95, 15), 0.5));
        // Next epoch without gain: cool down.
        assert!(!t.step(w(210, 210, 140, 85), 0.5));
        assert!(matches!(t.phase, Phase::Cooldown { until: 1210 }));
        assert!(!t.step(w(1300, 1300, 1000, 300), 0.5));
        assert_eq!(t.phase, Phase::Detect);
    }

    #[test]
    fn write_heavy_windows_never_trigger() {
        let mut t = ReadTrigger::new(100, 0.01, 1000);
        for i in 1..20 {
            assert!(!t.step(w(10 * i, 5 * i, i, 4 * i), 0.9));
        }
    }
}
