//! The verifier: what a key may hold given the expected state, checked for every get and
//! scan while the workload runs and for every key after each recovery (issue 5, items 1-2).
//!
//! # Windows
//! A read races with writers, so it is checked against a [`Window`]: the key's state loaded
//! just *before* the read and just *after* it (for a recovered store, both are the state at
//! the crash). With `lo` the version acknowledged before the read and `hi` the newest
//! version announced after it, the read may return:
//! - the value of any version in `lo..=hi`, whole and byte-exact (a value of another key, of
//!   a version older than `lo` — "acknowledged and lost" —, of a version never written, or
//!   a torn value is a [`Violation`]);
//! - nothing, when the key was absent at `lo` (deleted or never written) or a delete was
//!   announced after `lo`.
//!
//! In a quiescent store (`lo` = the acknowledged version, `hi` = `lo` or the one write in
//! flight at the crash) this is exactly "acknowledged writes survive, in-flight writes are
//! all or nothing". While writers run it may accept a little more than a linearizable
//! store could return (a delete announced just after the read returned), never less.
//!
//! Scans are checked the same way key by key, plus: keys strictly ascending, no key outside
//! the key space or never written (a phantom), and no key missing from the part of the key
//! space the scan covered when the key was present and acknowledged throughout the scan.
//!
//! After the per-key checks, [`verify_store`] checks every write batch of the round for
//! all-or-nothing ([`crate::batch`]: a torn batch is a violation).
//!
//! Thread safety: pure functions over a shared [`ExpectedState`]; any number of threads.

use std::ops::Bound;

use tierkv::{Db, Error};

use crate::batch::check_batches;
use crate::expected_state::{ExpectedState, KeySpace, KeyState, Observed};
use crate::fields::verify_rows;
use crate::race::{RaceLog, RaceWindow, ReadStart};
use crate::value_codec::{self, ValueSizes};

/// What a read loaded before it called the engine.
#[derive(Clone, Copy, Debug)]
pub struct ReadOpen {
    before: KeyState,
    race: Option<ReadStart>,
}

/// Opens the check of a read of key `id` (call before the engine).
pub fn open_read(state: &ExpectedState, id: u32) -> ReadOpen {
    ReadOpen {
        race: state.race().map(|r| r.read_start(id)),
        before: state.load(id),
    }
}

/// What one key may hold during one read or after a recovery: a [`Window`] when each key
/// has one writer, the linearizability rule of [`crate::race`] when writers race.
#[derive(Clone, Copy, Debug)]
pub enum Check<'a> {
    /// One writer per key.
    Exact(Window),
    /// Racing writers.
    Race(&'a RaceLog, RaceWindow, u32),
}

impl<'a> Check<'a> {
    /// Closes the check of a read opened with `open` (call after the engine returned).
    pub fn close(state: &'a ExpectedState, id: u32, open: ReadOpen) -> Self {
        match (state.race(), open.race) {
            (Some(log), Some(start)) => Check::Race(log, log.read_window(open.before, start), id),
            _ => Check::Exact(Window::close(state, id, open.before)),
        }
    }

    /// The check of key `id` of a quiescent store (recovered, or live with nothing running).
    pub fn quiescent(state: &'a ExpectedState, id: u32) -> Self {
        match state.race() {
            Some(log) => Check::Race(log, log.quiescent_window(id, state.load(id)), id),
            None => Check::Exact(Window::quiescent(state, id)),
        }
    }

    /// Checks what a read of key `id` returned (see [`Window::check`]).
    pub fn check(
        &self,
        space: KeySpace,
        sizes: &ValueSizes,
        id: u32,
        found: Option<&[u8]>,
    ) -> Result<Observed, (String, String)> {
        match self {
            Check::Exact(w) => w.check(space, sizes, id, found),
            Check::Race(log, w, _) => log.check(w, space, sizes, id, found),
        }
    }

    /// What the key may hold, in words.
    pub fn expected(&self) -> String {
        match self {
            Check::Exact(w) => w.expected(),
            Check::Race(log, w, id) => log.expected(w, *id),
        }
    }

    /// True when a scan covering the key must list it.
    pub fn must_be_listed(&self, space: KeySpace, sizes: &ValueSizes, id: u32) -> bool {
        match self {
            Check::Exact(w) => w.before == w.after && w.must_be_present(),
            Check::Race(..) => self.check(space, sizes, id, None).is_err(),
        }
    }

    /// True when a write to the key was in flight (at the crash, for a recovered store).
    pub fn in_flight(&self) -> bool {
        match self {
            Check::Exact(w) => w.before.pending.is_some(),
            Check::Race(log, _, id) => log.in_flight(*id),
        }
    }

    /// True when `found` is the acknowledged state rather than an in-flight write.
    pub fn is_acknowledged(&self, found: Observed) -> bool {
        match self {
            Check::Exact(w) => {
                found == Observed::Version(w.before.committed)
                    || (found == Observed::Absent && w.before.committed_absent())
            }
            Check::Race(log, w, id) => log.is_acknowledged(w, *id, found),
        }
    }
}

/// A broken guarantee: the key, what it should have held, what was found, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Where it was seen ("get during round 3", "recovery after round 7", ...).
    pub context: String,
    /// The key, as text.
    pub key: String,
    /// What the key was allowed to hold.
    pub expected: String,
    /// What was found.
    pub found: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "VIOLATION ({}) key {}: expected {}; found {}",
            self.context, self.key, self.expected, self.found
        )
    }
}

/// What one key may hold during one read (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// The key's state before the read.
    pub before: KeyState,
    /// The key's state after the read.
    pub after: KeyState,
    /// The last delete announced for the key, loaded after the read.
    pub last_delete: u32,
}

impl Window {
    /// The window of a key nobody is writing (a recovered store, or under the key's lock).
    pub fn quiescent(state: &ExpectedState, id: u32) -> Self {
        let s = state.load(id);
        Window {
            before: s,
            after: s,
            last_delete: state.last_delete(id),
        }
    }

    /// Closes a window opened with `before` (loaded before the read).
    pub fn close(state: &ExpectedState, id: u32, before: KeyState) -> Self {
        Window {
            before,
            after: state.load(id),
            last_delete: state.last_delete(id),
        }
    }

    fn lo(&self) -> u32 {
        self.before.committed
    }

    fn hi(&self) -> u32 {
        self.after.max_issued.max(self.lo())
    }

    /// True when the key may be absent.
    pub fn absent_allowed(&self) -> bool {
        self.before.committed_absent() || self.last_delete > self.lo()
    }

    /// True when the key must be present (acknowledged put, nothing announced since).
    pub fn must_be_present(&self) -> bool {
        !self.absent_allowed()
    }

    /// What the key may hold, in words.
    pub fn expected(&self) -> String {
        let lo = self.lo();
        let mut s = if self.before.committed == 0 {
            "absent (never written)".to_owned()
        } else if self.before.committed_delete {
            format!("absent (deleted at v#{lo}, acknowledged)")
        } else {
            format!("v#{lo} (acknowledged)")
        };
        let hi = self.hi();
        if hi == lo + 1 {
            let what = match self.after.pending {
                Some(p) if p.version == hi && p.delete => "a delete",
                Some(p) if p.version == hi => "a put",
                _ => "acknowledged during the read",
            };
            s.push_str(&format!(" or v#{hi} (in flight: {what})"));
        } else if hi > lo + 1 {
            s.push_str(&format!(
                " or any of v#{}..=v#{hi} (written during the read)",
                lo + 1
            ));
        }
        s
    }

    /// Checks what a read of key `id` returned. `Ok` says what it was.
    pub fn check(
        &self,
        space: KeySpace,
        sizes: &ValueSizes,
        id: u32,
        found: Option<&[u8]>,
    ) -> Result<Observed, (String, String)> {
        let key = space.key(id);
        let Some(bytes) = found else {
            return if self.absent_allowed() {
                Ok(Observed::Absent)
            } else {
                Err((self.expected(), "absent (acknowledged and lost)".to_owned()))
            };
        };
        let header = match value_codec::decode(bytes) {
            Ok(h) => h,
            Err(e) => return Err((self.expected(), e.to_string())),
        };
        if header.key_hash != value_codec::key_hash(&key) {
            return Err((self.expected(), describe_foreign(space, header)));
        }
        let v = header.version;
        if v < self.lo() {
            let why = if self.before.committed_delete {
                "resurrected after an acknowledged delete"
            } else {
                "older than acknowledged"
            };
            return Err((self.expected(), format!("v#{v} ({why})")));
        }
        if v > self.hi() {
            return Err((
                self.expected(),
                format!("v#{v} (a version never written: a phantom)"),
            ));
        }
        if !sizes.matches(&key, v, bytes) {
            return Err((
                self.expected(),
                format!(
                    "{} bytes with the header of v#{v} but other contents (or a version \
                     that was a delete)",
                    bytes.len()
                ),
            ));
        }
        Ok(Observed::Version(v))
    }
}

fn describe_foreign(space: KeySpace, h: value_codec::ValueHeader) -> String {
    let owner = (0..space.count()).find(|&i| value_codec::key_hash(&space.key(i)) == h.key_hash);
    match owner {
        Some(i) => format!(
            "v#{} of another key, {} ({} bytes)",
            h.version,
            KeySpace::show(&space.key(i)),
            h.len
        ),
        None => format!(
            "a value of an unknown key (key hash {:#010x}, v#{}, {} bytes)",
            h.key_hash, h.version, h.len
        ),
    }
}

/// Builds a [`Violation`].
pub fn violation(context: &str, key: &[u8], expected: String, found: String) -> Violation {
    Violation {
        context: context.to_owned(),
        key: KeySpace::show(key),
        expected,
        found,
    }
}

/// The violation of a store that cannot be reopened after a crash: every acknowledged
/// write is out of reach, so it is reported against every key at once.
pub fn unrecoverable(context: &str, dir: &std::path::Path, e: &Error) -> Violation {
    Violation {
        context: context.to_owned(),
        key: "(every key)".to_owned(),
        expected: format!(
            "the store in {} reopens with every acknowledged write",
            dir.display()
        ),
        found: format!("reopening failed: {e}"),
    }
}

/// The outcome of verifying a whole recovered store.
#[derive(Clone, Debug, Default)]
pub struct VerifyOutcome {
    /// Keys checked.
    pub keys_verified: u64,
    /// Keys found present.
    pub present: u64,
    /// The keys found present (key numbers) with the bytes each holds (key and value).
    pub present_keys: Vec<(u32, u64)>,
    /// Keys that had a write in flight at the crash.
    pub in_flight: u64,
    /// In-flight writes found applied.
    pub in_flight_applied: u64,
    /// Whether the full scan ran (false for engines without scans).
    pub scanned: bool,
    /// Write batches of the round checked for all-or-nothing ([`crate::batch`]).
    pub batches_checked: u64,
    /// Rows of the field workload checked ([`crate::fields`]).
    pub rows_verified: u64,
    /// Of those, rows with a field write in flight.
    pub rows_in_flight: u64,
    /// What was wrong.
    pub violations: Vec<Violation>,
}

impl VerifyOutcome {
    /// True when nothing was wrong.
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }
}

/// Verifies every key of a quiescent store (just recovered, or live after an injected
/// fault) against `state`, then a full scan (if the engine scans). With `resolve`, and when
/// nothing is wrong, resolves the in-flight writes to what was found, so the next round
/// starts exact (only after a recovery: a live store may show writes that are not durable).
/// Engine errors on reads count as violations (a recovered store must be readable).
pub fn verify_store(
    db: &Db,
    state: &ExpectedState,
    sizes: &ValueSizes,
    context: &str,
    resolve: bool,
) -> VerifyOutcome {
    let space = state.space();
    let mut out = VerifyOutcome::default();
    let mut seen = Vec::with_capacity(space.count() as usize);
    for id in 0..space.count() {
        let key = space.key(id);
        let w = Check::quiescent(state, id);
        out.keys_verified += 1;
        let pending = w.in_flight();
        if pending {
            out.in_flight += 1;
        }
        let found = match db.get(&key) {
            Ok(f) => f,
            Err(e) => {
                out.violations.push(violation(
                    context,
                    &key,
                    w.expected(),
                    format!("an error from get: {e}"),
                ));
                seen.push(None);
                continue;
            }
        };
        match w.check(space, sizes, id, found.as_deref()) {
            Ok(obs) => {
                // An acknowledged state means that any in-flight write was not applied.
                if pending && !w.is_acknowledged(obs) {
                    out.in_flight_applied += 1;
                }
                if matches!(obs, Observed::Version(_)) {
                    out.present += 1;
                    let bytes = found.as_ref().map_or(0, Vec::len) + key.len();
                    out.present_keys.push((id, bytes as u64));
                }
                seen.push(Some((obs, found)));
            }
            Err((expected, found)) => {
                out.violations
                    .push(violation(context, &key, expected, found));
                seen.push(None);
            }
        }
    }
    scan_all(db, space, &seen, context, &mut out);
    let observed: Vec<Option<Observed>> = seen.iter().map(|s| s.as_ref().map(|s| s.0)).collect();
    let (batches, torn) = check_batches(state, &observed, context);
    out.batches_checked = batches;
    out.violations.extend(torn);
    if let Some(fs) = state.fields() {
        // NOTE: rows resolve only when the keys are fine too (resolve && out.ok()).
        let rows = verify_rows(db, fs, context, resolve && out.ok());
        out.rows_verified = rows.rows;
        out.rows_in_flight = rows.in_flight;
        out.violations.extend(rows.violations);
    }
    if resolve && out.ok() {
        state.batches().reset();
        for (id, s) in seen.iter().enumerate() {
            if let (Some((obs, _)), Ok(id)) = (s, u32::try_from(id)) {
                state.resolve(id, *obs);
            }
        }
        if let Some(race) = state.race() {
            race.reset();
        }
    }
    out
}

type Seen = Option<(Observed, Option<Vec<u8>>)>;

/// The full scan of a quiescent store must list exactly what the gets found, in order.
fn scan_all(db: &Db, space: KeySpace, seen: &[Seen], context: &str, out: &mut VerifyOutcome) {
    let limit = space.count() as usize + 16;
    let all = (
        Bound::<Vec<u8>>::Unbounded,
        Bound::Excluded(crate::workload::RESERVED_FROM.to_vec()),
    );
    let rows = match db.scan::<Vec<u8>, _>(all, limit) {
        Ok(r) => r,
        Err(Error::Unsupported(_)) => return,
        Err(e) => {
            out.violations.push(violation(
                context,
                b"(full scan)",
                "a scan of the recovered store".to_owned(),
                format!("an error: {e}"),
            ));
            return;
        }
    };
    out.scanned = true;
    let ctx = format!("{context}, full scan");
    let mut prev: Option<&[u8]> = None;
    let mut listed = vec![false; seen.len()];
    for (k, v) in &rows {
        if let Some(p) = prev
            && p >= k.as_slice()
        {
            out.violations.push(violation(
                &ctx,
                k,
                "keys in strictly ascending order".to_owned(),
                format!("this key after {}", KeySpace::show(p)),
            ));
        }
        prev = Some(k);
        let Some(id) = space.id_of(k) else {
            out.violations.push(violation(
                &ctx,
                k,
                "no such key (outside the key space)".to_owned(),
                format!("a phantom with {} bytes", v.len()),
            ));
            continue;
        };
        if let Some(l) = listed.get_mut(id as usize) {
            *l = true;
        }
        match seen.get(id as usize) {
            Some(Some((_, Some(got)))) if got == v => {}
            Some(Some((_, got))) => out.violations.push(violation(
                &ctx,
                k,
                format!(
                    "what get returned ({})",
                    got.as_ref()
                        .map_or("absent".to_owned(), |g| format!("{} bytes", g.len()))
                ),
                format!("{} bytes that differ", v.len()),
            )),
            _ => {}
        }
    }
    for (id, s) in seen.iter().enumerate() {
        let missing = matches!(s, Some((_, Some(_)))) && !listed.get(id).copied().unwrap_or(true);
        if missing && let Ok(id) = u32::try_from(id) {
            out.violations.push(violation(
                &ctx,
                &space.key(id),
                "listed (get found it)".to_owned(),
                "missing from the scan".to_owned(),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (ExpectedState, ValueSizes, KeySpace) {
        let space = KeySpace::new(8);
        (ExpectedState::new(space), ValueSizes::default(), space)
    }

    fn put(st: &ExpectedState, id: u32) -> u32 {
        let v = st.begin_write(id, false).unwrap();
        st.commit(id, v);
        v
    }

    #[test]
    fn acknowledged_value_passes_and_older_one_is_lost() {
        let (st, sizes, space) = setup();
        let v1 = put(&st, 3);
        let v2 = put(&st, 3);
        let w = Window::quiescent(&st, 3);
        let key = space.key(3);
        assert_eq!(
            w.check(space, &sizes, 3, Some(&sizes.value(&key, v2))),
            Ok(Observed::Version(v2))
        );
        let (exp, found) = w
            .check(space, &sizes, 3, Some(&sizes.value(&key, v1)))
            .unwrap_err();
        assert_eq!(exp, "v#2 (acknowledged)");
        assert_eq!(found, "v#1 (older than acknowledged)");
        let (_, found) = w.check(space, &sizes, 3, None).unwrap_err();
        assert_eq!(found, "absent (acknowledged and lost)");
    }

    #[test]
    fn in_flight_put_may_be_old_or_new_but_whole() {
        let (st, sizes, space) = setup();
        let v1 = put(&st, 1);
        let v2 = st.begin_write(1, false).unwrap();
        let w = Window::quiescent(&st, 1);
        let key = space.key(1);
        for v in [v1, v2] {
            assert_eq!(
                w.check(space, &sizes, 1, Some(&sizes.value(&key, v))),
                Ok(Observed::Version(v))
            );
        }
        assert!(w.check(space, &sizes, 1, None).is_err());
        let mut torn = sizes.value(&key, v2);
        let n = torn.len();
        torn[n - 1] ^= 1;
        let (exp, found) = w.check(space, &sizes, 1, Some(&torn)).unwrap_err();
        assert_eq!(exp, "v#1 (acknowledged) or v#2 (in flight: a put)");
        assert!(found.starts_with("torn or corrupt"), "{found}");
    }

    #[test]
    fn in_flight_delete_allows_absence_and_acked_delete_refuses_the_value() {
        let (st, sizes, space) = setup();
        let v1 = put(&st, 2);
        let d = st.begin_write(2, true).unwrap();
        let key = space.key(2);
        let w = Window::quiescent(&st, 2);
        assert_eq!(w.check(space, &sizes, 2, None), Ok(Observed::Absent));
        assert!(
            w.check(space, &sizes, 2, Some(&sizes.value(&key, v1)))
                .is_ok()
        );
        st.commit(2, d);
        let w = Window::quiescent(&st, 2);
        let (exp, found) = w
            .check(space, &sizes, 2, Some(&sizes.value(&key, v1)))
            .unwrap_err();
        assert_eq!(exp, "absent (deleted at v#2, acknowledged)");
        assert_eq!(found, "v#1 (resurrected after an acknowledged delete)");
    }

    #[test]
    fn another_keys_value_and_a_future_version_are_named() {
        let (st, sizes, space) = setup();
        put(&st, 4);
        let w = Window::quiescent(&st, 4);
        let other = sizes.value(&space.key(5), 1);
        let (_, found) = w.check(space, &sizes, 4, Some(&other)).unwrap_err();
        assert!(found.contains("another key, k00000005"), "{found}");
        let future = sizes.value(&space.key(4), 9);
        let (_, found) = w.check(space, &sizes, 4, Some(&future)).unwrap_err();
        assert!(found.contains("never written"), "{found}");
        let never = Window::quiescent(&st, 6);
        assert_eq!(never.expected(), "absent (never written)");
        assert_eq!(never.check(space, &sizes, 6, None), Ok(Observed::Absent));
    }

    #[test]
    fn a_window_spanning_several_writes_accepts_each_of_them() {
        let (st, sizes, space) = setup();
        let before = {
            put(&st, 0);
            st.load(0)
        };
        let v2 = put(&st, 0);
        let v3 = st.begin_write(0, true).unwrap();
        let w = Window::close(&st, 0, before);
        let key = space.key(0);
        assert!(
            w.check(space, &sizes, 0, Some(&sizes.value(&key, v2)))
                .is_ok()
        );
        assert_eq!(w.check(space, &sizes, 0, None), Ok(Observed::Absent));
        assert!(w.expected().contains(&format!("v#2..=v#{v3}")));
    }
}
