//! The counters every engine reports (DESIGN §5): bytes written and read per tier (so write
//! amplification per tier), reads served per tier, DRAM in use, recovery time, and the
//! engine's own counters and gauges.
//!
//! *Counters* only grow, so a benchmark can take the difference over its measured phase
//! ([`Stats::delta_since`]); *gauges* are point values (DRAM in use, a hit ratio).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use serde::{Deserialize, Serialize};

/// A snapshot of a store's counters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Key + value bytes of acknowledged puts.
    pub user_bytes_written: u64,
    /// Value bytes returned by gets and scans.
    pub user_bytes_read: u64,
    /// Bytes written to the pmem pool (every `write` and atomic store).
    pub pmem_bytes_written: u64,
    /// Bytes read from the pmem pool.
    pub pmem_bytes_read: u64,
    /// `persist` calls on the pmem pool.
    pub pmem_persists: u64,
    /// Bytes written to flash files.
    pub flash_bytes_written: u64,
    /// Bytes read from flash files.
    pub flash_bytes_read: u64,
    /// Syncs (fdatasync) of flash files.
    pub flash_syncs: u64,
    /// Gets answered from DRAM (index, cache or buffer).
    pub reads_from_dram: u64,
    /// Gets answered from pmem.
    pub reads_from_pmem: u64,
    /// Gets answered from flash.
    pub reads_from_flash: u64,
    /// DRAM the engine holds now (a gauge).
    pub dram_bytes: u64,
    /// Time the last open spent in recovery, in microseconds (a gauge).
    pub recovery_micros: u64,
    /// Engine-specific counters (monotonic), e.g. `pwb_reclamations`.
    pub counters: BTreeMap<String, u64>,
    /// Engine-specific gauges, e.g. `svc_hit_ratio`.
    pub gauges: BTreeMap<String, f64>,
}

impl Stats {
    /// The counters accumulated since `before`; gauges are taken from `self`.
    #[must_use]
    pub fn delta_since(&self, before: &Stats) -> Stats {
        let d = |now: u64, then: u64| now.saturating_sub(then);
        Stats {
            user_bytes_written: d(self.user_bytes_written, before.user_bytes_written),
            user_bytes_read: d(self.user_bytes_read, before.user_bytes_read),
            pmem_bytes_written: d(self.pmem_bytes_written, before.pmem_bytes_written),
            pmem_bytes_read: d(self.pmem_bytes_read, before.pmem_bytes_read),
            pmem_persists: d(self.pmem_persists, before.pmem_persists),
            flash_bytes_written: d(self.flash_bytes_written, before.flash_bytes_written),
            flash_bytes_read: d(self.flash_bytes_read, before.flash_bytes_read),
            flash_syncs: d(self.flash_syncs, before.flash_syncs),
            reads_from_dram: d(self.reads_from_dram, before.reads_from_dram),
            reads_from_pmem: d(self.reads_from_pmem, before.reads_from_pmem),
            reads_from_flash: d(self.reads_from_flash, before.reads_from_flash),
            dram_bytes: self.dram_bytes,
            recovery_micros: self.recovery_micros,
            counters: self
                .counters
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        d(*v, before.counters.get(k).copied().unwrap_or(0)),
                    )
                })
                .collect(),
            gauges: self.gauges.clone(),
        }
    }

    /// Bytes written to `tier` per user byte written (write amplification), if any user
    /// bytes were written.
    pub fn write_amplification(&self, flash: bool) -> Option<f64> {
        if self.user_bytes_written == 0 {
            return None;
        }
        let tier = if flash {
            self.flash_bytes_written
        } else {
            self.pmem_bytes_written
        };
        Some(tier as f64 / self.user_bytes_written as f64)
    }

    /// Adds the media counters of one tier snapshot into these stats.
    pub fn add_media(&mut self, m: &MediaCounters) {
        self.pmem_bytes_written += m.pmem_bytes_written;
        self.pmem_bytes_read += m.pmem_bytes_read;
        self.pmem_persists += m.pmem_persists;
        self.flash_bytes_written += m.flash_bytes_written;
        self.flash_bytes_read += m.flash_bytes_read;
        self.flash_syncs += m.flash_syncs;
    }

    /// Every field as (name, value) pairs, common counters first, for tables and JSON.
    pub fn flatten(&self) -> Vec<(String, f64)> {
        let mut v: Vec<(String, f64)> = [
            ("user_bytes_written", self.user_bytes_written),
            ("user_bytes_read", self.user_bytes_read),
            ("pmem_bytes_written", self.pmem_bytes_written),
            ("pmem_bytes_read", self.pmem_bytes_read),
            ("pmem_persists", self.pmem_persists),
            ("flash_bytes_written", self.flash_bytes_written),
            ("flash_bytes_read", self.flash_bytes_read),
            ("flash_syncs", self.flash_syncs),
            ("reads_from_dram", self.reads_from_dram),
            ("reads_from_pmem", self.reads_from_pmem),
            ("reads_from_flash", self.reads_from_flash),
            ("dram_bytes", self.dram_bytes),
            ("recovery_micros", self.recovery_micros),
        ]
        .into_iter()
        .map(|(k, x)| (k.to_owned(), x as f64))
        .collect();
        v.extend(self.counters.iter().map(|(k, x)| (k.clone(), *x as f64)));
        v.extend(self.gauges.iter().map(|(k, x)| (k.clone(), *x)));
        v
    }
}

/// A snapshot of the byte counters the media layer keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MediaCounters {
    /// Bytes written to pmem.
    pub pmem_bytes_written: u64,
    /// Bytes read from pmem.
    pub pmem_bytes_read: u64,
    /// Persist calls.
    pub pmem_persists: u64,
    /// Bytes written to flash.
    pub flash_bytes_written: u64,
    /// Bytes read from flash.
    pub flash_bytes_read: u64,
    /// Flash syncs.
    pub flash_syncs: u64,
}

/// Cells a [`Counter`] is striped over.
const COUNTER_SHARDS: usize = 8;

/// One cell of a [`Counter`], alone on its cache line.
#[derive(Debug, Default)]
#[repr(align(64))]
struct CounterShard(AtomicU64);

/// The shard the calling thread adds to: threads take shards round-robin on first use.
fn counter_shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed) % COUNTER_SHARDS;
    }
    SHARD.with(|s| *s)
}

/// A monotonic counter shared between threads (relaxed: counters order nothing).
///
/// Striped over cache-line-sized cells, one per thread (round-robin): every read of every
/// engine bumps several counters, and on one shared word those increments bounce its cache
/// line between cores on every operation. [`Counter::get`] sums the cells.
#[derive(Debug, Default)]
pub struct Counter {
    shards: [CounterShard; COUNTER_SHARDS],
}

impl Counter {
    /// Adds `n`.
    #[inline]
    pub fn add(&self, n: u64) {
        self.shards[counter_shard()]
            .0
            .fetch_add(n, Ordering::Relaxed);
    }
    /// Adds one.
    #[inline]
    pub fn incr(&self) {
        self.add(1);
    }
    /// Subtracts `n` (for gauges kept in a counter cell; cells wrap, their sum does not).
    #[inline]
    pub fn sub(&self, n: u64) {
        self.shards[counter_shard()]
            .0
            .fetch_sub(n, Ordering::Relaxed);
    }
    /// Overwrites the value (for gauges: not meant to race with `add` or `sub`).
    #[inline]
    pub fn set(&self, n: u64) {
        self.shards[0].0.store(n, Ordering::Relaxed);
        for s in &self.shards[1..] {
            s.0.store(0, Ordering::Relaxed);
        }
    }
    /// The current value.
    #[inline]
    pub fn get(&self) -> u64 {
        self.shards
            .iter()
            .fold(0u64, |sum, s| sum.wrapping_add(s.0.load(Ordering::Relaxed)))
    }
}

/// The counters every engine keeps for its user-facing operations.
#[derive(Debug, Default)]
pub struct OpCounters {
    /// Key + value bytes of acknowledged puts.
    pub user_bytes_written: Counter,
    /// Value bytes returned.
    pub user_bytes_read: Counter,
    /// Gets answered from DRAM.
    pub reads_from_dram: Counter,
    /// Gets answered from pmem.
    pub reads_from_pmem: Counter,
    /// Gets answered from flash.
    pub reads_from_flash: Counter,
}

impl OpCounters {
    /// Copies these counters into a [`Stats`].
    pub fn fill(&self, s: &mut Stats) {
        s.user_bytes_written = self.user_bytes_written.get();
        s.user_bytes_read = self.user_bytes_read.get();
        s.reads_from_dram = self.reads_from_dram.get();
        s.reads_from_pmem = self.reads_from_pmem.get();
        s.reads_from_flash = self.reads_from_flash.get();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn striped_counter_sums_every_threads_adds() {
        let c = std::sync::Arc::new(Counter::default());
        let threads: Vec<_> = (0..12)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        c.incr();
                    }
                    c.add(5);
                    c.sub(5);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(c.get(), 120_000);
        c.sub(7); // a gauge may go down on a thread whose cell is at zero
        assert_eq!(c.get(), 119_993);
        c.set(3);
        assert_eq!(c.get(), 3);
    }

    #[test]
    fn delta_subtracts_counters_and_keeps_gauges() {
        let mut a = Stats {
            user_bytes_written: 10,
            dram_bytes: 5,
            ..Stats::default()
        };
        a.counters.insert("gc_runs".into(), 2);
        let mut b = Stats {
            user_bytes_written: 25,
            dram_bytes: 7,
            flash_bytes_written: 50,
            ..Stats::default()
        };
        b.counters.insert("gc_runs".into(), 5);
        b.gauges.insert("hit_ratio".into(), 0.5);
        let d = b.delta_since(&a);
        assert_eq!(d.user_bytes_written, 15);
        assert_eq!(d.dram_bytes, 7);
        assert_eq!(d.counters["gc_runs"], 3);
        assert_eq!(d.gauges["hit_ratio"], 0.5);
        assert_eq!(d.write_amplification(true), Some(50.0 / 15.0));
    }
}
