//! Racing writers (issue 17, item 1): several threads write the same key at once, so the
//! expected state can no longer be "the one acknowledged version plus the one in flight".
//! This module keeps, per key, the history of the writes of the current round — each with
//! the logical time it was announced (before the engine was called) and acknowledged
//! (after it returned) — and judges reads and recovered stores by linearizability.
//!
//! # Logical time
//! One process-wide counter ([`RaceLog::tick`], SeqCst). A write takes its `begin` tick
//! *before* it calls the engine and its `ack` tick *after* the engine returned, so
//! `w.ack < a.begin` proves that `w` returned before `a` was called (real-time order
//! `w → a`). The kill parent replays the child's pipe messages in arrival order with its
//! own ticks: an announcement is written before the call and an acknowledgement after it,
//! and one pipe keeps the order of the writes made to it, so the same reasoning holds.
//!
//! # The rule (the stress README states it for users)
//! The *frontier* of a key at a moment is the latest `begin` among its writes acknowledged
//! by then (0 if none; the state carried over from the previous round counts as a write
//! acknowledged at time 0). A write `w` is *superseded* at that moment when it was
//! acknowledged before the frontier (`w.ack < frontier`): some acknowledged write started
//! after `w` returned, so `w` can no longer be the key's latest value.
//!
//! - **After a crash at tick `cut`** (acknowledgements after `cut` do not count: those
//!   writes may have been persisted after the image), a key may hold exactly the value of a
//!   write (a delete: absence) that is not superseded: the last acknowledged write (latest
//!   `begin`), any write that overlapped it (acknowledged after it began), or any write
//!   still in flight. Nothing older, nothing never written.
//! - **A read** (get, or one key of a scan) that loaded the frontier `f` before calling the
//!   engine and took the tick `end` after it returned may return exactly the value of a
//!   write that began before `end` and was not superseded at `f`. This is the per-read
//!   condition of linearizability for a register with unique values (a read must not return
//!   a value overwritten before it began, nor one written after it returned); the harness
//!   does not search for one linearisation of all reads together.
//!
//! Thread safety: one mutex per key guards its history; the clock is an atomic.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use tierkv_testkit::{RacingWrite, ReadBounds};

use crate::batch::{BatchWrite, Relation};
use crate::expected_state::{KeySpace, KeyState, MAX_VERSION, Observed, VersionsExhausted};
use crate::value_codec::{self, ValueSizes};

/// One write of the current round.
type Rec = RacingWrite;

#[derive(Debug, Default)]
struct Hist {
    /// The latest `begin` of an acknowledged write (0: none this round).
    frontier: u64,
    writes: BTreeMap<u32, Rec>,
}

/// The write histories of every key for one round (see the module doc).
#[derive(Debug)]
pub struct RaceLog {
    clock: AtomicU64,
    /// Acknowledgements with a tick after this do not count (a crash is being cut).
    cut: AtomicU64,
    keys: Box<[Mutex<Hist>]>,
}

/// When a read started: the key's frontier, loaded before the engine was called.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadStart {
    frontier: u64,
}

/// What a read, or a recovered key, may return: the carried-over state and the rule's
/// bounds ([`ReadBounds`], shared with `tierkv-testkit`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaceWindow {
    /// The key's carried-over state (its acknowledged value before this round).
    pub base: KeyState,
    /// The frontier, end and cut of the rule.
    pub bounds: ReadBounds,
}

impl RaceLog {
    /// Empty histories for `space`.
    pub fn new(space: KeySpace) -> Self {
        RaceLog {
            clock: AtomicU64::new(0),
            cut: AtomicU64::new(u64::MAX),
            keys: (0..space.count()).map(|_| Mutex::default()).collect(),
        }
    }

    /// The next logical moment (never 0).
    pub fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::SeqCst) + 1
    }

    fn hist(&self, id: u32) -> &Mutex<Hist> {
        debug_assert!((id as usize) < self.keys.len());
        self.keys.get(id as usize).unwrap_or_else(|| &self.keys[0])
    }

    /// Announces a write to key `id` whose word is `word` (max_issued updated by the
    /// caller with the returned version); call before the engine.
    pub(crate) fn begin(
        &self,
        id: u32,
        delete: bool,
        max_issued: impl FnOnce() -> u32,
        publish: impl FnOnce(u32),
    ) -> Result<u32, VersionsExhausted> {
        let mut h = self.hist(id).lock();
        let issued = max_issued();
        if issued >= MAX_VERSION {
            return Err(VersionsExhausted(id));
        }
        let version = issued + 1;
        publish(version);
        h.writes.insert(
            version,
            Rec {
                delete,
                begin: self.tick(),
                ack: None,
            },
        );
        Ok(version)
    }

    /// Records a write announced elsewhere (the kill parent replaying its child).
    pub(crate) fn begin_known(&self, id: u32, version: u32, delete: bool) {
        let begin = self.tick();
        self.hist(id).lock().writes.insert(
            version,
            Rec {
                delete,
                begin,
                ack: None,
            },
        );
    }

    /// Records the acknowledgement of `version` of key `id`; call after the engine returned.
    pub(crate) fn ack(&self, id: u32, version: u32) {
        let mut h = self.hist(id).lock();
        // IMPORTANT: the frontier moves under the lock, before a reader can load it, and
        // only after the engine returned: a reader that sees it started after the return.
        let t = self.tick();
        if let Some(r) = h.writes.get_mut(&version) {
            r.ack = Some(t);
            let b = r.begin;
            h.frontier = h.frontier.max(b);
        }
    }

    /// Loads what a read of key `id` needs before it calls the engine.
    pub fn read_start(&self, id: u32) -> ReadStart {
        ReadStart {
            frontier: self.hist(id).lock().frontier,
        }
    }

    /// Closes a read opened with `start` (call after the engine returned).
    pub fn read_window(&self, base: KeyState, start: ReadStart) -> RaceWindow {
        RaceWindow {
            base,
            bounds: ReadBounds::live(start.frontier, self.tick()),
        }
    }

    /// The power is being cut now: later acknowledgements do not count.
    pub fn mark_cut(&self) {
        let t = self.tick();
        self.cut.store(t, Ordering::SeqCst);
    }

    /// The window of key `id` in a quiescent store: after a crash (acknowledgements after
    /// the cut are in flight), or live with nothing running.
    pub fn quiescent_window(&self, id: u32, base: KeyState) -> RaceWindow {
        let cut = self.cut.load(Ordering::SeqCst);
        let h = self.hist(id).lock();
        RaceWindow {
            base,
            bounds: ReadBounds::after_crash(h.writes.values().map(Rec::span), cut),
        }
    }

    /// Forgets the round: every key was resolved to what recovery found.
    pub fn reset(&self) {
        for h in self.keys.iter() {
            *h.lock() = Hist::default();
        }
        self.cut.store(u64::MAX, Ordering::SeqCst);
    }

    /// True when key `id` has a write in flight (unacknowledged, or acknowledged after the
    /// cut).
    pub fn in_flight(&self, id: u32) -> bool {
        let cut = self.cut.load(Ordering::SeqCst);
        self.hist(id)
            .lock()
            .writes
            .values()
            .any(|r| r.ack.is_none_or(|a| a >= cut))
    }

    /// Checks what a read (or a recovered key) returned against `w`.
    pub fn check(
        &self,
        w: &RaceWindow,
        space: KeySpace,
        sizes: &ValueSizes,
        id: u32,
        found: Option<&[u8]>,
    ) -> Result<Observed, (String, String)> {
        let h = self.hist(id).lock();
        let key = space.key(id);
        let Some(bytes) = found else {
            let base_ok = w.base.committed_absent() && w.base_allowed();
            let delete_ok = h.writes.values().any(|r| r.delete && w.allows(r));
            return if base_ok || delete_ok {
                Ok(Observed::Absent)
            } else {
                Err((w.describe(&h), "absent (acknowledged and lost)".to_owned()))
            };
        };
        let header = match value_codec::decode(bytes) {
            Ok(hd) => hd,
            Err(e) => return Err((w.describe(&h), e.to_string())),
        };
        if header.key_hash != value_codec::key_hash(&key) {
            return Err((
                w.describe(&h),
                format!("a value of another key ({header:?})"),
            ));
        }
        let v = header.version;
        let verdict = match h.writes.get(&v) {
            Some(r) if r.delete => Err(format!("v#{v} (a version that was a delete)")),
            Some(r) if w.allows(r) => Ok(()),
            Some(r) if r.begin >= w.bounds.end => Err(format!(
                "v#{v} (written after the read returned: a phantom)"
            )),
            Some(_) => Err(format!(
                "v#{v} (older than acknowledged: a write that began after it returned was \
                 acknowledged)"
            )),
            None if v == w.base.committed && !w.base.committed_delete => {
                if w.base_allowed() {
                    Ok(())
                } else {
                    Err(format!(
                        "v#{v} (older than acknowledged: the previous round's value, \
                         overwritten)"
                    ))
                }
            }
            None if v < w.base.committed => Err(format!("v#{v} (older than acknowledged)")),
            None => Err(format!("v#{v} (a version never written: a phantom)")),
        };
        if let Err(found) = verdict {
            return Err((w.describe(&h), found));
        }
        if !sizes.matches(&key, v, bytes) {
            return Err((
                w.describe(&h),
                format!(
                    "{} bytes with the header of v#{v} but other contents",
                    bytes.len()
                ),
            ));
        }
        Ok(Observed::Version(v))
    }

    /// How `found` (what key `w.id` holds) relates to the batch write `w`: a write
    /// acknowledged before `w` began (or the carried-over state) is *before* it; a
    /// write that overlapped it or came after says nothing (see [`crate::batch`]).
    pub fn relation(&self, found: Observed, w: &BatchWrite) -> Relation {
        let h = self.hist(w.id).lock();
        let Some(x) = h.writes.get(&w.version) else {
            return Relation::Unknown;
        };
        let done_before = |r: &Rec| r.ack.is_some_and(|a| a < x.begin);
        match found {
            Observed::Version(v) if v == w.version && !w.delete => Relation::Applied,
            Observed::Version(v) => match h.writes.get(&v) {
                Some(r) if done_before(r) => Relation::Before,
                Some(_) => Relation::Unknown,
                // The carried-over state: acknowledged at time 0.
                None => Relation::Before,
            },
            Observed::Absent if w.delete => Relation::Unknown,
            Observed::Absent => {
                if h.writes.values().all(|r| !r.delete || done_before(r)) {
                    Relation::Before
                } else {
                    Relation::Unknown
                }
            }
        }
    }

    /// What key `id` may hold in `w`, in words.
    pub fn expected(&self, w: &RaceWindow, id: u32) -> String {
        w.describe(&self.hist(id).lock())
    }

    /// True when `found` is a write acknowledged (before the cut) rather than in flight.
    pub fn is_acknowledged(&self, w: &RaceWindow, id: u32, found: Observed) -> bool {
        let h = self.hist(id).lock();
        let acked = |r: &Rec| w.bounds.counted_ack(r.span()).is_some();
        match found {
            Observed::Version(v) => h.writes.get(&v).is_none_or(acked),
            Observed::Absent => {
                w.base.committed_absent() && w.base_allowed()
                    || h.writes
                        .values()
                        .any(|r| r.delete && acked(r) && w.allows(r))
            }
        }
    }
}

impl RaceWindow {
    fn allows(&self, r: &Rec) -> bool {
        self.bounds.allows(r.span())
    }

    /// The carried-over state is a write acknowledged at time 0.
    fn base_allowed(&self) -> bool {
        self.bounds.allows_initial()
    }

    fn describe(&self, h: &Hist) -> String {
        let mut out = Vec::new();
        if self.base_allowed() {
            out.push(if self.base.committed == 0 {
                "absent (never written)".to_owned()
            } else if self.base.committed_delete {
                format!(
                    "absent (deleted at v#{}, acknowledged)",
                    self.base.committed
                )
            } else {
                format!("v#{} (acknowledged)", self.base.committed)
            });
        }
        for (v, r) in h.writes.iter().filter(|(_, r)| self.allows(r)) {
            let how = if self.bounds.counted_ack(r.span()).is_some() {
                "acknowledged"
            } else {
                "in flight"
            };
            out.push(if r.delete {
                format!("absent (v#{v}: a delete, {how})")
            } else {
                format!("v#{v} ({how})")
            });
        }
        if out.is_empty() {
            return "nothing (no write is allowed: a harness bug)".to_owned();
        }
        const SHOWN: usize = 6;
        let more = out.len().saturating_sub(SHOWN);
        out.truncate(SHOWN);
        let mut s = out.join(" or ");
        if more > 0 {
            s.push_str(&format!(" or {more} more"));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (RaceLog, KeySpace, ValueSizes) {
        let space = KeySpace::new(4);
        (RaceLog::new(space), space, ValueSizes::default())
    }

    fn begin(log: &RaceLog, id: u32, v: u32, delete: bool) {
        log.begin_known(id, v, delete);
    }

    fn value(space: KeySpace, sizes: &ValueSizes, id: u32, v: u32) -> Vec<u8> {
        sizes.value(&space.key(id), v)
    }

    #[test]
    fn after_a_crash_the_last_acked_write_and_its_overlaps_are_allowed_not_older_ones() {
        let (log, space, sizes) = setup();
        let base = KeyState::default();
        // v1 acked; then v2 and v3 race (v3 begins before v2 is acked); v4 in flight.
        begin(&log, 0, 1, false);
        log.ack(0, 1);
        begin(&log, 0, 2, false);
        begin(&log, 0, 3, true);
        log.ack(0, 2);
        log.ack(0, 3);
        begin(&log, 0, 4, false);
        log.mark_cut();
        let w = log.quiescent_window(0, base);
        let get = |v: u32| log.check(&w, space, &sizes, 0, Some(&value(space, &sizes, 0, v)));
        assert!(get(1).is_err(), "v1 was overwritten by acked writes");
        assert_eq!(get(2), Ok(Observed::Version(2)));
        assert_eq!(get(4), Ok(Observed::Version(4)));
        assert_eq!(
            log.check(&w, space, &sizes, 0, None),
            Ok(Observed::Absent),
            "the racing delete v3 may win"
        );
        let (exp, found) = get(5).unwrap_err();
        assert!(found.contains("never written"), "{found}");
        assert!(exp.starts_with("v#2 (acknowledged)"), "{exp}");
    }

    #[test]
    fn a_write_acked_after_the_cut_is_in_flight() {
        let (log, space, sizes) = setup();
        begin(&log, 1, 1, false);
        log.ack(1, 1);
        begin(&log, 1, 2, true);
        log.mark_cut();
        log.ack(1, 2);
        let w = log.quiescent_window(1, KeyState::default());
        assert!(
            log.check(&w, space, &sizes, 1, Some(&value(space, &sizes, 1, 1)))
                .is_ok()
        );
        assert!(log.check(&w, space, &sizes, 1, None).is_ok());
        assert!(log.in_flight(1));
    }

    #[test]
    fn a_lost_racing_winner_is_a_violation() {
        let (log, space, sizes) = setup();
        // v1 and v2 overlap; v2 acked; then v3 begins after both acked and is acked.
        begin(&log, 2, 1, false);
        begin(&log, 2, 2, false);
        log.ack(2, 1);
        log.ack(2, 2);
        begin(&log, 2, 3, false);
        log.ack(2, 3);
        log.mark_cut();
        let w = log.quiescent_window(2, KeyState::default());
        for v in [1, 2] {
            let (_, found) = log
                .check(&w, space, &sizes, 2, Some(&value(space, &sizes, 2, v)))
                .unwrap_err();
            assert!(found.contains("older than acknowledged"), "{found}");
        }
        let (_, found) = log.check(&w, space, &sizes, 2, None).unwrap_err();
        assert_eq!(found, "absent (acknowledged and lost)");
    }

    #[test]
    fn a_read_may_not_return_a_value_overwritten_before_it_began_nor_one_from_after_it() {
        let (log, space, sizes) = setup();
        let base = KeyState {
            committed: 5,
            ..KeyState::default()
        };
        begin(&log, 3, 6, false);
        log.ack(3, 6);
        let start = log.read_start(3);
        begin(&log, 3, 7, false); // concurrent with the read
        let w = log.read_window(base, start);
        begin(&log, 3, 8, false); // after the read returned
        let get = |v: u32| log.check(&w, space, &sizes, 3, Some(&value(space, &sizes, 3, v)));
        assert!(
            get(5).is_err(),
            "the base was overwritten by v6 before the read"
        );
        assert!(get(6).is_ok() && get(7).is_ok());
        let (_, found) = get(8).unwrap_err();
        assert!(found.contains("after the read returned"), "{found}");
        assert!(log.check(&w, space, &sizes, 3, None).is_err());
    }
}
