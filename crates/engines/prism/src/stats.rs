//! PRISM's counters (DESIGN §5 "every engine reports the same counters", plus the paper's
//! own): what the core counts itself, and how the counters of the components (Value
//! Storage, SVC, thread combining) are folded into one [`Stats`].
//!
//! | name | meaning |
//! |---|---|
//! | `pwb_reclaims` | reclamation passes that moved a PWB's head (§4.3) |
//! | `pwb_reclaim_values`, `pwb_reclaim_bytes` | well-coupled values (and their bytes) moved to Value Storage |
//! | `pwb_reclaim_dropped_bytes` | PWB bytes reclaimed without a write (superseded or deleted records) |
//! | `pwb_reclaim_lost` | values moved whose key was written meanwhile (the HSIT CAS lost) |
//! | `pwb_writer_waits` | waits (of up to 10 ms each) of writers that found their PWB full |
//! | `gc_passes` | passes of the GC thread (woken by the reclaimer, a scan chain, or its tick) |
//! | `gc_runs`, `gc_bytes_moved`, `gc_values_moved`, `gc_chunks_freed` | Value Storage GC (§5.2) |
//! | `svc_hits`, `svc_misses`, `svc_evictions`, gauge `svc_hit_ratio` | Scan-aware Value Cache (§4.4) |
//! | `svc_chain_writebacks`, `svc_chain_values` | scan chains handed to the GC thread on eviction (§4.4) |
//! | `svc_chain_values_rewritten`, `svc_chain_values_in_place` | their members moved together, in key order; members left where they were (already next to a key-order neighbour) |
//! | `svc_chains_dropped` | evicted chains not rewritten: the GC thread's queue was full |
//! | `svc_touches_dropped`, gauge `svc_entries` | hits not recorded in the 2Q lists (queue full); values cached |
//! | `svc_touches_coalesced` | hits not queued because a touch of the same value was waiting |
//! | `read_batches`, `read_batch_requests`, gauge `read_batch_mean` | thread combining (§5.3) |
//! | `dirty_pointer_helps` | dirty forward pointers persisted by a reader (§5.4) |
//! | `put_retries` | forward-pointer CASes a put lost and retried |
//! | `index_race_losses` | new keys whose index insertion lost to a concurrent insert |
//! | `recovery_micros` (common field) | time of the last open's recovery (§5.5) |
//! | `batches_committed`, `batches_replayed` | write batches committed; committed batches finished at open (`batch/`, kept by the store) |
//!
//! Thread safety: [`Counter`]s are relaxed atomics.

use tierkv_core::{Counter, OpCounters, Stats};

/// The counters the core keeps.
#[derive(Debug, Default)]
pub struct PrismCounters {
    /// User-facing operations (bytes, reads per tier).
    pub ops: OpCounters,
    /// Reclamation passes.
    pub pwb_reclaims: Counter,
    /// Values moved to Value Storage by reclamation.
    pub pwb_reclaim_values: Counter,
    /// Value bytes moved by reclamation.
    pub pwb_reclaim_bytes: Counter,
    /// PWB bytes freed without a write.
    pub pwb_reclaim_dropped_bytes: Counter,
    /// Reclaimed values whose HSIT CAS lost.
    pub pwb_reclaim_lost: Counter,
    /// Appends that waited for space.
    pub pwb_writer_waits: Counter,
    /// Scan-chain members rewritten together.
    pub chain_values_rewritten: Counter,
    /// Scan-chain members left in place: already next to a key-order neighbour.
    pub chain_values_in_place: Counter,
    /// Evicted scan chains not rewritten because the GC thread's queue was full (shared
    /// with the SVC's eviction callback, which counts them).
    pub chains_dropped: std::sync::Arc<Counter>,
    /// Passes of the GC thread.
    pub gc_passes: Counter,
    /// Dirty pointers persisted by readers.
    pub dirty_pointer_helps: Counter,
    /// Lost pointer CASes retried by puts.
    pub put_retries: Counter,
    /// New keys whose index insertion lost a race.
    pub index_race_losses: Counter,
    /// Recovery time of the last open, in microseconds.
    pub recovery_micros: Counter,
}

/// Counters reported by the components, gathered by the engine for one snapshot.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ComponentStats {
    /// GC passes.
    pub gc_runs: u64,
    /// Bytes GC copied.
    pub gc_bytes_moved: u64,
    /// Values GC copied.
    pub gc_values_moved: u64,
    /// Chunks GC freed.
    pub gc_chunks_freed: u64,
    /// Free chunks over all Value Storages.
    pub free_chunks: u64,
    /// Chunks over all Value Storages.
    pub chunks: u64,
    /// SVC hits (accesses to cached values).
    pub svc_hits: u64,
    /// SVC misses (flash reads: values admitted after one, and scan reads left out).
    pub svc_misses: u64,
    /// SVC evictions.
    pub svc_evictions: u64,
    /// SVC scan chains handed back on eviction.
    pub svc_chain_writebacks: u64,
    /// SVC touches dropped because its queue was full.
    pub svc_touches_dropped: u64,
    /// SVC touches coalesced with a queued one.
    pub svc_touches_coalesced: u64,
    /// Entries the SVC holds.
    pub svc_entries: u64,
    /// Bytes the SVC holds.
    pub svc_bytes: u64,
    /// Read batches submitted.
    pub read_batches: u64,
    /// Reads in those batches.
    pub read_batch_requests: u64,
    /// DRAM held by the components (bitmaps, HSIT's DRAM arrays, index search layer).
    pub dram_bytes: u64,
}

impl PrismCounters {
    /// One [`Stats`] from the core's counters and the components'.
    pub fn snapshot(&self, c: &ComponentStats) -> Stats {
        let mut s = Stats::default();
        self.ops.fill(&mut s);
        s.recovery_micros = self.recovery_micros.get();
        s.dram_bytes = c.dram_bytes + c.svc_bytes;
        let own = [
            ("pwb_reclaims", &self.pwb_reclaims),
            ("pwb_reclaim_values", &self.pwb_reclaim_values),
            ("pwb_reclaim_bytes", &self.pwb_reclaim_bytes),
            ("pwb_reclaim_dropped_bytes", &self.pwb_reclaim_dropped_bytes),
            ("pwb_reclaim_lost", &self.pwb_reclaim_lost),
            ("pwb_writer_waits", &self.pwb_writer_waits),
            ("svc_chain_values_rewritten", &self.chain_values_rewritten),
            ("svc_chain_values_in_place", &self.chain_values_in_place),
            ("svc_chains_dropped", &*self.chains_dropped),
            ("gc_passes", &self.gc_passes),
            ("dirty_pointer_helps", &self.dirty_pointer_helps),
            ("put_retries", &self.put_retries),
            ("index_race_losses", &self.index_race_losses),
        ];
        for (k, v) in own {
            s.counters.insert(k.into(), v.get());
        }
        let theirs = [
            ("gc_runs", c.gc_runs),
            ("gc_bytes_moved", c.gc_bytes_moved),
            ("gc_values_moved", c.gc_values_moved),
            ("gc_chunks_freed", c.gc_chunks_freed),
            ("svc_hits", c.svc_hits),
            ("svc_misses", c.svc_misses),
            ("svc_evictions", c.svc_evictions),
            ("svc_chain_writebacks", c.svc_chain_writebacks),
            ("svc_touches_dropped", c.svc_touches_dropped),
            ("svc_touches_coalesced", c.svc_touches_coalesced),
            ("read_batches", c.read_batches),
            ("read_batch_requests", c.read_batch_requests),
        ];
        for (k, v) in theirs {
            s.counters.insert(k.into(), v);
        }
        let ratio = |num: u64, den: u64| {
            if den == 0 {
                0.0
            } else {
                num as f64 / den as f64
            }
        };
        s.gauges.insert(
            "svc_hit_ratio".into(),
            ratio(c.svc_hits, c.svc_hits + c.svc_misses),
        );
        s.gauges.insert(
            "read_batch_mean".into(),
            ratio(c.read_batch_requests, c.read_batches),
        );
        s.gauges
            .insert("flash_free_chunks".into(), c.free_chunks as f64);
        s.gauges.insert("svc_entries".into(), c.svc_entries as f64);
        s.gauges.insert(
            "flash_utilization".into(),
            1.0 - ratio(c.free_chunks, c.chunks.max(1)),
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_carries_own_and_component_counters_and_ratios() {
        let p = PrismCounters::default();
        p.pwb_reclaims.add(3);
        p.recovery_micros.set(1234);
        p.ops.reads_from_flash.add(7);
        let c = ComponentStats {
            gc_runs: 2,
            svc_hits: 3,
            svc_misses: 1,
            read_batches: 4,
            read_batch_requests: 10,
            chunks: 10,
            free_chunks: 4,
            dram_bytes: 100,
            svc_bytes: 50,
            ..ComponentStats::default()
        };
        let s = p.snapshot(&c);
        assert_eq!(s.counters["pwb_reclaims"], 3);
        assert_eq!(s.counters["gc_runs"], 2);
        assert_eq!(s.recovery_micros, 1234);
        assert_eq!(s.reads_from_flash, 7);
        assert_eq!(s.dram_bytes, 150);
        assert_eq!(s.gauges["svc_hit_ratio"], 0.75);
        assert_eq!(s.gauges["read_batch_mean"], 2.5);
        assert!((s.gauges["flash_utilization"] - 0.6).abs() < 1e-9);
    }

    #[test]
    fn ratios_without_traffic_are_zero_not_nan() {
        let s = PrismCounters::default().snapshot(&ComponentStats::default());
        assert_eq!(s.gauges["svc_hit_ratio"], 0.0);
        assert_eq!(s.gauges["read_batch_mean"], 0.0);
    }
}
