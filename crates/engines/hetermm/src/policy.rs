//! The background decisions as pure functions of a snapshot (STYLE §8): when to flush, how
//! large the read cache should be, what to do about the log, which block to reorganise.
//! The mechanisms (`flush.rs`, `cache.rs`, `reorg.rs`) carry the choices out.
//!
//! Thread safety: pure functions.

use crate::nvm::blocks::BlockInfo;

/// What the flusher sees of the DRAM write region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DramSnapshot {
    /// Pages on the free list.
    pub free: usize,
    /// freePages (§4.1.1).
    pub threshold: usize,
    /// Complete blocks (every page handed out) still in DRAM.
    pub complete_blocks: u64,
    /// True when the read cache wants pages it cannot get.
    pub cache_wants: bool,
}

/// §4.1.2: flush when free pages fall below freePages — or, while the read cache is
/// growing (a read-only phase), whenever no more than freePages are free, so the write
/// region shrinks and hands its pages over (§5.1) — as long as a complete block exists.
pub fn should_flush(s: DramSnapshot) -> bool {
    s.complete_blocks > 0 && (s.free < s.threshold || (s.cache_wants && s.free <= s.threshold))
}

/// True when the overlap region should be made ready (a flush is near: fewer than twice
/// freePages are free).
pub fn should_prepare_overlap(s: DramSnapshot) -> bool {
    s.free < 2 * s.threshold
}

/// Reads and writes seen since the last decision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Window {
    /// Reads.
    pub reads: u64,
    /// Writes.
    pub writes: u64,
}

/// §5.1 (and the authors' code): while any write arrives, all of DRAM belongs to the write
/// region (the cache gets nothing: "the DRAM distribution strategy disables the read cache
/// for such workloads", §6.3); in a read-only window the cache may take every page but the
/// write region's minimum. An idle window keeps the current target.
pub fn cache_target(
    w: Window,
    current: usize,
    total_pages: usize,
    min_write_pages: usize,
) -> usize {
    if w.writes > 0 {
        0
    } else if w.reads > 0 {
        total_pages.saturating_sub(min_write_pages)
    } else {
        current
    }
}

/// What to do about the operation log (§5.3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogAction {
    /// Nothing.
    Nothing,
    /// Flush the oldest DRAM block: that lets the oldest log block go.
    Flush,
    /// Compress the oldest log block (its updates stay in the mutable region, so
    /// off_DRAM will not pass it soon).
    Compress,
}

/// The log is over its budget of `max_blocks`: if flushing the complete DRAM blocks would
/// make the oldest log block reclaimable, flush; otherwise compress it.
pub fn log_action(
    live_blocks: usize,
    max_blocks: usize,
    oldest_max_address: Option<u64>,
    flushable_end: u64,
) -> LogAction {
    match oldest_max_address {
        _ if live_blocks <= max_blocks => LogAction::Nothing,
        None => LogAction::Nothing,
        Some(a) if a < flushable_end => LogAction::Flush,
        Some(_) => LogAction::Compress,
    }
}

/// §5.2: the most invalid block above the threshold, if any.
pub fn choose_reorg(blocks: &[(u64, BlockInfo)], threshold: f64) -> Option<u64> {
    blocks
        .iter()
        .filter(|(_, i)| i.invalid_fraction() > threshold)
        .max_by(|a, b| a.1.invalid_fraction().total_cmp(&b.1.invalid_fraction()))
        .map(|(b, _)| *b)
}

/// Defragmentation: the blocks placed highest in the pool, highest first, at most `n` (the
/// ones whose moves free the top of the allocator's region).
pub fn choose_relocation(blocks: &[(u64, BlockInfo)], n: usize) -> Vec<u64> {
    let mut by_off: Vec<(u64, u64)> = blocks.iter().map(|(b, i)| (i.off, *b)).collect();
    by_off.sort_unstable_by(|a, b| b.cmp(a));
    by_off.into_iter().take(n).map(|(_, b)| b).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvm::blocks::Layout;

    fn dram(free: usize, complete: u64, cache_wants: bool) -> DramSnapshot {
        DramSnapshot {
            free,
            threshold: 8,
            complete_blocks: complete,
            cache_wants,
        }
    }

    #[test]
    fn flush_starts_below_free_pages_and_needs_a_complete_block() {
        assert!(should_flush(dram(7, 1, false)));
        assert!(!should_flush(dram(8, 1, false)));
        assert!(should_flush(dram(8, 1, true)), "the cache is growing");
        assert!(
            !should_flush(dram(0, 0, false)),
            "nothing complete to flush"
        );
        assert!(should_prepare_overlap(dram(15, 1, false)));
        assert!(!should_prepare_overlap(dram(16, 1, false)));
    }

    #[test]
    fn cache_gets_dram_only_in_read_only_windows() {
        assert_eq!(
            cache_target(
                Window {
                    reads: 100,
                    writes: 1
                },
                50,
                100,
                10
            ),
            0
        );
        assert_eq!(
            cache_target(
                Window {
                    reads: 100,
                    writes: 0
                },
                0,
                100,
                10
            ),
            90
        );
        assert_eq!(cache_target(Window::default(), 42, 100, 10), 42);
    }

    #[test]
    fn log_pressure_flushes_when_that_helps_and_compresses_otherwise() {
        assert_eq!(log_action(3, 4, Some(10), 100), LogAction::Nothing);
        assert_eq!(log_action(5, 4, Some(10), 100), LogAction::Flush);
        assert_eq!(log_action(5, 4, Some(200), 100), LogAction::Compress);
        assert_eq!(log_action(5, 4, None, 100), LogAction::Nothing);
    }

    #[test]
    fn reorganisation_picks_the_sparsest_block_over_the_threshold() {
        let info = |live| BlockInfo {
            off: 0,
            run_len: 0,
            layout: Layout::Full,
            live,
            capacity: 100,
            generation: 0,
        };
        let blocks = [(1, info(60)), (2, info(10)), (3, info(30))];
        assert_eq!(choose_reorg(&blocks, 0.5), Some(2));
        assert_eq!(choose_reorg(&blocks, 0.95), None);
    }

    #[test]
    fn relocation_picks_the_highest_placed_block() {
        let info = |off| BlockInfo {
            off,
            run_len: 0,
            layout: Layout::Full,
            live: 1,
            capacity: 1,
            generation: 0,
        };
        let blocks = [(1, info(900)), (2, info(4000)), (3, info(100))];
        assert_eq!(choose_relocation(&blocks, 2), vec![2, 1]);
        assert!(choose_relocation(&[], 2).is_empty());
    }
}
