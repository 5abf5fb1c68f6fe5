//! FOCUS's counters (DESIGN §5 plus the paper's own mechanisms: deltas appended, restore
//! points, chain entries read per partial read) and how they become a [`Stats`].
//!
//! Thread safety: every counter is a relaxed atomic.

use tierkv_core::{Counter, OpCounters, Stats};

use crate::store::FocusStore;

/// Engine counters (the pool counts its own bytes).
#[derive(Debug, Default)]
pub struct FocusCounters {
    /// User-facing operation counters.
    pub ops: OpCounters,
    /// Complete records appended by `put_row` and `put`.
    pub rows_put: Counter,
    /// Deltas appended to the DLog (swim).
    pub deltas_appended: Counter,
    /// Restore points: updates that rewrote the whole record after `restore_point` deltas.
    pub restore_points: Counter,
    /// Updates that rewrote the whole record because swim is off.
    pub full_updates: Counter,
    /// Tombstones appended.
    pub tombstones: Counter,
    /// Write batches committed (one commit record each).
    pub batches: Counter,
    /// Member records of the committed write batches.
    pub batch_records: Counter,
    /// Members of uncommitted write batches the last open dropped.
    pub uncommitted_dropped: Counter,
    /// Commit records GC appended again (their batch still had members in other chunks).
    pub gc_commits: Counter,
    /// Reads of fields (get_fields, get, one per scanned row).
    pub reads: Counter,
    /// Chain entries those reads visited.
    pub chain_steps: Counter,
    /// Schemas created.
    pub schemas_created: Counter,
    /// In-place merges done.
    pub merges: Counter,
    /// Deltas those merges folded into complete records.
    pub merged_deltas: Counter,
    /// Merges skipped (a chain with a variable-field delta).
    pub merges_skipped: Counter,
    /// Cache lines persisted by merges.
    pub merge_lines_persisted: Counter,
    /// Chunks collected by GC.
    pub gc_chunks: Counter,
    /// Rows GC rewrote (restore points) to free a chunk.
    pub gc_rewrites: Counter,
    /// Tombstones GC appended again.
    pub gc_tombstones: Counter,
    /// GC steps abandoned for want of room (a pool full of live data).
    pub gc_no_room: Counter,
    /// Writes that waited for GC to make room.
    pub write_stalls: Counter,
    /// Records found valid at the last recovery.
    pub recovered_records: Counter,
    /// Microseconds the last recovery took.
    pub recovery_micros: Counter,
}

impl FocusStore {
    /// A snapshot of the counters.
    pub fn stats_snapshot(&self) -> Stats {
        let c = &self.counters;
        let mut s = Stats::default();
        c.ops.fill(&mut s);
        s.recovery_micros = c.recovery_micros.get();
        s.dram_bytes = self.dram_bytes();
        let mut counter = |name: &str, v: u64| {
            s.counters.insert(format!("focus_{name}"), v);
        };
        counter("rows_put", c.rows_put.get());
        counter("deltas_appended", c.deltas_appended.get());
        counter("restore_points", c.restore_points.get());
        counter("full_updates", c.full_updates.get());
        counter("tombstones", c.tombstones.get());
        counter("batches", c.batches.get());
        counter("batch_records", c.batch_records.get());
        counter("gc_commits", c.gc_commits.get());
        counter("uncommitted_dropped", c.uncommitted_dropped.get());
        counter("reads", c.reads.get());
        counter("chain_steps", c.chain_steps.get());
        counter("schemas_created", c.schemas_created.get());
        counter("recovered_records", c.recovered_records.get());
        counter("merges", c.merges.get());
        counter("merged_deltas", c.merged_deltas.get());
        counter("merges_skipped", c.merges_skipped.get());
        counter("merge_lines_persisted", c.merge_lines_persisted.get());
        counter("gc_chunks", c.gc_chunks.get());
        counter("gc_rewrites", c.gc_rewrites.get());
        counter("gc_tombstones", c.gc_tombstones.get());
        counter("gc_no_room", c.gc_no_room.get());
        counter("write_stalls", c.write_stalls.get());
        counter("free_chunks", self.plog.free_chunks());
        let p = &self.plog.counters;
        counter("clog_chunks_opened", p.chunks_opened[0].get());
        counter("dlog_chunks_opened", p.chunks_opened[1].get());
        counter("catalog_chunks_opened", p.chunks_opened[2].get());
        counter("log_bytes_appended", p.bytes_appended.get());
        counter("keys", self.index_len() as u64);
        let reads = c.reads.get();
        if reads > 0 {
            s.gauges.insert(
                "focus_mean_chain_steps".into(),
                c.chain_steps.get() as f64 / reads as f64,
            );
        }
        if let Some(cache) = &self.cache {
            let cc = &cache.counters;
            for (name, v) in [
                ("cache_hits", cc.hits.get()),
                ("cache_misses", cc.misses.get()),
                ("cache_admissions", cc.admissions.get()),
                ("cache_rejections", cc.rejections.get()),
                ("cache_requests_dropped", cc.requests_dropped.get()),
                ("cache_first_sightings", cc.first_sightings.get()),
                ("cache_evictions", cc.evictions.get()),
                ("cache_eviction_rounds", cc.eviction_rounds.get()),
                ("cache_damaged_rows", cc.damaged_rows.get()),
                ("cache_rows", cache.rows() as u64),
            ] {
                s.counters.insert(format!("focus_{name}"), v);
            }
            s.gauges
                .insert("focus_cache_page_use".into(), cache.page_use());
            s.gauges.insert("focus_cache_use".into(), cache.usage());
            for (id, st) in cache.all_stats() {
                let name = self
                    .info(id)
                    .map_or_else(|_| id.to_string(), |i| i.schema.name.clone());
                if let Some(r) = st.ratio() {
                    s.gauges.insert(format!("focus_cache_hit_ratio_{name}"), r);
                }
            }
        }
        let a = self.plog.alloc().stats();
        s.gauges.insert(
            "focus_pmem_used_fraction".into(),
            a.used_bytes as f64 / (a.used_bytes + a.free_bytes).max(1) as f64,
        );
        s
    }
}
