//! The expected state: what every key must hold, and which writes to it are in flight
//! (issue 5, item 1; modelled on RocksDB's `db_stress_tool/expected_state.h`).
//!
//! One 64-bit word per key ([`KeyState`]), plus the version of the last delete issued:
//!
//! ```text
//! bits  0..28  committed        version of the last acknowledged write (0: never written)
//! bit   28     committed_delete the last acknowledged write was a delete
//! bit   29     pending          a write is in flight (announced, not yet acknowledged)
//! bit   30     pending_delete   the write in flight is a delete
//! bits 32..60  max_issued       the newest version ever announced for the key
//! ```
//!
//! Protocol (one writer per key at a time: callers hold the key's lock, see
//! [`crate::workload`]): [`ExpectedState::begin_write`] announces a new version (sets the
//! pending bits) *before* the engine is called; [`ExpectedState::commit`] records it as
//! acknowledged *after* the call returned. A pending write is always the newest version
//! issued (`max_issued`). A crash leaves the pending bits set: the write may be present or
//! absent (but whole). After recovery the verifier [`ExpectedState::resolve`]s each key to
//! what it found, so the next round starts exact again. Versions are never reused, so a
//! value lost at one crash cannot be mistaken for a later write.
//!
//! Thread safety: every method takes `&self`; words are atomics (SeqCst: the harness's
//! bookkeeping is not what is being measured). Readers may load a key's word while its
//! writer updates it; the verifier's windows ([`crate::verify::Window`]) are built from a
//! load before and a load after the read they check.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::batch::{BatchLog, BatchWrite, Relation, relation_by_version};
use crate::fields::{FieldConfig, FieldState};
use crate::race::RaceLog;

/// The largest version a key can reach (28 bits).
pub const MAX_VERSION: u32 = (1 << 28) - 1;

const VERSION_MASK: u64 = MAX_VERSION as u64;
const COMMITTED_DELETE: u64 = 1 << 28;
const PENDING: u64 = 1 << 29;
const PENDING_DELETE: u64 = 1 << 30;
const MAX_ISSUED_SHIFT: u32 = 32;

/// The keys of a run: `k00000000`, `k00000001`, ... (ordered as their numbers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeySpace {
    count: u32,
}

/// Length of every key.
pub const KEY_LEN: usize = 9;

impl KeySpace {
    /// `count` keys (at least one).
    pub fn new(count: u32) -> Self {
        KeySpace {
            count: count.max(1),
        }
    }
    /// How many keys.
    pub fn count(&self) -> u32 {
        self.count
    }
    /// The key with number `id`.
    pub fn key(&self, id: u32) -> Vec<u8> {
        format!("k{id:08}").into_bytes()
    }
    /// The number of `key`, if it is one of this key space's keys.
    pub fn id_of(&self, key: &[u8]) -> Option<u32> {
        let digits = key.strip_prefix(b"k")?;
        if digits.len() != KEY_LEN - 1 || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let id: u32 = std::str::from_utf8(digits).ok()?.parse().ok()?;
        (id < self.count).then_some(id)
    }
    /// The key as text, for reports.
    pub fn show(key: &[u8]) -> String {
        String::from_utf8_lossy(key).into_owned()
    }
}

/// A write announced but not (yet) acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pending {
    /// Its version (always the key's `max_issued`).
    pub version: u32,
    /// True for a delete.
    pub delete: bool,
}

/// One key's expected state, decoded from its word.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyState {
    /// Version of the last acknowledged write; 0 when the key was never written.
    pub committed: u32,
    /// The last acknowledged write was a delete.
    pub committed_delete: bool,
    /// The write in flight, if any.
    pub pending: Option<Pending>,
    /// The newest version ever announced.
    pub max_issued: u32,
}

impl KeyState {
    /// True when the acknowledged state is "absent" (deleted or never written).
    pub fn committed_absent(&self) -> bool {
        self.committed == 0 || self.committed_delete
    }

    fn encode(&self) -> u64 {
        let mut w = u64::from(self.committed) & VERSION_MASK;
        if self.committed_delete {
            w |= COMMITTED_DELETE;
        }
        if let Some(p) = self.pending {
            w |= PENDING;
            if p.delete {
                w |= PENDING_DELETE;
            }
        }
        w | ((u64::from(self.max_issued) & VERSION_MASK) << MAX_ISSUED_SHIFT)
    }

    fn decode(w: u64) -> Self {
        let max_issued = ((w >> MAX_ISSUED_SHIFT) & VERSION_MASK) as u32;
        KeyState {
            committed: (w & VERSION_MASK) as u32,
            committed_delete: w & COMMITTED_DELETE != 0,
            pending: (w & PENDING != 0).then_some(Pending {
                version: max_issued,
                delete: w & PENDING_DELETE != 0,
            }),
            max_issued,
        }
    }
}

/// What recovery found under a key, as far as the expected state cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observed {
    /// The key is absent.
    Absent,
    /// The key holds this version's value.
    Version(u32),
}

/// A key ran out of versions (2^28 writes to one key).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VersionsExhausted(pub u32);

impl std::fmt::Display for VersionsExhausted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "key number {} has used all {MAX_VERSION} versions; start a new run",
            self.0
        )
    }
}

/// The expected state of every key of a [`KeySpace`].
#[derive(Debug)]
pub struct ExpectedState {
    space: KeySpace,
    words: Box<[AtomicU64]>,
    last_delete: Box<[AtomicU32]>,
    /// With racing writers: the round's write histories (the words then hold the state
    /// carried over from the last recovery, and `max_issued`).
    race: Option<RaceLog>,
    /// The round's write batches (see [`crate::batch`]).
    batches: BatchLog,
    /// The rows of the field workload (see [`crate::fields`]), when it runs.
    fields: Option<FieldState>,
}

impl ExpectedState {
    /// Every key never written.
    pub fn new(space: KeySpace) -> Self {
        let n = space.count() as usize;
        ExpectedState {
            space,
            words: (0..n).map(|_| AtomicU64::new(0)).collect(),
            last_delete: (0..n).map(|_| AtomicU32::new(0)).collect(),
            race: None,
            batches: BatchLog::default(),
            fields: None,
        }
    }

    /// The same state with rows of the field workload, never written (see
    /// [`crate::fields`]); `None` leaves it without.
    pub fn with_fields(mut self, cfg: Option<FieldConfig>) -> Self {
        self.fields = cfg.map(FieldState::new);
        self
    }

    /// The rows of the field workload, when it runs.
    pub fn fields(&self) -> Option<&FieldState> {
        self.fields.as_ref()
    }

    /// Replaces the field state with a copy of `other`'s at this instant (a crash image
    /// taken now: writes not acknowledged are in flight).
    pub fn copy_fields_at_cut(&mut self, other: &ExpectedState) {
        self.fields = other.fields().map(FieldState::copy_at_cut);
    }

    /// Takes the field state back to what was acknowledged in `before` (see
    /// [`FieldState::rewind_to`]).
    pub fn rewind_fields(&mut self, before: Option<&FieldState>) {
        if let (Some(f), Some(b)) = (self.fields.as_mut(), before) {
            f.rewind_to(b);
        }
    }

    /// The round's write batches.
    pub fn batches(&self) -> &BatchLog {
        &self.batches
    }

    /// How what key `w.id` holds (`found`, already checked by the per-key rule) relates
    /// to the batch write `w` (see [`crate::batch`]).
    pub fn relation(&self, found: Observed, w: &BatchWrite) -> Relation {
        match &self.race {
            Some(race) => race.relation(found, w),
            None => relation_by_version(found, w, self.last_delete(w.id)),
        }
    }

    /// The same state, for racing writers (several writes to a key in flight at once,
    /// judged by [`crate::race`]'s linearizability rule).
    pub fn racing(mut self) -> Self {
        self.race = Some(RaceLog::new(self.space));
        self
    }

    /// The write histories, when writers race.
    pub fn race(&self) -> Option<&RaceLog> {
        self.race.as_ref()
    }

    /// The key space.
    pub fn space(&self) -> KeySpace {
        self.space
    }

    fn word(&self, id: u32) -> &AtomicU64 {
        // NOTE: ids come from the key space (`KeySpace::id_of` or a range below `count`);
        // an id out of range is a harness bug, and index 0 is a harmless stand-in.
        debug_assert!(id < self.space.count());
        self.words
            .get(id as usize)
            .unwrap_or_else(|| &self.words[0])
    }

    fn delete_word(&self, id: u32) -> &AtomicU32 {
        debug_assert!(id < self.space.count());
        self.last_delete
            .get(id as usize)
            .unwrap_or_else(|| &self.last_delete[0])
    }

    /// The state of key `id`.
    pub fn load(&self, id: u32) -> KeyState {
        KeyState::decode(self.word(id).load(Ordering::SeqCst))
    }

    /// The version of the last delete ever announced for key `id` (0: none).
    pub fn last_delete(&self, id: u32) -> u32 {
        self.delete_word(id).load(Ordering::SeqCst)
    }

    fn store(&self, id: u32, s: KeyState) {
        self.word(id).store(s.encode(), Ordering::SeqCst);
    }

    /// Announces a write to key `id` (call before the engine; the caller holds the key's
    /// write lock) and returns its version.
    pub fn begin_write(&self, id: u32, delete: bool) -> Result<u32, VersionsExhausted> {
        if let Some(race) = &self.race {
            return race.begin(
                id,
                delete,
                || self.load(id).max_issued,
                |v| self.raise_max_issued(id, v, delete),
            );
        }
        let mut s = self.load(id);
        if s.max_issued >= MAX_VERSION {
            return Err(VersionsExhausted(id));
        }
        let version = s.max_issued + 1;
        if delete {
            // IMPORTANT: published before the pending bit, so that a window that sees the
            // pending delete also sees that a delete happened.
            self.delete_word(id).store(version, Ordering::SeqCst);
        }
        s.max_issued = version;
        s.pending = Some(Pending { version, delete });
        self.store(id, s);
        Ok(version)
    }

    /// Records the write `version` to key `id` as acknowledged (call after the engine
    /// returned success).
    pub fn commit(&self, id: u32, version: u32) {
        if let Some(race) = &self.race {
            race.ack(id, version);
            return;
        }
        let mut s = self.load(id);
        let delete = matches!(s.pending, Some(p) if p.version == version && p.delete);
        s.committed = version;
        s.committed_delete = delete;
        if s.pending.is_some_and(|p| p.version == version) {
            s.pending = None;
        }
        self.store(id, s);
    }

    /// Records `version` as acknowledged when the pending bits are not known (the parent
    /// of a killed child replays acknowledgements this way).
    pub fn commit_known(&self, id: u32, version: u32, delete: bool) {
        if let Some(race) = &self.race {
            race.ack(id, version);
            return;
        }
        let mut s = self.load(id);
        s.committed = version;
        s.committed_delete = delete;
        s.max_issued = s.max_issued.max(version);
        if s.pending.is_some_and(|p| p.version <= version) {
            s.pending = None;
        }
        self.store(id, s);
    }

    /// Records an announced write when its pending bits come from elsewhere (the parent of
    /// a killed child replays announcements this way).
    pub fn announce_known(&self, id: u32, version: u32, delete: bool) {
        if let Some(race) = &self.race {
            self.raise_max_issued(id, version, delete);
            race.begin_known(id, version, delete);
            return;
        }
        let mut s = self.load(id);
        if delete {
            self.delete_word(id).fetch_max(version, Ordering::SeqCst);
        }
        s.max_issued = s.max_issued.max(version);
        s.pending = Some(Pending { version, delete });
        self.store(id, s);
    }

    /// After recovery: the key holds what was `found` (already checked to be allowed), so
    /// the acknowledged state becomes that and nothing is in flight any more.
    pub fn resolve(&self, id: u32, found: Observed) {
        let mut s = self.load(id);
        if self.race.is_some() {
            // NOTE: every version issued this round is above the carried-over one, so an
            // absent key becomes "deleted at max_issued": nothing older may come back.
            (s.committed, s.committed_delete) = match found {
                Observed::Version(v) => (v, false),
                Observed::Absent if s.committed == 0 && s.max_issued == 0 => (0, false),
                Observed::Absent => (s.max_issued, true),
            };
            s.pending = None;
            self.store(id, s);
            return;
        }
        match found {
            Observed::Version(v) => {
                s.committed = v;
                s.committed_delete = false;
            }
            Observed::Absent => {
                let d = self.last_delete(id);
                if d > s.committed {
                    s.committed = d;
                    s.committed_delete = true;
                }
            }
        }
        s.pending = None;
        self.store(id, s);
    }

    /// Turns the state of key `id` into the state a crash at the moment `before` was loaded
    /// leaves: what was acknowledged then must be there; every write announced since (up
    /// to the newest) may or may not be.
    pub fn rewind(&self, id: u32, before: KeyState) {
        if self.race.is_some() {
            // Racing writers: the histories know the cut (`RaceLog::mark_cut`).
            return;
        }
        let now = self.load(id);
        let hi = now.max_issued;
        let delete = match now.pending {
            Some(p) if p.version == hi => p.delete,
            _ => now.committed == hi && now.committed_delete,
        };
        let pending = (hi > before.committed).then_some(Pending {
            version: hi,
            delete,
        });
        self.store(
            id,
            KeyState {
                committed: before.committed,
                committed_delete: before.committed_delete,
                pending,
                max_issued: hi,
            },
        );
    }

    /// Racing writers: raises `max_issued` of key `id` to `version` (the caller holds the
    /// key's history lock, or replays a child's announcements in order).
    fn raise_max_issued(&self, id: u32, version: u32, delete: bool) {
        let mut s = self.load(id);
        s.max_issued = s.max_issued.max(version);
        if delete {
            self.delete_word(id).fetch_max(version, Ordering::SeqCst);
        }
        self.store(id, s);
    }

    /// The power is being cut now (racing writers: later acknowledgements do not count).
    pub fn mark_cut(&self) {
        if let Some(race) = &self.race {
            race.mark_cut();
        }
        if let Some(f) = &self.fields {
            f.mark_cut();
        }
    }

    /// The state of every key, in key order.
    pub fn snapshot(&self) -> Vec<KeyState> {
        (0..self.space.count()).map(|id| self.load(id)).collect()
    }

    /// Keys with a write in flight.
    pub fn pending_count(&self) -> usize {
        (0..self.space.count())
            .filter(|&id| match &self.race {
                Some(race) => race.in_flight(id),
                None => self.load(id).pending.is_some(),
            })
            .count()
    }

    /// Serialises the state (for the child of kill mode).
    ///
    /// ```text
    /// 0   8  magic  b"TKSXSTA1"
    /// 8   4  count  u32
    /// 12  .. count x (word u64, last_delete u32)
    /// ..  .. the field workload's rows, when it runs ([`FieldState::encode`])
    /// ```
    pub fn encode(&self) -> Vec<u8> {
        let n = self.space.count();
        let mut out = Vec::with_capacity(12 + n as usize * 12);
        out.extend_from_slice(STATE_MAGIC);
        out.extend_from_slice(&n.to_le_bytes());
        for id in 0..n {
            out.extend_from_slice(&self.word(id).load(Ordering::SeqCst).to_le_bytes());
            out.extend_from_slice(&self.last_delete(id).to_le_bytes());
        }
        if let Some(f) = &self.fields {
            f.encode(&mut out);
        }
        out
    }

    /// Reads what [`ExpectedState::encode`] wrote; `None` if the bytes are not that.
    pub fn decode(bytes: &[u8]) -> Option<ExpectedState> {
        let rest = bytes.strip_prefix(STATE_MAGIC)?;
        let (n, rest) = rest.split_first_chunk::<4>()?;
        let n = u32::from_le_bytes(*n);
        let keys_len = (n as usize).checked_mul(12)?;
        if n == 0 || rest.len() < keys_len {
            return None;
        }
        let (rest, field_bytes) = rest.split_at(keys_len);
        let mut st = ExpectedState::new(KeySpace::new(n));
        if !field_bytes.is_empty() {
            st.fields = Some(FieldState::decode(field_bytes)?);
        }
        for (id, rec) in rest.chunks_exact(12).enumerate() {
            let (w, d) = rec.split_first_chunk::<8>()?;
            let d: [u8; 4] = d.try_into().ok()?;
            let id = u32::try_from(id).ok()?;
            st.word(id).store(u64::from_le_bytes(*w), Ordering::SeqCst);
            st.delete_word(id)
                .store(u32::from_le_bytes(d), Ordering::SeqCst);
        }
        Some(st)
    }
}

/// The magic at the start of a serialised expected state.
pub const STATE_MAGIC: &[u8; 8] = b"TKSXSTA1";

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn keys_round_trip_and_sort_by_number() {
        let ks = KeySpace::new(1000);
        assert_eq!(ks.key(42), b"k00000042");
        assert_eq!(ks.id_of(b"k00000042"), Some(42));
        assert!(ks.key(9) < ks.key(10));
        for bad in [
            &b"k00001000"[..],
            b"k0000042",
            b"x00000042",
            b"k0000004a",
            b"",
        ] {
            assert_eq!(ks.id_of(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn write_is_pending_until_committed() {
        let st = ExpectedState::new(KeySpace::new(4));
        let v = st.begin_write(1, false).unwrap();
        assert_eq!(v, 1);
        let s = st.load(1);
        assert_eq!(s.committed, 0);
        assert_eq!(
            s.pending,
            Some(Pending {
                version: 1,
                delete: false
            })
        );
        st.commit(1, v);
        let s = st.load(1);
        assert_eq!(
            (s.committed, s.committed_delete, s.pending),
            (1, false, None)
        );
        let d = st.begin_write(1, true).unwrap();
        st.commit(1, d);
        let s = st.load(1);
        assert_eq!((s.committed, s.committed_delete), (2, true));
        assert_eq!(st.last_delete(1), 2);
        assert!(s.committed_absent());
    }

    #[test]
    fn resolve_takes_what_recovery_found_and_never_reuses_versions() {
        let st = ExpectedState::new(KeySpace::new(2));
        let v1 = st.begin_write(0, false).unwrap();
        st.commit(0, v1);
        let v2 = st.begin_write(0, false).unwrap();
        // Crash: v2 was in flight and recovery found v1.
        st.resolve(0, Observed::Version(v1));
        let s = st.load(0);
        assert_eq!((s.committed, s.pending), (v1, None));
        assert_eq!(st.begin_write(0, false).unwrap(), v2 + 1);
        // An in-flight delete found applied.
        let d = st.begin_write(1, true).unwrap();
        st.resolve(1, Observed::Absent);
        let s = st.load(1);
        assert_eq!((s.committed, s.committed_delete), (d, true));
    }

    #[test]
    fn replayed_announcements_and_acks_match_the_direct_protocol() {
        let direct = ExpectedState::new(KeySpace::new(1));
        let replayed = ExpectedState::new(KeySpace::new(1));
        for (i, delete) in [false, true, false, false].into_iter().enumerate() {
            let v = direct.begin_write(0, delete).unwrap();
            replayed.announce_known(0, v, delete);
            assert_eq!(direct.load(0), replayed.load(0), "announce {i}");
            direct.commit(0, v);
            replayed.commit_known(0, v, delete);
            assert_eq!(direct.load(0), replayed.load(0), "commit {i}");
        }
        assert_eq!(direct.encode(), replayed.encode());
    }

    #[test]
    fn rewind_keeps_what_was_acknowledged_and_marks_later_writes_in_flight() {
        let st = ExpectedState::new(KeySpace::new(2));
        let v1 = st.begin_write(0, false).unwrap();
        st.commit(0, v1);
        let snap = st.snapshot();
        let v2 = st.begin_write(0, false).unwrap();
        st.commit(0, v2);
        let v3 = st.begin_write(0, true).unwrap();
        st.commit(0, v3);
        for (id, before) in snap.iter().enumerate() {
            st.rewind(id as u32, *before);
        }
        let s = st.load(0);
        assert_eq!(
            (s.committed, s.committed_delete, s.max_issued),
            (v1, false, v3)
        );
        assert_eq!(
            s.pending,
            Some(Pending {
                version: v3,
                delete: true
            })
        );
        assert_eq!(st.load(1), KeyState::default());
    }

    #[test]
    fn decode_refuses_foreign_and_truncated_bytes() {
        let st = ExpectedState::new(KeySpace::new(3));
        let bytes = st.encode();
        assert!(ExpectedState::decode(&bytes).is_some());
        assert!(ExpectedState::decode(&bytes[..bytes.len() - 1]).is_none());
        assert!(ExpectedState::decode(b"TKSXSTA1\0\0\0\0").is_none());
        assert!(ExpectedState::decode(b"garbage").is_none());
    }

    fn arb_state() -> impl Strategy<Value = KeyState> {
        (
            0..=MAX_VERSION,
            any::<bool>(),
            proptest::option::of(any::<bool>()),
            0..=MAX_VERSION,
        )
            .prop_map(
                |(committed, committed_delete, pending, max_issued)| KeyState {
                    committed,
                    committed_delete,
                    pending: pending.map(|delete| Pending {
                        version: max_issued,
                        delete,
                    }),
                    max_issued,
                },
            )
    }

    proptest! {
        #[test]
        fn key_state_word_round_trips(s in arb_state()) {
            prop_assert_eq!(KeyState::decode(s.encode()), s);
        }

        #[test]
        fn state_file_round_trips(
            states in proptest::collection::vec((arb_state(), 0..=MAX_VERSION), 1..50),
        ) {
            let st = ExpectedState::new(KeySpace::new(states.len() as u32));
            for (id, (s, d)) in states.iter().enumerate() {
                st.store(id as u32, *s);
                st.delete_word(id as u32).store(*d, Ordering::SeqCst);
            }
            let back = ExpectedState::decode(&st.encode()).unwrap();
            for (id, (s, d)) in states.iter().enumerate() {
                prop_assert_eq!(back.load(id as u32), *s);
                prop_assert_eq!(back.last_delete(id as u32), *d);
            }
        }

        #[test]
        fn state_decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Some(st) = ExpectedState::decode(&bytes) {
                prop_assert_eq!(st.encode(), bytes);
            }
        }
    }
}
