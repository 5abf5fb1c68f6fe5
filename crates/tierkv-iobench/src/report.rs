//! The benchmark's output: the [`Report`] (also written as JSON with `--json`) and its text
//! table, one row per job in fio's units (IOPS, MiB/s, usec), with fio's row and the ratio
//! under each job when fio ran beside it.
//!
//! JSON shape (stable): `{"config": {file, size_bytes, runtime_s, backend, direct_io, seed},
//! "results": [{pattern, block_size, qd, ios, seconds, iops, mib_per_s, lat_mean_us,
//! lat_p50_us, lat_p99_us, lat_p999_us, lat_max_us, fio_command, fio: null | {iops,
//! mib_per_s, lat_mean_us, clat_p99_us}}]}`.
//!
//! Thread safety: plain data.

use std::fmt::Write as _;
use std::path::PathBuf;

use serde::Serialize;

use crate::fio::FioResult;
use crate::job::JobResult;

/// How the benchmark ran.
#[derive(Clone, Debug, Serialize)]
pub struct Config {
    /// The benchmark file.
    pub file: PathBuf,
    /// Its size in bytes.
    pub size_bytes: u64,
    /// Seconds per job.
    pub runtime_s: f64,
    /// "uring" or "threads" (pread/pwrite).
    pub backend: String,
    /// Whether the file was opened with `O_DIRECT`.
    pub direct_io: bool,
    /// Seed of the random offsets.
    pub seed: u64,
}

/// One job's figures, ours and (optionally) fio's.
#[derive(Clone, Debug, Serialize)]
pub struct Entry {
    /// Ours.
    #[serde(flatten)]
    pub ours: JobResult,
    /// The equivalent fio command.
    pub fio_command: String,
    /// fio's figures, when `--fio` was given.
    pub fio: Option<FioResult>,
}

/// Everything a run measured.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// How it ran.
    pub config: Config,
    /// One entry per job, in run order.
    pub results: Vec<Entry>,
}

/// The header line of the text output.
pub fn header(c: &Config) -> String {
    let io = if c.direct_io {
        "O_DIRECT"
    } else {
        "buffered I/O (the filesystem refuses O_DIRECT)"
    };
    let backend = if c.backend == "uring" {
        "io_uring"
    } else {
        "pread/pwrite"
    };
    format!(
        "tierkv bench-io: {} ({} MiB), {backend}, {io}, {} s per job, seed {}",
        c.file.display(),
        c.size_bytes >> 20,
        c.runtime_s,
        c.seed
    )
}

/// The column titles.
pub fn columns() -> String {
    format!(
        "{:<11}{:>6}{:>5}{:>12}{:>10}{:>17}{:>16}",
        "job", "bs", "qd", "IOPS", "MiB/s", "lat mean (usec)", "lat p99 (usec)"
    )
}

fn size_label(bytes: usize) -> String {
    format!("{}k", bytes >> 10)
}

/// The rows of one entry: ours, then fio's and the ratio when present.
pub fn rows(e: &Entry) -> String {
    let r = &e.ours;
    let mut s = format!(
        "{:<11}{:>6}{:>5}{:>12.1}{:>10.1}{:>17.2}{:>16.2}",
        r.job.pattern.to_string(),
        size_label(r.job.block_size),
        r.job.qd,
        r.iops,
        r.mib_per_s,
        r.lat_mean_us,
        r.lat_p99_us
    );
    if let Some(f) = &e.fio {
        let _ = write!(
            s,
            "\n{:<11}{:>6}{:>5}{:>12.1}{:>10.1}{:>17.2}{:>16.2}   ours/fio IOPS {:.3}",
            "  fio",
            size_label(r.job.block_size),
            r.job.qd,
            f.iops,
            f.mib_per_s,
            f.lat_mean_us,
            f.clat_p99_us,
            if f.iops > 0.0 { r.iops / f.iops } else { 0.0 }
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::{Job, Pattern};

    fn entry(fio: Option<FioResult>) -> Entry {
        Entry {
            ours: JobResult {
                job: Job {
                    pattern: Pattern::Randread,
                    block_size: 4096,
                    qd: 64,
                },
                ios: 1000,
                seconds: 1.0,
                iops: 1000.0,
                mib_per_s: 3.90625,
                lat_mean_us: 64.0,
                lat_p50_us: 60.0,
                lat_p99_us: 120.0,
                lat_p999_us: 200.0,
                lat_max_us: 300.0,
            },
            fio_command: "fio --name=randread".into(),
            fio,
        }
    }

    #[test]
    fn rows_line_up_with_columns_and_show_the_ratio() {
        let e = entry(Some(FioResult {
            iops: 800.0,
            mib_per_s: 3.125,
            lat_mean_us: 80.0,
            clat_p99_us: 150.0,
        }));
        let text = rows(&e);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].len(), columns().len());
        assert!(lines[0].starts_with("randread       4k   64      1000.0       3.9"));
        assert!(lines[1].ends_with("ours/fio IOPS 1.250"), "{}", lines[1]);
    }

    #[test]
    fn json_has_the_documented_fields() {
        let v = serde_json::to_value(entry(None)).unwrap();
        for k in [
            "pattern",
            "block_size",
            "qd",
            "ios",
            "iops",
            "mib_per_s",
            "lat_mean_us",
            "lat_p99_us",
            "fio_command",
        ] {
            assert!(v.get(k).is_some(), "{k} missing in {v}");
        }
        assert_eq!(v["pattern"], "randread");
        assert!(v["fio"].is_null());
    }
}
