//! Side-by-side runs of fio ([`run_fio`]): the same pattern, block size, queue depth, file
//! and runtime through fio's io_uring engine with `--direct=1`, and the parser of fio's JSON
//! output ([`parse_fio_json`]), so that the two can be compared in the same units.
//!
//! fio's "lat" (submission + completion) is what this benchmark measures per request, so
//! the mean is compared with fio's `lat_ns.mean`; fio reports percentiles for "clat"
//! (completion only) by default, so the p99 shown beside ours is fio's `clat` p99, which can
//! only be lower than its "lat" p99.
//!
//! Thread safety: spawns a child process and waits for it.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Serialize;

use crate::args::Job;

/// What fio measured for one job.
#[derive(Clone, Debug, Serialize)]
pub struct FioResult {
    /// Completed requests per second.
    pub iops: f64,
    /// MiB per second.
    pub mib_per_s: f64,
    /// Mean of fio's "lat" (submission + completion), microseconds.
    pub lat_mean_us: f64,
    /// 99th percentile of fio's "clat" (completion), microseconds.
    pub clat_p99_us: f64,
}

/// The fio command line equivalent to `job` on `path`.
pub fn fio_args(path: &Path, size: u64, job: &Job, runtime: Duration) -> Vec<String> {
    vec![
        format!("--name={}", job.pattern),
        format!("--filename={}", path.display()),
        format!("--size={size}"),
        format!("--rw={}", job.pattern.fio_rw()),
        format!("--bs={}", job.block_size),
        "--ioengine=io_uring".into(),
        "--direct=1".into(),
        format!("--iodepth={}", job.qd),
        format!("--runtime={}ms", runtime.as_millis()),
        "--time_based".into(),
        "--group_reporting".into(),
    ]
}

/// Runs fio for `job` and parses its result.
pub fn run_fio(path: &Path, size: u64, job: &Job, runtime: Duration) -> anyhow::Result<FioResult> {
    let out = Command::new("fio")
        .args(fio_args(path, size, job, runtime))
        .arg("--output-format=json")
        .output()
        .context("running fio (is it installed? apt-get install fio)")?;
    if !out.status.success() {
        bail!(
            "fio failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    parse_fio_json(&String::from_utf8_lossy(&out.stdout), job.pattern.writes())
}

/// Extracts the figures of the first job of fio's JSON output (`writes` selects the
/// "write" section, else "read"). Text before the JSON (fio's notes) is skipped.
pub fn parse_fio_json(text: &str, writes: bool) -> anyhow::Result<FioResult> {
    let start = text.find('{').context("fio printed no JSON")?;
    let v: serde_json::Value = serde_json::from_str(&text[start..]).context("fio's JSON")?;
    let dir = if writes { "write" } else { "read" };
    let s = &v["jobs"][0][dir];
    let num = |p: &serde_json::Value, what: &str| {
        p.as_f64()
            .with_context(|| format!("fio's JSON lacks jobs[0].{dir}.{what}"))
    };
    Ok(FioResult {
        iops: num(&s["iops"], "iops")?,
        mib_per_s: num(&s["bw_bytes"], "bw_bytes")? / f64::from(1u32 << 20),
        lat_mean_us: num(&s["lat_ns"]["mean"], "lat_ns.mean")? / 1000.0,
        clat_p99_us: num(&s["clat_ns"]["percentile"]["99.000000"], "clat_ns p99")? / 1000.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::Pattern;

    const SAMPLE: &str = r#"note: both iodepth >= 1 and synchronous I/O engine are selected
{
  "fio version" : "fio-3.33",
  "jobs" : [
    {
      "jobname" : "rr",
      "read" : {
        "bw_bytes" : 41943040,
        "iops" : 10240.5,
        "clat_ns" : { "mean" : 90000.0, "percentile" : { "50.000000" : 88064, "99.000000" : 150528 } },
        "lat_ns" : { "mean" : 97500.0 }
      },
      "write" : { "bw_bytes" : 0, "iops" : 0.0 }
    }
  ]
}"#;

    #[test]
    fn fio_json_is_read_in_fio_units() {
        let r = parse_fio_json(SAMPLE, false).unwrap();
        assert_eq!(r.iops, 10240.5);
        assert_eq!(r.mib_per_s, 40.0);
        assert_eq!(r.lat_mean_us, 97.5);
        assert_eq!(r.clat_p99_us, 150.528);
    }

    #[test]
    fn missing_fields_are_errors_naming_the_field() {
        let e = parse_fio_json(SAMPLE, true).unwrap_err();
        assert!(e.to_string().contains("write.lat_ns.mean"), "{e}");
        assert!(parse_fio_json("no json here", false).is_err());
    }

    #[test]
    fn fio_command_matches_the_job() {
        let job = Job {
            pattern: Pattern::Seqwrite,
            block_size: 524_288,
            qd: 64,
        };
        let a = fio_args(Path::new("/d/f"), 1 << 31, &job, Duration::from_secs(10));
        for want in [
            "--filename=/d/f",
            "--size=2147483648",
            "--rw=write",
            "--bs=524288",
            "--iodepth=64",
            "--runtime=10000ms",
            "--direct=1",
            "--ioengine=io_uring",
        ] {
            assert!(a.iter().any(|x| x == want), "{want} missing from {a:?}");
        }
    }
}
