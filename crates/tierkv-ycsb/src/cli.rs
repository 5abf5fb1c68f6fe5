//! The command line of `tierkv bench` ([`BenchArgs`], a clap `Args` the `tierkv` binary
//! mounts as its `bench` subcommand) and [`run`], which turns the flags into a plan,
//! prints the header, runs every target and writes the reports.
//!
//! Defaults (no flags): every engine of this build, Load and A-F, 100 000 records of 1 KiB
//! and 100 000 operations per workload, one client thread per CPU, data under
//! `./bench-data`, pmem pools on `/dev/shm` in Volatile mode where `/dev/shm` exists (said
//! in the header: not power-loss durable; so is a `--pmem-path` on tmpfs or ramfs), seed 42.
//!
//! Thread safety: [`run`] blocks its caller for the whole run.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};
use tierkv::core::api::options::DEFAULT_MAX_VALUE_LEN;
use tierkv::core::media::pmem::memory_backed;
use tierkv::{ByteSize, DurabilityMode, EmulatedLatency, Options};

use crate::keys::KeyFormat;
use crate::peer::{MediaSettings, TargetSpec, default_targets, parse_targets};
use crate::plan::{BenchPlan, Layout, PmemRoot, SHM, SHM_ROOT_NAME, execute};
use crate::report::{BenchReport, RunConfig, TargetLine, chart, header, json, table};
use crate::runner::phase::Quota;
use crate::runner::progress::Progress;
use crate::runner::{PhaseStatus, RunSettings};
use crate::schema::SchemaLayout;
use crate::values::ValueShape;
use crate::workload::{Distribution, FieldScope, Phase, parse_phases};

/// The workloads run by default.
pub const DEFAULT_WORKLOADS: &str = "load,a,b,c,d,e,f";
/// Records loaded by default.
pub const DEFAULT_RECORDS: u64 = 100_000;
/// Operations per workload by default (without `--duration`).
pub const DEFAULT_OPS: u64 = 100_000;
/// The default seed.
pub const DEFAULT_SEED: u64 = 42;
/// The default value size (PRISM's and PrismDB's 1 KiB).
pub const DEFAULT_VALUE_SIZE: ByteSize = ByteSize::kib(1);
/// YCSB's default field size.
pub const DEFAULT_FIELD_SIZE: ByteSize = ByteSize(100);
/// The smallest default pmem pool size.
pub const DEFAULT_PMEM_SIZE: ByteSize = ByteSize::gib(1);

/// The default pmem pool: four times the records' bytes (a key of up to 24 bytes and the
/// encoded value each), in whole GiB, at least [`DEFAULT_PMEM_SIZE`] — room for an
/// engine that keeps every record on pmem, its old versions and its logs, as the papers'
/// setups had; a smaller pool is a space test, asked for with `--pmem-size`.
pub fn default_pmem_size(records: u64, value_bytes: usize) -> ByteSize {
    let data = u128::from(records)
        .saturating_mul(value_bytes as u128 + 24)
        .saturating_mul(4);
    let gib = 1u128 << 30;
    let size = data.div_ceil(gib).saturating_mul(gib);
    ByteSize(
        u64::try_from(size)
            .unwrap_or(u64::MAX)
            .max(DEFAULT_PMEM_SIZE.bytes()),
    )
}
/// The most client threads (the acknowledgement window allows far more; this bounds
/// mistakes).
pub const MAX_THREADS: usize = 1024;

/// A warm-up: operations or time per workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Warmup {
    /// This many operations (over all threads).
    Ops(u64),
    /// This long.
    Time(Duration),
}

/// `tierkv bench`: YCSB Load and A-F against every engine (and peer) in one run.
#[derive(clap::Args, Clone, Debug, PartialEq)]
pub struct BenchArgs {
    /// Engines and peers, comma-separated: engine specs (`dram:btree`,
    /// `prism@queue_depth=1`) or `rocksdb` (built with `--features rocksdb`; WAL and L0 on the
    /// pmem path, the other levels on flash; `rocksdb@placement=pmem`: every level on the
    /// pmem path). Ratios are against the first. [default: every engine of this build]
    #[arg(long, value_name = "SPEC,...")]
    pub engines: Option<String>,
    /// Workloads, in order: `load` and YCSB's `a`..`f` (`s`: 95% scan, 5% update;
    /// `batch10` / `batch100`: every operation one crash-atomic WriteBatch of 10 / 100 puts
    /// of --value-size over uniform existing keys, reported as batches/s, keys/s and latency
    /// per batch; "unsupported" on engines without atomic batches; with --schema,
    /// `field-read` / `field-update` / `field-scan`: one field read, one field updated, one
    /// field of 100 rows scanned, FOCUS's micro-benchmarks). The load always runs first; it
    /// is reported when listed.
    #[arg(long, value_name = "NAME,...", default_value = DEFAULT_WORKLOADS)]
    pub workloads: String,
    /// Records loaded before the workloads.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_RECORDS)]
    pub records: u64,
    /// Operations per workload (over all threads). [default: 100000 unless --duration]
    #[arg(long, value_name = "N")]
    pub ops: Option<u64>,
    /// Time per workload (`30s`, `500ms`, `2m`); with --ops, whichever ends first.
    #[arg(long, value_name = "TIME", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Warm-up per workload, not measured: operations (`10000`) or a time (`5s`).
    #[arg(long, value_name = "OPS|TIME", default_value = "0", value_parser = parse_warmup)]
    pub warmup: Warmup,
    /// Client threads. [default: one per CPU]
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Request distribution for every workload: zipfian, latest or uniform. [default: each
    /// workload's own: latest for d, zipfian for the others]
    #[arg(long, value_name = "NAME", value_parser = parse_distribution)]
    pub distribution: Option<Distribution>,
    /// Key size: 8 for 8-byte binary keys, or at least 23 for zero-padded YCSB keys.
    /// [default: YCSB's "user" + hash, 5-23 bytes]
    #[arg(long, value_name = "BYTES")]
    pub key_size: Option<usize>,
    /// Value size (`1KiB`, `4096`). [default: 1KiB]
    #[arg(long, value_name = "SIZE", conflicts_with = "fields")]
    pub value_size: Option<ByteSize>,
    /// Store YCSB records of N fields instead of opaque values (see the README's encoding).
    #[arg(long, value_name = "N")]
    pub fields: Option<usize>,
    /// Bytes per field with --fields. [default: 100]
    #[arg(long, value_name = "SIZE", requires = "fields")]
    pub field_size: Option<ByteSize>,
    /// Store the --fields records through the field-level (schema) API, held as LAYOUT says:
    /// `native` (the engine's own schema store, FOCUS; the consolidated adapter elsewhere),
    /// `consolidated` (a row as one value) or `scattered` (one key per field). Reads read
    /// whole rows, updates set one field; `field-read`, `field-update` and `field-scan`
    /// need it.
    #[arg(long, value_name = "LAYOUT", requires = "fields", value_parser = parse_layout)]
    pub schema: Option<SchemaLayout>,
    /// DRAM budget of every engine (caches and buffers; RocksDB: block cache + memtables).
    /// [default: 256MiB]
    #[arg(long, value_name = "SIZE")]
    pub dram: Option<ByteSize>,
    /// Directory for pmem pools (each engine gets a subdirectory). [default: /dev/shm when
    /// it exists, else each engine's data directory]
    #[arg(long, value_name = "DIR")]
    pub pmem_path: Option<PathBuf>,
    /// Pmem pool size per engine. [default: 4 x the records' bytes, in whole GiB, at
    /// least 1GiB (4GiB for 1,000,000 records of 1 KiB)]
    #[arg(long, value_name = "SIZE")]
    pub pmem_size: Option<ByteSize>,
    /// Pmem durability mode: dax, msync or volatile. [default: volatile where the pmem
    /// directory is on tmpfs or ramfs (such as /dev/shm: msync there writes nothing back),
    /// else msync]
    #[arg(long, value_name = "MODE")]
    pub pmem_mode: Option<DurabilityMode>,
    /// Emulated pmem latency on DRAM-speed pools, e.g. `200,100`: nanoseconds added per
    /// 64-byte line read and per persist (Optane-like media on /dev/shm; printed in the
    /// report). The RocksDB peer's files on the pmem path pay the same per line read and per
    /// sync. Not with `--pmem-mode dax`. [default: off]
    #[arg(long, value_name = "READ_NS,PERSIST_NS", value_parser = parse_latency)]
    pub pmem_latency: Option<EmulatedLatency>,
    /// Directory for flash files (each engine gets a subdirectory). [default: each engine's
    /// data directory]
    #[arg(long, value_name = "DIR")]
    pub flash_path: Option<PathBuf>,
    /// Flash capacity per engine. [default: 4GiB]
    #[arg(long, value_name = "SIZE")]
    pub flash_size: Option<ByteSize>,
    /// Write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Draw throughput and p99 latency as an SVG chart in FILE.
    #[arg(long, value_name = "FILE")]
    pub chart: Option<PathBuf>,
    /// Seed of every key, operation and value stream.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_SEED)]
    pub seed: u64,
    /// Directory for the engines' data (a fresh subdirectory per run and engine).
    #[arg(long, value_name = "DIR", default_value = "bench-data")]
    pub dir: PathBuf,
    /// Keep the data after the run.
    #[arg(long)]
    pub keep: bool,
    /// Measure recovery after a crash: once the load has ended, kill this process with
    /// SIGKILL, leaving the store unclosed and its data kept; then `tierkv stats --dir
    /// <the data directory printed>` reopens it and reports the engine's recovery time
    /// (`scripts/recovery-after-kill.sh` does both). One engine only; no workload runs.
    #[arg(long)]
    pub crash_after_load: bool,
    /// After the load, wait until the engine's background work is done (its pmem and
    /// flash bytes written unchanged for 1 s), at most TIME, and report the load's
    /// counters again up to then: work a load leaves to background threads (compactions,
    /// flushes) is part of its write amplification (`30s`, `2m`)
    #[arg(long, value_name = "TIME", value_parser = parse_duration)]
    pub settle_load: Option<Duration>,
    /// Run every engine N times, round after round, each round in a rotated order (the
    /// first engine of round 2 is the second of round 1), and end with a summary per
    /// workload: each engine's median throughput over the rounds and the median of its
    /// per-round ratios to the first engine. On a shared or noisy machine a ratio
    /// measured side by side within a round, taken over several rounds, says more than
    /// one run (1..=100)
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub repeat: u32,
}

pub use tierkv::core::api::size::parse_duration;

/// The most rounds `--repeat` takes.
pub const MAX_REPEAT: u32 = 100;

/// `--warmup`: a bare integer is operations, anything with a unit a time.
pub fn parse_warmup(s: &str) -> Result<Warmup, String> {
    match s.trim().parse::<u64>() {
        Ok(n) => Ok(Warmup::Ops(n)),
        Err(_) => parse_duration(s).map(Warmup::Time),
    }
}

fn parse_distribution(s: &str) -> Result<Distribution, String> {
    s.parse()
}

fn parse_layout(s: &str) -> Result<SchemaLayout, String> {
    s.parse()
}

/// `--pmem-latency READ_NS,PERSIST_NS`: nanoseconds per 64-byte line read, per persist.
pub fn parse_latency(s: &str) -> Result<EmulatedLatency, String> {
    let bad = || {
        format!(
            "--pmem-latency {s:?}: expected READ_NS,PERSIST_NS, two whole numbers of \
             nanoseconds (e.g. `200,100`)"
        )
    };
    let (read, persist) = s.split_once(',').ok_or_else(bad)?;
    let ns = |t: &str| t.trim().parse::<u32>().map_err(|_| bad());
    Ok(EmulatedLatency {
        read_ns_per_line: ns(read)?,
        persist_ns: ns(persist)?,
    })
}

impl BenchArgs {
    /// The arguments of a bare `tierkv bench`.
    pub fn defaults() -> Self {
        BenchArgs {
            engines: None,
            workloads: DEFAULT_WORKLOADS.to_owned(),
            records: DEFAULT_RECORDS,
            ops: None,
            duration: None,
            warmup: Warmup::Ops(0),
            threads: None,
            distribution: None,
            key_size: None,
            value_size: None,
            fields: None,
            field_size: None,
            schema: None,
            dram: None,
            pmem_path: None,
            pmem_size: None,
            pmem_mode: None,
            pmem_latency: None,
            flash_path: None,
            flash_size: None,
            json: None,
            chart: None,
            seed: DEFAULT_SEED,
            dir: PathBuf::from("bench-data"),
            keep: false,
            crash_after_load: false,
            settle_load: None,
            repeat: 1,
        }
    }

    fn quota(&self) -> Result<Quota, String> {
        if self.ops == Some(0) {
            return Err("--ops must be at least 1".into());
        }
        if self.duration.is_some_and(|d| d.is_zero()) {
            return Err("--duration must be longer than zero".into());
        }
        Ok(Quota {
            ops: self.ops.or(if self.duration.is_none() {
                Some(DEFAULT_OPS)
            } else {
                None
            }),
            time: self.duration,
        })
    }

    fn value_shape(&self) -> Result<ValueShape, String> {
        let shape = match self.fields {
            Some(n) => {
                let size = self.field_size.unwrap_or(DEFAULT_FIELD_SIZE).bytes();
                ValueShape::fields(n, usize::try_from(size).map_err(|e| e.to_string())?)?
            }
            None => {
                let size = self.value_size.unwrap_or(DEFAULT_VALUE_SIZE).bytes();
                ValueShape::Bytes(usize::try_from(size).map_err(|e| e.to_string())?)
            }
        };
        if shape.encoded_len() > DEFAULT_MAX_VALUE_LEN {
            return Err(format!(
                "values of {} bytes exceed the engines' limit of {DEFAULT_MAX_VALUE_LEN} bytes",
                shape.encoded_len()
            ));
        }
        Ok(shape)
    }

    fn threads_or_default(&self) -> Result<usize, String> {
        let n = self.threads.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
        });
        if n == 0 || n > MAX_THREADS {
            return Err(format!(
                "--threads {n}: must be between 1 and {MAX_THREADS}"
            ));
        }
        Ok(n)
    }

    /// Where pmem pools go and in which mode, by the rules of the defaults.
    fn pmem(&self) -> (PmemRoot, DurabilityMode) {
        let shm = Path::new(SHM);
        let (root, default_mode) = match &self.pmem_path {
            // msync on tmpfs is a system call per persist that writes nothing back: a pool
            // there survives a process crash in any mode and a power loss in none.
            Some(p) if memory_backed(p) => (PmemRoot::Dir(p.clone()), DurabilityMode::Volatile),
            Some(p) => (PmemRoot::Dir(p.clone()), DurabilityMode::Msync),
            None if shm.is_dir() => (
                PmemRoot::Dir(shm.join(SHM_ROOT_NAME)),
                DurabilityMode::Volatile,
            ),
            None => (PmemRoot::InDataDir, DurabilityMode::Msync),
        };
        (root, self.pmem_mode.unwrap_or(default_mode))
    }

    /// Checks the flags and resolves every default into a plan.
    pub fn plan(&self) -> Result<BenchPlan, String> {
        if self.records == 0 {
            return Err("--records must be at least 1".into());
        }
        if !(1..=MAX_REPEAT).contains(&self.repeat) {
            return Err(format!(
                "--repeat must be between 1 and {MAX_REPEAT}, not {}",
                self.repeat
            ));
        }
        if self.repeat > 1 && self.crash_after_load {
            return Err("--repeat and --crash-after-load do not go together".into());
        }
        let targets = match &self.engines {
            Some(list) => parse_targets(list)?,
            None => default_targets(),
        };
        if self.crash_after_load && targets.len() != 1 {
            return Err("--crash-after-load needs exactly one engine in --engines".into());
        }
        let (pmem_root, pmem_mode) = self.pmem();
        let defaults = Options::default();
        let media = MediaSettings {
            dram: self.dram.unwrap_or(defaults.dram_budget),
            pmem_size: match self.pmem_size {
                Some(s) => s,
                None => default_pmem_size(self.records, self.value_shape()?.encoded_len()),
            },
            pmem_mode,
            pmem_latency: self.pmem_latency.unwrap_or_default(),
            flash_size: self.flash_size.unwrap_or(defaults.flash.size),
        };
        if media.pmem_latency.is_on() && pmem_mode == DurabilityMode::Dax {
            return Err(
                "--pmem-latency emulates persistent memory on DRAM; it cannot be combined with \
                 --pmem-mode dax (real persistent memory)"
                    .into(),
            );
        }
        let settings = RunSettings {
            records: self.records,
            quota: self.quota()?,
            warmup: match self.warmup {
                Warmup::Ops(n) => Quota {
                    ops: Some(n),
                    time: None,
                },
                Warmup::Time(t) => Quota {
                    ops: None,
                    time: Some(t),
                },
            },
            threads: self.threads_or_default()?,
            distribution: self.distribution,
            keys: KeyFormat::from_key_size(self.key_size)?,
            values: self.value_shape()?,
            schema: self.schema,
            seed: self.seed,
            crash_after_load: self.crash_after_load,
            settle_load: self.settle_load,
        };
        let phases = parse_phases(&self.workloads)?;
        if self.schema.is_none()
            && let Some(p) = phases
                .iter()
                .find(|p| matches!(p, Phase::Run(w) if w.fields == FieldScope::OneField))
        {
            return Err(format!(
                "workload {} reads or writes single fields: it needs --schema (and --fields)",
                p.name()
            ));
        }
        Ok(BenchPlan {
            targets,
            phases,
            rounds: self.repeat,
            settings,
            media,
            layout: Layout::new(
                self.dir.clone(),
                pmem_root,
                self.flash_path.clone(),
                self.keep || self.crash_after_load,
            ),
        })
    }

    /// The `config` record of the reports.
    pub fn config(&self, plan: &BenchPlan) -> RunConfig {
        let s = &plan.settings;
        let path = |p: &Path| p.display().to_string();
        RunConfig {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            engines: plan.targets.iter().map(|t| t.label.clone()).collect(),
            workloads: plan.phases.iter().map(|p| p.name().to_owned()).collect(),
            records: s.records,
            ops: s.quota.ops,
            duration_s: s.quota.time.map(|d| d.as_secs_f64()),
            warmup_ops: s.warmup.ops,
            warmup_s: s.warmup.time.map(|d| d.as_secs_f64()),
            threads: s.threads,
            distribution: s.distribution.map(|d| d.to_string()),
            key_size: self.key_size,
            key_format: s.keys.to_string(),
            value_size: self
                .fields
                .is_none()
                .then(|| self.value_size.unwrap_or(DEFAULT_VALUE_SIZE).bytes()),
            fields: self.fields,
            field_size: self
                .fields
                .map(|_| self.field_size.unwrap_or(DEFAULT_FIELD_SIZE).bytes()),
            schema: self.schema.map(|l| l.to_string()),
            value_bytes: s.values.encoded_len(),
            dram: plan.media.dram.bytes(),
            pmem_path: match &plan.layout.pmem_root {
                PmemRoot::Dir(d) if *d != plan.layout.dir => path(d),
                _ => format!("{}/<engine>/pmem", path(&plan.layout.run_dir())),
            },
            pmem_size: plan.media.pmem_size.bytes(),
            pmem_mode: plan.media.pmem_mode.to_string(),
            pmem_durability: durability(plan.media.pmem_mode, &plan.layout.pmem_root),
            pmem_emulated_latency: plan.media.pmem_latency.is_on(),
            pmem_latency_read_ns_per_line: plan.media.pmem_latency.read_ns_per_line,
            pmem_latency_persist_ns: plan.media.pmem_latency.persist_ns,
            flash_path: match &plan.layout.flash_root {
                Some(f) if *f != plan.layout.dir => {
                    format!("{}/{}/<engine>", path(f), plan.layout.run)
                }
                _ => format!("{}/<engine>/flash", path(&plan.layout.run_dir())),
            },
            flash_size: plan.media.flash_size.bytes(),
            json: self.json.as_deref().map(path),
            chart: self.chart.as_deref().map(path),
            seed: s.seed,
            dir: path(&self.dir),
            run_dir: path(&plan.layout.run_dir()),
            keep: self.keep || self.crash_after_load,
            repeat: self.repeat,
        }
    }
}

/// What the report says pools in `mode` under `root` survive: a mode that would be durable
/// elsewhere is not on tmpfs or ramfs, and the report must not claim it.
fn durability(mode: DurabilityMode, root: &PmemRoot) -> String {
    let on_memory = match root {
        PmemRoot::Dir(d) => memory_backed(d),
        PmemRoot::InDataDir => false,
    };
    match mode {
        DurabilityMode::Msync | DurabilityMode::Dax if on_memory => format!(
            "NOT durable across power loss or reboot: {mode} on tmpfs/ramfs writes nothing back \
             (survives only a process crash)"
        ),
        _ => mode.guarantee().to_owned(),
    }
}

fn target_lines(targets: &[TargetSpec]) -> Vec<TargetLine> {
    targets
        .iter()
        .map(|t| TargetLine {
            label: t.label.clone(),
            description: t.describe(),
        })
        .collect()
}

/// Runs the benchmark `args` describe, writing the header, progress lines and tables to
/// `out`; writes `--json` and `--chart`; returns the report. Fails when the flags are
/// wrong, when a target cannot be opened, or (after writing every report) when operations
/// failed with anything but "unsupported".
pub fn run_with(
    args: &BenchArgs,
    out: &mut dyn Write,
    progress: Progress,
) -> anyhow::Result<BenchReport> {
    let plan = args.plan().map_err(anyhow::Error::msg)?;
    let config = args.config(&plan);
    let targets = target_lines(&plan.targets);
    write!(out, "{}", header(&config, &targets))?;
    writeln!(out)?;
    let results = execute(&plan, progress, out)?;
    let report = BenchReport {
        config,
        targets,
        phases: plan.phases.clone(),
        results,
    };
    writeln!(out)?;
    write!(out, "{}", table::render(&report))?;
    if let Some(p) = &args.json {
        json::write(&report, p)?;
        writeln!(out, "JSON written to {}", p.display())?;
    }
    if let Some(p) = &args.chart {
        chart::write(&report, p)?;
        writeln!(out, "chart written to {}", p.display())?;
    }
    let fate = if args.keep { "kept in" } else { "removed from" };
    writeln!(out, "data {fate} {}", report.config.run_dir)?;
    let failed: Vec<String> = report
        .results
        .iter()
        .filter_map(|r| match &r.status {
            PhaseStatus::Failed(m) => Some(format!(
                "{} {}: {} failed operations, first: {m}",
                r.engine,
                r.phase.name(),
                r.errors()
            )),
            _ => None,
        })
        .collect();
    if !failed.is_empty() {
        bail!("operations failed:\n  {}", failed.join("\n  "));
    }
    Ok(report)
}

/// `tierkv bench`: runs the benchmark, printing to stdout (progress bars on stderr when
/// stdout is a terminal).
pub fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    run_with(args, &mut out, Progress::for_stdout())
        .map(|_| ())
        .context("tierkv bench")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn parse(args: &[&str]) -> Result<BenchArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied())).map(|c| c.bench)
    }

    #[test]
    fn the_default_pool_holds_four_times_the_records() {
        assert_eq!(default_pmem_size(1_000_000, 1024), ByteSize::gib(4));
        assert_eq!(default_pmem_size(1_000_000, 4096), ByteSize::gib(16));
        assert_eq!(default_pmem_size(1000, 1024), ByteSize::gib(1));
        assert_eq!(default_pmem_size(0, 0), ByteSize::gib(1));
        assert_eq!(default_pmem_size(u64::MAX, usize::MAX), ByteSize(u64::MAX));
        let a = parse(&["--records", "2000000"]).unwrap();
        assert_eq!(a.plan().unwrap().media.pmem_size, ByteSize::gib(8));
        let a = parse(&["--records", "2000000", "--pmem-size", "300MiB"]).unwrap();
        assert_eq!(a.plan().unwrap().media.pmem_size, ByteSize::mib(300));
    }

    #[test]
    fn no_flags_means_the_documented_defaults() {
        let a = parse(&[]).unwrap();
        assert_eq!(a, BenchArgs::defaults());
        let plan = a.plan().unwrap();
        assert_eq!(plan.settings.quota.ops, Some(DEFAULT_OPS));
        assert_eq!(plan.settings.records, DEFAULT_RECORDS);
        assert_eq!(plan.phases.len(), 7);
        assert_eq!(plan.targets.len(), tierkv::ENGINES.len());
        assert_eq!(plan.settings.values, ValueShape::Bytes(1024));
        if Path::new(SHM).is_dir() {
            assert_eq!(plan.media.pmem_mode, DurabilityMode::Volatile);
            assert_eq!(
                plan.layout.pmem_root,
                PmemRoot::Dir(Path::new(SHM).join(SHM_ROOT_NAME))
            );
        }
    }

    /// A `--pmem-path` on tmpfs gets Volatile (msync there writes nothing back) and the
    /// report never claims power-loss durability for pools there; one on a disk gets
    /// Msync; `--pmem-mode` overrides either.
    #[test]
    fn the_pmem_mode_follows_the_filesystem_of_the_pmem_path() {
        let disk = tempfile::tempdir_in(".").unwrap();
        let on_disk = disk.path().join("not-yet/pools");
        let a = parse(&["--pmem-path", on_disk.to_str().unwrap()]).unwrap();
        if !memory_backed(disk.path()) {
            let plan = a.plan().unwrap();
            assert_eq!(plan.media.pmem_mode, DurabilityMode::Msync);
            let root = &plan.layout.pmem_root;
            assert_eq!(
                durability(DurabilityMode::Msync, root),
                "durable across power loss (msync)"
            );
        }
        if memory_backed(Path::new(SHM)) {
            let a = parse(&["--pmem-path", "/dev/shm/tierkv-test-not-created/x"]).unwrap();
            let plan = a.plan().unwrap();
            assert_eq!(plan.media.pmem_mode, DurabilityMode::Volatile);
            let root = &plan.layout.pmem_root;
            assert!(durability(DurabilityMode::Volatile, root).starts_with("NOT durable"));
            let a = parse(&["--pmem-path", "/dev/shm/x", "--pmem-mode", "msync"]).unwrap();
            let plan = a.plan().unwrap();
            assert_eq!(plan.media.pmem_mode, DurabilityMode::Msync);
            let said = durability(DurabilityMode::Msync, &plan.layout.pmem_root);
            assert!(
                said.starts_with("NOT durable") && said.contains("msync on tmpfs"),
                "{said}"
            );
        }
    }

    #[test]
    fn every_flag_of_the_issue_parses() {
        let a = parse(&[
            "--engines",
            "dram:btree,dram:hash",
            "--workloads",
            "load,a,e",
            "--records",
            "500",
            "--ops",
            "1000",
            "--duration",
            "2s",
            "--warmup",
            "1.5s",
            "--threads",
            "3",
            "--distribution",
            "uniform",
            "--key-size",
            "8",
            "--value-size",
            "4KiB",
            "--dram",
            "64MiB",
            "--pmem-path",
            "/tmp/p",
            "--pmem-size",
            "2GiB",
            "--pmem-mode",
            "msync",
            "--flash-path",
            "/tmp/f",
            "--flash-size",
            "1GiB",
            "--json",
            "o.json",
            "--chart",
            "o.svg",
            "--seed",
            "7",
            "--dir",
            "/tmp/d",
            "--keep",
        ])
        .unwrap();
        assert_eq!(a.value_size, Some(ByteSize::kib(4)));
        assert_eq!(a.warmup, Warmup::Time(Duration::from_millis(1500)));
        assert_eq!(a.pmem_mode, Some(DurabilityMode::Msync));
        let plan = a.plan().unwrap();
        assert_eq!(plan.settings.keys, KeyFormat::Binary8);
        assert_eq!(plan.settings.distribution, Some(Distribution::Uniform));
        assert_eq!(plan.media.dram, ByteSize::mib(64));
        assert_eq!(plan.media.pmem_size, ByteSize::gib(2));
        assert_eq!(
            plan.settings.quota,
            Quota {
                ops: Some(1000),
                time: Some(Duration::from_secs(2))
            }
        );
        let c = a.config(&plan);
        assert_eq!(c.pmem_path, "/tmp/p");
        assert!(c.flash_path.starts_with("/tmp/f/run-"), "{}", c.flash_path);
        assert_eq!(c.seed, 7);
    }

    #[test]
    fn emulated_latency_reaches_the_engines_options_and_the_report() {
        let a = parse(&["--pmem-latency", "200,100", "--pmem-mode", "volatile"]).unwrap();
        let plan = a.plan().unwrap();
        let want = EmulatedLatency {
            read_ns_per_line: 200,
            persist_ns: 100,
        };
        assert_eq!(plan.media.pmem_latency, want);
        let place = crate::peer::TargetPlacement {
            data_dir: "/tmp/d".into(),
            pmem_dir: "/tmp/p".into(),
            flash_dir: "/tmp/f".into(),
        };
        let spec: tierkv::EngineSpec = "focus".parse().unwrap();
        assert_eq!(plan.media.options(&spec, &place).pmem.latency, want);
        let c = a.config(&plan);
        assert!(c.pmem_emulated_latency);
        assert_eq!(
            (c.pmem_latency_read_ns_per_line, c.pmem_latency_persist_ns),
            (200, 100)
        );
        // Off unless asked for.
        let plan = parse(&[]).unwrap().plan().unwrap();
        assert!(!plan.media.pmem_latency.is_on());
        for bad in ["200", "a,1", "1,-2", "200,100,3", ""] {
            let e = parse(&["--pmem-latency", bad]).unwrap_err().to_string();
            assert!(e.contains("READ_NS,PERSIST_NS"), "{bad:?}: {e}");
        }
        let e = parse(&["--pmem-latency", "200,0", "--pmem-mode", "dax"])
            .unwrap()
            .plan()
            .unwrap_err();
        assert!(e.contains("dax"), "{e}");
    }

    #[test]
    fn records_of_fields_default_to_ycsbs_hundred_bytes() {
        let plan = parse(&["--fields", "10"]).unwrap().plan().unwrap();
        assert_eq!(
            plan.settings.values,
            ValueShape::Fields {
                count: 10,
                size: 100
            }
        );
        assert!(
            parse(&["--fields", "10", "--value-size", "1KiB"]).is_err(),
            "conflict"
        );
        assert!(
            parse(&["--field-size", "10"]).is_err(),
            "--field-size needs --fields"
        );
    }

    #[test]
    fn bad_values_are_refused_with_the_flag_named() {
        for (args, needle) in [
            (&["--records", "0"][..], "--records"),
            (&["--ops", "0"], "--ops"),
            (&["--threads", "0"], "--threads"),
            (&["--key-size", "12"], "--key-size"),
            (&["--value-size", "2MiB"], "limit"),
            (&["--workloads", "load,x"], "unknown workload"),
            (&["--engines", "nosuch"], "unknown engine"),
        ] {
            let e = parse(args).unwrap().plan().unwrap_err();
            assert!(e.contains(needle), "{args:?}: {e}");
        }
        assert!(parse(&["--duration", "5 parsecs"]).is_err());
        assert!(parse(&["--value-size", "lots"]).is_err());
        assert!(parse(&["--pmem-mode", "sometimes"]).is_err());
    }

    #[test]
    fn durations_and_warmups_accept_units() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_warmup("5000").unwrap(), Warmup::Ops(5000));
        assert_eq!(
            parse_warmup("5s").unwrap(),
            Warmup::Time(Duration::from_secs(5))
        );
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn duration_alone_runs_without_an_operation_count() {
        let plan = parse(&["--duration", "3s"]).unwrap().plan().unwrap();
        assert_eq!(
            plan.settings.quota,
            Quota {
                ops: None,
                time: Some(Duration::from_secs(3))
            }
        );
    }
}
