//! Write batches in the workload and the rule that judges them (issue 24: "the oracle
//! treats a batch as one write"; DESIGN §2, `KvStore::write_batch`).
//!
//! A batch op of the workload writes several distinct keys (puts of fresh versions and
//! deletes) with one [`tierkv::Db::write`]. Each of its writes is announced and
//! acknowledged key by key through the expected state exactly like a single put or delete
//! (so the per-key rules — one write per key, or the racing writers' linearizability rule —
//! judge every read and every recovered key as before), and the batch as a whole is
//! recorded here ([`BatchLog`]) before the engine is called.
//!
//! # The batch rule
//! After a crash (or on a quiescent live store after an injected fault), every batch of
//! the round is classified key by key by what recovery found ([`Relation`]):
//! - **applied**: the key holds the batch's own put (its version is unique to the batch);
//! - **before**: the key holds a state that was complete before the batch's write to it
//!   began — a version of a write that returned before the batch was called (one writer
//!   per key: any lower version; racing writers: a write whose acknowledgement tick is
//!   below the batch write's begin tick), the state carried over from the last recovery,
//!   or absence when every delete of the key returned before the batch began;
//! - **unknown**: anything else (a later or overlapping write superseded the batch's write,
//!   or the batch's delete, whose absence cannot be told from an earlier one).
//!
//! A batch with one key *applied* and another *before* is **torn**: the recovered store
//! shows part of it and not the rest, with no later write to explain the difference. That
//! is a violation, reported against the key that missed the batch. Acknowledged batches
//! lost entirely are caught by the per-key rule (an acknowledged write lost).
//!
//! Thread safety: the log is behind a mutex; workers append, the verifier reads.

use parking_lot::Mutex;

use crate::expected_state::{ExpectedState, KeySpace, Observed};
use crate::verify::{Violation, violation};

/// Most keys one batch of the stress workload writes (the kill child's pipe line for a
/// batch must stay under `PIPE_BUF`).
pub const MAX_STRESS_BATCH: usize = 100;

/// One write of a batch: key number, version, put or delete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchWrite {
    /// Key number.
    pub id: u32,
    /// The version this batch writes to the key.
    pub version: u32,
    /// True for a delete.
    pub delete: bool,
}

/// The batches of the current round (cleared when recovery resolves the round).
#[derive(Debug, Default)]
pub struct BatchLog {
    batches: Mutex<Vec<Vec<BatchWrite>>>,
}

impl BatchLog {
    /// Records a batch (call before the engine is called).
    pub fn record(&self, writes: Vec<BatchWrite>) {
        self.batches.lock().push(writes);
    }

    /// Batches recorded this round.
    pub fn len(&self) -> usize {
        self.batches.lock().len()
    }

    /// True when no batch was recorded this round.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The batches recorded this round.
    pub fn all(&self) -> Vec<Vec<BatchWrite>> {
        self.batches.lock().clone()
    }

    /// Replaces the log with `batches` (a copy of the state at a crash point).
    pub fn replace(&self, batches: Vec<Vec<BatchWrite>>) {
        *self.batches.lock() = batches;
    }

    /// Forgets the round.
    pub fn reset(&self) {
        self.batches.lock().clear();
    }
}

/// How what a key holds relates to one write of a batch (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Relation {
    /// The key holds the batch's put.
    Applied,
    /// The key holds a state complete before the batch's write to it began.
    Before,
    /// Neither can be told.
    Unknown,
}

/// The relation under one writer per key: versions of a key are issued under its lock, so
/// a lower version returned before the batch (which holds the locks of all its keys) began.
pub(crate) fn relation_by_version(found: Observed, w: &BatchWrite, last_delete: u32) -> Relation {
    match found {
        Observed::Version(v) if v == w.version && !w.delete => Relation::Applied,
        Observed::Version(v) if v < w.version => Relation::Before,
        Observed::Absent if !w.delete && last_delete < w.version => Relation::Before,
        _ => Relation::Unknown,
    }
}

/// Checks every batch of the round against what a quiescent store holds: `seen[id]` is
/// what key `id` was found to hold (`None` when its per-key check already failed).
pub fn check_batches(
    state: &ExpectedState,
    seen: &[Option<Observed>],
    context: &str,
) -> (u64, Vec<Violation>) {
    let space = state.space();
    let mut out = Vec::new();
    let batches = state.batches().all();
    for b in &batches {
        let mut applied = None;
        let mut before = None;
        for w in b {
            let Some(Some(found)) = seen.get(w.id as usize) else {
                continue;
            };
            match state.relation(*found, w) {
                Relation::Applied => applied = applied.or(Some((w, *found))),
                Relation::Before => before = before.or(Some((w, *found))),
                Relation::Unknown => {}
            }
        }
        if let (Some((a, _)), Some((m, found))) = (applied, before) {
            out.push(torn(space, b, a, m, found, context));
        }
    }
    (batches.len() as u64, out)
}

fn show_write(space: KeySpace, w: &BatchWrite) -> String {
    let what = if w.delete { "delete" } else { "put" };
    format!(
        "{} v#{} ({what})",
        KeySpace::show(&space.key(w.id)),
        w.version
    )
}

fn torn(
    space: KeySpace,
    batch: &[BatchWrite],
    applied: &BatchWrite,
    missed: &BatchWrite,
    found: Observed,
    context: &str,
) -> Violation {
    const SHOWN: usize = 8;
    let mut writes: Vec<String> = batch
        .iter()
        .take(SHOWN)
        .map(|w| show_write(space, w))
        .collect();
    if batch.len() > SHOWN {
        writes.push(format!("{} more", batch.len() - SHOWN));
    }
    let held = match found {
        Observed::Version(v) => format!("v#{v}"),
        Observed::Absent => "absent".to_owned(),
    };
    violation(
        context,
        &space.key(missed.id),
        format!(
            "all or none of the batch of {} writes [{}]",
            batch.len(),
            writes.join(", ")
        ),
        format!(
            "{held}, from before the batch's v#{}, while {} holds the batch's v#{} (a torn \
             batch)",
            missed.version,
            KeySpace::show(&space.key(applied.id)),
            applied.version
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(id: u32, version: u32, delete: bool) -> BatchWrite {
        BatchWrite {
            id,
            version,
            delete,
        }
    }

    /// One writer per key: key 0 and 1 acknowledged at v1; a batch writes v2 to both and
    /// a delete (v2) of key 2, and is in flight at the crash.
    fn one_writer_history() -> (ExpectedState, Vec<BatchWrite>) {
        let st = ExpectedState::new(KeySpace::new(4));
        for id in 0..3 {
            let v = st.begin_write(id, false).unwrap();
            st.commit(id, v);
        }
        let writes: Vec<BatchWrite> = [(0, false), (1, false), (2, true)]
            .into_iter()
            .map(|(id, delete)| w(id, st.begin_write(id, delete).unwrap(), delete))
            .collect();
        st.batches().record(writes.clone());
        (st, writes)
    }

    #[test]
    fn a_whole_batch_or_none_of_it_passes() {
        let (st, _) = one_writer_history();
        let all = [
            Some(Observed::Version(2)),
            Some(Observed::Version(2)),
            Some(Observed::Absent),
            Some(Observed::Absent),
        ];
        let none = [
            Some(Observed::Version(1)),
            Some(Observed::Version(1)),
            Some(Observed::Version(1)),
            Some(Observed::Absent),
        ];
        for seen in [all, none] {
            let (n, v) = check_batches(&st, &seen, "t");
            assert_eq!(n, 1);
            assert!(v.is_empty(), "{seen:?}: {v:?}");
        }
    }

    #[test]
    fn one_put_applied_and_another_missing_is_a_torn_batch() {
        let (st, _) = one_writer_history();
        let seen = [
            Some(Observed::Version(2)),
            Some(Observed::Version(1)),
            Some(Observed::Absent),
            None,
        ];
        let (_, v) = check_batches(&st, &seen, "recovery");
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].key, "k00000001");
        assert!(v[0].found.contains("torn batch"), "{}", v[0]);
        assert!(
            v[0].found.contains("k00000000 holds the batch's v#2"),
            "{}",
            v[0]
        );
        assert!(v[0].expected.contains("k00000002 v#2 (delete)"), "{}", v[0]);
    }

    #[test]
    fn a_put_applied_and_the_batchs_delete_missing_is_torn_too() {
        let (st, _) = one_writer_history();
        let seen = [
            Some(Observed::Version(2)),
            Some(Observed::Version(2)),
            Some(Observed::Version(1)),
            None,
        ];
        let (_, v) = check_batches(&st, &seen, "t");
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].key, "k00000002");
    }

    #[test]
    fn a_key_overwritten_after_the_batch_says_nothing() {
        let (st, writes) = one_writer_history();
        for x in &writes {
            st.commit(x.id, x.version);
        }
        // Key 1 is deleted after the batch (acknowledged); key 0 rewritten and in flight.
        let d = st.begin_write(1, true).unwrap();
        st.commit(1, d);
        st.begin_write(0, false).unwrap();
        let seen = [
            Some(Observed::Version(3)),
            Some(Observed::Absent),
            Some(Observed::Absent),
            None,
        ];
        assert!(check_batches(&st, &seen, "t").1.is_empty());
        // Key 0's in-flight v3 lost and the batch's v2 there; key 1 absent through the
        // later delete: nothing torn either.
        let seen = [
            Some(Observed::Version(2)),
            Some(Observed::Absent),
            Some(Observed::Absent),
            None,
        ];
        assert!(check_batches(&st, &seen, "t").1.is_empty());
    }

    #[test]
    fn absence_is_before_a_put_only_when_no_later_delete_explains_it() {
        assert_eq!(
            relation_by_version(Observed::Absent, &w(0, 5, false), 3),
            Relation::Before
        );
        assert_eq!(
            relation_by_version(Observed::Absent, &w(0, 5, false), 6),
            Relation::Unknown
        );
        assert_eq!(
            relation_by_version(Observed::Absent, &w(0, 5, true), 5),
            Relation::Unknown
        );
        assert_eq!(
            relation_by_version(Observed::Version(5), &w(0, 5, false), 0),
            Relation::Applied
        );
        assert_eq!(
            relation_by_version(Observed::Version(7), &w(0, 5, false), 0),
            Relation::Unknown
        );
    }

    #[test]
    fn racing_writers_a_write_that_overlapped_the_batch_says_nothing() {
        let st = ExpectedState::new(KeySpace::new(2)).racing();
        let race = st.race().unwrap();
        // Key 1: v1 acknowledged before the batch; v2 (a racing put) begins before the
        // batch's v3 and is acknowledged after it began.
        let v1 = st.begin_write(1, false).unwrap();
        st.commit(1, v1);
        let v2 = st.begin_write(1, false).unwrap();
        let b0 = st.begin_write(0, false).unwrap();
        let b1 = st.begin_write(1, false).unwrap();
        st.batches().record(vec![w(0, b0, false), w(1, b1, false)]);
        st.commit(1, v2);
        race.mark_cut();
        let overlapped = [Some(Observed::Version(b0)), Some(Observed::Version(v2))];
        assert!(check_batches(&st, &overlapped, "t").1.is_empty());
        let torn = [Some(Observed::Version(b0)), Some(Observed::Version(v1))];
        let (_, v) = check_batches(&st, &torn, "t");
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].key, "k00000001");
    }

    #[test]
    fn racing_writers_absence_from_a_delete_done_before_the_batch_is_before() {
        let st = ExpectedState::new(KeySpace::new(2)).racing();
        let p = st.begin_write(0, false).unwrap();
        st.commit(0, p);
        let d = st.begin_write(0, true).unwrap();
        st.commit(0, d);
        let b0 = st.begin_write(0, false).unwrap();
        let b1 = st.begin_write(1, false).unwrap();
        st.batches().record(vec![w(0, b0, false), w(1, b1, false)]);
        st.mark_cut();
        let torn = [Some(Observed::Absent), Some(Observed::Version(b1))];
        assert_eq!(check_batches(&st, &torn, "t").1.len(), 1);
        // A racing delete that overlaps the batch explains the absence.
        let st2 = ExpectedState::new(KeySpace::new(2)).racing();
        let d = st2.begin_write(0, true).unwrap();
        let b0 = st2.begin_write(0, false).unwrap();
        let b1 = st2.begin_write(1, false).unwrap();
        st2.batches().record(vec![w(0, b0, false), w(1, b1, false)]);
        st2.commit(0, d);
        st2.mark_cut();
        let ok = [Some(Observed::Absent), Some(Observed::Version(b1))];
        assert!(check_batches(&st2, &ok, "t").1.is_empty());
    }
}
