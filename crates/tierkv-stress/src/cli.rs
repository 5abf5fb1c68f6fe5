//! The command-line front of the harness: [`StressArgs`] (a clap `Args` struct the `tierkv`
//! binary embeds as `tierkv stress`, and the `tierkv-stress` binary parses on its own) and
//! [`run`], which prints the seed first, runs the mode and prints the verdict last (issue 5,
//! item 4).
//!
//! Output (stdout): `tierkv stress: seed S`, a header line describing the run, one line per
//! round with `--verbose`, then any failures and violations (one per line, each naming the
//! key, what it should have held and what was found) and a one-line verdict with the
//! counters. `run` returns the verdict; the binaries exit non-zero when it is false.
//!
//! Thread safety: `run` runs on the caller's thread.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use tierkv::{ByteSize, DurabilityMode, IoBackend, Tier};

use crate::batch::MAX_STRESS_BATCH;
use crate::expected_state::KeySpace;
use crate::fields::FieldConfig;
use crate::modes::{self, Budget, PersistPointsConfig, RunConfig, SpaceConfig};
use crate::report::RunReport;
use crate::target::{Target, TierConfig};
use crate::value_codec::{MIN_VALUE_LEN, ValueSizes};
use crate::workload::{OpMix, WorkloadConfig};

/// Examples for `--help` (of `tierkv stress` and of `tierkv-stress`).
pub const EXAMPLES: &str = "Examples:
  tierkv stress --engine prism --mode kill --duration 2m             # SIGKILL loop
  tierkv stress --engine prism --mode kill --pmem-mode tracked       # power-loss kills
  tierkv stress --engine hetermm:hash --mode pmem-image --rounds 200 --pmem-path /dev/shm
  tierkv stress --engine prism --mode flash-faults --duration 2m --seed 42
  tierkv stress --engine prism --mode space --duration 2m --pmem-path /dev/shm   # fill until NoSpace
  tierkv stress --engine mio --mode space --pmem-size 8MiB --gc-wait 20s --kill-fraction 0.5
  tierkv stress --engine focus --mode pmem-image --fields 10 --pmem-path /dev/shm  # field updates
  tierkv stress --engine prism --mode kill --fields 6    # through the consolidated adapter
Exit codes: 0 passed, 1 a violation or failure was found, 2 the run could not start.";

/// The crash modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// A child process runs the workload; the parent SIGKILLs it at a random moment,
    /// reopens the store and verifies it (with `--pmem-mode tracked`: a power-loss kill).
    Kill,
    /// In-process crash images of a Tracked pmem pool, each recovered and verified.
    PmemImage,
    /// In-process flash crashes (unsynced writes dropped or torn) and injected EIO/ENOSPC.
    FlashFaults,
    /// In-process, single-threaded: count the persists of a workload, replay it and take
    /// crash images (lines and torn words) right after persist N for every N (or a
    /// stratified sample of --points), each recovered and verified (e.g. `--mode
    /// persist-points --ops 1500 --points 2000 --pmem-path /dev/shm`).
    PersistPoints,
    /// Rounds of: fill the store until writes are refused with NoSpace, verify, delete a
    /// share (deletes must succeed on a full store), write new keys again (after the
    /// engine's GC, within --gc-wait), verify, close and reopen (or SIGKILL a child mid-fill
    /// in --kill-fraction of the rounds), verify (e.g. `--mode space --duration 2m
    /// --pmem-path /dev/shm`; small pools by default: 16MiB pmem, 64MiB flash).
    Space,
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mode::Kill => "kill",
            Mode::PmemImage => "pmem-image",
            Mode::FlashFaults => "flash-faults",
            Mode::PersistPoints => "persist-points",
            Mode::Space => "space",
        })
    }
}

/// A duration as people write it: `90`, `90s`, `500ms`, `2m`, `1h`, `1.5s`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HumanDuration(pub Duration);

impl FromStr for HumanDuration {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        tierkv::core::api::size::parse_duration(s).map(HumanDuration)
    }
}

/// `tierkv stress`: crash, fault and bad-input testing of an engine.
#[derive(Args, Debug, Clone)]
pub struct StressArgs {
    /// Engine spec to stress (`tierkv engines` lists them; volatile engines are refused).
    #[arg(long, value_name = "SPEC")]
    pub engine: String,
    /// Crash mode.
    #[arg(long, value_enum, default_value_t = Mode::Kill)]
    pub mode: Mode,
    /// Client threads.
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub threads: usize,
    /// Threads that write the same key at once (puts and deletes race; at most
    /// --threads). 1: one writer per key. Above 1, acknowledged writes and reads are judged
    /// by linearizability (see the README). E.g. `--threads 8 --writers-per-key 4`: two
    /// groups of four threads, each group racing on its current key.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub writers_per_key: usize,
    /// Run for this long (e.g. 2m); with --rounds, whichever ends first. Default: 20
    /// rounds when neither is given.
    #[arg(long, value_name = "DURATION")]
    pub duration: Option<HumanDuration>,
    /// Run this many rounds (crash + recovery + verification each).
    #[arg(long, value_name = "N")]
    pub rounds: Option<u64>,
    /// Working directory (must be absent or empty; kept when the run fails). Default: a
    /// new directory under the system's temporary directory.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Seed of every random choice; printed first, so that a failure can be replayed.
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Size of the key space (small, so that overwrites and deletes of a key are frequent).
    /// Default: 1000; in space mode enough keys to hold twice the capacity.
    #[arg(long, value_name = "N")]
    pub keys: Option<u32>,
    /// Longest value (lengths are skewed: half are at most 64 bytes).
    #[arg(long, default_value = "16KiB", value_name = "SIZE")]
    pub max_value: ByteSize,
    /// Operation weights `PUT,DELETE,GET,SCAN[,BATCH]`. Without BATCH, engines with
    /// crash-atomic write batches get write batches of weight 10, the others none; a BATCH
    /// weight above 0 on an engine without them is refused.
    #[arg(long, default_value = "45,15,30,10", value_name = "WEIGHTS")]
    pub mix: OpMix,
    /// Most keys of one write batch (each batch writes 1..=N distinct keys, puts and
    /// deletes in the mix's proportion; at most 100).
    #[arg(long, default_value_t = 16, value_name = "N")]
    pub batch_size: usize,
    /// Field updates (issue 20): a schema of N fixed fields of 16 bytes, and half the
    /// operations become put_row, update_fields of 1..=N fields (threads update different
    /// fields of one row at once), get_fields, delete_row and scan_fields over 4 rows per
    /// thread, each checked per field (see the README). Default: 10 on engines with a
    /// native schema store (focus), 0 (off) on the others, which run it through the
    /// consolidated adapter when asked. At most 64.
    #[arg(long, value_name = "N")]
    pub fields: Option<usize>,
    /// Longest scan (rows).
    #[arg(long, default_value_t = 32, value_name = "N")]
    pub max_scan: usize,
    /// Longest workload phase of a round; the crash comes at a random moment within it.
    #[arg(long, default_value = "500ms", value_name = "DURATION")]
    pub round_time: HumanDuration,
    /// Directory for pmem pool files (e.g. /dev/shm). Default: inside the working directory.
    #[arg(long, value_name = "DIR")]
    pub pmem_path: Option<PathBuf>,
    /// Pmem pool size. Default: 64MiB; 16MiB in space mode (so that filling takes seconds).
    #[arg(long, value_name = "SIZE")]
    pub pmem_size: Option<ByteSize>,
    /// Pool mode for kill mode: msync (default), volatile, or tracked (a power-loss kill:
    /// the store is recovered from a crash image taken at the moment of the kill). The
    /// in-process modes always use tracked.
    #[arg(long, value_name = "MODE")]
    pub pmem_mode: Option<DurabilityMode>,
    /// Directory for flash directories. Default: inside the working directory.
    #[arg(long, value_name = "DIR")]
    pub flash_path: Option<PathBuf>,
    /// Flash capacity. Default: 1GiB; 64MiB in space and persist-points modes (persist-points
    /// copies the whole flash directory into each of its thousands of crash images).
    #[arg(long, value_name = "SIZE")]
    pub flash_size: Option<ByteSize>,
    /// Flash I/O back end: auto, uring or threads.
    #[arg(long, default_value = "auto", value_name = "BACKEND")]
    pub io_backend: IoBackend,
    /// Fraction of pmem crash images whose 8-byte words are torn independently (the rest
    /// are line-level).
    #[arg(long, default_value_t = 0.5, value_name = "F")]
    pub tear_fraction: f64,
    /// Fraction of flash-faults rounds with an injected EIO or ENOSPC.
    #[arg(long, default_value_t = 0.5, value_name = "F")]
    pub fault_fraction: f64,
    /// persist-points mode: checked operations of each pass's workload.
    #[arg(long, default_value_t = 400, value_name = "N")]
    pub ops: u64,
    /// persist-points mode: the most persist points cut per pass (every persist when the
    /// workload makes fewer; else one per stratum of equal size).
    #[arg(long, default_value_t = 2000, value_name = "N")]
    pub points: u64,
    /// space mode: share of the live keys deleted after each fill.
    #[arg(long, default_value_t = 0.5, value_name = "F")]
    pub delete_share: f64,
    /// space mode: after the deletes, new keys are written until they hold this share of
    /// the bytes the deletes freed; each must fit (after retries for up to --gc-wait).
    #[arg(long, default_value_t = 0.25, value_name = "F")]
    pub refill: f64,
    /// space mode: how long a refused write of a new key may be retried after deletes
    /// freed space (the engine's GC may need time to reclaim it).
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    pub gc_wait: HumanDuration,
    /// space mode: the longest one write or delete may take (refused or not); longer is a
    /// failure. A fill that does not reach its refusals within --fill-time fails too.
    #[arg(long, default_value = "5s", value_name = "DURATION")]
    pub write_bound: HumanDuration,
    /// space mode: the longest fill phase.
    #[arg(long, default_value = "60s", value_name = "DURATION")]
    pub fill_time: HumanDuration,
    /// space mode: share of the rounds that end with a child process SIGKILLed mid-fill
    /// instead of a clean close.
    #[arg(long, default_value_t = 0.3, value_name = "F")]
    pub kill_fraction: f64,
    /// space mode: the least share of the capacity that must be live when writes are first
    /// refused (a store that refuses at 5% full is a finding).
    #[arg(long, default_value_t = 0.1, value_name = "F")]
    pub min_full: f64,
    /// Keep the working directory after a passing run.
    #[arg(long)]
    pub keep: bool,
    /// Print one line per round.
    #[arg(short, long)]
    pub verbose: bool,
    /// Internal: run as the child of kill mode, in this working directory.
    #[arg(long, hide = true, value_name = "DIR")]
    pub kill_child: Option<PathBuf>,
}

impl StressArgs {
    /// Checks the numbers that clap cannot.
    fn validate(&self) -> anyhow::Result<()> {
        if self.threads == 0 || self.threads > 1024 {
            bail!("--threads {}: between 1 and 1024", self.threads);
        }
        if self.writers_per_key == 0 || self.writers_per_key > self.threads {
            bail!(
                "--writers-per-key {}: between 1 and --threads ({}); raise --threads for \
                 more racing writers",
                self.writers_per_key,
                self.threads
            );
        }
        if let Some(k) = self.keys
            && (k == 0 || k > 10_000_000)
        {
            bail!("--keys {k}: between 1 and 10000000");
        }
        if self.rounds == Some(0) {
            bail!("--rounds 0 runs nothing");
        }
        if self.batch_size == 0 || self.batch_size > MAX_STRESS_BATCH {
            bail!(
                "--batch-size {}: between 1 and {MAX_STRESS_BATCH}",
                self.batch_size
            );
        }
        for (name, f) in [
            ("--tear-fraction", self.tear_fraction),
            ("--fault-fraction", self.fault_fraction),
            ("--delete-share", self.delete_share),
            ("--refill", self.refill),
            ("--kill-fraction", self.kill_fraction),
            ("--min-full", self.min_full),
        ] {
            if !(0.0..=1.0).contains(&f) {
                bail!("{name} {f}: a fraction between 0 and 1");
            }
        }
        if self.fields.is_some_and(|f| f > crate::fields::MAX_FIELDS) {
            bail!("--fields: at most {}", crate::fields::MAX_FIELDS);
        }
        if self.round_time.0 < Duration::from_millis(1) {
            bail!("--round-time must be at least 1ms");
        }
        Ok(())
    }
}

/// Builds the run's configuration (shared by the parent and the child of kill mode).
pub(crate) fn config(args: &StressArgs, seed: u64, work_dir: PathBuf) -> anyhow::Result<RunConfig> {
    args.validate()?;
    let target = Target::resolve(&args.engine)?;
    let max_value = usize::try_from(args.max_value.bytes())
        .unwrap_or(usize::MAX)
        .min(target.max_value_len());
    if max_value < MIN_VALUE_LEN {
        bail!(
            "--max-value {}: stress values need at least {MIN_VALUE_LEN} bytes",
            args.max_value
        );
    }
    let space_mode = args.mode == Mode::Space;
    let tiers = TierConfig {
        pmem_dir: args.pmem_path.clone(),
        pmem_size: args.pmem_size.unwrap_or(if space_mode {
            ByteSize(16 << 20)
        } else {
            ByteSize(64 << 20)
        }),
        flash_dir: args.flash_path.clone(),
        flash_size: args
            .flash_size
            .unwrap_or(if space_mode || args.mode == Mode::PersistPoints {
                ByteSize(64 << 20)
            } else {
                ByteSize(1 << 30)
            }),
        io_backend: args.io_backend,
    };
    let sizes = ValueSizes::up_to(max_value);
    let keys = match args.keys {
        Some(k) => k,
        None if space_mode => modes::space::default_keys(&target, &tiers, &sizes),
        None => 1000,
    };
    let rounds = match (args.rounds, args.duration) {
        // NOTE: a persist-points pass already cuts up to --points crashes.
        (None, None) if args.mode == Mode::PersistPoints => Some(1),
        (None, None) => Some(20),
        (r, _) => r,
    };
    Ok(RunConfig {
        tiers,
        pmem_mode: args.pmem_mode,
        workload: WorkloadConfig {
            // NOTE: persist-points runs one thread: its point is determinism.
            threads: if args.mode == Mode::PersistPoints {
                1
            } else {
                args.threads
            },
            mix: args.mix,
            max_scan: args.max_scan,
            sizes,
            seed,
            writers_per_key: args.writers_per_key,
            max_batch: args.batch_size,
        },
        space: KeySpace::new(keys),
        work_dir,
        round_time: args.round_time.0,
        budget: Budget {
            rounds,
            duration: args.duration.map(|d| d.0),
            start: Instant::now(),
        },
        tear_fraction: args.tear_fraction,
        fault_fraction: args.fault_fraction,
        seed,
        verbose: args.verbose,
        persist_points: PersistPointsConfig {
            ops: args.ops.max(1),
            points: args.points.max(1),
        },
        space_mode: SpaceConfig {
            delete_share: args.delete_share,
            refill: args.refill,
            gc_wait: args.gc_wait.0,
            write_bound: args.write_bound.0,
            fill_time: args.fill_time.0,
            kill_fraction: args.kill_fraction,
            min_full: args.min_full,
        },
        fields: match args.fields {
            Some(0) => None,
            Some(n) => Some(FieldConfig::new(n, args.threads, keys)),
            None if target.native_schema() => Some(FieldConfig::new(
                crate::fields::DEFAULT_FIELDS,
                args.threads,
                keys,
            )),
            None => None,
        },
        target,
    })
}

/// The working directory: `--dir`, or a new one in the temporary directory.
fn work_dir_path(args: &StressArgs, seed: u64) -> PathBuf {
    args.dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("tierkv-stress-{seed}-{}", std::process::id()))
    })
}

/// Refuses to start over files an earlier run of the same name left in `--pmem-path` or
/// `--flash-path` ([`modes::leftovers`]), naming them, rather than failing part-way.
fn refuse_leftovers(cfg: &RunConfig) -> anyhow::Result<()> {
    let found = modes::leftovers(cfg);
    if found.is_empty() {
        return Ok(());
    }
    let shown: Vec<String> = found
        .iter()
        .take(5)
        .map(|p| format!("  {}", p.display()))
        .collect();
    bail!(
        "{} file(s) of an earlier run named {:?} are in the pmem or flash directory (kept \
         after a failure, or left by a killed run):\n{}{}\nremove them, or give another \
         --dir (its name prefixes the files a run keeps there); the harness never deletes \
         what it did not create",
        found.len(),
        cfg.work_dir.file_name().unwrap_or_default(),
        shown.join("\n"),
        if found.len() > 5 { "\n  ..." } else { "" }
    )
}

/// Creates the working directory, refusing one that holds anything.
fn prepare_work_dir(args: &StressArgs, seed: u64) -> anyhow::Result<PathBuf> {
    let dir = work_dir_path(args, seed);
    if let Ok(mut entries) = std::fs::read_dir(&dir)
        && entries.next().is_some()
    {
        bail!(
            "--dir {} is not empty; give an empty or new directory (the harness never \
             deletes what it did not create)",
            dir.display()
        );
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// Refuses engine/mode combinations that cannot work, with the reason.
fn check_engine(cfg: &RunConfig, mode: Mode) -> anyhow::Result<()> {
    let d = cfg.target.desc;
    if cfg.workload.mix.batch.unwrap_or(0) > 0 && tierkv::descriptor(d.name).is_ok() {
        tierkv::check_atomic_batches(d.name).with_context(|| {
            format!(
                "--mix {}: write batches asked for (the fifth weight); drop it or set it to 0",
                cfg.workload.mix
            )
        })?;
    }
    if d.volatile {
        bail!(
            "engine {} is volatile (nothing survives a restart): there is nothing to \
             recover, so no crash mode applies to it",
            d.name
        );
    }
    match mode {
        Mode::Kill => modes::kill::check_engine(cfg),
        Mode::PmemImage => modes::pmem_image::check_engine(cfg),
        Mode::FlashFaults => modes::flash_faults::check_engine(cfg),
        Mode::PersistPoints => modes::persist_points::check_engine(cfg),
        Mode::Space => modes::space::check_engine(cfg),
    }
}

fn describe(cfg: &RunConfig, mode: Mode) -> String {
    let t = &cfg.target;
    let mut tiers = Vec::new();
    if t.uses(Tier::Pmem) {
        let m = match mode {
            Mode::Kill | Mode::Space => cfg.pmem_mode.unwrap_or_default(),
            _ => DurabilityMode::Tracked,
        };
        tiers.push(format!(
            "pmem {} in mode {m} ({})",
            cfg.tiers.pmem_size,
            m.guarantee()
        ));
    }
    if t.uses(Tier::Flash) {
        tiers.push(format!("flash {}", cfg.tiers.flash_size));
    }
    let budget = match (cfg.budget.rounds, cfg.budget.duration) {
        (Some(r), Some(d)) => format!("{r} rounds or {:.0} s", d.as_secs_f64()),
        (Some(r), None) => format!("{r} rounds"),
        (None, Some(d)) => format!("{:.0} s", d.as_secs_f64()),
        (None, None) => "unbounded".to_owned(),
    };
    let racing = match cfg.workload.writers_per_key {
        1 => String::new(),
        n => format!(" ({n} writers per key)"),
    };
    let mix = if mode == Mode::Space {
        let s = &cfg.space_mode;
        format!(
            "fills put,get,scan = 80,15,5 (+ batches as --mix says) until refused, then {:.0}% deleted and {:.0}% of the \
             freed bytes written again (--gc-wait {:.0} s, --write-bound {:.0} ms), {:.0}% of \
             the rounds end in a SIGKILL of a child running the mix put,delete,get,scan = {}",
            s.delete_share * 100.0,
            s.refill * 100.0,
            s.gc_wait.as_secs_f64(),
            s.write_bound.as_secs_f64() * 1e3,
            s.kill_fraction * 100.0,
            cfg.workload.mix
        )
    } else {
        let m = &cfg.workload.mix;
        let batches = match m.batch {
            Some(0) => String::new(),
            Some(_) => format!(", write batches of 1..={} keys", cfg.workload.max_batch),
            None => format!(
                " (+ batch {} on engines with atomic write batches: 1..={} keys)",
                crate::workload::DEFAULT_BATCH_WEIGHT,
                cfg.workload.max_batch
            ),
        };
        let names = if m.batch.is_some() {
            "put,delete,get,scan,batch"
        } else {
            "put,delete,get,scan"
        };
        format!("mix {names} = {m}{batches}")
    };
    let mix = match cfg.fields {
        Some(f) => format!(
            "{mix}; {}% field operations (put_row,update_fields,get_fields,delete_row,\
             scan_fields = {}) on {} fields x {} B over {} rows",
            crate::fields::FIELD_SHARE,
            crate::fields::FIELD_MIX.map(|w| w.to_string()).join(","),
            f.fields,
            crate::fields::FIELD_LEN,
            f.rows
        ),
        None => mix,
    };
    format!(
        "engine {}, mode {mode}, {} threads{racing}, {} keys, values {MIN_VALUE_LEN} B..{} B, \
         {mix}, {budget}, rounds up to {:.0} ms; {}; dir {}",
        t.spec,
        cfg.workload.threads,
        cfg.space.count(),
        cfg.workload.sizes.max,
        cfg.round_time.as_secs_f64() * 1e3,
        tiers.join(", "),
        cfg.work_dir.display()
    )
}

/// Runs `tierkv stress`; returns the verdict (true: no violation, no failure). `Err` is for
/// runs that could not start (bad arguments, an engine the mode cannot test, an unusable
/// directory) or a harness failure.
pub fn run(args: &StressArgs) -> anyhow::Result<bool> {
    if let Some(work) = &args.kill_child {
        return modes::kill::child_main(args, work);
    }
    let seed = args.seed.unwrap_or_else(rand::random);
    println!("tierkv stress: seed {seed}");
    // Validate before touching the file system.
    let probe = config(args, seed, PathBuf::new())?;
    check_engine(&probe, args.mode)?;
    let cfg = config(args, seed, work_dir_path(args, seed))?;
    refuse_leftovers(&cfg)?;
    let work_dir = prepare_work_dir(args, seed)?;
    println!("{}", describe(&cfg, args.mode));
    let mut report = RunReport::default();
    let started = Instant::now();
    let outcome = match args.mode {
        Mode::Kill => modes::kill::run(&cfg, &mut report),
        Mode::PmemImage => modes::pmem_image::run(&cfg, &mut report),
        Mode::FlashFaults => modes::flash_faults::run(&cfg, &mut report),
        Mode::PersistPoints => modes::persist_points::run(&cfg, &mut report),
        Mode::Space => modes::space::run(&cfg, &mut report),
    };
    report.elapsed = started.elapsed();
    if let Err(e) = outcome {
        report.fail(format!("the harness stopped: {e:#}"));
    }
    print!("{}", report.render(seed));
    if report.passed() && !args.keep {
        modes::remove_path(&work_dir)
            .with_context(|| format!("removing {}", work_dir.display()))?;
    } else {
        println!("data kept in {}", work_dir.display());
        for k in &report.kept {
            println!("data kept: {k}");
        }
    }
    Ok(report.passed())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: StressArgs,
    }

    fn parse(line: &[&str]) -> Result<StressArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("tierkv-stress").chain(line.iter().copied()))
            .map(|c| c.args)
    }

    #[test]
    fn durations_parse_with_units() {
        let d = |s: &str| s.parse::<HumanDuration>().map(|d| d.0);
        assert_eq!(d("90"), Ok(Duration::from_secs(90)));
        assert_eq!(d("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(d("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(d("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(d("soon").is_err());
        assert!(d("5 fortnights").is_err());
    }

    #[test]
    fn flags_parse_and_defaults_hold() {
        let a = parse(&[
            "--engine",
            "reflog",
            "--mode",
            "pmem-image",
            "--seed",
            "7",
            "--duration",
            "2m",
        ])
        .unwrap();
        assert_eq!(a.mode, Mode::PmemImage);
        assert_eq!(a.seed, Some(7));
        assert_eq!(a.duration, Some(HumanDuration(Duration::from_secs(120))));
        assert_eq!(a.threads, 4);
        assert_eq!(a.mix, OpMix::default());
        assert!(parse(&["--mode", "kill"]).is_err(), "--engine is required");
        assert!(parse(&["--engine", "x", "--mode", "bogus"]).is_err());
    }

    #[test]
    fn nonsense_numbers_are_refused_before_anything_runs() {
        for bad in [
            &["--engine", "dram", "--threads", "0"][..],
            &["--engine", "dram", "--keys", "0"],
            &["--engine", "dram", "--rounds", "0"],
            &["--engine", "dram", "--tear-fraction", "1.5"],
            &["--engine", "dram", "--max-value", "4"],
        ] {
            let a = parse(bad).unwrap();
            assert!(config(&a, 1, PathBuf::new()).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn volatile_engines_are_refused_with_the_reason() {
        let a = parse(&["--engine", "dram", "--rounds", "1"]).unwrap();
        let cfg = config(&a, 1, PathBuf::new()).unwrap();
        let e = check_engine(&cfg, Mode::Kill).unwrap_err().to_string();
        assert!(e.contains("volatile"), "{e}");
        assert!(e.contains("nothing to recover"), "{e}");
    }

    #[cfg(feature = "reference-engine")]
    #[test]
    fn modes_refuse_engines_without_their_tier() {
        let a = parse(&["--engine", "reflog"]).unwrap();
        let cfg = config(&a, 1, PathBuf::new()).unwrap();
        let e = check_engine(&cfg, Mode::FlashFaults)
            .unwrap_err()
            .to_string();
        assert!(e.contains("writes nothing to flash"), "{e}");
        let a = parse(&["--engine", "reflog-flash"]).unwrap();
        let cfg = config(&a, 1, PathBuf::new()).unwrap();
        let e = check_engine(&cfg, Mode::PmemImage).unwrap_err().to_string();
        assert!(e.contains("keeps nothing on pmem"), "{e}");
        check_engine(&cfg, Mode::Kill).unwrap();
    }

    #[test]
    fn files_an_earlier_run_of_the_same_name_left_are_refused_before_anything_is_written() {
        let work = tempfile::tempdir().unwrap();
        let shm = tempfile::tempdir().unwrap();
        let dir = work.path().join("st-run");
        let args = |mode: &str| {
            parse(&[
                "--engine",
                "prism",
                "--mode",
                mode,
                "--dir",
                dir.to_str().unwrap(),
                "--pmem-path",
                shm.path().to_str().unwrap(),
            ])
            .unwrap()
        };
        // Other runs' files (another name, a name that only begins alike) are not in the way.
        std::fs::write(shm.path().join("st-other-r000001.pool"), b"x").unwrap();
        std::fs::write(shm.path().join("st-running.pool"), b"x").unwrap();
        let cfg = config(&args("pmem-image"), 1, dir.clone()).unwrap();
        refuse_leftovers(&cfg).unwrap();
        // A round's pool file (the other modes) and a kill run's directory are.
        for left in ["st-run-r000002.pool", "st-run"] {
            let p = shm.path().join(left);
            if left.ends_with(".pool") {
                std::fs::write(&p, b"x").unwrap();
            } else {
                std::fs::create_dir(&p).unwrap();
            }
            for mode in ["pmem-image", "kill"] {
                let e = run(&args(mode)).unwrap_err().to_string();
                assert!(e.contains(left) && e.contains("remove them"), "{e}");
                assert!(
                    !dir.exists(),
                    "the working directory was made before the refusal"
                );
            }
            modes::remove_path(&p).unwrap();
        }
        refuse_leftovers(&cfg).unwrap();
        // The working directory itself in the pmem directory (empty, made beforehand) is
        // no leftover.
        let inside = shm.path().join("st-here");
        std::fs::create_dir(&inside).unwrap();
        let a = parse(&[
            "--engine",
            "prism",
            "--dir",
            inside.to_str().unwrap(),
            "--pmem-path",
            shm.path().to_str().unwrap(),
        ])
        .unwrap();
        refuse_leftovers(&config(&a, 1, inside.clone()).unwrap()).unwrap();
    }

    #[test]
    fn a_non_empty_dir_is_refused() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("precious"), b"x").unwrap();
        let a = parse(&["--engine", "dram", "--dir", d.path().to_str().unwrap()]).unwrap();
        let e = prepare_work_dir(&a, 1).unwrap_err().to_string();
        assert!(e.contains("not empty"), "{e}");
        assert!(d.path().join("precious").exists());
    }
}
