//! Reclaiming the elements of deleted collections (issue 25 item 4; Kvrocks's
//! compaction filter, done here by a walk).
//!
//! DEL, an overwrite, a flush or the expiry of a collection removes or replaces its
//! metadata record only (the commands' collection layer), so it is O(1); its
//! elements, whose keys carry the generation the metadata named, are garbage from then
//! on: no read looks at a generation no metadata names. This walk, run by the server's
//! sweep thread ([`crate::expiry::Sweeper`], started at bind and joined at shutdown),
//! goes over the element space ([`crate::keyspace::elements_start`]) a page per tick.
//! For each run of elements sharing a prefix (one key's generation) it takes the key's
//! lock (shared: writers of the key are excluded, so a collection being written — its
//! elements before its metadata on an engine without batches — is seen whole) and looks
//! the metadata up: when it names this generation and has not expired, the walk jumps
//! past the whole run; otherwise it deletes the run's elements (in one write batch per
//! page where the engine has them). A dead generation never comes back (generations are
//! unique, [`crate::shared::Shared::new_generation`]), so deleting after the lock is
//! released is safe.
//!
//! A pass over the whole element space costs a metadata read per live collection, so the
//! walk does not run without end: after a pass that found nothing to delete it rests
//! until a key was removed since the pass began (`Reclaimer::hint`, bumped by every
//! key removal: DEL, expiry, a collection emptied, FLUSHDB) or [`REST`] passed (an
//! overwrite of a collection by another type bumps nothing; the rest bounds how long its
//! elements wait). The first pass runs at start, for garbage left by a crash.
//!
//! # Unordered engines
//! An engine whose index is unordered cannot scan the element space; the walk goes over
//! the whole store by cursor instead ([`tierkv::Db::scan_cursor`]: whole index shards,
//! at least [`PAGE`] store keys per page, [`PAGES_PER_TICK`] pages per tick) and looks at
//! the element keys it meets. The elements of one collection are spread over the shards,
//! so liveness is decided per element key, by the same check under the same lock (cached
//! per prefix within a page); the argument above holds unchanged (a dead generation never
//! comes back, so an element found dead stays dead). A pass costs O(store keys) there.
//! With this walk, DEL of a collection is O(1) on every engine (lists used to delete
//! their elements one by one there, and an overwrite or expiry leaked them).
//!
//! Thread-safety: runs on the sweep thread; takes key locks like a command.

use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tierkv::WriteBatch;

use crate::encoding::{self, Stored};
use crate::expiry::{expired, now_ms};
use crate::keyspace;
use crate::locks::Access;
use crate::shared::Shared;

/// Element keys examined per page.
pub const PAGE: usize = 1024;
/// Pages per tick at most.
pub const PAGES_PER_TICK: usize = 4;

/// How long the walk rests after a pass that deleted nothing, unless keys are removed.
pub const REST: Duration = Duration::from_secs(5);

/// The walk's state, kept by the sweep thread.
#[derive(Debug)]
pub struct Reclaimer {
    /// Where the walk goes on; `None` once the engine turned out not to scan.
    pos: Option<Vec<u8>>,
    /// Where the walk goes on on an unordered engine (a store cursor; 0 starts a pass).
    cursor: u64,
    /// [`Reclaimer::hint`] when the current pass began.
    pass_hint: u64,
    /// Whether the current pass deleted anything.
    pass_deleted: bool,
    /// Resting until then (or until the hint moves).
    rest_until: Option<Instant>,
}

impl Default for Reclaimer {
    fn default() -> Reclaimer {
        Reclaimer {
            pos: Some(keyspace::elements_start()),
            cursor: 0,
            pass_hint: 0,
            pass_deleted: false,
            rest_until: None,
        }
    }
}

impl Reclaimer {
    /// The removal counter the walk watches (bumped by [`Reclaimer::removed`]).
    fn hint(shared: &Shared) -> u64 {
        shared.expiry.removals.load(Ordering::Relaxed)
    }

    /// Notes that a key was removed (its elements, if it had any, are now garbage).
    pub fn removed(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// One tick of the walk.
    pub fn tick(&mut self, shared: &Shared) {
        if let Some(until) = self.rest_until {
            if Instant::now() < until && Self::hint(shared) == self.pass_hint {
                return;
            }
            self.rest_until = None;
            self.pass_hint = Self::hint(shared);
            self.pass_deleted = false;
        }
        let before = shared.expiry.reclaimed_elements.load(Ordering::Relaxed);
        let wrapped = if shared.db.ordered() {
            let Some(from) = self.pos.take() else {
                return;
            };
            let Some((next, wrapped)) = step(shared, from) else {
                return;
            };
            self.pos = Some(next);
            wrapped
        } else {
            let (next, wrapped) = cursor_step(shared, self.cursor);
            self.cursor = next;
            wrapped
        };
        self.pass_deleted |= shared.expiry.reclaimed_elements.load(Ordering::Relaxed) != before;
        if wrapped {
            if !self.pass_deleted && Self::hint(shared) == self.pass_hint {
                self.rest_until = Some(Instant::now() + REST);
            }
            self.pass_hint = Self::hint(shared);
            self.pass_deleted = false;
        }
    }
}

/// True when the metadata under `db`/`key` names `generation` and has not expired.
fn live(shared: &Shared, db: u8, key: &[u8], generation: u64) -> Result<bool, tierkv::Error> {
    let _g = shared.locks.lock([key].into_iter(), Access::Read);
    let Some(v) = shared.db.get(&keyspace::user_key(db, key))? else {
        return Ok(false);
    };
    let Ok((deadline, _)) = encoding::split_expiry(&v) else {
        // Not something this server wrote: leave its elements alone.
        return Ok(true);
    };
    Ok(match encoding::decode(&v) {
        Ok(Stored::Meta(m)) => m.generation == generation && !expired(deadline, now_ms()),
        Ok(_) => false,
        Err(_) => true,
    })
}

/// Up to [`PAGES_PER_TICK`] pages of the walk from `from`: the next position and whether
/// the walk reached the end (it then starts over), or `None` when the engine cannot scan.
fn step(shared: &Shared, mut from: Vec<u8>) -> Option<(Vec<u8>, bool)> {
    for _ in 0..PAGES_PER_TICK {
        match page(shared, &from) {
            Ok(Some(next)) => from = next,
            Ok(None) => return Some((keyspace::elements_start(), true)),
            Err(tierkv::Error::Unsupported(_)) => return None,
            Err(e) => {
                eprintln!("tierkv serve: reclaiming elements failed: {e}");
                return Some((keyspace::elements_start(), true));
            }
        }
    }
    Some((from, false))
}

/// Up to [`PAGES_PER_TICK`] pages of the walk by cursor (unordered engines) from
/// `cursor`: the next cursor and whether the pass ended (the next one then starts at 0).
fn cursor_step(shared: &Shared, mut cursor: u64) -> (u64, bool) {
    for _ in 0..PAGES_PER_TICK {
        match cursor_page(shared, cursor) {
            Ok(0) => return (0, true),
            Ok(next) => cursor = next,
            Err(e) => {
                eprintln!("tierkv serve: reclaiming elements failed: {e}");
                return (0, true);
            }
        }
    }
    (cursor, false)
}

/// One page of the walk by cursor: deletes the dead element keys among the store keys of
/// whole shards from `cursor` on; returns the next cursor (0: the pass is over).
fn cursor_page(shared: &Shared, cursor: u64) -> Result<u64, tierkv::Error> {
    let page = shared.db.scan_cursor(cursor, PAGE)?;
    let mut alive: std::collections::HashMap<Vec<u8>, bool> = std::collections::HashMap::new();
    let mut dead: Vec<Vec<u8>> = Vec::new();
    for (k, _) in page.entries {
        let Some(e) = keyspace::parse_element(&k) else {
            continue;
        };
        let prefix = k.get(..e.prefix_len).unwrap_or_default();
        let live_now = match alive.get(prefix) {
            Some(a) => *a,
            None => {
                let a = live(shared, e.db, e.key, e.generation)?;
                alive.insert(prefix.to_vec(), a);
                a
            }
        };
        if !live_now {
            dead.push(k);
        }
    }
    for chunk in dead.chunks(tierkv::MAX_BATCH_OPS) {
        delete(shared, chunk)?;
    }
    Ok(page.next)
}

/// One page; `Ok(None)` at the end of the element space.
fn page(shared: &Shared, from: &[u8]) -> Result<Option<Vec<u8>>, tierkv::Error> {
    let start = keyspace::elements_start();
    let end = keyspace::successor(&start).map_or(Bound::Unbounded, Bound::Excluded);
    let rows = shared
        .db
        .scan((Bound::Included(from.to_vec()), end), PAGE)?;
    let full = rows.len() == PAGE;
    let mut dead: Vec<Vec<u8>> = Vec::new();
    // The run being looked at: its prefix and whether it is live.
    let mut run: Option<(Vec<u8>, bool)> = None;
    let mut next = None;
    for (k, _) in rows {
        let Some(e) = keyspace::parse_element(&k) else {
            next = Some(keyspace::after(&k));
            continue;
        };
        let prefix = k.get(..e.prefix_len).unwrap_or_default();
        let alive = match &run {
            Some((p, alive)) if p.as_slice() == prefix => *alive,
            _ => {
                let alive = live(shared, e.db, e.key, e.generation)?;
                run = Some((prefix.to_vec(), alive));
                alive
            }
        };
        if alive {
            // Jump over the rest of a live collection.
            next = keyspace::successor(prefix);
            break;
        }
        next = Some(keyspace::after(&k));
        dead.push(k);
    }
    delete(shared, &dead)?;
    let alive_jump = run.as_ref().is_some_and(|(_, alive)| *alive);
    Ok(if full || alive_jump { next } else { None })
}

fn delete(shared: &Shared, keys: &[Vec<u8>]) -> Result<(), tierkv::Error> {
    if keys.is_empty() {
        return Ok(());
    }
    if shared.db.atomic_batches() {
        let mut b = WriteBatch::new();
        for k in keys {
            b.delete(k.as_slice());
        }
        shared.db.write(&b)?;
    } else {
        for k in keys {
            shared.db.delete(k)?;
        }
    }
    shared
        .expiry
        .reclaimed_elements
        .fetch_add(keys.len() as u64, Ordering::Relaxed);
    Ok(())
}
