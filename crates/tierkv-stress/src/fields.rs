//! Field updates in the stress workload and the per-field oracle that judges them (issue 20:
//! "the stress workload gains field updates"; the schema API of `papers/003` §IV, Table I,
//! `tierkv_core::api::schema`).
//!
//! With `--fields N` (default 10 on engines with a native schema store, `focus`; opt-in for
//! the others, which run it through the consolidated adapter) the run creates a schema
//! `stress` of N fixed fields of [`FIELD_LEN`] bytes, and a share of the workload's
//! operations become `put_row`, `update_fields` of 1..=N fields, `get_fields` of a random
//! selection, `delete_row` and `scan_fields` over a small set of rows (`k00000000`.. in the
//! schema's own key space: [`FieldConfig::rows`]), so that several threads update
//! *different fields of one row* at once.
//!
//! # The expected state per field
//! Each row ([`RowState`]) keeps, per field, the version of the last acknowledged write that
//! set it (`committed`), whether the acknowledged row is absent (never put, or deleted),
//! and a log of every write announced this round ([`FieldWrite`]: put, update of a field
//! mask, delete; acknowledged or in flight; refused). Versions are issued per row, so a
//! version names exactly one write. One writer per *field* at a time: an update holds the
//! locks of its fields, a put or delete the locks of every field of the row. A value
//! ([`field_value`]) encodes row, field and version with a checksum, so a read is checked
//! exactly.
//!
//! # The rule
//! A read (live, between a state loaded before it and the state after it; or of a
//! quiescent recovered store) of field `f` may return version `v` when `v` is the field's
//! acknowledged version at the start (and the row was present), or `v` is newer and a put
//! or an update of `f` announced by the end of the read. The row may be absent when it was
//! absent at the start or a delete was in flight or announced. On top of that,
//! `update_fields` and `put_row` are **atomic**: if one field shows write `v`, every other
//! field `v` wrote must show `v` or newer — never an older version (a torn update). A lost
//! field update shows as a field older than acknowledged; a refused write (`NoSpace`)
//! must write nothing, so its version found anywhere is a violation.
//!
//! After a crash every write in flight may be there or not, whole; the verifier then
//! resolves each row to what was found and the round's log starts over.
//!
//! Thread safety: one mutex per row for the bookkeeping (never held across an engine call);
//! the workload's field locks are separate ([`FieldLocks`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::{Mutex, MutexGuard};
use tierkv::Db;
use tierkv_core::format::checksum::{crc32c, mask};
use tierkv_core::{FieldDef, FieldId, FieldSelection, SchemaId, SchemaStore};

use crate::expected_state::KeySpace;
use crate::verify::{Violation, violation};

/// Bytes of every field value.
pub const FIELD_LEN: usize = 16;
/// Most fields of the stress schema (a write's fields are a 64-bit mask).
pub const MAX_FIELDS: usize = 64;
/// The default number of fields on engines with a native schema store.
pub const DEFAULT_FIELDS: usize = 10;
/// The stress schema's name.
pub const SCHEMA_NAME: &str = "stress";
/// Percentage of the workload's operations that are field operations when fields are on.
pub const FIELD_SHARE: u32 = 50;
/// Weights of the field operations: put_row, update_fields, get_fields, delete_row,
/// scan_fields.
pub const FIELD_MIX: [u32; 5] = [15, 45, 25, 5, 10];
/// Rows per workload thread (few rows, so that threads meet on one row).
pub const ROWS_PER_THREAD: u32 = 4;

const VALUE_MAGIC: u16 = 0xF1D5;

/// The shape of the field workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldConfig {
    /// Fields of the schema (1..=[`MAX_FIELDS`]).
    pub fields: u16,
    /// Rows (keys of the schema).
    pub rows: u32,
}

impl FieldConfig {
    /// `fields` fields over rows for `threads` threads (at most `keys` rows).
    pub fn new(fields: usize, threads: usize, keys: u32) -> FieldConfig {
        let rows = (threads as u32)
            .saturating_mul(ROWS_PER_THREAD)
            .clamp(2, keys.max(2));
        FieldConfig {
            fields: fields.clamp(1, MAX_FIELDS) as u16,
            rows,
        }
    }

    /// The schema's field definitions.
    pub fn defs(&self) -> Vec<FieldDef> {
        (0..self.fields)
            .map(|f| FieldDef::fixed(&format!("f{f}"), FIELD_LEN as u16))
            .collect()
    }

    /// The rows' key space.
    pub fn rows(&self) -> KeySpace {
        KeySpace::new(self.rows)
    }

    fn all_mask(&self) -> u64 {
        if self.fields as usize >= 64 {
            u64::MAX
        } else {
            (1u64 << self.fields) - 1
        }
    }
}

/// The value of field `field` of row `row` written by version `version`.
///
/// ```text
/// 0  4  row       u32
/// 4  2  field     u16
/// 6  2  magic     0xF1D5
/// 8  4  version   u32
/// 12 4  crc       masked CRC-32C of bytes 0..12
/// ```
pub fn field_value(row: u32, field: FieldId, version: u32) -> [u8; FIELD_LEN] {
    let mut v = [0u8; FIELD_LEN];
    v[0..4].copy_from_slice(&row.to_le_bytes());
    v[4..6].copy_from_slice(&field.to_le_bytes());
    v[6..8].copy_from_slice(&VALUE_MAGIC.to_le_bytes());
    v[8..12].copy_from_slice(&version.to_le_bytes());
    let crc = mask(crc32c(&v[..12]));
    v[12..16].copy_from_slice(&crc.to_le_bytes());
    v
}

/// What a field value says about itself: (row, field, version), or why it is not one.
pub fn decode_field(bytes: &[u8]) -> Result<(u32, FieldId, u32), String> {
    let Ok(b) = <[u8; FIELD_LEN]>::try_from(bytes) else {
        return Err(format!(
            "{} bytes (field values are {FIELD_LEN})",
            bytes.len()
        ));
    };
    let word = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    if u16::from_le_bytes([b[6], b[7]]) != VALUE_MAGIC || word(12) != mask(crc32c(&b[..12])) {
        return Err("torn or corrupt: bad magic or checksum".to_owned());
    }
    Ok((word(0), u16::from_le_bytes([b[4], b[5]]), word(8)))
}

/// What a field write does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteKind {
    /// `put_row`: every field.
    Put,
    /// `update_fields` of the fields in the mask.
    Update,
    /// `delete_row`.
    Delete,
}

/// One write of the round to a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldWrite {
    /// What it does.
    pub kind: WriteKind,
    /// The fields it sets (every field for a put or delete).
    pub mask: u64,
    /// Acknowledged (before any cut).
    pub acked: bool,
    /// Refused with `NoSpace`: must have written nothing.
    pub refused: bool,
}

impl FieldWrite {
    fn in_flight(&self) -> bool {
        !self.acked && !self.refused
    }
}

/// One row's expected state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowState {
    /// Per field: the version of the last acknowledged write that set it (a delete sets
    /// every field; 0: never written).
    pub committed: Vec<u32>,
    /// The acknowledged row is absent (never put, or deleted).
    pub absent: bool,
    /// The newest version announced.
    pub max_issued: u32,
    /// The newest delete announced.
    pub last_delete: u32,
    /// Every write announced since the last resolve, by version.
    pub log: BTreeMap<u32, FieldWrite>,
}

impl RowState {
    fn new(fields: u16) -> RowState {
        RowState {
            committed: vec![0; usize::from(fields)],
            absent: true,
            max_issued: 0,
            last_delete: 0,
            log: BTreeMap::new(),
        }
    }

    fn pending_delete(&self) -> bool {
        self.log
            .values()
            .any(|w| w.kind == WriteKind::Delete && w.in_flight())
    }

    /// Whether the row exists, when no put or delete is in flight.
    pub fn exists(&self) -> Option<bool> {
        let unsure = self
            .log
            .values()
            .any(|w| w.kind != WriteKind::Update && w.in_flight());
        (!unsure).then_some(!self.absent)
    }
}

/// What a read loaded before it called the engine.
#[derive(Clone, Debug)]
pub struct RowBefore {
    committed: Vec<u32>,
    absent: bool,
    last_delete: u32,
    pending_delete: bool,
}

impl RowBefore {
    fn of(s: &RowState) -> RowBefore {
        RowBefore {
            committed: s.committed.clone(),
            absent: s.absent,
            last_delete: s.last_delete,
            pending_delete: s.pending_delete(),
        }
    }
}

/// The expected state of every row.
#[derive(Debug)]
pub struct FieldState {
    cfg: FieldConfig,
    rows: Box<[Mutex<RowState>]>,
    /// The power is being cut: acknowledgements from now on leave writes in flight.
    cut: AtomicBool,
}

/// A row's value as the oracle sees it after a check: absent, or each field's version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RowSeen {
    /// No row.
    Absent,
    /// Every field's version, in field order.
    Present(Vec<u32>),
}

impl FieldState {
    /// Every row never written.
    pub fn new(cfg: FieldConfig) -> FieldState {
        FieldState {
            rows: (0..cfg.rows)
                .map(|_| Mutex::new(RowState::new(cfg.fields)))
                .collect(),
            cfg,
            cut: AtomicBool::new(false),
        }
    }

    /// The shape.
    pub fn config(&self) -> FieldConfig {
        self.cfg
    }

    /// The state of `row` (locked: never hold it across an engine call).
    pub fn row(&self, row: u32) -> MutexGuard<'_, RowState> {
        // NOTE: rows come from the row space; index 0 is a harmless stand-in for a harness
        // bug.
        debug_assert!(row < self.cfg.rows);
        self.rows
            .get(row as usize)
            .unwrap_or_else(|| &self.rows[0])
            .lock()
    }

    /// Announces a write to `row` (the caller holds the locks of the fields of `mask`)
    /// and returns its version.
    pub fn begin(&self, row: u32, kind: WriteKind, mask: u64) -> u32 {
        let mut s = self.row(row);
        let version = s.max_issued + 1;
        self.announce_locked(&mut s, version, kind, mask);
        version
    }

    /// Records an announced write whose version was issued elsewhere (kill mode's parent).
    pub fn announce_known(&self, row: u32, version: u32, kind: WriteKind, mask: u64) {
        let mut s = self.row(row);
        self.announce_locked(&mut s, version, kind, mask);
    }

    fn announce_locked(&self, s: &mut RowState, version: u32, kind: WriteKind, mask: u64) {
        let mask = match kind {
            WriteKind::Update => mask & self.cfg.all_mask(),
            _ => self.cfg.all_mask(),
        };
        s.max_issued = s.max_issued.max(version);
        if kind == WriteKind::Delete {
            s.last_delete = s.last_delete.max(version);
        }
        s.log.insert(
            version,
            FieldWrite {
                kind,
                mask,
                acked: false,
                refused: false,
            },
        );
    }

    /// Records write `version` of `row` as acknowledged (after a cut it stays in flight).
    pub fn commit(&self, row: u32, version: u32) {
        let mut s = self.row(row);
        if self.cut.load(Ordering::SeqCst) {
            return;
        }
        let Some(w) = s.log.get_mut(&version) else {
            return;
        };
        w.acked = true;
        let w = *w;
        for (f, c) in s.committed.iter_mut().enumerate() {
            if w.mask & (1u64 << f) != 0 {
                *c = (*c).max(version);
            }
        }
        match w.kind {
            WriteKind::Put => s.absent = false,
            WriteKind::Delete => s.absent = true,
            WriteKind::Update => {}
        }
    }

    /// Records write `version` of `row` as refused with `NoSpace` (it must write nothing).
    pub fn refuse(&self, row: u32, version: u32) {
        if let Some(w) = self.row(row).log.get_mut(&version) {
            w.refused = true;
        }
    }

    /// The power is being cut now: later acknowledgements leave their writes in flight.
    pub fn mark_cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
    }

    /// Opens the check of a read of `row`.
    pub fn open_read(&self, row: u32) -> RowBefore {
        RowBefore::of(&self.row(row))
    }

    /// Writes in flight at the moment (for the verdict's counters).
    pub fn in_flight(&self, row: u32) -> bool {
        self.row(row).log.values().any(FieldWrite::in_flight)
    }

    /// Checks what a read of the fields `sel` of `row` returned (`found`: `None` for no
    /// row), against the state before the read and the state now. `Ok` gives the versions.
    pub fn check(
        &self,
        row: u32,
        before: &RowBefore,
        sel: &[FieldId],
        found: Option<&[Vec<u8>]>,
    ) -> Result<Option<Vec<u32>>, (String, String)> {
        let now = self.row(row);
        let expected = || describe(before, &now, sel);
        let Some(values) = found else {
            return if before.absent || before.pending_delete || now.last_delete > before.last_delete
            {
                Ok(None)
            } else {
                Err((expected(), "absent (an acknowledged row lost)".to_owned()))
            };
        };
        if values.len() != sel.len() {
            return Err((
                expected(),
                format!("{} values for {} selected fields", values.len(), sel.len()),
            ));
        }
        let mut versions = Vec::with_capacity(sel.len());
        for (&f, bytes) in sel.iter().zip(values) {
            let (r, field, v) =
                decode_field(bytes).map_err(|e| (expected(), format!("field f{f}: {e}")))?;
            if (r, field) != (row, f) {
                return Err((
                    expected(),
                    format!("field f{f}: v#{v} of field f{field} of row k{r:08}"),
                ));
            }
            let lo = before.committed.get(usize::from(f)).copied().unwrap_or(0);
            let logged = now.log.get(&v);
            let ok = (v == lo && !before.absent && lo != 0)
                || (v > lo
                    && logged.is_some_and(|w| {
                        !w.refused && w.kind != WriteKind::Delete && w.mask & (1u64 << f) != 0
                    }));
            if !ok {
                let why = match logged {
                    _ if v < lo && before.absent => {
                        "resurrected after an acknowledged delete".to_owned()
                    }
                    _ if v < lo => "older than acknowledged: a lost field update".to_owned(),
                    Some(w) if w.refused => {
                        "of a write refused with NoSpace (it must write nothing)".to_owned()
                    }
                    Some(w) if w.kind == WriteKind::Delete => {
                        "a version that was a delete".to_owned()
                    }
                    _ => "a version never written to this field: a phantom".to_owned(),
                };
                return Err((expected(), format!("field f{f}: v#{v} ({why})")));
            }
            versions.push(v);
        }
        // Atomicity: a field showing write v means every other field v set shows v or newer.
        for (i, &vi) in versions.iter().enumerate() {
            let Some(w) = now.log.get(&vi) else { continue };
            for (j, &vj) in versions.iter().enumerate() {
                let g = sel.get(j).copied().unwrap_or(0);
                if vj < vi && w.mask & (1u64 << g) != 0 {
                    let fi = sel.get(i).copied().unwrap_or(0);
                    return Err((
                        format!(
                            "all or none of v#{vi} ({}) — {}",
                            show_write(w, self.cfg.fields),
                            expected()
                        ),
                        format!(
                            "field f{fi} holds v#{vi} but field f{g} holds v#{vj}, from before \
                             it (a torn update)"
                        ),
                    ));
                }
            }
        }
        Ok(Some(versions))
    }

    /// True when `row` was present and acknowledged from `before` until now (a scan that
    /// covered it must list it).
    pub fn must_be_listed(&self, row: u32, before: &RowBefore) -> bool {
        let now = self.row(row);
        !before.absent && !before.pending_delete && now.last_delete == before.last_delete
    }

    /// After recovery: `row` holds what was `found` (already checked); nothing is in flight.
    pub fn resolve(&self, row: u32, found: &RowSeen) {
        let mut s = self.row(row);
        match found {
            RowSeen::Present(vs) => {
                s.committed.clone_from(vs);
                s.absent = false;
            }
            RowSeen::Absent => {
                // NOTE: every later version is above max_issued, so nothing older may come
                // back.
                let hi = s.max_issued;
                s.committed.iter_mut().for_each(|c| *c = hi);
                s.absent = true;
            }
        }
        s.log.clear();
    }

    /// Ends the round: nothing cut any more (after every row was resolved).
    pub fn end_round(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }

    /// A copy of the state at this instant, for a crash image taken now (persist-points):
    /// every write not acknowledged by now is in flight.
    pub fn copy_at_cut(&self) -> FieldState {
        let copy = FieldState {
            cfg: self.cfg,
            rows: self
                .rows
                .iter()
                .map(|r| Mutex::new(r.lock().clone()))
                .collect(),
            cut: AtomicBool::new(true),
        };
        if self.cut.load(Ordering::SeqCst) {
            copy.cut.store(true, Ordering::SeqCst);
        }
        copy
    }

    /// Takes this copy (made after a crash image) back to what was acknowledged when
    /// `before` (a copy made before the image) was taken: a write acknowledged in between
    /// is in flight again, since the image may have been taken before its persist (the
    /// cut can fall on a background thread while the workload goes on). Writes announced
    /// in between stay known, so that the image may hold them.
    pub fn rewind_to(&mut self, before: &FieldState) {
        for (row, pre) in self.rows.iter_mut().zip(before.rows.iter()) {
            let (row, pre) = (row.get_mut(), pre.lock());
            row.committed.clone_from(&pre.committed);
            row.absent = pre.absent;
            for (version, w) in row.log.iter_mut() {
                if !pre.log.get(version).is_some_and(|p| p.acked) {
                    w.acked = false;
                }
            }
        }
    }

    /// Serialises the acknowledged state (kill mode's state file; written only after a
    /// resolve, when nothing is in flight).
    ///
    /// ```text
    /// 0  8  magic   b"TKSXFLD1"
    /// 8  2  fields  u16
    /// 10 4  rows    u32
    /// 14 .. rows x (absent u8, max_issued u32, last_delete u32, fields x committed u32)
    /// ```
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(FIELDS_MAGIC);
        out.extend_from_slice(&self.cfg.fields.to_le_bytes());
        out.extend_from_slice(&self.cfg.rows.to_le_bytes());
        for r in self.rows.iter() {
            let s = r.lock();
            out.push(u8::from(s.absent));
            out.extend_from_slice(&s.max_issued.to_le_bytes());
            out.extend_from_slice(&s.last_delete.to_le_bytes());
            for c in &s.committed {
                out.extend_from_slice(&c.to_le_bytes());
            }
        }
    }

    /// Reads what [`FieldState::encode`] wrote (all of `bytes`); `None` if it is not that.
    pub fn decode(bytes: &[u8]) -> Option<FieldState> {
        let rest = bytes.strip_prefix(FIELDS_MAGIC)?;
        let (f, rest) = rest.split_first_chunk::<2>()?;
        let (r, rest) = rest.split_first_chunk::<4>()?;
        let fields = u16::from_le_bytes(*f);
        let rows = u32::from_le_bytes(*r);
        if fields == 0 || usize::from(fields) > MAX_FIELDS || rows < 2 {
            return None;
        }
        let rec = 9 + 4 * usize::from(fields);
        if rest.len() != (rows as usize).checked_mul(rec)? {
            return None;
        }
        let st = FieldState::new(FieldConfig { fields, rows });
        for (i, b) in rest.chunks_exact(rec).enumerate() {
            let (&absent, b) = b.split_first()?;
            if absent > 1 {
                return None;
            }
            let word = |j: usize| -> Option<u32> {
                Some(u32::from_le_bytes(b.get(j..j + 4)?.try_into().ok()?))
            };
            let mut s = st.rows.get(i)?.lock();
            s.absent = absent == 1;
            s.max_issued = word(0)?;
            s.last_delete = word(4)?;
            for (k, c) in s.committed.iter_mut().enumerate() {
                *c = word(8 + 4 * k)?;
            }
        }
        Some(st)
    }
}

/// The magic of the field section of a serialised expected state.
pub const FIELDS_MAGIC: &[u8; 8] = b"TKSXFLD1";

fn show_mask(mask: u64, fields: u16) -> String {
    let ids: Vec<String> = (0..fields.min(64))
        .filter(|f| mask & (1u64 << f) != 0)
        .map(|f| format!("f{f}"))
        .collect();
    ids.join(",")
}

fn show_write(w: &FieldWrite, fields: u16) -> String {
    match w.kind {
        WriteKind::Put => "put_row".to_owned(),
        WriteKind::Delete => "delete_row".to_owned(),
        WriteKind::Update => format!("update of {}", show_mask(w.mask, fields)),
    }
}

fn describe(before: &RowBefore, now: &RowState, sel: &[FieldId]) -> String {
    let mut s = if before.absent {
        "row absent (acknowledged)".to_owned()
    } else {
        let shown: Vec<String> = sel
            .iter()
            .take(8)
            .map(|&f| {
                let c = before.committed.get(usize::from(f)).copied().unwrap_or(0);
                format!("f{f}=v#{c}")
            })
            .collect();
        format!("row with {} (acknowledged)", shown.join(" "))
    };
    let fields = now.committed.len() as u16;
    // Only the writes that could be newer than the acknowledged state of a selected field.
    let sel_mask = sel.iter().fold(0u64, |m, f| {
        m | 1u64.checked_shl(u32::from(*f)).unwrap_or(0)
    });
    let lo = sel
        .iter()
        .map(|&f| before.committed.get(usize::from(f)).copied().unwrap_or(0))
        .min()
        .unwrap_or(0);
    let relevant: Vec<(&u32, &FieldWrite)> = now
        .log
        .iter()
        .filter(|(v, w)| !w.refused && **v > lo && w.mask & sel_mask != 0)
        .collect();
    let newer: Vec<String> = relevant
        .iter()
        .skip(relevant.len().saturating_sub(6))
        .map(|(v, w)| {
            let state = if w.acked { "acknowledged" } else { "in flight" };
            format!("v#{v} ({}, {state})", show_write(w, fields))
        })
        .collect();
    if !newer.is_empty() {
        let _ = write!(s, " or newer: {}", newer.join(", "));
    }
    s
}

/// The schema store and the stress schema's id on an open store.
#[derive(Clone)]
pub struct SchemaHandle {
    /// The field-level API of the store.
    pub store: Arc<dyn SchemaStore>,
    /// The stress schema.
    pub id: SchemaId,
}

impl SchemaHandle {
    /// Creates (or finds) the stress schema on `db`.
    pub fn create(db: &Db, cfg: FieldConfig) -> tierkv::Result<SchemaHandle> {
        let store = db.schema_store()?;
        let s = store.create_schema(SCHEMA_NAME, &cfg.defs())?;
        Ok(SchemaHandle { store, id: s.id })
    }

    /// The stress schema on `db`, if it exists.
    pub fn find(db: &Db) -> tierkv::Result<Option<SchemaHandle>> {
        let store = db.schema_store()?;
        Ok(store.schema(SCHEMA_NAME)?.map(|s| SchemaHandle {
            id: s.id,
            store: store.clone(),
        }))
    }
}

/// What verifying every row of a quiescent store found.
#[derive(Debug, Default)]
pub struct RowsOutcome {
    /// Rows checked.
    pub rows: u64,
    /// Rows with a field write in flight.
    pub in_flight: u64,
    /// Rows found present.
    pub present: u64,
    /// What was wrong.
    pub violations: Vec<Violation>,
    seen: Vec<Option<RowSeen>>,
}

/// Verifies every row of a quiescent store against `fs` (a `get_fields` of every field of
/// every row, then a full `scan_fields` that must list exactly what the gets found); with
/// `resolve` and nothing wrong, resolves the rows to what was found.
pub fn verify_rows(db: &Db, fs: &FieldState, context: &str, resolve: bool) -> RowsOutcome {
    let cfg = fs.config();
    let space = cfg.rows();
    let mut out = RowsOutcome::default();
    let all: Vec<FieldId> = (0..cfg.fields).collect();
    let handle = match SchemaHandle::find(db) {
        Ok(h) => h,
        Err(e) => {
            out.violations.push(violation(
                context,
                b"(schema)",
                format!("the schema {SCHEMA_NAME}"),
                format!("an error: {e}"),
            ));
            return out;
        }
    };
    for row in 0..cfg.rows {
        let key = space.key(row);
        out.rows += 1;
        if fs.in_flight(row) {
            out.in_flight += 1;
        }
        let before = fs.open_read(row);
        let found = match &handle {
            // No schema: nothing was ever written under it (create_schema is acknowledged
            // before the first row write), so every row must be allowed to be absent.
            None => Ok(None),
            Some(h) => h.store.get_fields(h.id, &key, &FieldSelection::All),
        };
        let found = match found {
            Ok(f) => f,
            Err(e) => {
                out.violations.push(violation(
                    context,
                    &key,
                    "a row read".to_owned(),
                    format!("an error from get_fields: {e}"),
                ));
                out.seen.push(None);
                continue;
            }
        };
        match fs.check(row, &before, &all, found.as_deref()) {
            Ok(Some(vs)) => {
                out.present += 1;
                out.seen.push(Some(RowSeen::Present(vs)));
            }
            Ok(None) => out.seen.push(Some(RowSeen::Absent)),
            Err((exp, got)) => {
                let what = if handle.is_none() {
                    format!("{got} (the schema {SCHEMA_NAME} is gone)")
                } else {
                    got
                };
                out.violations
                    .push(violation(&format!("{context}, row"), &key, exp, what));
                out.seen.push(None);
            }
        }
    }
    if let Some(h) = &handle {
        scan_rows(h, fs, context, &mut out);
    }
    if resolve && out.violations.is_empty() {
        for (row, s) in out.seen.iter().enumerate() {
            if let (Some(s), Ok(row)) = (s, u32::try_from(row)) {
                fs.resolve(row, s);
            }
        }
        fs.end_round();
    }
    out
}

fn scan_rows(h: &SchemaHandle, fs: &FieldState, context: &str, out: &mut RowsOutcome) {
    let cfg = fs.config();
    let space = cfg.rows();
    let ctx = format!("{context}, full scan_fields");
    let rows = match h
        .store
        .scan_fields(h.id, b"", &FieldSelection::All, cfg.rows as usize + 8)
    {
        Ok(r) => r,
        Err(e) => {
            out.violations.push(violation(
                &ctx,
                b"(scan)",
                "a scan of the rows".to_owned(),
                format!("an error: {e}"),
            ));
            return;
        }
    };
    let mut listed = vec![false; cfg.rows as usize];
    let mut prev: Option<u32> = None;
    for (k, vals) in &rows {
        let Some(id) = space.id_of(k) else {
            out.violations.push(violation(
                &ctx,
                k,
                "no such row".to_owned(),
                "a phantom row".to_owned(),
            ));
            continue;
        };
        if prev.is_some_and(|p| p >= id) {
            out.violations.push(violation(
                &ctx,
                k,
                "rows in strictly ascending key order".to_owned(),
                "this row out of order".to_owned(),
            ));
        }
        prev = Some(id);
        if let Some(l) = listed.get_mut(id as usize) {
            *l = true;
        }
        let versions: Vec<Option<u32>> = vals
            .iter()
            .map(|b| decode_field(b).ok().map(|x| x.2))
            .collect();
        match out.seen.get(id as usize) {
            Some(Some(RowSeen::Present(vs)))
                if versions.len() == vs.len()
                    && versions.iter().zip(vs).all(|(a, b)| *a == Some(*b)) => {}
            Some(Some(seen)) => out.violations.push(violation(
                &ctx,
                k,
                format!("what get_fields returned ({seen:?})"),
                format!("versions {versions:?}"),
            )),
            _ => {}
        }
    }
    for (id, l) in listed.iter().enumerate() {
        if !l && matches!(out.seen.get(id), Some(Some(RowSeen::Present(_)))) {
            out.violations.push(violation(
                &ctx,
                &space.key(id as u32),
                "the row get_fields returned".to_owned(),
                "missing from the scan".to_owned(),
            ));
        }
    }
}

/// A random subset of `fields` fields (half the time one field), as a mask.
pub fn random_mask(rng: &mut impl rand::Rng, fields: u16) -> u64 {
    let n = u32::from(fields.min(64));
    if n == 1 || rng.random_bool(0.5) {
        return 1u64 << rng.random_range(0..n);
    }
    let mut m = 0u64;
    while m == 0 {
        m = rng.random::<u64>();
        if n < 64 {
            m &= (1u64 << n) - 1;
        }
    }
    m
}

/// The fields of a mask, in id order.
pub fn mask_fields(mask: u64) -> Vec<FieldId> {
    (0..64u16).filter(|f| mask & (1u64 << f) != 0).collect()
}

/// The per-(row, field) write locks of a workload.
pub struct FieldLocks {
    fields: usize,
    locks: Box<[Mutex<()>]>,
}

impl FieldLocks {
    /// Locks for every field of every row.
    pub fn new(cfg: FieldConfig) -> FieldLocks {
        let n = cfg.rows as usize * usize::from(cfg.fields);
        FieldLocks {
            fields: usize::from(cfg.fields),
            locks: (0..n).map(|_| Mutex::new(())).collect(),
        }
    }

    /// Takes the locks of the fields of `mask` of `row`, in field order.
    pub fn lock(&self, row: u32, mask: u64) -> Vec<MutexGuard<'_, ()>> {
        let base = row as usize * self.fields;
        (0..self.fields)
            .filter(|f| mask & (1u64 << f) != 0)
            .filter_map(|f| self.locks.get(base + f).map(Mutex::lock))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st() -> FieldState {
        FieldState::new(FieldConfig { fields: 4, rows: 3 })
    }

    fn vals(row: u32, vs: &[(FieldId, u32)]) -> Vec<Vec<u8>> {
        vs.iter()
            .map(|(f, v)| field_value(row, *f, *v).to_vec())
            .collect()
    }

    fn quiet(
        fs: &FieldState,
        row: u32,
        found: Option<&[Vec<u8>]>,
    ) -> Result<Option<Vec<u32>>, (String, String)> {
        let b = fs.open_read(row);
        fs.check(row, &b, &[0, 1, 2, 3], found)
    }

    #[test]
    fn field_values_round_trip_and_corruption_is_named() {
        let v = field_value(7, 3, 99);
        assert_eq!(decode_field(&v), Ok((7, 3, 99)));
        let mut bad = v;
        bad[9] ^= 1;
        assert!(decode_field(&bad).unwrap_err().contains("checksum"));
        assert!(decode_field(&v[..10]).is_err());
    }

    #[test]
    fn a_copy_rewound_to_before_an_image_leaves_later_acknowledgements_in_flight() {
        let fs = st();
        let p = fs.begin(0, WriteKind::Put, 0);
        fs.commit(0, p);
        let before = fs.copy_at_cut();
        // After `before`, while a background thread takes the image: row 1 is put and
        // acknowledged, row 0 updated and then deleted, both acknowledged.
        let q = fs.begin(1, WriteKind::Put, 0);
        fs.commit(1, q);
        let u = fs.begin(0, WriteKind::Update, 1 << 2);
        fs.commit(0, u);
        let d = fs.begin(0, WriteKind::Delete, 0);
        fs.commit(0, d);
        let mut at = fs.copy_at_cut();
        at.rewind_to(&before);
        // The image may predate all three: row 1 absent, row 0 as put.
        assert_eq!(quiet(&at, 1, None), Ok(None));
        let old = vals(0, &[(0, p), (1, p), (2, p), (3, p)]);
        assert_eq!(quiet(&at, 0, Some(&old)), Ok(Some(vec![p, p, p, p])));
        // Or hold any of them.
        assert_eq!(quiet(&at, 0, None), Ok(None));
        let newer = vals(0, &[(0, p), (1, p), (2, u), (3, p)]);
        assert_eq!(quiet(&at, 0, Some(&newer)), Ok(Some(vec![p, p, u, p])));
        let row1 = vals(1, &[(0, q), (1, q), (2, q), (3, q)]);
        assert_eq!(quiet(&at, 1, Some(&row1)), Ok(Some(vec![q, q, q, q])));
        // Without the rewind, the copy calls the image that predates them a loss.
        let unrewound = fs.copy_at_cut();
        assert!(quiet(&unrewound, 0, Some(&old)).is_err());
        assert!(quiet(&unrewound, 1, None).is_err());
    }

    #[test]
    fn concurrent_updates_of_different_fields_both_count_and_a_lost_one_is_caught() {
        let fs = st();
        let p = fs.begin(0, WriteKind::Put, 0);
        fs.commit(0, p);
        // Two writers on row 0: one updates f1, the other f2, both acknowledged.
        let a = fs.begin(0, WriteKind::Update, 1 << 1);
        let b = fs.begin(0, WriteKind::Update, 1 << 2);
        fs.commit(0, b);
        fs.commit(0, a);
        let good = vals(0, &[(0, p), (1, a), (2, b), (3, p)]);
        assert_eq!(quiet(&fs, 0, Some(&good)), Ok(Some(vec![p, a, b, p])));
        // The store lost b (f2 still holds the put): a lost field update.
        let lost = vals(0, &[(0, p), (1, a), (2, p), (3, p)]);
        let (_, found) = quiet(&fs, 0, Some(&lost)).unwrap_err();
        assert!(
            found.contains("f2: v#1") && found.contains("lost field update"),
            "{found}"
        );
    }

    #[test]
    fn an_in_flight_update_is_all_or_nothing() {
        let fs = st();
        let p = fs.begin(1, WriteKind::Put, 0);
        fs.commit(1, p);
        let u = fs.begin(1, WriteKind::Update, 0b0110);
        fs.mark_cut();
        fs.commit(1, u); // acknowledged after the cut: still in flight
        let none = vals(1, &[(0, p), (1, p), (2, p), (3, p)]);
        let all = vals(1, &[(0, p), (1, u), (2, u), (3, p)]);
        assert!(quiet(&fs, 1, Some(&none)).is_ok());
        assert!(quiet(&fs, 1, Some(&all)).is_ok());
        let torn = vals(1, &[(0, p), (1, u), (2, p), (3, p)]);
        let (exp, found) = quiet(&fs, 1, Some(&torn)).unwrap_err();
        assert!(found.contains("torn update"), "{found}");
        assert!(exp.contains("update of f1,f2"), "{exp}");
        // A torn put: one field new, another from before it.
        let q = fs.begin(2, WriteKind::Put, 0);
        fs.commit(2, q);
        let q2 = fs.begin(2, WriteKind::Put, 0);
        let torn = vals(2, &[(0, q2), (1, q), (2, q2), (3, q2)]);
        assert!(quiet(&fs, 2, Some(&torn)).unwrap_err().1.contains("torn"));
    }

    #[test]
    fn deletes_refusals_and_foreign_values_are_judged() {
        let fs = st();
        let p = fs.begin(0, WriteKind::Put, 0);
        fs.commit(0, p);
        let d = fs.begin(0, WriteKind::Delete, 0);
        // In flight: absent or the put.
        assert_eq!(quiet(&fs, 0, None), Ok(None));
        assert!(quiet(&fs, 0, Some(&vals(0, &[(0, p), (1, p), (2, p), (3, p)]))).is_ok());
        fs.commit(0, d);
        let (_, f) = quiet(&fs, 0, Some(&vals(0, &[(0, p), (1, p), (2, p), (3, p)]))).unwrap_err();
        assert!(f.contains("resurrected"), "{f}");
        // An acknowledged row lost.
        let q = fs.begin(1, WriteKind::Put, 0);
        fs.commit(1, q);
        assert!(quiet(&fs, 1, None).unwrap_err().1.contains("row lost"));
        // A refused update must write nothing.
        let r = fs.begin(1, WriteKind::Update, 1);
        fs.refuse(1, r);
        let (_, f) = quiet(&fs, 1, Some(&vals(1, &[(0, r), (1, q), (2, q), (3, q)]))).unwrap_err();
        assert!(f.contains("refused"), "{f}");
        // Another row's or field's value.
        let (_, f) = quiet(&fs, 1, Some(&vals(2, &[(0, q), (1, q), (2, q), (3, q)]))).unwrap_err();
        assert!(f.contains("of row k00000002"), "{f}");
        // A version never written to the field.
        let u = fs.begin(1, WriteKind::Update, 1 << 3);
        fs.commit(1, u);
        let (_, f) = quiet(&fs, 1, Some(&vals(1, &[(0, u), (1, q), (2, q), (3, u)]))).unwrap_err();
        assert!(f.contains("phantom"), "{f}");
    }

    #[test]
    fn resolve_carries_the_found_row_into_the_next_round() {
        let fs = st();
        let p = fs.begin(0, WriteKind::Put, 0);
        fs.mark_cut();
        fs.resolve(0, &RowSeen::Present(vec![p; 4]));
        fs.resolve(1, &RowSeen::Absent);
        fs.end_round();
        assert_eq!(fs.row(0).exists(), Some(true));
        assert!(quiet(&fs, 0, Some(&vals(0, &[(0, p), (1, p), (2, p), (3, p)]))).is_ok());
        assert!(quiet(&fs, 0, None).is_err());
        let copy = FieldState::decode(&{
            let mut b = Vec::new();
            fs.encode(&mut b);
            b
        })
        .unwrap();
        assert_eq!(*copy.row(0), *fs.row(0));
        assert!(FieldState::decode(b"TKSXFLD1").is_none());
    }

    #[test]
    fn masks_are_never_empty_and_stay_in_range() {
        use rand::SeedableRng;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        for _ in 0..1000 {
            let m = random_mask(&mut rng, 10);
            assert!(m != 0 && m < (1 << 10));
        }
        assert_eq!(mask_fields(0b1010), vec![1, 3]);
    }
}
