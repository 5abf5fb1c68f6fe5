//! The recent SWAPDBs, as WATCH needs them (issue 25; Redis 7.0's
//! `touchAllWatchedKeysInDb`, called by `dbSwapDatabases` for both databases).
//!
//! Redis fails a transaction across `SWAPDB a b` only when one of its watched keys was
//! watched in database `a` or `b` *and* exists in either of the two databases at the time
//! of the swap (before or after it: the same two sets of keys). Watches of keys that exist
//! in neither, and watches in other databases, survive.
//!
//! The server does not keep a table of every client's watched keys for SWAPDB to walk.
//! Instead SWAPDB appends one [`Swap`] here (under every key lock), and EXEC, holding its
//! watched keys' stripes, asks for the swaps since each key's WATCH that involve the
//! key's database, and checks the key's existence in the two *physical* databases of each
//! ([`crate::dbmap`]). That is the existence at the time of the swap, because
//! - a swap moves no key: it exchanges two entries of the database map, so the two
//!   physical databases hold after the swap what they held before;
//! - EXEC only gets here when the stripe version of the key is unchanged since WATCH
//!   ([`crate::locks`]), and every write or delete of the key in any database bumps it, so
//!   the key's stored entries are the same now as at the swap;
//! - an entry whose deadline passed between the swap and EXEC existed at the swap: the
//!   check compares the deadline with the swap's time ([`Swap::at_ms`]), not with now.
//!
//! The log keeps the last [`SwapLog::KEPT`] swaps. A watch older than the oldest kept
//! swap cannot be checked and fails EXEC (a spurious abort: the client retries, as after
//! any lost race; never a missed change).
//!
//! Thread-safety: a mutex around a short deque; written by SWAPDB, read by EXEC.

use std::collections::VecDeque;
use std::sync::Mutex;

/// One SWAPDB.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Swap {
    /// Its number (the first swap of a run is 1).
    pub seq: u64,
    /// The two logical databases exchanged.
    pub logical: [u8; 2],
    /// The physical databases that held them (the same two before and after).
    pub physical: [u8; 2],
    /// When it happened, Unix ms.
    pub at_ms: u64,
}

#[derive(Debug, Default)]
struct Inner {
    /// Number of the last swap (0: none yet).
    seq: u64,
    /// The last swaps, oldest first.
    recent: VecDeque<Swap>,
}

/// The log of recent swaps.
#[derive(Debug, Default)]
pub struct SwapLog {
    inner: Mutex<Inner>,
}

impl SwapLog {
    /// Swaps kept for EXEC to check.
    pub const KEPT: usize = 1024;

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The number of the last swap: what WATCH remembers.
    pub fn seq(&self) -> u64 {
        self.inner().seq
    }

    /// Records the swap of logical databases `logical`, held by the physical databases
    /// `physical`, at `at_ms` (the caller holds every key lock).
    pub fn record(&self, logical: [u8; 2], physical: [u8; 2], at_ms: u64) {
        let mut inner = self.inner();
        inner.seq += 1;
        let seq = inner.seq;
        if inner.recent.len() == Self::KEPT {
            inner.recent.pop_front();
        }
        inner.recent.push_back(Swap {
            seq,
            logical,
            physical,
            at_ms,
        });
    }

    /// The swaps after number `since` that exchanged logical database `db`, oldest first;
    /// `None` when some swap after `since` is no longer kept (the caller must assume the
    /// worst).
    pub fn since(&self, since: u64, db: u8) -> Option<Vec<Swap>> {
        let inner = self.inner();
        if inner.seq == since {
            return Some(Vec::new());
        }
        let oldest = inner.recent.front().map_or(u64::MAX, |s| s.seq);
        if since + 1 < oldest {
            return None;
        }
        Some(
            inner
                .recent
                .iter()
                .filter(|s| s.seq > since && s.logical.contains(&db))
                .copied()
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swaps_since_a_watch_are_those_of_its_database() {
        let log = SwapLog::default();
        assert_eq!(log.since(0, 0), Some(vec![]));
        log.record([0, 1], [0, 1], 10);
        let watched = log.seq();
        log.record([2, 3], [2, 3], 20);
        log.record([1, 0], [1, 0], 30);
        assert_eq!(watched, 1);
        let for_0 = log.since(watched, 0).unwrap();
        assert_eq!(for_0.len(), 1);
        assert_eq!((for_0[0].seq, for_0[0].at_ms), (3, 30));
        assert_eq!(log.since(watched, 2).unwrap().len(), 1);
        assert_eq!(log.since(watched, 5), Some(vec![]));
        assert_eq!(log.since(0, 0).unwrap().len(), 2);
    }

    #[test]
    fn a_watch_older_than_the_kept_swaps_cannot_be_checked() {
        let log = SwapLog::default();
        for i in 0..SwapLog::KEPT + 2 {
            log.record([4, 5], [4, 5], i as u64);
        }
        let kept_from = log.seq() - SwapLog::KEPT as u64;
        assert_eq!(log.since(kept_from, 9), Some(vec![]));
        assert_eq!(log.since(kept_from - 1, 9), None);
        assert_eq!(log.since(log.seq(), 4), Some(vec![]));
    }
}
