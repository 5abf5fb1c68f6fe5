//! The workload: N threads of random put / delete / get / scan over a small key space, every
//! read checked against the expected state while it runs (issue 5, item 2).
//!
//! - Writes: a thread takes the key's lock (one write in flight per key, as in RocksDB's
//!   db_stress; with racing writers, `writers_per_key` > 1, no lock: groups of threads
//!   write the same key at once and [`crate::race`] judges the outcome), announces the new version ([`ExpectedState::begin_write`] and
//!   [`WriteObserver::announce`]), calls the engine, and on success records the
//!   acknowledgement ([`ExpectedState::commit`], [`WriteObserver::acked`]). A failed write
//!   stays *in flight* (its outcome is unknown) and stops the workload: after a failed write
//!   an engine may refuse writes until it is reopened (STYLE §5). Space mode lets writes be
//!   refused with `NoSpace` ([`Workload::allow_refusals`]): such a write stays in flight too,
//!   and the workers go on.
//! - Reads take no lock, so they race with writers of the same key; each is checked against
//!   a [`Check`] (state before and after the read).
//! - Scans start at a random key; the engine's answer must be ordered, free of phantoms and
//!   of keys deleted (and acknowledged) throughout the scan, and must not skip a key that was
//!   present and acknowledged throughout. Engines whose scans are `Unsupported` skip scans.
//!
//! The mode that drives the workload may *crash* the store under it (take a pmem crash
//! image, roll back unsynced flash writes): it calls [`Workload::mark_crashed`] first, and
//! from then on nothing the engine returns is judged (a rolled-back file under a live engine
//! can make it return anything).
//!
//! Thread safety: a [`Workload`] is shared by its worker threads and the mode's thread; all
//! fields are atomics or locks.

use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv::{Db, Error, WriteBatch};
use tierkv_core::Counter;

use crate::batch::{BatchWrite, MAX_STRESS_BATCH};
use crate::expected_state::{ExpectedState, KeySpace};
use crate::fields::{FIELD_SHARE, FieldLocks, SchemaHandle, WriteKind};
use crate::value_codec::ValueSizes;
use crate::verify::{Check, Violation, open_read, violation};

mod field_ops;

/// Bytes of values one stress batch writes at most (shared by its puts): under the
/// smallest engine batch limit of the pools the harness uses, prism's half a PWB (64 KiB of
/// records in a 4 MiB pool: `the records of a write batch take 75072 bytes, more than half a
/// PWB of 131072 bytes`); hetermm's batches span log pages since 2026-11-26.
pub const BATCH_VALUE_BYTES: usize = 24 << 10;

/// The first key of the schema adapters' key space (`tierkv_core::schema::keys`): plain
/// scans stop before it, since the consolidated adapter keeps rows there.
pub const RESERVED_FROM: &[u8] = &[tierkv_core::schema::keys::RESERVED];

/// Percentages of each operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpMix {
    /// Puts.
    pub put: u32,
    /// Deletes.
    pub delete: u32,
    /// Gets.
    pub get: u32,
    /// Scans (turned into gets on engines without scans).
    pub scan: u32,
    /// Write batches ([`crate::batch`]); `None`: [`DEFAULT_BATCH_WEIGHT`] on engines with
    /// crash-atomic batches (`Db::atomic_batches`), none on the others.
    pub batch: Option<u32>,
}

/// The batch weight when `--mix` gives none and the engine has atomic batches.
pub const DEFAULT_BATCH_WEIGHT: u32 = 10;

impl Default for OpMix {
    fn default() -> Self {
        OpMix {
            put: 45,
            delete: 15,
            get: 30,
            scan: 10,
            batch: None,
        }
    }
}

impl std::str::FromStr for OpMix {
    type Err = String;
    /// `PUT,DELETE,GET,SCAN[,BATCH]` weights, e.g. `45,15,30,10` or `40,10,30,10,10`.
    fn from_str(s: &str) -> Result<Self, String> {
        let parts: Vec<u32> = s
            .split(',')
            .map(|p| p.trim().parse::<u32>())
            .collect::<Result<_, _>>()
            .map_err(|e| format!("op mix {s:?}: {e}"))?;
        let (put, delete, get, scan, batch) = match parts[..] {
            [put, delete, get, scan] => (put, delete, get, scan, None),
            [put, delete, get, scan, batch] => (put, delete, get, scan, Some(batch)),
            _ => {
                return Err(format!(
                    "op mix {s:?}: expected four or five weights PUT,DELETE,GET,SCAN[,BATCH]"
                ));
            }
        };
        if put + delete + batch.unwrap_or(0) == 0 {
            return Err(format!("op mix {s:?}: a stress run needs puts or deletes"));
        }
        Ok(OpMix {
            put,
            delete,
            get,
            scan,
            batch,
        })
    }
}

impl std::fmt::Display for OpMix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{},{},{},{}", self.put, self.delete, self.get, self.scan)?;
        match self.batch {
            Some(b) => write!(f, ",{b}"),
            None => Ok(()),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Put,
    Delete,
    Get,
    Scan,
    Batch,
}

impl OpMix {
    /// The batch weight on a store whose engine has (`atomic`) or lacks atomic batches.
    pub fn batch_weight(&self, atomic: bool) -> u32 {
        match self.batch {
            Some(b) => b,
            None if atomic => DEFAULT_BATCH_WEIGHT,
            None => 0,
        }
    }

    fn pick(&self, rng: &mut impl Rng, scans: bool, batch: u32) -> Op {
        let scan = if scans { self.scan } else { 0 };
        let total = self.put + self.delete + self.get + batch + scan;
        let mut x = rng.random_range(0..total.max(1));
        for (w, op) in [
            (self.put, Op::Put),
            (self.delete, Op::Delete),
            (self.get, Op::Get),
            (batch, Op::Batch),
        ] {
            if x < w {
                return op;
            }
            x -= w;
        }
        if scans { Op::Scan } else { Op::Get }
    }
}

/// The shape of a workload.
#[derive(Clone, Debug)]
pub struct WorkloadConfig {
    /// Worker threads.
    pub threads: usize,
    /// Operation weights.
    pub mix: OpMix,
    /// Longest scan (limit drawn uniformly from 1..=max_scan).
    pub max_scan: usize,
    /// Value lengths.
    pub sizes: ValueSizes,
    /// The seed of this round (each thread derives its own from it).
    pub seed: u64,
    /// Threads that write the same key at once (1: one writer per key, under the key's
    /// lock). With N > 1 the threads form groups of N that share a current key and move
    /// on to a random one now and then, so N writes (puts and deletes) to a key race;
    /// the expected state must then be [`ExpectedState::racing`].
    pub writers_per_key: usize,
    /// Most keys of one write batch (each batch writes 1..=max_batch distinct keys; at
    /// most [`MAX_STRESS_BATCH`]).
    pub max_batch: usize,
}

/// Told about every write before the engine is called and after it acknowledged: kill
/// mode's child reports these to its parent over a pipe.
pub trait WriteObserver: Send + Sync {
    /// `version` of key `id` is about to be written.
    fn announce(&self, id: u32, version: u32, delete: bool);
    /// `version` of key `id` was acknowledged.
    fn acked(&self, id: u32, version: u32, delete: bool);
    /// The writes of one batch are about to be applied (one engine call).
    fn announce_batch(&self, writes: &[BatchWrite]) {
        for w in writes {
            self.announce(w.id, w.version, w.delete);
        }
    }
    /// The batch was acknowledged.
    fn acked_batch(&self, writes: &[BatchWrite]) {
        for w in writes {
            self.acked(w.id, w.version, w.delete);
        }
    }
    /// A field write (`put_row`, `update_fields` of the fields of `mask`, `delete_row`)
    /// `version` of row `row` is about to be made ([`crate::fields`]).
    fn announce_field(&self, _row: u32, _version: u32, _kind: WriteKind, _mask: u64) {}
    /// The field write was acknowledged.
    fn acked_field(&self, _row: u32, _version: u32) {}
    /// The field write was refused with `NoSpace` (it must have written nothing).
    fn refused_field(&self, _row: u32, _version: u32) {}
}

/// An observer that ignores everything (in-process modes).
pub struct NoObserver;

impl WriteObserver for NoObserver {
    fn announce(&self, _: u32, _: u32, _: bool) {}
    fn acked(&self, _: u32, _: u32, _: bool) {}
}

/// Operation counters of a workload.
#[derive(Debug, Default)]
pub struct OpCounts {
    /// Acknowledged puts.
    pub puts: Counter,
    /// Acknowledged deletes.
    pub deletes: Counter,
    /// Checked gets.
    pub gets: Counter,
    /// Checked scans.
    pub scans: Counter,
    /// Rows returned by checked scans.
    pub scan_rows: Counter,
    /// Acknowledged write batches.
    pub batches: Counter,
    /// Keys written by acknowledged write batches.
    pub batch_keys: Counter,
    /// Writes refused with `NoSpace` (only counted when refusals are allowed, see
    /// [`Workload::allow_refusals`]; otherwise a refusal is a failed write).
    pub refused: Counter,
    /// The longest write (put or delete, refused or not), in microseconds.
    pub max_write_micros: AtomicU64,
    /// Acknowledged `put_row`s ([`crate::fields`]).
    pub row_puts: Counter,
    /// Acknowledged `delete_row`s.
    pub row_deletes: Counter,
    /// Acknowledged `update_fields` of an existing row.
    pub field_updates: Counter,
    /// Fields set by those updates.
    pub fields_updated: Counter,
    /// `update_fields` of an absent row (each must return false and write nothing).
    pub absent_updates: Counter,
    /// Checked `get_fields`.
    pub row_gets: Counter,
    /// Checked `scan_fields`.
    pub row_scans: Counter,
}

impl OpCounts {
    /// All operations.
    pub fn total(&self) -> u64 {
        self.puts.get()
            + self.deletes.get()
            + self.gets.get()
            + self.scans.get()
            + self.batches.get()
            + self.field_ops()
    }

    /// The field workload's counters, in the order of `RunReport::field_ops`: put_row,
    /// delete_row, update_fields, fields updated, updates of absent rows, get_fields,
    /// scan_fields.
    pub fn field_counts(&self) -> [u64; 7] {
        [
            &self.row_puts,
            &self.row_deletes,
            &self.field_updates,
            &self.fields_updated,
            &self.absent_updates,
            &self.row_gets,
            &self.row_scans,
        ]
        .map(Counter::get)
    }

    /// Field operations ([`crate::fields`]).
    pub fn field_ops(&self) -> u64 {
        self.row_puts.get()
            + self.row_deletes.get()
            + self.field_updates.get()
            + self.absent_updates.get()
            + self.row_gets.get()
            + self.row_scans.get()
    }
}

/// How a workload ended.
#[derive(Debug, Default)]
pub struct WorkloadEnd {
    /// Broken guarantees seen by reads (before any crash).
    pub violations: Vec<Violation>,
    /// The first failed write (its message), if any.
    pub write_error: Option<String>,
}

/// A running workload over one open store.
pub struct Workload<'a> {
    db: &'a Db,
    state: &'a ExpectedState,
    cfg: WorkloadConfig,
    observer: &'a dyn WriteObserver,
    context: String,
    locks: Box<[Mutex<()>]>,
    /// Racing writers: the current key of each group of threads.
    group_keys: Box<[AtomicU32]>,
    /// Operations the workers may still start (see [`Workload::limit_ops`]).
    ops_left: AtomicU64,
    /// Called by each worker before each operation (see [`Workload::pace_with`]).
    pacer: Option<&'a (dyn Fn() + Sync)>,
    stop: AtomicBool,
    crashed: AtomicBool,
    scans: AtomicBool,
    /// The batch weight of the mix on this store (see [`OpMix::batch_weight`]).
    batch_weight: u32,
    /// A write refused with `NoSpace` stays in flight and the workers go on (space mode).
    refusals_allowed: bool,
    /// The field workload's schema and locks, when it runs ([`crate::fields`]).
    fields: Option<(SchemaHandle, FieldLocks)>,
    /// Counters of checked operations.
    pub counts: OpCounts,
    violations: Mutex<Vec<Violation>>,
    write_error: Mutex<Option<String>>,
}

/// Keys past a scan's start whose windows are taken (bounds the work per scan on large key
/// spaces).
const SCAN_WINDOW: u32 = 4096;

/// The most violations kept per workload (the first ones are what matters).
const MAX_VIOLATIONS: usize = 32;

impl<'a> Workload<'a> {
    /// A workload over `db`, recording writes in `state`; `context` labels violations.
    pub fn new(
        db: &'a Db,
        state: &'a ExpectedState,
        cfg: WorkloadConfig,
        observer: &'a dyn WriteObserver,
        context: String,
    ) -> Self {
        let n = state.space().count() as usize;
        let batch_weight = cfg.mix.batch_weight(db.atomic_batches());
        let group_keys = (0..cfg.threads.max(1))
            .map(|g| AtomicU32::new((g as u32).wrapping_mul(7919) % n.max(1) as u32))
            .collect();
        let mut schema_error = None;
        let fields = state
            .fields()
            .and_then(|fs| match SchemaHandle::create(db, fs.config()) {
                Ok(h) => Some((h, FieldLocks::new(fs.config()))),
                Err(e) => {
                    schema_error = Some(format!("create_schema: {e}"));
                    None
                }
            });
        Workload {
            db,
            state,
            cfg,
            observer,
            context,
            locks: (0..n).map(|_| Mutex::new(())).collect(),
            group_keys,
            ops_left: AtomicU64::new(u64::MAX),
            pacer: None,
            crashed: AtomicBool::new(false),
            scans: AtomicBool::new(true),
            batch_weight,
            refusals_allowed: false,
            fields,
            counts: OpCounts::default(),
            violations: Mutex::new(Vec::new()),
            stop: AtomicBool::new(schema_error.is_some()),
            write_error: Mutex::new(schema_error),
        }
    }

    /// Stops the workload by itself after `n` operations (so that two runs with one
    /// thread and one seed do the same operations).
    pub fn limit_ops(self, n: u64) -> Self {
        self.ops_left.store(n, Ordering::SeqCst);
        self
    }

    /// Lets writes be refused with `NoSpace` (space mode): a refused write stays in flight
    /// (its outcome is unknown, as for any failed write, but the value it replaces must
    /// survive), is counted in [`OpCounts::refused`], and the workers go on. Any other
    /// error still stops the workload.
    pub fn allow_refusals(mut self) -> Self {
        self.refusals_allowed = true;
        self
    }

    /// Calls `pacer` before each operation, outside any engine call (it may wait, e.g.
    /// for the harness to catch up with work it queued from inside the engine).
    pub fn pace_with(mut self, pacer: &'a (dyn Fn() + Sync)) -> Self {
        self.pacer = Some(pacer);
        self
    }

    /// Takes one operation from the budget; false (and the workload stops) when it is spent.
    fn take_op(&self) -> bool {
        let ok = self
            .ops_left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if !ok {
            self.stop();
        }
        ok
    }

    /// Asks the workers to stop after their current operation.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// True once the workload was asked to stop (or stopped itself on a failed write or a
    /// violation).
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// From now on nothing the engine returns is judged (the store is being crashed under
    /// the workers); also stops the workers.
    pub fn mark_crashed(&self) {
        self.crashed.store(true, Ordering::SeqCst);
        self.stop();
    }

    /// Sleeps until `deadline` or until the workload stops, whichever comes first; true if
    /// the deadline was reached with the workload still running.
    pub fn run_until(&self, deadline: Instant) -> bool {
        loop {
            if self.stopped() {
                return false;
            }
            let now = Instant::now();
            if now >= deadline {
                return true;
            }
            std::thread::sleep((deadline - now).min(Duration::from_millis(2)));
        }
    }

    /// Runs the worker threads until [`Workload::stop`]; returns what went wrong.
    pub fn run(&self) -> WorkloadEnd {
        if self.batch_weight > 0 && !self.db.atomic_batches() {
            self.fail_write(format!(
                "the mix asks for write batches (weight {}), but engine {} has no crash-atomic \
                 write batches (Db::atomic_batches is false); drop the fifth weight of --mix",
                self.batch_weight,
                self.db.descriptor().name
            ));
        }
        std::thread::scope(|s| {
            for t in 0..self.cfg.threads.max(1) {
                let seed = self.cfg.seed ^ (t as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                s.spawn(move || self.worker(seed, t));
            }
        });
        WorkloadEnd {
            violations: std::mem::take(&mut *self.violations.lock()),
            write_error: self.write_error.lock().take(),
        }
    }

    fn racing(&self) -> bool {
        self.cfg.writers_per_key > 1
    }

    /// The key of the next operation: random, or with racing writers the group's current
    /// key, moved on by each thread with probability 1 / (4 N) per operation (so a key
    /// sees about four operations from each of the N threads).
    fn next_key(&self, rng: &mut ChaCha8Rng, thread: usize) -> u32 {
        let count = self.state.space().count();
        if !self.racing() {
            return rng.random_range(0..count);
        }
        let n = self.cfg.writers_per_key;
        let Some(cur) = self.group_keys.get(thread / n) else {
            return rng.random_range(0..count);
        };
        let id = cur.load(Ordering::Relaxed);
        if rng.random_range(0..4 * n) == 0 {
            let _ = cur.compare_exchange(
                id,
                rng.random_range(0..count),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
        id.min(count - 1)
    }

    fn worker(&self, seed: u64, thread: usize) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        while !self.stopped() && self.take_op() {
            if let Some(p) = self.pacer {
                p();
            }
            if self.fields.is_some() && rng.random_range(0..100) < FIELD_SHARE {
                self.field_op(&mut rng);
                continue;
            }
            let id = self.next_key(&mut rng, thread);
            match self.cfg.mix.pick(
                &mut rng,
                self.scans.load(Ordering::Relaxed),
                self.batch_weight,
            ) {
                Op::Put => self.write(id, false),
                Op::Delete => self.write(id, true),
                Op::Get => self.get(id),
                Op::Batch => self.batch(id, &mut rng),
                Op::Scan => {
                    let limit = rng.random_range(1..=self.cfg.max_scan.max(1));
                    self.scan(id, limit);
                }
            }
        }
    }

    fn report(&self, v: Violation) {
        if self.crashed.load(Ordering::SeqCst) {
            return;
        }
        let mut all = self.violations.lock();
        if all.len() < MAX_VIOLATIONS {
            all.push(v);
        }
        drop(all);
        self.stop();
    }

    fn write(&self, id: u32, delete: bool) {
        let space = self.state.space();
        let key = space.key(id);
        // NOTE: racing writers take no lock; the expected state tracks every write.
        let _guard = (!self.racing())
            .then(|| self.locks.get(id as usize).map(Mutex::lock))
            .flatten();
        let version = match self.state.begin_write(id, delete) {
            Ok(v) => v,
            Err(e) => {
                self.fail_write(e.to_string());
                return;
            }
        };
        self.observer.announce(id, version, delete);
        let value = (!delete).then(|| self.cfg.sizes.value(&key, version));
        let started = Instant::now();
        let result = match &value {
            None => self.db.delete(&key),
            Some(v) => self.db.put(&key, v),
        };
        let took = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.counts
            .max_write_micros
            .fetch_max(took, Ordering::Relaxed);
        match result {
            Ok(()) => {
                self.state.commit(id, version);
                self.observer.acked(id, version, delete);
                if delete {
                    self.counts.deletes.incr();
                } else {
                    self.counts.puts.incr();
                }
            }
            Err(Error::NoSpace { .. }) if self.refusals_allowed => self.counts.refused.incr(),
            Err(e) => {
                let op = if delete { "delete" } else { "put" };
                self.fail_write(format!("{op} of {} v#{version}: {e}", KeySpace::show(&key)));
            }
        }
    }

    /// A write batch of 1..=max_batch distinct keys starting with `first` (the group's
    /// current key with racing writers, so batches race with the group's single writes),
    /// puts and deletes in the mix's proportion. With one writer per key the batch holds
    /// the locks of all its keys (taken in key order, so never a deadlock).
    fn batch(&self, first: u32, rng: &mut ChaCha8Rng) {
        let space = self.state.space();
        let count = space.count();
        let n = rng
            .random_range(1..=self.cfg.max_batch.clamp(1, MAX_STRESS_BATCH))
            .min(count as usize);
        let mut ids = std::collections::BTreeSet::from([first]);
        while ids.len() < n {
            ids.insert(rng.random_range(0..count));
        }
        let deletes = self.cfg.mix.delete;
        let writes_total = (self.cfg.mix.put + deletes).max(1);
        let _guards: Vec<_> = if self.racing() {
            Vec::new()
        } else {
            ids.iter()
                .filter_map(|id| self.locks.get(*id as usize).map(Mutex::lock))
                .collect()
        };
        let mut writes = Vec::with_capacity(ids.len());
        for &id in &ids {
            let delete = rng.random_range(0..writes_total) < deletes;
            match self.state.begin_write(id, delete) {
                Ok(version) => writes.push(BatchWrite {
                    id,
                    version,
                    delete,
                }),
                Err(e) => {
                    // NOTE: the writes announced so far stay in flight, as for a failed
                    // write.
                    self.fail_write(e.to_string());
                    return;
                }
            }
        }
        let mut batch = WriteBatch::new();
        for w in &writes {
            let key = space.key(w.id);
            if w.delete {
                batch.delete(key);
            } else {
                // NOTE: a batch's values share BATCH_VALUE_BYTES, so that every batch fits
                // the smallest engine limit (prism: half a PWB, 64 KiB in a 4 MiB pool).
                let cap = BATCH_VALUE_BYTES / writes.len();
                let value = self.cfg.sizes.value_capped(&key, w.version, cap);
                batch.put(key, value);
            }
        }
        self.state.batches().record(writes.clone());
        self.observer.announce_batch(&writes);
        let started = Instant::now();
        let result = self.db.write(&batch);
        let took = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.counts
            .max_write_micros
            .fetch_max(took, Ordering::Relaxed);
        match result {
            Ok(()) => {
                for w in &writes {
                    self.state.commit(w.id, w.version);
                }
                self.observer.acked_batch(&writes);
                self.counts.batches.incr();
                self.counts.batch_keys.add(writes.len() as u64);
            }
            Err(Error::NoSpace { .. }) if self.refusals_allowed => self.counts.refused.incr(),
            Err(e) => {
                let first = writes.first().map_or(0, |w| w.id);
                self.fail_write(format!(
                    "write batch of {} keys from {}: {e}",
                    writes.len(),
                    KeySpace::show(&space.key(first))
                ));
            }
        }
    }

    fn fail_write(&self, msg: String) {
        if !self.crashed.load(Ordering::SeqCst) {
            let mut first = self.write_error.lock();
            if first.is_none() {
                *first = Some(msg);
            }
        }
        self.stop();
    }

    fn get(&self, id: u32) {
        let space = self.state.space();
        let key = space.key(id);
        let before = open_read(self.state, id);
        let result = self.db.get(&key);
        let window = Check::close(self.state, id, before);
        let ctx = format!("{}, get", self.context);
        match result {
            Ok(found) => {
                if let Err((exp, got)) = window.check(space, &self.cfg.sizes, id, found.as_deref())
                {
                    self.report(violation(&ctx, &key, exp, got));
                }
                self.counts.gets.incr();
            }
            Err(e) => self.report(violation(
                &ctx,
                &key,
                window.expected(),
                format!("an error: {e}"),
            )),
        }
    }

    fn scan(&self, start: u32, limit: usize) {
        let space = self.state.space();
        let start_key = space.key(start);
        // NOTE: windows for at most SCAN_WINDOW keys from the start; rows past them are
        // checked for order and phantoms only.
        let end = space.count().min(start.saturating_add(SCAN_WINDOW));
        let befores: Vec<_> = (start..end).map(|id| open_read(self.state, id)).collect();
        // NOTE: keys from 0xFF on belong to the schema adapters (crate::fields).
        let result = self.db.scan::<Vec<u8>, _>(
            (
                Bound::Included(start_key.clone()),
                Bound::Excluded(RESERVED_FROM.to_vec()),
            ),
            limit,
        );
        let windows: Vec<Check> = (start..end)
            .zip(befores)
            .map(|(id, b)| Check::close(self.state, id, b))
            .collect();
        let ctx = format!(
            "{}, scan from {} limit {limit}",
            self.context,
            KeySpace::show(&start_key)
        );
        let rows = match result {
            Ok(rows) => rows,
            Err(Error::Unsupported(_)) => {
                self.scans.store(false, Ordering::Relaxed);
                return;
            }
            Err(e) => {
                self.report(violation(
                    &ctx,
                    &start_key,
                    "a scan".to_owned(),
                    format!("an error: {e}"),
                ));
                return;
            }
        };
        for v in check_scan(space, &self.cfg.sizes, start, limit, &rows, &windows, &ctx) {
            self.report(v);
        }
        self.counts.scans.incr();
        self.counts.scan_rows.add(rows.len() as u64);
    }
}

/// Checks a scan's rows: `windows[i]` is the window of key `start + i` (rows past the
/// windows are checked for order and phantoms only).
pub(crate) fn check_scan(
    space: KeySpace,
    sizes: &ValueSizes,
    start: u32,
    limit: usize,
    rows: &[(Vec<u8>, Vec<u8>)],
    windows: &[Check<'_>],
    ctx: &str,
) -> Vec<Violation> {
    let mut out = Vec::new();
    if rows.len() > limit {
        out.push(violation(
            ctx,
            b"(scan)",
            format!("at most {limit} rows"),
            format!("{} rows", rows.len()),
        ));
    }
    let mut listed = vec![false; windows.len()];
    let mut prev: Option<u32> = None;
    for (k, v) in rows {
        let Some(id) = space.id_of(k).filter(|id| *id >= start) else {
            out.push(violation(
                ctx,
                k,
                "no such key in the scanned range".to_owned(),
                format!("a phantom with {} bytes", v.len()),
            ));
            continue;
        };
        if let Some(p) = prev
            && p >= id
        {
            out.push(violation(
                ctx,
                k,
                "keys in strictly ascending order".to_owned(),
                format!("this key after {}", KeySpace::show(&space.key(p))),
            ));
        }
        prev = Some(id);
        let i = (id - start) as usize;
        if let Some(l) = listed.get_mut(i) {
            *l = true;
        }
        if let Some(w) = windows.get(i)
            && let Err((exp, got)) = w.check(space, sizes, id, Some(v))
        {
            out.push(violation(ctx, k, exp, got));
        }
    }
    // The scan covered [start, last row] when it was cut by the limit, else everything from
    // start on: a key present and acknowledged throughout must not be skipped there.
    let covered = if rows.len() >= limit {
        prev.map_or(0, |p| (p - start) as usize + 1)
    } else {
        windows.len()
    };
    for (i, w) in windows.iter().enumerate().take(covered) {
        let id = start + i as u32;
        if !listed.get(i).copied().unwrap_or(true) && w.must_be_listed(space, sizes, id) {
            out.push(violation(
                ctx,
                &space.key(id),
                w.expected(),
                "missing from the scan".to_owned(),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expected_state::KeySpace;

    #[test]
    fn op_mix_parses_and_refuses_nonsense() {
        let m: OpMix = "50,10,30,10".parse().unwrap();
        assert_eq!(m.to_string(), "50,10,30,10");
        assert!("1,2,3".parse::<OpMix>().is_err());
        assert!("0,0,50,50".parse::<OpMix>().is_err());
        assert!("a,b,c,d".parse::<OpMix>().is_err());
        let b: OpMix = "40,10,30,10,10".parse().unwrap();
        assert_eq!(
            (b.batch, b.to_string()),
            (Some(10), "40,10,30,10,10".to_owned())
        );
        assert_eq!(b.batch_weight(false), 10);
        assert_eq!(OpMix::default().batch_weight(true), DEFAULT_BATCH_WEIGHT);
        assert_eq!(OpMix::default().batch_weight(false), 0);
        assert!("0,0,50,50,5".parse::<OpMix>().is_ok());
        assert!("1,2,3,4,5,6".parse::<OpMix>().is_err());
    }

    #[test]
    fn op_mix_without_scans_never_picks_scan() {
        let m = OpMix {
            put: 0,
            delete: 1,
            get: 0,
            scan: 99,
            batch: None,
        };
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        assert!((0..1000).all(|_| m.pick(&mut rng, false, 0) != Op::Scan));
        assert!((0..1000).any(|_| m.pick(&mut rng, true, 0) == Op::Scan));
        assert!((0..1000).all(|_| m.pick(&mut rng, true, 0) != Op::Batch));
        assert!((0..1000).any(|_| m.pick(&mut rng, true, 50) == Op::Batch));
    }

    fn scan_setup() -> (ExpectedState, ValueSizes, KeySpace) {
        let space = KeySpace::new(6);
        let st = ExpectedState::new(space);
        for id in [1, 2, 4] {
            let v = st.begin_write(id, false).unwrap();
            st.commit(id, v);
        }
        let d = st.begin_write(4, true).unwrap();
        st.commit(4, d);
        (st, ValueSizes::default(), space)
    }

    fn windows(st: &ExpectedState, start: u32) -> Vec<Check<'_>> {
        (start..st.space().count())
            .map(|id| Check::quiescent(st, id))
            .collect()
    }

    fn row(space: KeySpace, sizes: &ValueSizes, id: u32, v: u32) -> (Vec<u8>, Vec<u8>) {
        let k = space.key(id);
        let val = sizes.value(&k, v);
        (k, val)
    }

    #[test]
    fn a_correct_scan_passes() {
        let (st, sizes, space) = scan_setup();
        let rows = vec![row(space, &sizes, 1, 1), row(space, &sizes, 2, 1)];
        let w = windows(&st, 0);
        assert!(check_scan(space, &sizes, 0, 10, &rows, &w, "t").is_empty());
        // Cut by the limit after key 1: key 2 is outside the covered range.
        assert!(check_scan(space, &sizes, 0, 1, &rows[..1], &w, "t").is_empty());
    }

    #[test]
    fn a_scan_with_a_deleted_key_a_gap_or_disorder_is_caught() {
        let (st, sizes, space) = scan_setup();
        let w = windows(&st, 0);
        let deleted = vec![
            row(space, &sizes, 1, 1),
            row(space, &sizes, 2, 1),
            row(space, &sizes, 4, 1),
        ];
        let v = check_scan(space, &sizes, 0, 10, &deleted, &w, "t");
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].found.contains("resurrected"), "{}", v[0]);
        let gap = vec![row(space, &sizes, 2, 1)];
        let v = check_scan(space, &sizes, 0, 10, &gap, &w, "t");
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].key, "k00000001");
        assert_eq!(v[0].found, "missing from the scan");
        let disorder = vec![row(space, &sizes, 2, 1), row(space, &sizes, 1, 1)];
        let v = check_scan(space, &sizes, 0, 10, &disorder, &w, "t");
        assert!(v.iter().any(|v| v.expected.contains("ascending")), "{v:?}");
        let phantom = vec![(b"zzz".to_vec(), b"v".to_vec())];
        let v = check_scan(space, &sizes, 3, 10, &phantom, &windows(&st, 3), "t");
        assert!(v[0].found.contains("phantom"), "{v:?}");
    }
}
