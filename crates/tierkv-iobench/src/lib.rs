//! # tierkv-iobench
//!
//! The flash I/O microbenchmark (`tierkv bench-io`, issue 4 item 6): random 4 KiB reads,
//! random 4 KiB writes and sequential 512 KiB writes through tierkv's own flash tier
//! (`tierkv_core::media::flash`: io_uring + `O_DIRECT`) at chosen queue depths, printed in
//! the units fio prints (IOPS, MiB/s, usec) so the two can be put side by side — and, with
//! `--fio`, run fio on the same file right after each job and print both.
//!
//! Modules: [`args`] (flags and the job list), `target` (the benchmark file), `job` (one
//! measurement: a queue kept `qd` deep), [`fio`] (fio's command line and JSON), [`report`]
//! (table and JSON).
//!
//! Library use (the CLI flattens [`IoBenchArgs`] into its `bench-io` subcommand):
//! ```no_run
//! use clap::Parser;
//! #[derive(Parser)]
//! struct Cli {
//!     #[command(flatten)]
//!     io: tierkv_iobench::IoBenchArgs,
//! }
//! tierkv_iobench::run(&Cli::parse().io).unwrap();
//! ```
//!
//! Thread safety: the benchmark runs on the calling thread.

#![forbid(unsafe_code)]

pub mod args;
pub mod fio;
mod job;
pub mod report;
mod target;

use std::io::{IsTerminal, Write};
use std::time::Duration;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};

pub use args::{IoBenchArgs, Job, Pattern};
pub use fio::FioResult;
pub use job::JobResult;
pub use report::{Config, Entry, Report};
use tierkv_core::IoBackend;

/// Runs the benchmark, printing the table to stdout (and progress bars when stdout is a
/// terminal), writing `--json` if asked.
pub fn run(args: &IoBenchArgs) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    let show_progress = stdout.is_terminal();
    bench(args, &mut stdout.lock(), show_progress).map(drop)
}

/// Runs the benchmark, writing the text output to `out`; returns what it measured.
pub fn bench(
    args: &IoBenchArgs,
    out: &mut dyn Write,
    show_progress: bool,
) -> anyhow::Result<Report> {
    args::check(args)?;
    let jobs = args::jobs(args)?;
    let max_qd = jobs.iter().map(|j| j.qd).max().unwrap_or(1);
    let bar = |len: u64, what: &str| progress_bar(show_progress, len, what);
    let t = target::prepare(args, max_qd, |len| bar(len, "laying out"))?;
    let runtime = Duration::from_secs_f64(args.runtime);
    let config = Config {
        file: t.path.clone(),
        size_bytes: t.file.len(),
        runtime_s: args.runtime,
        backend: match t.dev.backend() {
            IoBackend::Uring => "uring".into(),
            _ => "threads".into(),
        },
        direct_io: t.file.direct_io(),
        seed: args.seed,
    };
    writeln!(out, "{}", report::header(&config))?;
    writeln!(out, "{}", report::columns())?;
    let mut results = Vec::with_capacity(jobs.len());
    for (i, job) in jobs.iter().enumerate() {
        let pb = bar(
            u64::try_from(runtime.as_millis())?,
            &format!("{} qd{}", job.pattern, job.qd),
        );
        let seed = args.seed.wrapping_add(i as u64);
        let ours = job::run_job(&t.dev, &t.file, *job, runtime, seed, &pb)?;
        pb.finish_and_clear();
        let fio_args = fio::fio_args(&t.path, config.size_bytes, job, runtime);
        let fio = if args.fio {
            Some(fio::run_fio(&t.path, config.size_bytes, job, runtime)?)
        } else {
            None
        };
        let entry = Entry {
            ours,
            fio_command: format!("fio {}", fio_args.join(" ")),
            fio,
        };
        writeln!(out, "{}", report::rows(&entry))?;
        results.push(entry);
    }
    let report = Report { config, results };
    finish(args, &t, &report, out)?;
    Ok(report)
}

/// Writes the JSON, lists the equivalent fio commands, and keeps or removes the file.
fn finish(
    args: &IoBenchArgs,
    t: &target::Target,
    report: &Report,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(report)?;
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
        writeln!(out, "results written to {}", path.display())?;
    }
    writeln!(out, "equivalent fio jobs:")?;
    for e in &report.results {
        writeln!(out, "  {}", e.fio_command)?;
    }
    if args.cleanup {
        t.dev.remove_file(&args.file)?;
        t.dev.sync_dir()?;
        writeln!(out, "removed {}", t.path.display())?;
    } else {
        writeln!(
            out,
            "benchmark file kept: {} (--cleanup removes it)",
            t.path.display()
        )?;
    }
    Ok(())
}

fn progress_bar(show: bool, len: u64, what: &str) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template("{prefix:>16} [{bar:40}] {percent:>3}%") {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_prefix(what.to_owned());
    pb
}
