//! The garbage-collection *policy* of a Value Storage (PRISM §5.2, "Garbage collection in
//! Value Storage"): a pure function from a snapshot of chunk usage to a [`GcChoice`]. The
//! mechanism that carries a choice out is [`super::ValueStorage::gc_step`].
//!
//! The policy is greedy, as in the paper: victims are the sealed chunks with the fewest
//! live values (ties broken by fewer live bytes, then by the older sequence number).
//! Chunks without live values are taken first and cost nothing to collect. Chunks with
//! live values are added while their live bytes still fit in one new chunk, and only when
//! at least two of them are chosen, since collecting one chunk into one chunk frees
//! nothing.
//!
//! Thread safety: pure functions.

/// What GC knows about one sealed chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkUsage {
    /// The chunk index.
    pub chunk: u32,
    /// Valid records in it.
    pub live_values: u32,
    /// Footprint bytes of its valid records.
    pub live_bytes: u64,
    /// The chunk's sequence number (smaller = written earlier).
    pub sequence: u64,
}

/// What one GC step should do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GcChoice {
    /// Nothing worth collecting.
    Nothing,
    /// Collect these chunks.
    Collect {
        /// Chunks with no live value: freed without copying.
        empty: Vec<u32>,
        /// Chunks whose live values are copied into one new chunk, then freed.
        victims: Vec<u32>,
        /// Footprint bytes to copy.
        live_bytes: u64,
    },
}

/// Chooses victims among `usage` (sealed chunks only). `payload_capacity` is the room for
/// records in one chunk; at most `max_victims` chunks with live values are chosen.
pub fn choose_victims(usage: &[ChunkUsage], payload_capacity: u64, max_victims: usize) -> GcChoice {
    let mut order: Vec<&ChunkUsage> = usage.iter().collect();
    order.sort_by_key(|u| (u.live_values, u.live_bytes, u.sequence, u.chunk));
    let empty: Vec<u32> = order
        .iter()
        .filter(|u| u.live_values == 0)
        .map(|u| u.chunk)
        .collect();
    let mut victims = Vec::new();
    let mut live_bytes = 0u64;
    for u in order.iter().filter(|u| u.live_values > 0) {
        if victims.len() >= max_victims {
            break;
        }
        if live_bytes + u.live_bytes <= payload_capacity {
            live_bytes += u.live_bytes;
            victims.push(u.chunk);
        }
    }
    if victims.len() < 2 {
        victims.clear();
        live_bytes = 0;
    }
    if empty.is_empty() && victims.is_empty() {
        GcChoice::Nothing
    } else {
        GcChoice::Collect {
            empty,
            victims,
            live_bytes,
        }
    }
}

/// True when GC should run: fewer than `threshold` free chunks.
pub fn needs_gc(free_chunks: usize, threshold: usize) -> bool {
    free_chunks < threshold
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(chunk: u32, live_values: u32, live_bytes: u64, sequence: u64) -> ChunkUsage {
        ChunkUsage {
            chunk,
            live_values,
            live_bytes,
            sequence,
        }
    }

    #[test]
    fn empty_chunks_are_taken_without_copying() {
        let c = choose_victims(&[u(1, 0, 0, 1), u(2, 100, 90_000, 2)], 100_000, 8);
        assert_eq!(
            c,
            GcChoice::Collect {
                empty: vec![1],
                victims: vec![],
                live_bytes: 0
            }
        );
    }

    #[test]
    fn greedy_picks_fewest_live_values_that_fit_one_chunk() {
        let usage = [
            u(1, 50, 50_000, 1),
            u(2, 10, 10_000, 2),
            u(3, 30, 30_000, 3),
            u(4, 20, 20_000, 4),
            u(5, 60, 60_000, 5),
        ];
        match choose_victims(&usage, 65_000, 8) {
            GcChoice::Collect {
                empty,
                victims,
                live_bytes,
            } => {
                assert!(empty.is_empty());
                assert_eq!(victims, vec![2, 4, 3]);
                assert_eq!(live_bytes, 60_000);
            }
            GcChoice::Nothing => panic!("expected victims"),
        }
    }

    #[test]
    fn one_live_victim_frees_nothing_so_none_is_chosen() {
        assert_eq!(
            choose_victims(&[u(1, 10, 60_000, 1), u(2, 20, 60_000, 2)], 100_000, 8),
            GcChoice::Nothing
        );
        assert_eq!(choose_victims(&[], 100_000, 8), GcChoice::Nothing);
    }

    #[test]
    fn ties_go_to_the_older_chunk_and_max_victims_is_respected() {
        let usage = [u(7, 5, 500, 9), u(8, 5, 500, 3), u(9, 5, 500, 6)];
        match choose_victims(&usage, 10_000, 2) {
            GcChoice::Collect { victims, .. } => assert_eq!(victims, vec![8, 9]),
            GcChoice::Nothing => panic!("expected victims"),
        }
    }

    #[test]
    fn gc_runs_below_the_free_threshold_only() {
        assert!(needs_gc(3, 4));
        assert!(!needs_gc(4, 4));
    }
}
