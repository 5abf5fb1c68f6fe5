//! Workloads: YCSB's core workloads as named operation mixes, and the per-thread stream of
//! operations a mix produces (YCSB `CoreWorkload.doTransaction`).
//!
//! A workload is a [`Workload`] value: a name, the proportions of read / update / insert /
//! scan / read-modify-write, a request distribution and a scan-length range. YCSB's A-F are
//! in [`WORKLOADS`] with YCSB's `workloads/workload[a-f]` settings; adding a workload is
//! adding an entry (the scan-heavy `s` is one). `load` is not a mix: it inserts the
//! `--records` records once per engine, before the mixes run.
//!
//! Key choice follows `CoreWorkload.init` and `nextKeynum`:
//! - zipfian: [`ScrambledZipfian`] over the records present at the start of the workload plus
//!   twice the inserts it expects (`ops × insert proportion × 2`, YCSB's fudge factor), so
//!   the hot set does not move as inserts arrive;
//! - latest: [`SkewedLatest`] from the newest acknowledged insert;
//! - uniform: [`Uniform`] over the records present at the start;
//!
//! and a drawn ordinal that is not yet acknowledged is drawn again, so an operation only
//! names keys whose insert has returned, across all client threads ([`KeySpace`]).
//!
//! Determinism: a stream is a function of the seed, the workload name, the thread index and
//! the acknowledged count it reads. With one thread, or with workloads without inserts, the
//! same seed gives the same operations; with several threads and inserts the interleaving
//! of acknowledgements can change which ordinals are eligible, as in YCSB.
//!
//! Thread safety: [`KeySpace`] is shared by all client threads; each thread owns its
//! [`OpStream`].

use std::fmt;
use std::str::FromStr;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::generator::counter::{AcknowledgedCounter, Counter, WindowFull};
use crate::generator::fnvhash64;
use crate::generator::latest::SkewedLatest;
use crate::generator::scrambled::ScrambledZipfian;
use crate::generator::uniform::Uniform;
use crate::values::ValueSource;

/// The kinds of operation a workload issues.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    /// A get of one key.
    Read,
    /// A put over an existing key.
    Update,
    /// A put of a new key.
    Insert,
    /// A scan of 1..N keys from an existing key.
    Scan,
    /// A get then a put of the same key, timed as one operation.
    ReadModifyWrite,
    /// One crash-atomic write batch of puts over existing keys (`Db::write`), timed as one
    /// operation.
    Batch,
}

impl OpKind {
    /// Every kind, in report order.
    pub const ALL: [OpKind; 6] = [
        OpKind::Read,
        OpKind::Update,
        OpKind::Insert,
        OpKind::Scan,
        OpKind::ReadModifyWrite,
        OpKind::Batch,
    ];

    /// The name in reports and JSON.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Read => "read",
            OpKind::Update => "update",
            OpKind::Insert => "insert",
            OpKind::Scan => "scan",
            OpKind::ReadModifyWrite => "rmw",
            OpKind::Batch => "batch",
        }
    }

    /// The position in [`OpKind::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// How keys are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Distribution {
    /// YCSB's scrambled zipfian, θ = 0.99.
    Zipfian,
    /// YCSB's skewed-latest.
    Latest,
    /// Uniform over the records present when the workload starts.
    Uniform,
}

impl fmt::Display for Distribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Distribution::Zipfian => "zipfian",
            Distribution::Latest => "latest",
            Distribution::Uniform => "uniform",
        })
    }
}

impl FromStr for Distribution {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "zipfian" => Ok(Distribution::Zipfian),
            "latest" => Ok(Distribution::Latest),
            "uniform" => Ok(Distribution::Uniform),
            _ => Err(format!(
                "distribution {s:?}: expected zipfian, latest or uniform"
            )),
        }
    }
}

/// The proportions of each operation kind (they need not sum to 1; YCSB normalizes).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Mix {
    /// Reads.
    pub read: f64,
    /// Updates.
    pub update: f64,
    /// Inserts.
    pub insert: f64,
    /// Scans.
    pub scan: f64,
    /// Read-modify-writes.
    pub rmw: f64,
    /// Write batches (of [`Workload::batch_size`] puts).
    pub batch: f64,
}

impl Mix {
    const NONE: Mix = Mix {
        read: 0.0,
        update: 0.0,
        insert: 0.0,
        scan: 0.0,
        rmw: 0.0,
        batch: 0.0,
    };

    fn weights(&self) -> [(OpKind, f64); 6] {
        [
            (OpKind::Read, self.read),
            (OpKind::Update, self.update),
            (OpKind::Insert, self.insert),
            (OpKind::Scan, self.scan),
            (OpKind::ReadModifyWrite, self.rmw),
            (OpKind::Batch, self.batch),
        ]
    }

    fn total(&self) -> f64 {
        self.weights().iter().map(|(_, w)| w).sum()
    }

    /// The share of `kind` in the mix.
    pub fn share(&self, kind: OpKind) -> f64 {
        let total = self.total();
        let w = self.weights()[kind.index()].1;
        if total > 0.0 { w / total } else { 0.0 }
    }

    /// YCSB `DiscreteGenerator.nextString`: the kind a uniform `u` in `[0, 1)` selects.
    fn choose(&self, u: f64) -> OpKind {
        let total = self.total();
        let mut left = u;
        let mut last = OpKind::Read;
        for (kind, w) in self.weights() {
            if w <= 0.0 {
                continue;
            }
            let p = w / total;
            if left < p {
                return kind;
            }
            left -= p;
            last = kind;
        }
        last
    }
}

/// Which fields the reads and scans of a schema workload select (`--schema`;
/// `crate::schema`). Updates always set one field in schema mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldScope {
    /// Whole records (YCSB `readallfields=true`); without `--schema`, values are whole
    /// anyway.
    Record,
    /// One field drawn uniformly (FOCUS's micro-benchmarks); needs `--schema`.
    OneField,
}

/// A named operation mix.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Workload {
    /// The name on the command line and in reports (`a` ... `f`, `s`).
    pub name: &'static str,
    /// One line for the report.
    pub summary: &'static str,
    /// The proportions.
    pub mix: Mix,
    /// The default request distribution (`--distribution` overrides it).
    pub distribution: Distribution,
    /// Scan lengths, drawn uniformly from this inclusive range.
    pub scan_length: (u64, u64),
    /// Puts per write batch (0: the workload issues no batches).
    pub batch_size: usize,
    /// What reads and scans select in schema mode.
    pub fields: FieldScope,
}

/// YCSB's scan lengths in workload E (`maxscanlength=100`, uniform).
const SCAN_LENGTH: (u64, u64) = (1, 100);

/// Every named mix, in the order reports list them.
pub static WORKLOADS: &[Workload] = &[
    Workload {
        name: "a",
        summary: "update heavy: 50% read, 50% update",
        mix: Mix {
            read: 0.5,
            update: 0.5,
            ..Mix::NONE
        },
        distribution: Distribution::Zipfian,
        scan_length: SCAN_LENGTH,
        batch_size: 0,
        fields: FieldScope::Record,
    },
    Workload {
        name: "b",
        summary: "read mostly: 95% read, 5% update",
        mix: Mix {
            read: 0.95,
            update: 0.05,
            ..Mix::NONE
        },
        distribution: Distribution::Zipfian,
        scan_length: SCAN_LENGTH,
        batch_size: 0,
        fields: FieldScope::Record,
    },
    Workload {
        name: "c",
        summary: "read only: 100% read",
        mix: Mix {
            read: 1.0,
            ..Mix::NONE
        },
        distribution: Distribution::Zipfian,
        scan_length: SCAN_LENGTH,
        batch_size: 0,
        fields: FieldScope::Record,
    },
    Workload {
        name: "d",
        summary: "read latest: 95% read, 5% insert",
        mix: Mix {
            read: 0.95,
            insert: 0.05,
            ..Mix::NONE
        },
        distribution: Distribution::Latest,
        scan_length: SCAN_LENGTH,
        batch_size: 0,
        fields: FieldScope::Record,
    },
    Workload {
        name: "e",
        summary: "short ranges: 95% scan (1-100 keys), 5% insert",
        mix: Mix {
            scan: 0.95,
            insert: 0.05,
            ..Mix::NONE
        },
        distribution: Distribution::Zipfian,
        scan_length: SCAN_LENGTH,
        batch_size: 0,
        fields: FieldScope::Record,
    },
    Workload {
        name: "f",
        summary: "read-modify-write: 50% read, 50% read-modify-write",
        mix: Mix {
            read: 0.5,
            rmw: 0.5,
            ..Mix::NONE
        },
        distribution: Distribution::Zipfian,
        scan_length: SCAN_LENGTH,
        batch_size: 0,
        fields: FieldScope::Record,
    },
    Workload {
        name: "s",
        summary: "scan heavy: 95% scan (1-100 keys), 5% update",
        mix: Mix {
            scan: 0.95,
            update: 0.05,
            ..Mix::NONE
        },
        distribution: Distribution::Zipfian,
        scan_length: SCAN_LENGTH,
        batch_size: 0,
        fields: FieldScope::Record,
    },
    Workload {
        name: "batch10",
        summary: "write batches: 100% WriteBatch of 10 puts (uniform keys)",
        mix: Mix {
            batch: 1.0,
            ..Mix::NONE
        },
        distribution: Distribution::Uniform,
        scan_length: SCAN_LENGTH,
        batch_size: 10,
        fields: FieldScope::Record,
    },
    Workload {
        name: "batch100",
        summary: "write batches: 100% WriteBatch of 100 puts (uniform keys)",
        mix: Mix {
            batch: 1.0,
            ..Mix::NONE
        },
        distribution: Distribution::Uniform,
        scan_length: SCAN_LENGTH,
        batch_size: 100,
        fields: FieldScope::Record,
    },
    Workload {
        name: "field-read",
        summary: "schema micro-benchmark: 100% read of one field",
        mix: Mix {
            read: 1.0,
            ..Mix::NONE
        },
        distribution: Distribution::Zipfian,
        scan_length: SCAN_LENGTH,
        batch_size: 0,
        fields: FieldScope::OneField,
    },
    Workload {
        name: "field-update",
        summary: "schema micro-benchmark: 100% update of one field",
        mix: Mix {
            update: 1.0,
            ..Mix::NONE
        },
        distribution: Distribution::Zipfian,
        scan_length: SCAN_LENGTH,
        batch_size: 0,
        fields: FieldScope::OneField,
    },
    Workload {
        name: "field-scan",
        summary: "schema micro-benchmark: 100% scan of one field of 100 rows",
        mix: Mix {
            scan: 1.0,
            ..Mix::NONE
        },
        distribution: Distribution::Zipfian,
        scan_length: (100, 100),
        batch_size: 0,
        fields: FieldScope::OneField,
    },
];

/// The name of the load phase.
pub const LOAD: &str = "load";

/// One step of a benchmark: the load, or a mix.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Phase {
    /// Insert the records.
    Load,
    /// Run a mix.
    Run(Workload),
}

impl Phase {
    /// The name in reports (`load`, `a`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            Phase::Load => LOAD,
            Phase::Run(w) => w.name,
        }
    }

    /// One line for reports.
    pub fn summary(&self) -> &'static str {
        match self {
            Phase::Load => "bulk insert: 100% insert of the records",
            Phase::Run(w) => w.summary,
        }
    }
}

/// The workload called `name` (case-insensitive).
pub fn workload(name: &str) -> Option<&'static Workload> {
    WORKLOADS.iter().find(|w| w.name.eq_ignore_ascii_case(name))
}

/// Parses `--workloads` (`load,a,b,...`); refuses unknown and repeated names.
pub fn parse_phases(list: &str) -> Result<Vec<Phase>, String> {
    let mut phases = Vec::new();
    for name in list.split(',').map(str::trim) {
        let phase = if name.eq_ignore_ascii_case(LOAD) {
            Phase::Load
        } else if let Some(w) = workload(name) {
            Phase::Run(*w)
        } else {
            let known: Vec<&str> = WORKLOADS.iter().map(|w| w.name).collect();
            return Err(format!(
                "unknown workload {name:?} (workloads: {LOAD}, {})",
                known.join(", ")
            ));
        };
        if phases.iter().any(|p: &Phase| p.name() == phase.name()) {
            return Err(format!("workload {name:?} is listed twice"));
        }
        phases.push(phase);
    }
    Ok(phases)
}

/// The ordinals of one engine's run, shared by its client threads: the load sequence and
/// the acknowledged inserts, which carry over from one workload to the next.
#[derive(Debug)]
pub struct KeySpace {
    records: u64,
    load: Counter,
    inserts: AcknowledgedCounter,
}

impl KeySpace {
    /// A key space of `records` records (at least one) to load.
    pub fn new(records: u64) -> Self {
        let records = records.max(1);
        KeySpace {
            records,
            load: Counter::new(0),
            inserts: AcknowledgedCounter::new(records),
        }
    }

    /// The next ordinal to load, until all records are handed out.
    pub fn next_load(&self) -> Option<u64> {
        let o = self.load.next_value();
        (o < self.records).then_some(o)
    }

    /// Acknowledges a transaction-phase insert once it returned.
    pub fn acknowledge(&self, ordinal: u64) -> Result<(), WindowFull> {
        self.inserts.acknowledge(ordinal)
    }

    /// Moves all acknowledged inserts over (call once the clients stopped).
    pub fn settle(&self) {
        self.inserts.settle();
    }

    /// How many records exist: the loaded ones and the acknowledged inserts.
    pub fn acknowledged(&self) -> u64 {
        self.inserts.acknowledged()
    }
}

/// Picks the ordinal an operation works on.
#[derive(Clone, Debug)]
pub enum KeyChooser {
    /// Scrambled zipfian.
    Zipfian(ScrambledZipfian),
    /// Skewed latest.
    Latest(SkewedLatest),
    /// Uniform.
    Uniform(Uniform),
}

impl KeyChooser {
    /// A chooser for a workload starting with `present` records and expecting
    /// `expected_inserts` more (YCSB `CoreWorkload.init`).
    pub fn new(distribution: Distribution, present: u64, expected_inserts: u64) -> Self {
        let present = present.max(1);
        match distribution {
            Distribution::Zipfian => {
                KeyChooser::Zipfian(ScrambledZipfian::new(0, present + expected_inserts))
            }
            Distribution::Latest => KeyChooser::Latest(SkewedLatest::new(present - 1)),
            Distribution::Uniform => KeyChooser::Uniform(Uniform::new(0, present - 1)),
        }
    }

    /// YCSB `nextKeynum`: draws until the ordinal is acknowledged.
    fn next_keynum<R: Rng + ?Sized>(&mut self, keys: &KeySpace, rng: &mut R) -> u64 {
        loop {
            let acknowledged = keys.acknowledged();
            let k = match self {
                KeyChooser::Zipfian(z) => z.next_value(rng),
                KeyChooser::Latest(l) => l.next_value(acknowledged.saturating_sub(1), rng),
                KeyChooser::Uniform(u) => u.next_value(rng),
            };
            if k < acknowledged {
                return k;
            }
        }
    }
}

/// One operation, naming its key by ordinal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Get the key.
    Read(u64),
    /// Put a new value over the key.
    Update(u64),
    /// Put a new key (acknowledge the ordinal when it returns).
    Insert(u64),
    /// Scan `len` pairs from the key.
    Scan(u64, usize),
    /// Get, then put, the key.
    ReadModifyWrite(u64),
    /// A write batch of this many puts over existing keys (drawn by
    /// [`OpStream::batch_keys`]).
    Batch(usize),
}

impl Op {
    /// The kind of the operation.
    pub fn kind(&self) -> OpKind {
        match self {
            Op::Read(_) => OpKind::Read,
            Op::Update(_) => OpKind::Update,
            Op::Insert(_) => OpKind::Insert,
            Op::Scan(..) => OpKind::Scan,
            Op::ReadModifyWrite(_) => OpKind::ReadModifyWrite,
            Op::Batch(_) => OpKind::Batch,
        }
    }
}

/// The seed of one thread's stream in one phase: the run's seed mixed with the phase's name
/// and the thread's index (SplitMix64 finalizer).
pub fn stream_seed(seed: u64, phase: &str, thread: usize) -> u64 {
    let name_hash = phase.bytes().fold(0u64, |h, b| fnvhash64(h ^ u64::from(b)));
    let mut z =
        seed ^ name_hash.rotate_left(17) ^ (thread as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One client thread's operations for one workload.
#[derive(Debug)]
pub struct OpStream<'k> {
    workload: Workload,
    keys: &'k KeySpace,
    chooser: KeyChooser,
    scan_length: Uniform,
    rng: ChaCha8Rng,
}

impl<'k> OpStream<'k> {
    /// The stream of thread `thread`; `chooser` is built once per workload and cloned.
    pub fn new(
        workload: Workload,
        keys: &'k KeySpace,
        chooser: KeyChooser,
        seed: u64,
        thread: usize,
    ) -> Self {
        OpStream {
            workload,
            keys,
            chooser,
            scan_length: Uniform::new(workload.scan_length.0, workload.scan_length.1),
            rng: ChaCha8Rng::seed_from_u64(stream_seed(seed, workload.name, thread)),
        }
    }

    /// The next operation.
    pub fn next_op(&mut self) -> Op {
        let kind = self.workload.mix.choose(self.rng.random());
        match kind {
            OpKind::Insert => Op::Insert(self.keys.inserts.next_value()),
            OpKind::Read => Op::Read(self.next_keynum()),
            OpKind::Update => Op::Update(self.next_keynum()),
            OpKind::ReadModifyWrite => Op::ReadModifyWrite(self.next_keynum()),
            OpKind::Batch => Op::Batch(self.workload.batch_size.max(1)),
            OpKind::Scan => {
                let k = self.next_keynum();
                let len = self.scan_length.next_value(&mut self.rng);
                Op::Scan(k, usize::try_from(len).unwrap_or(usize::MAX))
            }
        }
    }

    /// Writes the value of the next update or insert into `out`, from this stream's RNG.
    pub fn fill_value(&mut self, values: &ValueSource, out: &mut Vec<u8>) {
        values.fill(&mut self.rng, out);
    }

    /// Draws the `n` keys of a write batch into `out` (repeats are possible; a batch keeps
    /// the last put of a key, so it may then hold fewer than `n` keys).
    pub fn batch_keys(&mut self, n: usize, out: &mut Vec<u64>) {
        out.clear();
        for _ in 0..n {
            let k = self.next_keynum();
            out.push(k);
        }
    }

    /// The key space the stream draws from.
    pub fn keys(&self) -> &'k KeySpace {
        self.keys
    }

    /// The workload.
    pub fn workload(&self) -> &Workload {
        &self.workload
    }

    /// Draws a field index below `count` (the field a schema update sets, or a one-field
    /// read selects), from this stream's RNG.
    pub fn field(&mut self, count: usize) -> usize {
        self.rng.random_range(0..count.max(1))
    }

    /// Writes `len` fresh value bytes (one field) into `out`, from this stream's RNG.
    pub fn fill_piece(&mut self, values: &ValueSource, len: usize, out: &mut Vec<u8>) {
        values.fill_piece(&mut self.rng, len, out);
    }

    fn next_keynum(&mut self) -> u64 {
        self.chooser.next_keynum(self.keys, &mut self.rng)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream_ops(w: &Workload, seed: u64, n: usize) -> Vec<Op> {
        let keys = KeySpace::new(1_000);
        let chooser = KeyChooser::new(w.distribution, 1_000, 100);
        let mut s = OpStream::new(*w, &keys, chooser, seed, 0);
        (0..n)
            .map(|_| {
                let op = s.next_op();
                if let Op::Insert(o) = op {
                    keys.acknowledge(o).unwrap();
                }
                op
            })
            .collect()
    }

    #[test]
    fn the_same_seed_gives_the_same_operation_stream() {
        // NOTE: batch workloads issue only `Batch(n)`; their keys are checked below.
        for w in WORKLOADS.iter().filter(|w| w.batch_size == 0) {
            let seed = 0x5eed_0040;
            assert_eq!(
                stream_ops(w, seed, 5_000),
                stream_ops(w, seed, 5_000),
                "{}",
                w.name
            );
            assert_ne!(
                stream_ops(w, seed, 5_000),
                stream_ops(w, seed + 1, 5_000),
                "{}: another seed, another stream",
                w.name
            );
        }
    }

    fn batch_stream(w: &Workload, seed: u64) -> Vec<u64> {
        let keys = KeySpace::new(1_000);
        let mut s = OpStream::new(
            *w,
            &keys,
            KeyChooser::new(w.distribution, 1_000, 0),
            seed,
            0,
        );
        let mut all = Vec::new();
        let mut batch = Vec::new();
        for _ in 0..50 {
            let Op::Batch(n) = s.next_op() else {
                panic!("{} issued another operation", w.name);
            };
            assert_eq!(n, w.batch_size);
            s.batch_keys(n, &mut batch);
            assert_eq!(batch.len(), n);
            assert!(batch.iter().all(|k| *k < 1_000));
            all.extend_from_slice(&batch);
        }
        all
    }

    #[test]
    fn batch_workloads_issue_batches_of_their_size_over_loaded_keys_by_seed() {
        for name in ["batch10", "batch100"] {
            let w = workload(name).unwrap();
            assert_eq!(batch_stream(w, 1), batch_stream(w, 1), "{name}");
            assert_ne!(batch_stream(w, 1), batch_stream(w, 2), "{name}");
        }
        assert!(parse_phases("load,batch10,batch100").is_ok());
    }

    #[test]
    fn threads_get_different_streams_from_one_seed() {
        assert_ne!(stream_seed(1, "a", 0), stream_seed(1, "a", 1));
        assert_ne!(stream_seed(1, "a", 0), stream_seed(1, "b", 0));
    }

    #[test]
    fn mixes_issue_their_proportions() {
        let seed = 0x5eed_0041;
        println!("seed {seed:#x}");
        for w in WORKLOADS {
            let ops = stream_ops(w, seed, 40_000);
            for kind in OpKind::ALL {
                let share =
                    ops.iter().filter(|o| o.kind() == kind).count() as f64 / ops.len() as f64;
                let want = w.mix.share(kind);
                assert!(
                    (share - want).abs() < 0.01,
                    "workload {}: {} share {share:.3}, want {want}",
                    w.name,
                    kind.name()
                );
            }
        }
    }

    #[test]
    fn operations_only_name_acknowledged_keys() {
        let keys = KeySpace::new(100);
        let w = *workload("d").unwrap();
        let mut s = OpStream::new(w, &keys, KeyChooser::new(w.distribution, 100, 10), 7, 0);
        let mut pending = Vec::new();
        for _ in 0..20_000 {
            match s.next_op() {
                Op::Insert(o) => pending.push(o),
                Op::Read(k) => assert!(k < keys.acknowledged(), "read of unacknowledged {k}"),
                other => panic!("workload d issued {other:?}"),
            }
        }
        // Nothing was acknowledged: reads stayed within the loaded records.
        assert_eq!(keys.acknowledged(), 100);
        for o in pending {
            keys.acknowledge(o).unwrap();
        }
        keys.settle();
        assert!(keys.acknowledged() > 100);
    }

    #[test]
    fn scans_use_ycsb_workload_e_lengths() {
        let ops = stream_ops(workload("e").unwrap(), 9, 20_000);
        let lens: Vec<usize> = ops
            .iter()
            .filter_map(|o| {
                if let Op::Scan(_, l) = o {
                    Some(*l)
                } else {
                    None
                }
            })
            .collect();
        assert!(lens.iter().all(|l| (1..=100).contains(l)));
        assert_eq!(lens.iter().min(), Some(&1));
        assert_eq!(lens.iter().max(), Some(&100));
    }

    #[test]
    fn phase_lists_parse_and_refuse_unknown_or_repeated_names() {
        let p = parse_phases("load,A,b,s").unwrap();
        let names: Vec<&str> = p.iter().map(Phase::name).collect();
        assert_eq!(names, ["load", "a", "b", "s"]);
        assert!(
            parse_phases("a,z")
                .unwrap_err()
                .contains("unknown workload")
        );
        assert!(parse_phases("a,a").unwrap_err().contains("twice"));
        assert!(parse_phases("").is_err());
    }
}
