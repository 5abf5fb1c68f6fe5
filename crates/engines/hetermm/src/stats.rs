//! HeterMM's counters (DESIGN §5 plus the paper's own: DRAM hit ratio, read-cache size and
//! hit ratio, flushes, reorganisations, log bytes, recovery time) and how they become a
//! [`Stats`] snapshot.
//!
//! Thread safety: every counter is a relaxed atomic.

use std::sync::atomic::Ordering;

use tierkv_core::{Counter, OpCounters, Stats};

use crate::mem::HeterMem;

/// Engine counters (the media layer counts bytes per tier itself).
#[derive(Debug, Default)]
pub struct HeterCounters {
    /// User-facing operation counters.
    pub ops: OpCounters,
    /// Puts that updated a record in place (mutable region).
    pub in_place: Counter,
    /// Puts that wrote a new record (inserts and out-of-place updates).
    pub out_of_place: Counter,
    /// Deletes.
    pub deletes: Counter,
    /// Write batches committed (their puts and deletes count in the two above).
    pub batches: Counter,
    /// Blocks persisted by the flusher.
    pub flushes: Counter,
    /// Bytes of records persisted by the flusher.
    pub flushed_bytes: Counter,
    /// Forced flushes (flush(), close, recovery).
    pub forced_flushes: Counter,
    /// Time spent flushing, in microseconds.
    pub flush_micros: Counter,
    /// Records marked invalid in a pmem bitmap.
    pub marks: Counter,
    /// Blocks reorganised into compact blocks.
    pub reorganisations: Counter,
    /// Blocks freed because every record in them was invalid.
    pub blocks_freed: Counter,
    /// Bytes of pmem given back by reorganisation.
    pub reclaimed_bytes: Counter,
    /// Time spent reorganising, in microseconds.
    pub reorg_micros: Counter,
    /// Blocks moved down the pool to defragment it.
    pub relocations: Counter,
    /// Reads that found a DRAM version whose log entry was still being persisted, and
    /// waited for it.
    pub reads_waited: Counter,
    /// Writers that had to wait for a free DRAM page.
    pub page_waits: Counter,
    /// Waits of a writer for the log to shrink below its limit (200 µs each).
    pub log_waits: Counter,
    /// Room passes run for writers waiting while the reserve was dipped.
    pub room_passes: Counter,
    /// Write batches spanning log pages that found no run for a new log block: each gave
    /// its records back and waited for one (`mem/alloc.rs` `wait_for_log_block`).
    pub batch_log_waits: Counter,
    /// Pages a writer left because the alarm said it was about to become read-only.
    pub alarms: Counter,
    /// Changes of the read cache's target size.
    pub cache_resizes: Counter,
    /// Records installed from pmem at the last recovery.
    pub recovered_records: Counter,
    /// Log entries replayed at the last recovery.
    pub replayed_entries: Counter,
    /// Microseconds the last recovery took.
    pub recovery_micros: Counter,
    /// Microseconds of the last recovery spent reading the log (step 2).
    pub recovery_log_micros: Counter,
    /// Microseconds of the last recovery spent walking and sorting the blocks (step 3).
    pub recovery_scan_micros: Counter,
    /// Microseconds of the last recovery spent replaying the log into DRAM (step 4).
    pub recovery_replay_micros: Counter,
    /// Microseconds of the last recovery spent building the index (step 4).
    pub recovery_build_micros: Counter,
}

impl HeterMem {
    /// A snapshot of the counters and gauges.
    pub fn stats(&self) -> Stats {
        let c = &self.counters;
        let mut s = Stats::default();
        c.ops.fill(&mut s);
        s.recovery_micros = c.recovery_micros.get();
        let cache_pages = self.cache.as_ref().map_or(0, |x| x.pages());
        let write_pages = self.pages.count() - self.pages.free_count() - cache_pages;
        // The index's own bytes are added by the store (`store.rs`); a read-cache map entry
        // (papaya: two words, its node and the reclamation header) is charged 64 bytes.
        s.dram_bytes = self.pages.allocated() as u64 * self.geo.page_size()
            + self.cache.as_ref().map_or(0, |x| x.entries() as u64 * 64);
        let mut counter = |name: &str, v: u64| {
            s.counters.insert(format!("hetermm_{name}"), v);
        };
        counter("in_place_updates", c.in_place.get());
        counter("out_of_place_writes", c.out_of_place.get());
        counter("deletes", c.deletes.get());
        counter("batches", c.batches.get());
        counter("flushes", c.flushes.get());
        counter("flushed_bytes", c.flushed_bytes.get());
        counter("forced_flushes", c.forced_flushes.get());
        counter("flush_micros", c.flush_micros.get());
        counter("marks", c.marks.get());
        counter("reorganisations", c.reorganisations.get());
        counter("blocks_freed", c.blocks_freed.get());
        counter("reclaimed_bytes", c.reclaimed_bytes.get());
        counter("reorg_micros", c.reorg_micros.get());
        counter("relocations", c.relocations.get());
        counter("page_waits", c.page_waits.get());
        counter("reads_waited_for_log", c.reads_waited.get());
        counter("alarms", c.alarms.get());
        counter("log_waits", c.log_waits.get());
        counter("room_passes", c.room_passes.get());
        counter("batch_log_waits", c.batch_log_waits.get());
        counter("cache_resizes", c.cache_resizes.get());
        counter("recovered_records", c.recovered_records.get());
        counter("replayed_entries", c.replayed_entries.get());
        counter("recovery_log_micros", c.recovery_log_micros.get());
        counter("recovery_scan_micros", c.recovery_scan_micros.get());
        counter("recovery_replay_micros", c.recovery_replay_micros.get());
        counter("recovery_build_micros", c.recovery_build_micros.get());
        if let Some(log) = &self.oplog {
            counter("log_bytes", log.counters.bytes.get());
            counter("log_entries", log.counters.entries.get());
            counter("log_blocks_reclaimed", log.counters.reclaimed.get());
            counter("log_compressions", log.counters.compressed.get());
            counter("log_entries_copied", log.counters.copied.get());
            counter("log_entries_retracted", log.counters.retracted.get());
            counter("log_persist_requests", log.sync.requests.get());
            counter("log_persists", log.sync.persists.get());
            counter("spanning_batches", log.counters.spanning_batches.get());
            counter("batch_parts", log.counters.batch_parts.get());
        }
        if let Some(cache) = &self.cache {
            let k = &cache.counters;
            counter("cache_hits", k.hits.get());
            counter("cache_misses", k.misses.get());
            counter("cache_admissions", k.admissions.get());
            counter("cache_invalidations", k.invalidations.get());
            counter("cache_evictions", k.evictions.get());
            counter("cache_grows", k.grows.get());
            counter("cache_shrinks", k.shrinks.get());
        }
        let mut gauge = |name: &str, v: f64| {
            s.gauges.insert(format!("hetermm_{name}"), v);
        };
        let (dram, pmem) = (c.ops.reads_from_dram.get(), c.ops.reads_from_pmem.get());
        gauge("dram_hit_ratio", ratio(dram, dram + pmem));
        if let Some(cache) = &self.cache {
            let (h, m) = (cache.counters.hits.get(), cache.counters.misses.get());
            gauge("read_cache_hit_ratio", ratio(h, h + m));
            gauge("read_cache_pages", cache.pages() as f64);
            gauge(
                "read_cache_bytes",
                (cache.pages() as u64 * self.geo.page_size()) as f64,
            );
            gauge("read_cache_entries", cache.entries() as f64);
        }
        gauge("write_region_pages", write_pages as f64);
        gauge("free_pages", self.pages.free_count() as f64);
        gauge("pmem_blocks", self.blocks.len() as f64);
        gauge(
            "log_blocks",
            self.oplog.as_ref().map_or(0, |l| l.block_count()) as f64,
        );
        gauge(
            "off_dram",
            self.regions.off_dram.load(Ordering::Relaxed) as f64,
        );
        gauge(
            "off_read_only",
            self.regions.off_read_only.load(Ordering::Relaxed) as f64,
        );
        s
    }
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

impl HeterMem {
    /// Where pmem went (said when writes are refused): the published blocks' live and held
    /// bytes, the log, the reserve, and the free chunks with the longest free run.
    pub fn space_report(&self) -> String {
        use crate::nvm::{COMPACT_TAG, DATA_TAG, LOG_TAG};
        let layout = self.nvm.alloc.layout();
        let cs = layout.chunk_size;
        let mut used = vec![false; layout.chunk_count as usize];
        for tag in [DATA_TAG, COMPACT_TAG, LOG_TAG] {
            for a in self.nvm.alloc.iter_chunks(tag) {
                let Some(k) = layout.chunk_of(a.offset) else {
                    continue;
                };
                let first = k as usize;
                let end = (first + (a.size / cs) as usize).min(used.len());
                used[first.min(end)..end].fill(true);
            }
        }
        let (mut free, mut run, mut longest) = (0u64, 0u64, 0u64);
        for u in &used {
            run = if *u { 0 } else { run + 1 };
            free += u64::from(!*u);
            longest = longest.max(run);
        }
        let blocks = self.blocks.snapshot();
        let live: u64 = blocks.iter().map(|(_, i)| i.live).sum();
        let held: u64 = blocks.iter().map(|(_, i)| i.run_len).sum();
        format!(
            "{} blocks hold {} KiB of records in {} KiB, {} log blocks, reserve {} of {} \
             blocks, {} of {} chunks of {} KiB free (longest free run {}, a block takes {})",
            blocks.len(),
            live >> 10,
            held >> 10,
            self.oplog.as_ref().map_or(0, |l| l.block_count()),
            self.nvm.reserve.held(),
            self.nvm.reserve.target(),
            free,
            layout.chunk_count,
            cs >> 10,
            longest,
            self.nvm.chunks_for(self.geo.block_size()),
        )
    }
}
