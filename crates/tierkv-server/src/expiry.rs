//! Key expiry: the clock, the queue of deadlines, and the active sweep.
//!
//! A key with a TTL is stored inside an expiry envelope ([`crate::encoding`], type `x`)
//! that carries its deadline (Unix time in ms), so the deadline is durable with the value
//! and survives restarts. Expired keys are removed three ways, as in Redis:
//! 1. *Invisible at once*: every read through the command context
//!    (`crate::commands`'s `Ctx::load`) checks the deadline and treats a passed one as a
//!    missing key;
//! 2. *Lazily*: that same read deletes the key;
//! 3. *Actively*: the [`Sweeper`], a thread owned by the server (started at bind, joined at
//!    shutdown before the store is closed), pops due deadlines from the [`ExpiryQueue`]
//!    (filled by every write that sets a TTL in this run) and also walks the whole
//!    keyspace a page per tick, so that keys given a TTL before a restart are found too
//!    (the element space of collections is jumped over: elements hold user bytes, never a
//!    deadline). On an unordered engine the walk goes by cursor
//!    ([`tierkv::Db::scan_cursor`], whole index shards of at least `WALK_PAGE` store
//!    keys per tick) and skips the element keys it meets instead of jumping over them.
//!    The same thread runs the walk that reclaims the elements of deleted collections
//!    ([`crate::reclaim`]).
//!
//! Every removal re-reads the key under its exclusive lock and deletes only if the stored
//! deadline has passed, so a key rewritten meanwhile (stale queue entry) survives.
//!
//! Thread-safety: the queue is one mutex (pushed by writers, popped by the sweeper); the
//! sweeper takes key locks like any command.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam::channel::{Receiver, RecvTimeoutError, Sender, bounded};
use parking_lot::Mutex;

use crate::encoding;
use crate::keyspace;
use crate::locks::Access;
use crate::shared::Shared;

/// Most deadlines queued; past this, new ones are not queued (lazy expiry and the walk
/// still remove those keys).
pub const MAX_QUEUED: usize = 1 << 20;
/// How often the sweeper wakes.
pub const TICK: Duration = Duration::from_millis(100);
/// Most due deadlines handled per tick.
const POPS_PER_TICK: usize = 2_000;
/// Keys examined per tick by the keyspace walk.
const WALK_PAGE: usize = 256;

/// Now, as Unix time in milliseconds.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// True when a value stored with `deadline` is expired at `now`.
pub fn expired(deadline: Option<u64>, now: u64) -> bool {
    deadline.is_some_and(|d| d <= now)
}

/// A queued deadline: (Unix ms, stored key), earliest on top.
type Due = Reverse<(u64, Vec<u8>)>;

/// The deadlines set in this run, earliest first.
#[derive(Debug, Default)]
pub struct ExpiryQueue {
    heap: Mutex<BinaryHeap<Due>>,
    /// Keys removed by expiry (lazily or by the sweep), for INFO.
    pub expired_keys: AtomicU64,
    /// Elements of deleted collections reclaimed ([`crate::reclaim`]), for INFO.
    pub reclaimed_elements: AtomicU64,
    /// Keys removed (any way): wakes the reclaiming walk ([`crate::reclaim::Reclaimer`]).
    pub removals: AtomicU64,
}

impl ExpiryQueue {
    /// Remembers that `key` (a stored key) expires at `at_ms`.
    pub fn push(&self, key: &[u8], at_ms: u64) {
        let mut h = self.heap.lock();
        if h.len() < MAX_QUEUED {
            h.push(Reverse((at_ms, key.to_vec())));
        }
    }

    /// Takes up to `max` entries due at `now`.
    fn pop_due(&self, now: u64, max: usize) -> Vec<Vec<u8>> {
        let mut h = self.heap.lock();
        let mut due = Vec::new();
        while due.len() < max && h.peek().is_some_and(|Reverse((at, _))| *at <= now) {
            if let Some(Reverse((_, k))) = h.pop() {
                due.push(k);
            }
        }
        due
    }

    /// Number of queued deadlines.
    pub fn len(&self) -> usize {
        self.heap.lock().len()
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Deletes `key` if its stored deadline has passed (under the key's exclusive lock);
/// true when it did.
pub fn remove_if_expired(shared: &Shared, key: &[u8]) -> Result<bool, tierkv::Error> {
    // Commands lock user keys, without their database prefix.
    let _g = shared
        .locks
        .lock([keyspace::lock_key(key)].into_iter(), Access::Write);
    let Some(v) = shared.db.get(key)? else {
        return Ok(false);
    };
    let deadline = encoding::split_expiry(&v).ok().and_then(|(d, _)| d);
    if !expired(deadline, now_ms()) {
        return Ok(false);
    }
    shared.db.delete(key)?;
    shared.locks.touch(keyspace::lock_key(key));
    crate::reclaim::Reclaimer::removed(&shared.expiry.removals);
    shared.expiry.expired_keys.fetch_add(1, Ordering::Relaxed);
    Ok(true)
}

/// The active sweep thread.
#[derive(Debug)]
pub struct Sweeper {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Sweeper {
    /// Starts the sweep over `shared`.
    pub fn start(shared: Arc<Shared>) -> std::io::Result<Sweeper> {
        let (tx, rx) = bounded::<()>(1);
        let thread = std::thread::Builder::new()
            .name("tierkv-expire".into())
            .spawn(move || sweep(&shared, &rx))?;
        Ok(Sweeper {
            stop: Some(tx),
            thread: Some(thread),
        })
    }

    /// Stops the sweep and waits for it.
    pub fn join(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        self.stop = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Sweeper {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

fn sweep(shared: &Shared, stop: &Receiver<()>) {
    let mut walk: Option<Bound<Vec<u8>>> = Some(Bound::Unbounded);
    let mut cursor = 0u64;
    let mut reclaim = crate::reclaim::Reclaimer::default();
    loop {
        match stop.recv_timeout(TICK) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        for key in shared.expiry.pop_due(now_ms(), POPS_PER_TICK) {
            if let Err(e) = remove_if_expired(shared, &key) {
                eprintln!("tierkv serve: expiring a key failed: {e}");
            }
        }
        if shared.db.ordered() {
            walk = walk.and_then(|from| walk_step(shared, from));
        } else {
            cursor = walk_cursor_step(shared, cursor);
        }
        reclaim.tick(shared);
    }
}

/// One page of the keyspace walk by cursor (unordered engines): removes the expired keys
/// among the store keys of whole shards from `cursor` on (element keys and the schema
/// adapters' keys skipped); returns the next cursor (0: the pass is over, the next starts).
fn walk_cursor_step(shared: &Shared, cursor: u64) -> u64 {
    let page = match shared.db.scan_cursor(cursor, WALK_PAGE) {
        Ok(page) => page,
        Err(e) => {
            eprintln!("tierkv serve: the expiry walk failed: {e}");
            return 0;
        }
    };
    let now = now_ms();
    let elements = keyspace::elements_start();
    for (k, v) in page.entries {
        if keyspace::adapter_prefix(&k).is_some() || k.starts_with(&elements) {
            continue;
        }
        let deadline = encoding::split_expiry(&v).ok().and_then(|(d, _)| d);
        if expired(deadline, now)
            && let Err(e) = remove_if_expired(shared, &k)
        {
            eprintln!("tierkv serve: expiring a key failed: {e}");
        }
    }
    page.next
}

/// One page of the keyspace walk; the next position, or `None` when the engine cannot
/// scan (the walk then stops for good). Wraps around at the end.
fn walk_step(shared: &Shared, from: Bound<Vec<u8>>) -> Option<Bound<Vec<u8>>> {
    let rows = match shared.db.scan((from, Bound::Unbounded), WALK_PAGE) {
        Ok(rows) => rows,
        Err(tierkv::Error::Unsupported(_)) => return None,
        Err(e) => {
            eprintln!("tierkv serve: the expiry walk failed: {e}");
            return Some(Bound::Unbounded);
        }
    };
    let now = now_ms();
    let full = rows.len() == WALK_PAGE;
    let mut last = None;
    for (k, v) in rows {
        // Elements and the schema adapters' catalog and rows carry user bytes, never a
        // deadline (a row's bytes could look like an expiry envelope): jump over them.
        let elements = keyspace::elements_start();
        let skip = keyspace::adapter_prefix(&k)
            .or_else(|| k.starts_with(&elements).then_some(elements.as_slice()));
        if let Some(prefix) = skip {
            return Some(match keyspace::successor(prefix) {
                Some(after) => Bound::Included(after),
                None => Bound::Unbounded,
            });
        }
        let deadline = encoding::split_expiry(&v).ok().and_then(|(d, _)| d);
        if expired(deadline, now)
            && let Err(e) = remove_if_expired(shared, &k)
        {
            eprintln!("tierkv serve: expiring a key failed: {e}");
        }
        last = Some(k);
    }
    Some(match last {
        Some(k) if full => Bound::Excluded(k),
        _ => Bound::Unbounded,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_pops_only_due_entries_in_deadline_order() {
        let q = ExpiryQueue::default();
        q.push(b"late", 300);
        q.push(b"early", 100);
        q.push(b"mid", 200);
        assert_eq!(q.pop_due(50, 10), Vec::<Vec<u8>>::new());
        assert_eq!(q.pop_due(200, 10), vec![b"early".to_vec(), b"mid".to_vec()]);
        assert_eq!(q.len(), 1);
        assert_eq!(q.pop_due(1_000, 10), vec![b"late".to_vec()]);
        assert!(q.is_empty());
    }

    #[test]
    fn expiry_is_inclusive_of_the_deadline() {
        assert!(!expired(None, 10));
        assert!(!expired(Some(11), 10));
        assert!(expired(Some(10), 10));
    }
}
