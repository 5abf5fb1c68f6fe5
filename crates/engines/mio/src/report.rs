//! Builds the [`Stats`] of a store from its counters and the current version (issue 18,
//! item 11); the pool's byte counters are added by the facade (`tierkv::Db::stats`).
//!
//! Thread safety: reads atomics and clones the version.

use tierkv_core::Stats;

use crate::store::Inner;

/// The store's counters now.
pub(crate) fn stats(inner: &Inner) -> Stats {
    let c = &inner.shared.counters;
    let mut s = Stats::default();
    c.ops.fill(&mut s);
    // The per-tier byte counters are the media layer's: `tierkv::Db::stats` adds the
    // pool's (adding them here too counted every byte twice).
    s.recovery_micros = c.recovery_micros.get();
    let v = inner.version();
    let mut dram = v.mem.arena.capacity() as u64;
    if let Some(imm) = &v.imm {
        dram += imm.arena.capacity() as u64;
    }
    let blooms: u64 = v
        .levels
        .iter()
        .flatten()
        .filter_map(|t| t.bloom.read().as_ref().map(|b| b.bytes() as u64))
        .sum();
    let seek_indexes: u64 = v
        .levels
        .iter()
        .flatten()
        .map(|t| t.runs().index_bytes() as u64)
        .sum();
    // The spare MemTable block kept for the next switch is DRAM in use too.
    s.dram_bytes = dram + blooms + seek_indexes + inner.arenas.bytes() as u64;
    let mut put = |k: &str, x: u64| {
        s.counters.insert(format!("mio_{k}"), x);
    };
    put("flushes", c.flushes.get());
    put("flush_micros", c.flush_micros.get());
    put("flush_bytes", c.flush_bytes.get());
    put("table_bytes_written", c.table_bytes_written.get());
    put("compaction_bytes_copied", c.compaction_bytes_copied.get());
    put("compaction_bytes_relinked", c.relinked_words.get() * 8);
    put("nodes_relinked", c.nodes_relinked.get());
    put("optimistic_retries", c.optimistic_retries.get());
    put("throttle_micros", c.throttle_micros.get());
    put("locked_reads", c.locked_reads.get());
    put("paused_reads", c.paused_reads.get());
    put("slow_paused_reads", c.slow_paused_reads.get());
    put("versions_dropped", c.versions_dropped.get());
    put("marks_repaired", c.marks_repaired.get());
    put("repository_nodes_freed", c.repository_nodes_freed.get());
    put("defrag_chunks_freed", c.defrag_chunks_freed.get());
    put("defrag_nodes_moved", c.defrag_nodes_moved.get());
    put("defrag_bytes_moved", c.defrag_bytes_moved.get());
    put("defrag_links_repaired", c.defrag_links_repaired.get());
    put("stall_micros", c.stall_micros.get());
    put("writes_refused", c.writes_refused.get());
    put("wal_bytes", c.wal_bytes.get());
    put("batches", c.batches.get());
    put("batch_ops", c.batch_ops.get());
    put("dir_publishes", c.dir_publishes.get());
    put("runs_freed", c.runs_freed.get());
    put("bloom_negatives", c.bloom_negatives.get());
    put("replayed_records", c.replayed_records.get());
    put("leaks_collected", c.leaks_collected.get());
    for (i, n) in c.compactions.iter().enumerate().take(v.levels.len()) {
        put(&format!("compactions_l{i}"), n.get());
    }
    for (i, l) in v.levels.iter().enumerate() {
        s.gauges.insert(format!("mio_tables_l{i}"), l.len() as f64);
    }
    s.gauges
        .insert("mio_seek_index_bytes".into(), seek_indexes as f64);
    if let Some(repo) = &inner.flash {
        put("flash_tables_written", c.flash_tables_written.get());
        put("flash_bytes_written_out", c.flash_bytes_written_out.get());
        put("flash_bytes_compacted", c.flash_bytes_compacted.get());
        put("flash_tombstones_dropped", c.flash_tombstones_dropped.get());
        let counts = v.flash.counts();
        for (i, n) in c.flash_compactions.iter().enumerate().take(counts.len()) {
            put(&format!("flash_compactions_f{i}"), n.get());
        }
        for (i, n) in counts.iter().enumerate() {
            s.gauges.insert(format!("mio_flash_tables_f{i}"), *n as f64);
            s.gauges
                .insert(format!("mio_flash_bytes_f{i}"), v.flash.bytes(i) as f64);
        }
        s.gauges
            .insert("mio_block_cache_bytes".into(), repo.cache.bytes() as f64);
        s.dram_bytes += v.flash.dram_bytes() + repo.cache.bytes() as u64;
    }
    let a = inner.shared.alloc.stats();
    s.gauges
        .insert("mio_pmem_used_bytes".into(), a.used_bytes as f64);
    s.gauges
        .insert("mio_pmem_free_bytes".into(), a.free_bytes as f64);
    s
}
