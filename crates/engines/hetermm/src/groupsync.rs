//! Group commit of log persists (ours, issue 22; HeterMM §5.3 writes each entry with two
//! persists of its own).
//!
//! Writers call [`GroupSync::persist`] for the lines of their log entry once they have
//! stored them. The first caller becomes the *leader*: it takes every range queued so far
//! and persists them, while callers that arrive meanwhile queue their ranges for the next
//! group; when the leader is done it wakes its group, and one of the waiting callers leads
//! the next. So N concurrent writers pay about two persists, not N: with emulated latency
//! the group pays it once. (In msync mode the kernel merges concurrent `msync`s itself, and
//! letting them overlap measured faster: [`GroupSync::groups`].) A group's ranges are
//! persisted as one span when they lie close together (volatile and msync mode).
//!
//! Why it is safe (FORMAT.md § Writes, group commit): a caller's range joins a group only
//! after the caller stored its bytes, and the group's persist starts after the leader took
//! the queue, so it covers every store of every member; a member returns only once its
//! group's persist has returned. Persisting a wider span than asked makes other lines
//! durable early, which the media model allows at any time (unpersisted lines may reach the
//! media in any order).
//!
//! In `Tracked` mode the leader persists each range on its own (crash images stay exact);
//! `Dax` mode, msync mode without emulated latency and a volatile pool without it do not
//! group at all ([`GroupSync::groups`]).
//!
//! Thread safety: `Send + Sync`; one mutex and condition variable.

use parking_lot::{Condvar, Mutex};
use tierkv_core::media::pmem::{DurabilityMode, PmemPool};
use tierkv_core::{Counter, Error, Result};

/// Spans up to this many bytes are persisted as one range in msync and volatile mode.
const MAX_SPAN: u64 = 64 << 20;

#[derive(Debug, Default)]
struct SyncState {
    /// Ranges of the group now collecting.
    queue: Vec<(u64, usize)>,
    /// Number of the group now collecting.
    open: u64,
    /// Every group numbered up to this one has been persisted.
    finished: u64,
    /// A leader is persisting.
    leading: bool,
    /// The first persist that failed (the pool is poisoned then).
    failed: Option<String>,
}

/// Group commit of persists (see the module doc).
#[derive(Debug)]
pub struct GroupSync {
    /// Off: every persist is the caller's own (option `group_commit=off`).
    enabled: bool,
    state: Mutex<SyncState>,
    done: Condvar,
    /// Persist calls made by leaders.
    pub persists: Counter,
    /// Ranges persisted (requests).
    pub requests: Counter,
}

impl Default for GroupSync {
    fn default() -> Self {
        GroupSync::new(true)
    }
}

impl GroupSync {
    /// A combiner, grouping (`enabled`) or not.
    pub fn new(enabled: bool) -> GroupSync {
        GroupSync {
            enabled,
            state: Mutex::new(SyncState {
                open: 1,
                ..SyncState::default()
            }),
            done: Condvar::new(),
            persists: Counter::default(),
            requests: Counter::default(),
        }
    }

    /// Makes every store to `[off, off + len)` made before this call durable, persisting it
    /// together with the ranges of concurrent callers.
    pub fn persist(&self, pool: &PmemPool, off: u64, len: usize) -> Result<()> {
        self.requests.incr();
        if !self.enabled || !Self::groups(pool) {
            self.persists.incr();
            return pool.persist(off, len);
        }
        let mut st = self.state.lock();
        st.queue.push((off, len));
        let mine = st.open;
        loop {
            if let Some(why) = &st.failed {
                return Err(Error::Poisoned(why.clone()));
            }
            if st.finished >= mine {
                return Ok(());
            }
            if st.leading {
                self.done.wait(&mut st);
                continue;
            }
            st.leading = true;
            let group = st.open;
            st.open += 1;
            let ranges = std::mem::take(&mut st.queue);
            drop(st);
            let r = self.persist_ranges(pool, &ranges);
            st = self.state.lock();
            st.leading = false;
            st.finished = group;
            if let Err(e) = r {
                st.failed.get_or_insert_with(|| e.to_string());
            }
            self.done.notify_all();
        }
    }

    /// Whether persists are grouped on this pool: with emulated persist latency (each call
    /// pays it) and in Tracked mode (so that the crash-image tests run the grouped path).
    /// Not in msync mode: the kernel already merges concurrent `msync`s of one file (their
    /// journal commit and device flush), and overlapping them measured faster than one
    /// leader at a time (issue 22: YCSB load 5.5k vs 4.6k puts/s, A 7.6k vs 4.2k ops/s at 4
    /// threads). Not on a volatile pool without latency (a persist does nothing there, and
    /// one mutex for every writer would only cost) nor in Dax mode (each range needs its
    /// own cache-line write-backs; only the fence would be shared).
    fn groups(pool: &PmemPool) -> bool {
        match pool.mode() {
            DurabilityMode::Tracked => true,
            DurabilityMode::Volatile | DurabilityMode::Msync => pool.latency().persist_ns > 0,
            DurabilityMode::Dax => false,
        }
    }

    fn persist_ranges(&self, pool: &PmemPool, ranges: &[(u64, usize)]) -> Result<()> {
        let lo = ranges.iter().map(|r| r.0).min().unwrap_or(0);
        let hi = ranges.iter().map(|r| r.0 + r.1 as u64).max().unwrap_or(0);
        let one_span = matches!(
            pool.mode(),
            DurabilityMode::Msync | DurabilityMode::Volatile
        ) && hi - lo <= MAX_SPAN;
        if one_span || ranges.len() == 1 {
            self.persists.incr();
            return pool.persist(lo, (hi - lo) as usize);
        }
        for &(off, len) in ranges {
            self.persists.incr();
            pool.persist(off, len)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tierkv_core::media::pmem::{EmulatedLatency, PmemConfig};

    fn pool(mode: DurabilityMode, persist_ns: u32) -> (tempfile::TempDir, Arc<PmemPool>) {
        let dir = tempfile::tempdir().unwrap();
        let pool = PmemPool::create(&PmemConfig {
            path: dir.path().join("p"),
            size: 4 << 20,
            mode,
            latency: EmulatedLatency {
                persist_ns,
                ..EmulatedLatency::default()
            },
        })
        .unwrap();
        (dir, pool)
    }

    /// Concurrent callers share persists: with a slow persist, 8 threads × 20 requests take
    /// far fewer than 160 persist calls, and every request returns Ok.
    #[test]
    fn concurrent_persists_are_grouped() {
        let (_dir, pool) = pool(DurabilityMode::Volatile, 2_000_000);
        let g = GroupSync::default();
        let base = pool.data_start();
        std::thread::scope(|s| {
            for t in 0..8u64 {
                let (g, pool) = (&g, &pool);
                s.spawn(move || {
                    for i in 0..20u64 {
                        let off = base + (t * 20 + i) * 64;
                        pool.write(off, &[1u8; 64]).unwrap();
                        g.persist(pool, off, 64).unwrap();
                    }
                });
            }
        });
        assert_eq!(g.requests.get(), 160);
        assert!(
            g.persists.get() < 100,
            "{} persist calls for 160 requests",
            g.persists.get()
        );
    }

    /// In Tracked mode each range is persisted on its own, and what a caller asked for is
    /// in the persisted image when it returns.
    #[test]
    fn a_returned_persist_is_in_the_tracked_image() {
        let (_dir, pool) = pool(DurabilityMode::Tracked, 0);
        let g = GroupSync::default();
        let off = pool.data_start() + 4096;
        pool.write(off, &[7u8; 64]).unwrap();
        g.persist(&pool, off, 64).unwrap();
        let image = pool
            .crash_image(1, tierkv_core::media::pmem::CrashImageOptions::lines())
            .unwrap();
        assert_eq!(&image[off as usize..off as usize + 64], &[7u8; 64]);
    }
}
