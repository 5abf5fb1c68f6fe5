//! One measurement ([`run_job`]): keep `qd` requests in flight on one [`IoQueue`] of the
//! flash tier for the job's runtime, as fio's io_uring engine does at the same `iodepth`:
//! each completion is reaped, timed, and its buffer resubmitted at once at the next offset.
//!
//! Latency is measured per request from the moment it is pushed to the moment its
//! completion is reaped (fio's "lat": submission plus completion), in nanoseconds, into an
//! HDR histogram; IOPS and MiB/s count completed requests over the time from the first
//! submission to the last completion. The hot loop allocates nothing: buffers travel with
//! their requests and come back in the completions.
//!
//! Thread safety: runs on the calling thread (an [`IoQueue`] is not `Send`).

use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use serde::Serialize;
use tierkv_core::media::flash::{AlignedBuf, FlashDevice, FlashFile, IoOp, IoRequest};

use crate::args::{Job, Pattern};

/// What one job measured.
#[derive(Clone, Debug, Serialize)]
pub struct JobResult {
    /// The job.
    #[serde(flatten)]
    pub job: Job,
    /// Requests completed.
    pub ios: u64,
    /// Seconds from the first submission to the last completion.
    pub seconds: f64,
    /// Completed requests per second.
    pub iops: f64,
    /// MiB (2^20 bytes) transferred per second.
    pub mib_per_s: f64,
    /// Mean latency, microseconds.
    pub lat_mean_us: f64,
    /// Median latency, microseconds.
    pub lat_p50_us: f64,
    /// 99th percentile latency, microseconds.
    pub lat_p99_us: f64,
    /// 99.9th percentile latency, microseconds.
    pub lat_p999_us: f64,
    /// Largest latency, microseconds.
    pub lat_max_us: f64,
}

/// Where the next request of a job goes.
struct Offsets {
    pattern: Pattern,
    blocks: u64,
    block_size: u64,
    next_seq: u64,
    rng: SmallRng,
}

impl Offsets {
    fn new(job: &Job, file_len: u64, seed: u64) -> Offsets {
        let block_size = job.block_size as u64;
        Offsets {
            pattern: job.pattern,
            blocks: file_len / block_size,
            block_size,
            next_seq: 0,
            rng: SmallRng::seed_from_u64(seed),
        }
    }

    fn next(&mut self) -> u64 {
        let block = match self.pattern {
            Pattern::Seqwrite => {
                let b = self.next_seq;
                self.next_seq = (b + 1) % self.blocks;
                b
            }
            _ => self.rng.random_range(0..self.blocks),
        };
        block * self.block_size
    }
}

/// Runs `job` on `file` for `runtime`.
pub(crate) fn run_job(
    dev: &FlashDevice,
    file: &FlashFile,
    job: Job,
    runtime: Duration,
    seed: u64,
    progress: &ProgressBar,
) -> anyhow::Result<JobResult> {
    let op = if job.pattern.writes() {
        IoOp::Write
    } else {
        IoOp::Read
    };
    let mut offsets = Offsets::new(&job, file.len(), seed);
    let qd = job.qd as usize;
    let mut pushed_at = vec![Instant::now(); qd];
    let mut hist = latency_histogram()?;
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x5eed);
    let mut q = dev.queue();
    for (tag, at) in pushed_at.iter_mut().enumerate() {
        let mut buf = AlignedBuf::new(job.block_size)?;
        rng.fill_bytes(&mut buf);
        *at = Instant::now();
        q.push(request(file, op, offsets.next(), buf, tag));
    }
    q.submit()?;
    let start = pushed_at.first().copied().unwrap_or_else(Instant::now);
    let deadline = start + runtime;
    let mut ios = 0u64;
    let mut last = start;
    let mut last_draw = start;
    let mut out = Vec::with_capacity(qd);
    while q.outstanding() > 0 {
        q.wait(1, &mut out)?;
        let now = Instant::now();
        for c in out.drain(..) {
            let tag = usize::try_from(c.request.tag)?;
            c.result
                .with_context(|| format!("{} at offset {}", job.pattern, c.request.offset))?;
            let t0 = pushed_at.get(tag).copied().unwrap_or(start);
            let ns = u64::try_from(now.duration_since(t0).as_nanos()).unwrap_or(u64::MAX);
            hist.saturating_record(ns.max(1));
            ios += 1;
            last = now;
            if now < deadline {
                if let Some(at) = pushed_at.get_mut(tag) {
                    *at = now;
                }
                let next = request(file, op, offsets.next(), c.request.buf, tag);
                q.push(next);
            }
        }
        if now.duration_since(last_draw) >= Duration::from_millis(100) {
            last_draw = now;
            progress.set_position(millis(now.duration_since(start)));
        }
    }
    progress.set_position(millis(runtime));
    Ok(summarize(job, ios, last.duration_since(start), &hist))
}

/// A histogram of 1 ns .. 1 h at 3 significant digits (values beyond are clamped).
fn latency_histogram() -> anyhow::Result<Histogram<u64>> {
    const HOUR_NS: u64 = 3_600 * 1_000_000_000;
    Histogram::new_with_bounds(1, HOUR_NS, 3).context("latency histogram")
}

fn request(file: &FlashFile, op: IoOp, offset: u64, buf: AlignedBuf, tag: usize) -> IoRequest {
    IoRequest {
        file: file.clone(),
        op,
        offset,
        buf,
        tag: tag as u64,
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Turns counts and the latency histogram (ns) into fio's units.
fn summarize(job: Job, ios: u64, elapsed: Duration, hist: &Histogram<u64>) -> JobResult {
    let seconds = elapsed.as_secs_f64().max(f64::MIN_POSITIVE);
    let us = |ns: u64| ns as f64 / 1000.0;
    let iops = ios as f64 / seconds;
    JobResult {
        job,
        ios,
        seconds,
        iops,
        mib_per_s: iops * job.block_size as f64 / f64::from(1u32 << 20),
        lat_mean_us: hist.mean() / 1000.0,
        lat_p50_us: us(hist.value_at_quantile(0.50)),
        lat_p99_us: us(hist.value_at_quantile(0.99)),
        lat_p999_us: us(hist.value_at_quantile(0.999)),
        lat_max_us: us(hist.max()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(pattern: Pattern, qd: u32) -> Job {
        Job {
            pattern,
            block_size: pattern.block_size(),
            qd,
        }
    }

    #[test]
    fn sequential_offsets_wrap_at_the_end_of_the_file() {
        let mut o = Offsets::new(&job(Pattern::Seqwrite, 1), 3 * (512 << 10), 1);
        let got: Vec<u64> = (0..5).map(|_| o.next()).collect();
        assert_eq!(got, [0, 524_288, 1_048_576, 0, 524_288]);
    }

    #[test]
    fn random_offsets_are_aligned_inside_the_file_and_seeded() {
        let len = 1 << 20;
        let mut a = Offsets::new(&job(Pattern::Randread, 1), len, 7);
        let mut b = Offsets::new(&job(Pattern::Randread, 1), len, 7);
        for _ in 0..1000 {
            let x = a.next();
            assert_eq!(x, b.next());
            assert!(x.is_multiple_of(4096) && x + 4096 <= len);
        }
    }

    #[test]
    fn summary_converts_to_fio_units() {
        let mut h = latency_histogram().unwrap();
        for _ in 0..99 {
            h.saturating_record(100_000); // 100 us
        }
        h.saturating_record(1_000_000); // 1 ms
        let r = summarize(job(Pattern::Randread, 1), 100, Duration::from_secs(2), &h);
        assert_eq!(r.iops, 50.0);
        assert!((r.mib_per_s - 50.0 * 4096.0 / 1_048_576.0).abs() < 1e-9);
        assert!((r.lat_mean_us - 109.0).abs() < 0.5, "{}", r.lat_mean_us);
        assert!((r.lat_p50_us - 100.0).abs() < 0.1);
        assert!((r.lat_max_us - 1000.0).abs() < 1.0);
    }
}
