//! The command line of `tierkv bench-io` ([`IoBenchArgs`]) and the list of jobs it expands
//! to ([`jobs`]): which access pattern, block size and queue depth each measurement uses.
//!
//! The defaults are the figures issue 4 asks to put beside fio's: 4 KiB random reads at
//! queue depth 1 and 64, 4 KiB random writes at 32, 512 KiB sequential writes at 1 and 64.
//!
//! Thread safety: plain data.

use std::fmt;
use std::path::PathBuf;

use serde::Serialize;
use tierkv_core::{ByteSize, IoBackend};

/// What a job does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// 4 KiB reads at uniformly random aligned offsets.
    Randread,
    /// 4 KiB writes at uniformly random aligned offsets.
    Randwrite,
    /// 512 KiB writes at increasing offsets, wrapping at the end of the file.
    Seqwrite,
    /// All three, one after the other.
    All,
}

impl Pattern {
    /// The block size of the pattern's requests.
    pub fn block_size(self) -> usize {
        match self {
            Pattern::Seqwrite => 512 << 10,
            _ => 4 << 10,
        }
    }

    /// The queue depths measured when `--qd` is not given.
    fn default_depths(self) -> &'static [u32] {
        match self {
            Pattern::Randwrite => &[32],
            _ => &[1, 64],
        }
    }

    /// fio's `--rw` for the same pattern.
    pub fn fio_rw(self) -> &'static str {
        match self {
            Pattern::Randread => "randread",
            Pattern::Randwrite => "randwrite",
            Pattern::Seqwrite | Pattern::All => "write",
        }
    }

    /// True for patterns that write.
    pub fn writes(self) -> bool {
        matches!(self, Pattern::Randwrite | Pattern::Seqwrite)
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Pattern::Randread => "randread",
            Pattern::Randwrite => "randwrite",
            Pattern::Seqwrite => "seqwrite",
            Pattern::All => "all",
        })
    }
}

/// The flags of `tierkv bench-io`.
#[derive(Clone, Debug, clap::Args)]
pub struct IoBenchArgs {
    /// Directory of the benchmark file (created if missing); put it on the device to measure.
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,

    /// Size of the benchmark file (4096, 64MiB, 2GiB, ...). A new file is written in full
    /// once, so reads hit real data; an existing file of this size is reused as is.
    #[arg(long, default_value = "2GiB")]
    pub size: ByteSize,

    /// Seconds each job runs (fractions allowed).
    #[arg(long, default_value_t = 10.0)]
    pub runtime: f64,

    /// Queue depths to measure, comma-separated, for every selected pattern
    /// [default: randread 1,64; randwrite 32; seqwrite 1,64].
    #[arg(long, value_delimiter = ',')]
    pub qd: Vec<u32>,

    /// Access pattern to measure.
    #[arg(long, value_enum, default_value_t = Pattern::All)]
    pub pattern: Pattern,

    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,

    /// How I/O is submitted: uring (io_uring, the default; fails if the kernel refuses it),
    /// auto (io_uring, else pread/pwrite) or threads (pread/pwrite).
    #[arg(long, default_value = "uring")]
    pub backend: IoBackend,

    /// File name of the benchmark file inside --dir.
    #[arg(long, default_value = "tierkv-iobench.dat")]
    pub file: String,

    /// After each job, run fio (if installed) with the same pattern, block size and queue
    /// depth on the same file, and print both side by side.
    #[arg(long)]
    pub fio: bool,

    /// Remove the benchmark file at the end (by default it is kept for re-runs and fio).
    #[arg(long)]
    pub cleanup: bool,

    /// Seed of the random offsets.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// One measurement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Job {
    /// What the requests do.
    pub pattern: Pattern,
    /// Bytes per request.
    pub block_size: usize,
    /// Requests kept in flight.
    pub qd: u32,
}

/// The jobs `args` asks for, in the order they run (reads first, on the freshly laid out
/// file).
pub fn jobs(args: &IoBenchArgs) -> anyhow::Result<Vec<Job>> {
    if let Some(&bad) = args.qd.iter().find(|&&q| q == 0 || q > 4096) {
        anyhow::bail!("--qd {bad}: queue depths must be between 1 and 4096");
    }
    let patterns = match args.pattern {
        Pattern::All => vec![Pattern::Randread, Pattern::Randwrite, Pattern::Seqwrite],
        p => vec![p],
    };
    let mut out = Vec::new();
    for p in patterns {
        let depths = if args.qd.is_empty() {
            p.default_depths()
        } else {
            &args.qd[..]
        };
        out.extend(depths.iter().map(|&qd| Job {
            pattern: p,
            block_size: p.block_size(),
            qd,
        }));
    }
    Ok(out)
}

/// Checks the flags that do not depend on the file system.
pub fn check(args: &IoBenchArgs) -> anyhow::Result<()> {
    let block = (512 << 10) as u64;
    if args.size.bytes() < block || !args.size.bytes().is_multiple_of(block) {
        anyhow::bail!(
            "--size {}: the file must be a non-zero multiple of 512 KiB",
            args.size
        );
    }
    if !(args.runtime.is_finite() && args.runtime > 0.0) {
        anyhow::bail!(
            "--runtime {}: must be a positive number of seconds",
            args.runtime
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: IoBenchArgs,
    }

    fn parse(argv: &[&str]) -> IoBenchArgs {
        Cli::parse_from(std::iter::once("bench-io").chain(argv.iter().copied())).args
    }

    #[test]
    fn defaults_are_the_issue_four_matrix() {
        let a = parse(&[]);
        assert_eq!(a.size, ByteSize::gib(2));
        assert_eq!(a.runtime, 10.0);
        let j: Vec<(Pattern, usize, u32)> = jobs(&a)
            .unwrap()
            .iter()
            .map(|j| (j.pattern, j.block_size, j.qd))
            .collect();
        assert_eq!(
            j,
            [
                (Pattern::Randread, 4096, 1),
                (Pattern::Randread, 4096, 64),
                (Pattern::Randwrite, 4096, 32),
                (Pattern::Seqwrite, 524_288, 1),
                (Pattern::Seqwrite, 524_288, 64),
            ]
        );
    }

    #[test]
    fn qd_list_applies_to_the_chosen_pattern() {
        let a = parse(&[
            "--pattern",
            "randwrite",
            "--qd",
            "1,8,16",
            "--size",
            "64MiB",
        ]);
        let qds: Vec<u32> = jobs(&a).unwrap().iter().map(|j| j.qd).collect();
        assert_eq!(qds, [1, 8, 16]);
        assert!(
            jobs(&a)
                .unwrap()
                .iter()
                .all(|j| j.pattern == Pattern::Randwrite)
        );
        check(&a).unwrap();
    }

    #[test]
    fn bad_sizes_depths_and_runtimes_are_refused() {
        assert!(jobs(&parse(&["--qd", "0"])).is_err());
        assert!(check(&parse(&["--size", "100KiB"])).is_err());
        assert!(check(&parse(&["--size", "1000000"])).is_err());
        assert!(check(&parse(&["--runtime", "0"])).is_err());
    }
}
