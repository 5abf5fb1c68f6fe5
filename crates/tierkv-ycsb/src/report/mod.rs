//! Reports of a run (DESIGN §6): the header (what ran, where the data went, how durable the
//! pmem tier was), a table per workload with ratios against the first target
//! ([`table`]), the JSON document scripts read ([`json`]) and an SVG chart ([`chart`]).
//!
//! Every report is built from one [`BenchReport`], so they always agree.
//!
//! Thread safety: plain values.

pub mod chart;
pub mod json;
pub mod rounds;
pub mod table;

use serde::Serialize;
use tierkv::ByteSize;

use crate::runner::PhaseResult;
use crate::workload::Phase;

/// The resolved configuration of a run: every flag as it took effect, plus where the data
/// went. Serialized as the JSON `config` object (sizes in bytes, times in seconds).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunConfig {
    /// The harness version.
    pub version: String,
    /// `--engines`, one label per target.
    pub engines: Vec<String>,
    /// `--workloads`.
    pub workloads: Vec<String>,
    /// `--records`.
    pub records: u64,
    /// `--ops` per workload (`null`: time only).
    pub ops: Option<u64>,
    /// `--duration` per workload in seconds (`null`: operation count only).
    pub duration_s: Option<f64>,
    /// `--warmup` as operations per workload (`null` when given as a time).
    pub warmup_ops: Option<u64>,
    /// `--warmup` as seconds per workload (`null` when given as operations).
    pub warmup_s: Option<f64>,
    /// `--threads`.
    pub threads: usize,
    /// `--distribution` (`null`: each workload's own, zipfian for all but D's latest).
    pub distribution: Option<String>,
    /// `--key-size` (`null`: YCSB's variable-length keys).
    pub key_size: Option<usize>,
    /// How keys are spelt.
    pub key_format: String,
    /// `--value-size` in bytes (`null` with `--fields`).
    pub value_size: Option<u64>,
    /// `--fields`.
    pub fields: Option<usize>,
    /// `--field-size` in bytes.
    pub field_size: Option<u64>,
    /// `--schema`: how records are held through the field-level API (`null`: records are
    /// opaque values).
    pub schema: Option<String>,
    /// Bytes of every value as stored.
    pub value_bytes: usize,
    /// `--dram` in bytes.
    pub dram: u64,
    /// The pmem root (`--pmem-path` or its default); each target has a directory below.
    pub pmem_path: String,
    /// `--pmem-size` in bytes.
    pub pmem_size: u64,
    /// `--pmem-mode` as it took effect.
    pub pmem_mode: String,
    /// What that mode survives.
    pub pmem_durability: String,
    /// Emulated pmem latency on (`--pmem-latency`).
    pub pmem_emulated_latency: bool,
    /// Nanoseconds added per 64-byte line read from an engine's pool.
    pub pmem_latency_read_ns_per_line: u32,
    /// Nanoseconds added per persist of an engine's pool.
    pub pmem_latency_persist_ns: u32,
    /// The flash root (`--flash-path` or each data directory's `flash/`).
    pub flash_path: String,
    /// `--flash-size` in bytes.
    pub flash_size: u64,
    /// `--json`.
    pub json: Option<String>,
    /// `--chart`.
    pub chart: Option<String>,
    /// `--seed`.
    pub seed: u64,
    /// `--dir`.
    pub dir: String,
    /// This run's directory under `--dir`.
    pub run_dir: String,
    /// `--keep`.
    pub keep: bool,
    /// `--repeat`: rounds of every engine.
    pub repeat: u32,
}

/// A target's label and one line on what it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetLine {
    /// The label.
    pub label: String,
    /// What it is, which tiers it uses, how durable it is.
    pub description: String,
}

/// Everything a run reports.
#[derive(Debug)]
pub struct BenchReport {
    /// The configuration.
    pub config: RunConfig,
    /// The targets, in order (ratios are against the first).
    pub targets: Vec<TargetLine>,
    /// The phases, in order.
    pub phases: Vec<Phase>,
    /// One result per target and phase.
    pub results: Vec<PhaseResult>,
}

impl BenchReport {
    /// The result of `engine` in `phase`, if it ran.
    pub fn result(&self, engine: &str, phase: &str) -> Option<&PhaseResult> {
        self.result_in(1, engine, phase)
    }

    /// The result of `engine` in `phase` in `round` (from 1; `--repeat`).
    pub fn result_in(&self, round: u32, engine: &str, phase: &str) -> Option<&PhaseResult> {
        self.results
            .iter()
            .find(|r| r.round == round && r.engine == engine && r.phase.name() == phase)
    }

    /// How many rounds ran (`--repeat`; 1 without).
    pub fn rounds(&self) -> u32 {
        self.results.iter().map(|r| r.round).max().unwrap_or(1)
    }

    /// The phases in report order: the load first if listed, then the workloads as given
    /// (the order they ran in).
    pub fn phases_in_run_order(&self) -> Vec<Phase> {
        let mut v: Vec<Phase> = self
            .phases
            .iter()
            .copied()
            .filter(|p| *p == Phase::Load)
            .collect();
        v.extend(self.phases.iter().copied().filter(|p| *p != Phase::Load));
        v
    }
}

/// The header printed before the run: what runs, where the data goes, how durable the
/// pmem tier is, the seed.
pub fn header(config: &RunConfig, targets: &[TargetLine]) -> String {
    let mut out = String::new();
    let mut line = |s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    line(format!(
        "tierkv bench {}: YCSB workloads {} on {}",
        config.version,
        config.workloads.join(","),
        config.engines.join(", ")
    ));
    let quota = match (config.ops, config.duration_s) {
        (Some(o), Some(d)) => format!("{o} ops or {d} s per workload, whichever ends first"),
        (Some(o), None) => format!("{o} ops per workload"),
        (None, Some(d)) => format!("{d} s per workload"),
        (None, None) => "load only".to_owned(),
    };
    let warmup = match (config.warmup_ops, config.warmup_s) {
        (Some(0), _) | (None, None) => "no warm-up".to_owned(),
        (Some(o), _) => format!("warm-up {o} ops"),
        (None, Some(s)) => format!("warm-up {s} s"),
    };
    line(format!(
        "  {} records, {quota}, {} threads, {warmup}, seed {}",
        config.records, config.threads, config.seed
    ));
    if config.repeat > 1 {
        line(format!(
            "  {} rounds of every engine, each round in a rotated order; a summary of the \
             rounds ends the report (the chart shows round 1)",
            config.repeat
        ));
    }
    if let (Some(layout), Some(n), Some(size)) = (&config.schema, config.fields, config.field_size)
    {
        line(format!(
            "  schema API ({layout}): rows of {n} fixed fields x {size} bytes; reads whole \
             rows (one field in field-*), updates set one field"
        ));
    }
    line(format!(
        "  requests: {}; keys: {}; values: {} bytes",
        config
            .distribution
            .as_deref()
            .unwrap_or("each workload's own (zipfian; latest for d)"),
        config.key_format,
        config.value_bytes
    ));
    let fate = if config.keep {
        "kept after the run"
    } else {
        "removed after each engine ran (--keep keeps it)"
    };
    line(format!("  data:  {}/<engine>, {fate}", config.run_dir));
    let pmem_dir = if config.pmem_path.contains("<engine>") {
        config.pmem_path.clone()
    } else {
        format!("{}/<run>/<engine>", config.pmem_path)
    };
    line(format!(
        "  pmem:  {pmem_dir} (engines with a pmem tier), {} pool, mode {}: {}",
        ByteSize(config.pmem_size),
        config.pmem_mode,
        config.pmem_durability
    ));
    line(format!(
        "  flash: {} (engines with a flash tier), {} per engine",
        config.flash_path,
        ByteSize(config.flash_size)
    ));
    line(format!(
        "  dram budget: {} per engine; emulated pmem latency: {}",
        ByteSize(config.dram),
        if config.pmem_emulated_latency {
            format!(
                "+{} ns per 64-byte line read, +{} ns per persist (engines' pools and the \
                 RocksDB peer's files on the pmem path)",
                config.pmem_latency_read_ns_per_line, config.pmem_latency_persist_ns
            )
        } else {
            "off".to_owned()
        }
    ));
    for t in targets {
        line(format!("  {}: {}", t.label, t.description));
    }
    out
}

#[cfg(test)]
pub(crate) mod tests;
