//! One client thread: draws operations, issues them against the target, times them and
//! records the outcome (YCSB `ClientThread` with `DBWrapper`'s measurements).
//!
//! Only the target's calls are timed: key and value bytes are built before the clock
//! starts. A read-modify-write is one get and one put, timed together; its put is skipped
//! when the get finds nothing (YCSB skips the update when the read fails).
//! A write batch (`batch10`, `batch100`) is built (keys and values) before the clock starts
//! and timed as one operation: one `write_batch` call.
//!
//! In schema mode (`--schema`, `crate::schema`) the same operations go through the
//! field-level API: an insert is `put_row`, a read `get_fields` (the whole record, or one
//! field in a [`FieldScope::OneField`] workload), an update `update_fields` of one field
//! drawn uniformly (not found when the row is missing), a scan `scan_fields`, a
//! read-modify-write a whole-record read and a one-field update; field values and the
//! selection are built before the clock starts.
//!
//! Outcomes: a completed operation is recorded in its histogram (a get that finds nothing
//! also counts as not-found); a failed one is counted as an error and its first message
//! kept; [`Error::Unsupported`] stops the whole phase, which is then reported as
//! unsupported for this target.
//!
//! Thread safety: a `Worker` is owned by one thread; what it shares with the other workers
//! ([`Shared`]) is atomics and mutexes touched only on errors.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv::{Error, FieldSelection, WriteBatch};

use crate::histogram::OpHistograms;
use crate::keys::KeyFormat;
use crate::peer::BenchTarget;
use crate::schema::RowSchema;
use crate::values::ValueSource;
use crate::workload::{FieldScope, KeySpace, LOAD, Op, OpKind, OpStream, stream_seed};

/// How often a worker publishes its progress (operations).
pub const PROGRESS_BATCH: u64 = 256;

/// State every worker of a phase shares.
#[derive(Debug, Default)]
pub struct Shared {
    /// Set to stop every worker (unsupported operation, or a full acknowledgement window).
    pub stop: AtomicBool,
    /// Operations done so far, published every [`PROGRESS_BATCH`].
    pub done: AtomicU64,
    /// Why the phase is unsupported, if it is.
    pub unsupported: Mutex<Option<String>>,
    /// The first error message, if any operation failed.
    pub first_error: Mutex<Option<String>>,
}

impl Shared {
    fn keep_first(slot: &Mutex<Option<String>>, message: String) {
        let mut s = slot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if s.is_none() {
            *s = Some(message);
        }
    }

    /// The unsupported message, if any.
    pub fn unsupported(&self) -> Option<String> {
        self.unsupported
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The first error message, if any.
    pub fn first_error(&self) -> Option<String> {
        self.first_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// Where a worker's operations come from.
// NOTE: one per worker thread, built once and never moved in the hot loop, so the size
// of the mix variant (its workload, chooser and RNG) costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum OpSource<'k> {
    /// The load: inserts of the ordinals the key space hands out, until all are loaded.
    Load {
        /// The key space.
        keys: &'k KeySpace,
        /// The RNG the values are drawn with.
        rng: ChaCha8Rng,
    },
    /// A mix.
    Mix(OpStream<'k>),
}

impl<'k> OpSource<'k> {
    /// The load source of thread `thread`.
    pub fn load(keys: &'k KeySpace, seed: u64, thread: usize) -> Self {
        OpSource::Load {
            keys,
            rng: ChaCha8Rng::seed_from_u64(stream_seed(seed, LOAD, thread)),
        }
    }

    fn next_op(&mut self) -> Option<Op> {
        match self {
            OpSource::Load { keys, .. } => keys.next_load().map(Op::Insert),
            OpSource::Mix(s) => Some(s.next_op()),
        }
    }

    fn fill_value(&mut self, values: &ValueSource, out: &mut Vec<u8>) {
        match self {
            OpSource::Load { rng, .. } => values.fill(rng, out),
            OpSource::Mix(s) => s.fill_value(values, out),
        }
    }

    /// What reads and scans select in schema mode.
    fn scope(&self) -> FieldScope {
        match self {
            OpSource::Load { .. } => FieldScope::Record,
            OpSource::Mix(s) => s.workload().fields,
        }
    }

    /// A field index below `count`.
    fn field(&mut self, count: usize) -> usize {
        match self {
            OpSource::Load { rng, .. } => rng.random_range(0..count.max(1)),
            OpSource::Mix(s) => s.field(count),
        }
    }

    /// `len` fresh value bytes (one field).
    fn fill_piece(&mut self, values: &ValueSource, len: usize, out: &mut Vec<u8>) {
        match self {
            OpSource::Load { rng, .. } => values.fill_piece(rng, len, out),
            OpSource::Mix(s) => s.fill_piece(values, len, out),
        }
    }

    fn keys(&self) -> Option<&'k KeySpace> {
        match self {
            OpSource::Load { .. } => None,
            OpSource::Mix(s) => Some(s.keys()),
        }
    }
}

/// What happened to one operation.
enum Outcome {
    Done,
    NotFound,
    Failed(Error),
}

/// One client thread's state.
pub struct Worker<'a, 'k> {
    target: &'a dyn BenchTarget,
    source: OpSource<'k>,
    keys: KeyFormat,
    values: &'a ValueSource,
    shared: &'a Shared,
    /// The schema of a schema run (`--schema`).
    schema: Option<&'a RowSchema>,
    hist: OpHistograms,
    key: Vec<u8>,
    value: Vec<u8>,
    /// The fields of a schema row being inserted.
    row: Vec<Vec<u8>>,
    /// The ordinals of the current write batch.
    batch_keys: Vec<u64>,
    unpublished: u64,
}

impl<'a, 'k> Worker<'a, 'k> {
    /// A worker issuing `source`'s operations against `target` (through `schema`'s field
    /// API when it is given).
    pub fn new(
        target: &'a dyn BenchTarget,
        source: OpSource<'k>,
        keys: KeyFormat,
        values: &'a ValueSource,
        shared: &'a Shared,
        schema: Option<&'a RowSchema>,
    ) -> Result<Self, String> {
        Ok(Worker {
            target,
            source,
            keys,
            values,
            shared,
            schema,
            hist: OpHistograms::new()?,
            key: Vec::with_capacity(32),
            value: Vec::new(),
            row: Vec::new(),
            batch_keys: Vec::new(),
            unpublished: 0,
        })
    }

    /// Issues one operation; `measure` records it. Returns the time it finished, or `None`
    /// when the source is exhausted or the phase was stopped.
    pub fn step(&mut self, measure: bool) -> Option<Instant> {
        if self.shared.stop.load(Ordering::Relaxed) {
            return None;
        }
        let op = self.source.next_op()?;
        let kind = op.kind();
        let (outcome, start, end) = self.issue(op);
        self.account(
            kind,
            outcome,
            measure.then(|| end.saturating_duration_since(start)),
        );
        Some(end)
    }

    /// Publishes the operations not yet counted in [`Shared::done`].
    pub fn publish(&mut self) {
        self.shared
            .done
            .fetch_add(self.unpublished, Ordering::Relaxed);
        self.unpublished = 0;
    }

    /// The histograms recorded so far.
    pub fn into_histograms(mut self) -> OpHistograms {
        self.publish();
        self.hist
    }

    fn issue(&mut self, op: Op) -> (Outcome, Instant, Instant) {
        if let Some(rs) = self.schema {
            return self.issue_row(rs, op);
        }
        let t = self.target;
        match op {
            Op::Read(k) => {
                self.keys.build(k, &mut self.key);
                let start = Instant::now();
                let r = t.get(&self.key);
                (found(r), start, Instant::now())
            }
            Op::Update(k) => {
                self.prepare_write(k);
                let start = Instant::now();
                let r = t.put(&self.key, &self.value);
                (done(r), start, Instant::now())
            }
            Op::Insert(k) => {
                self.prepare_write(k);
                let start = Instant::now();
                let r = t.put(&self.key, &self.value);
                let end = Instant::now();
                (self.acknowledge(k, done(r)), start, end)
            }
            Op::Scan(k, len) => {
                self.keys.build(k, &mut self.key);
                let start = Instant::now();
                let r = t.scan(&self.key, len);
                (done(r), start, Instant::now())
            }
            Op::Batch(n) => {
                let mut ordinals = std::mem::take(&mut self.batch_keys);
                if let OpSource::Mix(s) = &mut self.source {
                    s.batch_keys(n, &mut ordinals);
                }
                let mut batch = WriteBatch::new();
                for &k in &ordinals {
                    self.prepare_write(k);
                    batch.put(self.key.as_slice(), self.value.as_slice());
                }
                self.batch_keys = ordinals;
                let start = Instant::now();
                let r = t.write_batch(&batch);
                (done(r), start, Instant::now())
            }
            Op::ReadModifyWrite(k) => {
                self.prepare_write(k);
                let start = Instant::now();
                let outcome = match found(t.get(&self.key)) {
                    Outcome::Done => done(t.put(&self.key, &self.value)),
                    other => other,
                };
                (outcome, start, Instant::now())
            }
        }
    }

    /// `op` through the field-level API.
    fn issue_row(&mut self, rs: &RowSchema, op: Op) -> (Outcome, Instant, Instant) {
        let (id, store) = (rs.schema.id, &*rs.store);
        match op {
            Op::Read(k) => {
                self.keys.build(k, &mut self.key);
                let selection = self.selection(rs);
                let start = Instant::now();
                let r = store.get_fields(id, &self.key, &selection);
                (found(r), start, Instant::now())
            }
            Op::Update(k) => {
                let field = self.prepare_field(rs, k);
                let start = Instant::now();
                let r = store.update_fields(id, &self.key, &[(field, &self.value)]);
                (updated(r), start, Instant::now())
            }
            Op::Insert(k) => {
                self.keys.build(k, &mut self.key);
                self.row.resize_with(rs.fields(), Vec::new);
                for f in &mut self.row {
                    self.source.fill_piece(self.values, rs.field_size, f);
                }
                let values: Vec<&[u8]> = self.row.iter().map(Vec::as_slice).collect();
                let start = Instant::now();
                let r = store.put_row(id, &self.key, &values);
                let end = Instant::now();
                (self.acknowledge(k, done(r)), start, end)
            }
            Op::Scan(k, len) => {
                self.keys.build(k, &mut self.key);
                let selection = self.selection(rs);
                let start = Instant::now();
                let r = store.scan_fields(id, &self.key, &selection, len);
                (done(r), start, Instant::now())
            }
            Op::ReadModifyWrite(k) => {
                let field = self.prepare_field(rs, k);
                let start = Instant::now();
                let outcome = match found(store.get_fields(id, &self.key, &FieldSelection::All)) {
                    Outcome::Done => {
                        updated(store.update_fields(id, &self.key, &[(field, &self.value)]))
                    }
                    other => other,
                };
                (outcome, start, Instant::now())
            }
            Op::Batch(_) => {
                let now = Instant::now();
                let why = "write batches are not part of the schema workloads".to_owned();
                (Outcome::Failed(Error::Unsupported(why)), now, now)
            }
        }
    }

    /// Whole records, or one field drawn uniformly, as the workload says.
    fn selection(&mut self, rs: &RowSchema) -> FieldSelection {
        match self.source.scope() {
            FieldScope::Record => FieldSelection::All,
            FieldScope::OneField => {
                FieldSelection::Only(vec![rs.field_id(self.source.field(rs.fields()))])
            }
        }
    }

    /// Builds the key of `keynum` and a fresh value for one field drawn uniformly; the field.
    fn prepare_field(&mut self, rs: &RowSchema, keynum: u64) -> tierkv::FieldId {
        self.keys.build(keynum, &mut self.key);
        let field = rs.field_id(self.source.field(rs.fields()));
        self.source
            .fill_piece(self.values, rs.field_size, &mut self.value);
        field
    }

    fn prepare_write(&mut self, keynum: u64) {
        self.keys.build(keynum, &mut self.key);
        self.source.fill_value(self.values, &mut self.value);
    }

    /// Acknowledges a transaction insert (whatever its outcome, as YCSB does).
    fn acknowledge(&mut self, ordinal: u64, outcome: Outcome) -> Outcome {
        if let Some(keys) = self.source.keys()
            && let Err(e) = keys.acknowledge(ordinal)
        {
            self.shared.stop.store(true, Ordering::Relaxed);
            Shared::keep_first(&self.shared.first_error, e.to_string());
        }
        outcome
    }

    /// Records `outcome`: latencies only when measured (`latency` is `Some`), failures
    /// always (a failure in the warm-up is still a failure).
    fn account(&mut self, kind: OpKind, outcome: Outcome, latency: Option<Duration>) {
        let ns = latency.map(|l| u64::try_from(l.as_nanos()).unwrap_or(u64::MAX));
        match outcome {
            Outcome::Done => {
                if let Some(ns) = ns {
                    self.hist.record(kind, ns);
                }
            }
            Outcome::NotFound => {
                if let Some(ns) = ns {
                    self.hist.record(kind, ns);
                    self.hist.record_not_found(kind);
                }
            }
            Outcome::Failed(Error::Unsupported(what)) => {
                self.shared.stop.store(true, Ordering::Relaxed);
                Shared::keep_first(&self.shared.unsupported, format!("{}: {what}", kind.name()));
            }
            Outcome::Failed(e) => {
                self.hist.record_error(kind);
                Shared::keep_first(&self.shared.first_error, format!("{}: {e}", kind.name()));
            }
        }
        if ns.is_none() {
            return;
        }
        self.unpublished += 1;
        if self.unpublished >= PROGRESS_BATCH {
            self.publish();
        }
    }
}

fn done<T>(r: tierkv::Result<T>) -> Outcome {
    match r {
        Ok(_) => Outcome::Done,
        Err(e) => Outcome::Failed(e),
    }
}

/// An `update_fields`: not found when there was no row.
fn updated(r: tierkv::Result<bool>) -> Outcome {
    match r {
        Ok(true) => Outcome::Done,
        Ok(false) => Outcome::NotFound,
        Err(e) => Outcome::Failed(e),
    }
}

fn found<T>(r: tierkv::Result<Option<T>>) -> Outcome {
    match r {
        Ok(Some(_)) => Outcome::Done,
        Ok(None) => Outcome::NotFound,
        Err(e) => Outcome::Failed(e),
    }
}
