//! Counters of a Value Storage (DESIGN §5: "background work (… GC …: counts, bytes,
//! time)"; PRISM §7.6 for the batch sizes): chunks by state, live data, writes, reads, GC
//! work and the thread-combining batch sizes. The core adds them to the engine's `Stats` (per-storage
//! counters summed; names in [`ValueStorageStats::add_to`]).
//!
//! Thread safety: counters are relaxed atomics ([`Counter`]); a snapshot is not atomic as
//! a whole (each field is exact, their combination may straddle an operation).

use tierkv_core::{Counter, Stats};

use crate::combining::CombiningStats;

/// The running counters (monotonic).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) chunks_written: Counter,
    pub(crate) chunk_bytes_written: Counter,
    pub(crate) values_written: Counter,
    pub(crate) write_errors: Counter,
    pub(crate) reads: Counter,
    pub(crate) read_errors: Counter,
    pub(crate) value_bytes_read: Counter,
    pub(crate) multi_reads: Counter,
    pub(crate) multi_read_values: Counter,
    pub(crate) multi_read_ios: Counter,
    pub(crate) gc_runs: Counter,
    pub(crate) gc_chunks_reclaimed: Counter,
    pub(crate) gc_values_moved: Counter,
    pub(crate) gc_bytes_moved: Counter,
    pub(crate) gc_values_dropped: Counter,
    pub(crate) gc_micros: Counter,
    pub(crate) gc_corrupt_chunks: Counter,
}

/// A snapshot of one Value Storage's counters and gauges.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ValueStorageStats {
    /// The storage id.
    pub id: u8,
    /// The chunk size.
    pub chunk_size: u32,
    /// Chunks in the file.
    pub chunks_total: u64,
    /// Free chunks.
    pub chunks_free: u64,
    /// Chunks holding values (sealed, or being collected).
    pub chunks_used: u64,
    /// Chunks being written now.
    pub chunks_writing: u64,
    /// Chunks retired, waiting for their grace period.
    pub chunks_retiring: u64,
    /// Chunks set aside because GC could not read them back intact.
    pub chunks_quarantined: u64,
    /// Valid values.
    pub live_values: u64,
    /// Footprint bytes of valid values.
    pub live_bytes: u64,
    /// Chunks written (by PWB reclamation, SVC write-back and GC).
    pub chunks_written: u64,
    /// Bytes of chunk images written.
    pub chunk_bytes_written: u64,
    /// Values written.
    pub values_written: u64,
    /// Chunk writes that failed.
    pub write_errors: u64,
    /// Point reads.
    pub reads: u64,
    /// Reads that returned an error (I/O or checksum).
    pub read_errors: u64,
    /// Value bytes returned by reads.
    pub value_bytes_read: u64,
    /// `read_many` calls.
    pub multi_reads: u64,
    /// Values they read.
    pub multi_read_values: u64,
    /// I/Os they issued after merging neighbouring records.
    pub multi_read_ios: u64,
    /// GC steps that collected something.
    pub gc_runs: u64,
    /// Chunks GC freed.
    pub gc_chunks_reclaimed: u64,
    /// Values GC moved.
    pub gc_values_moved: u64,
    /// Footprint bytes GC moved.
    pub gc_bytes_moved: u64,
    /// Values GC copied but did not move (the HSIT entry changed meanwhile).
    pub gc_values_dropped: u64,
    /// Time spent in GC steps, µs.
    pub gc_micros: u64,
    /// Victims GC found damaged and quarantined.
    pub gc_corrupt_chunks: u64,
    /// DRAM held by bitmaps and chunk metadata.
    pub dram_bytes: u64,
    /// Batch sizes of flash reads.
    pub combining: CombiningStats,
}

impl ValueStorageStats {
    /// Adds these figures to an engine's `Stats` under `prism_vs_*` (counters) and
    /// `prism_vs_*` / `prism_read_batch_*` (gauges), summing over storages.
    pub fn add_to(&self, s: &mut Stats) {
        let mut add =
            |k: &str, v: u64| *s.counters.entry(format!("prism_vs_{k}")).or_insert(0) += v;
        add("chunks_written", self.chunks_written);
        add("chunk_bytes_written", self.chunk_bytes_written);
        add("values_written", self.values_written);
        add("write_errors", self.write_errors);
        add("reads", self.reads);
        add("read_errors", self.read_errors);
        add("multi_reads", self.multi_reads);
        add("multi_read_values", self.multi_read_values);
        add("multi_read_ios", self.multi_read_ios);
        add("gc_runs", self.gc_runs);
        add("gc_chunks_reclaimed", self.gc_chunks_reclaimed);
        add("gc_values_moved", self.gc_values_moved);
        add("gc_bytes_moved", self.gc_bytes_moved);
        add("gc_values_dropped", self.gc_values_dropped);
        add("gc_micros", self.gc_micros);
        add("gc_corrupt_chunks", self.gc_corrupt_chunks);
        for (n, c) in self
            .combining
            .histogram
            .iter()
            .enumerate()
            .skip(1)
            .filter(|(_, c)| **c > 0)
        {
            *s.counters
                .entry(format!("prism_read_batch_size_{n:02}"))
                .or_insert(0) += c;
        }
        let mut gauge =
            |k: &str, v: u64| *s.gauges.entry(format!("prism_vs_{k}")).or_insert(0.0) += v as f64;
        gauge("chunks_total", self.chunks_total);
        gauge("chunks_free", self.chunks_free);
        gauge("chunks_used", self.chunks_used);
        gauge("chunks_retiring", self.chunks_retiring);
        gauge("chunks_quarantined", self.chunks_quarantined);
        gauge("live_values", self.live_values);
        gauge("live_bytes", self.live_bytes);
        s.dram_bytes += self.dram_bytes;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storages_sum_into_one_stats_with_batch_sizes_by_name() {
        let one = ValueStorageStats {
            gc_runs: 2,
            live_values: 10,
            dram_bytes: 100,
            combining: CombiningStats {
                histogram: vec![0, 5, 0, 1],
            },
            ..ValueStorageStats::default()
        };
        let mut s = Stats::default();
        one.add_to(&mut s);
        one.add_to(&mut s);
        assert_eq!(s.counters["prism_vs_gc_runs"], 4);
        assert_eq!(s.counters["prism_read_batch_size_01"], 10);
        assert_eq!(s.counters["prism_read_batch_size_03"], 2);
        assert!(!s.counters.contains_key("prism_read_batch_size_02"));
        assert_eq!(s.gauges["prism_vs_live_values"], 20.0);
        assert_eq!(s.dram_bytes, 200);
    }
}
