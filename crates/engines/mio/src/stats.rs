//! MioDB's counters (issue 18, item 11): flushes and their time, compactions per level,
//! bytes written by flushes and by copying compactions, stall time, tables per level,
//! recovery time. Keys in [`Stats::counters`](tierkv_core::Stats::counters) and gauges
//! carry the prefix `mio_`.
//!
//! Thread safety: counters are atomic.

use tierkv_core::{Counter, OpCounters};

/// Every counter the engine keeps.
#[derive(Default)]
pub struct Counters {
    /// The common user-operation counters.
    pub ops: OpCounters,
    /// One-piece flushes.
    pub flushes: Counter,
    /// Microseconds spent in flushes (allocation, copy, rebase, persist, publish).
    pub flush_micros: Counter,
    /// Bytes written to pmem by one-piece flushes.
    pub flush_bytes: Counter,
    /// Bytes written to pmem as tables (flushes and copying compactions).
    pub table_bytes_written: Counter,
    /// Bytes copied by compactions (key and value bytes re-written).
    pub compaction_bytes_copied: Counter,
    /// Microseconds writers waited for a flush (stall time).
    pub stall_micros: Counter,
    /// Link and mark words stored by zero-copy compactions (8 bytes each).
    pub relinked_words: Counter,
    /// Nodes moved by zero-copy compactions.
    pub nodes_relinked: Counter,
    /// Older versions dropped by zero-copy compactions.
    pub versions_dropped: Counter,
    /// Microseconds puts slept before admission because the room was low (`throttle`).
    pub throttle_micros: Counter,
    /// Lock-free reads of a buffer level that a concurrent node move made a get read
    /// again.
    pub optimistic_retries: Counter,
    /// Gets that read a buffer level under the level locks (moves kept racing them).
    pub locked_reads: Counter,
    /// Reads that raced a node move and held while the merges paused for them.
    pub paused_reads: Counter,
    /// Paused reads that waited a millisecond or more for the move under way (the merge
    /// thread was off its core mid-move).
    pub slow_paused_reads: Counter,
    /// Marked nodes whose move recovery finished.
    pub marks_repaired: Counter,
    /// Older repository versions freed by lazy copies.
    pub repository_nodes_freed: Counter,
    /// Slab chunks given back by repository defragmentation (`defrag.rs`).
    pub defrag_chunks_freed: Counter,
    /// Repository nodes moved by defragmentation.
    pub defrag_nodes_moved: Counter,
    /// Bytes of the nodes moved by defragmentation.
    pub defrag_bytes_moved: Counter,
    /// Upper-level links to nodes level 0 no longer reached, unlinked at the last open (a
    /// defragmentation move cut by a crash).
    pub defrag_links_repaired: Counter,
    /// Writes refused with NoSpace after waiting.
    pub writes_refused: Counter,
    /// Log bytes appended.
    pub wal_bytes: Counter,
    /// Write batches committed (one batch record each).
    pub batches: Counter,
    /// Operations of the write batches committed.
    pub batch_ops: Counter,
    /// Directory publishes.
    pub dir_publishes: Counter,
    /// Runs freed after their tables became obsolete.
    pub runs_freed: Counter,
    /// Table lookups answered "absent" by a Bloom filter.
    pub bloom_negatives: Counter,
    /// Log records replayed at the last open.
    pub replayed_records: Counter,
    /// Unreferenced runs or objects freed at the last open.
    pub leaks_collected: Counter,
    /// Recovery time of the last open.
    pub recovery_micros: Counter,
    /// Compactions out of each level.
    pub compactions: [Counter; 32],
    /// `mio:flash`: sorted tables written (write-outs and flash compactions).
    pub flash_tables_written: Counter,
    /// `mio:flash`: table bytes written by write-outs of PMTables.
    pub flash_bytes_written_out: Counter,
    /// `mio:flash`: table bytes written by flash compactions.
    pub flash_bytes_compacted: Counter,
    /// `mio:flash`: tombstones dropped by flash compactions (nothing older below).
    pub flash_tombstones_dropped: Counter,
    /// `mio:flash`: compactions out of each flash level.
    pub flash_compactions: [Counter; 16],
}
