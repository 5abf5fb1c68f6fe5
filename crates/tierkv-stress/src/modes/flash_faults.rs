//! `flash-faults` mode (issue 5, item 3; DESIGN §4, failures 3 and 4): in-process, on flash
//! devices opened with a fault injector (LevelDB's fault-injection env, RocksDB's fault
//! injection file system).
//! - At each power cut, every write not yet synced is dropped whole or torn at 4 KiB
//!   granularity, and files created since the last directory sync vanish; a pool, if the
//!   engine has one, is cut too (a line-level crash image).
//! - In `--fault-fraction` of the rounds, the n-th write or sync from the start of the
//!   round fails; n is drawn uniformly from the writes (or syncs) the engine is expected to
//!   issue before the round's power cut, estimated from the rate it issued them in earlier
//!   rounds (an engine that writes to flash rarely, such as one that buffers megabytes in
//!   pmem first, would otherwise see its faults armed beyond the end of every round). The
//!   fault with EIO or ENOSPC — whether the engine is writing for a
//!   client or in the background (reclamation, GC, compaction, flushing). The engine must
//!   report the error; the harness then verifies the live store as it stands (it must still
//!   be consistent: nothing acknowledged lost), then either cuts the power or closes the
//!   store cleanly, and reopens it (it must reopen and lose nothing acknowledged).
//!
//! The round machinery is in `power.rs`; this module is the policy. Engines without a flash
//! tier are refused (the mode has nothing to inject faults into), and a run in which the
//! engine issued no flash write or sync at all (everything fitted in its pmem pool) fails
//! with advice instead of passing having tested nothing.
//!
//! Thread safety: runs on the caller's thread.

use std::time::{Duration, Instant};

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use tierkv::Tier;
use tierkv::core::media::flash::{CrashMode, InjectedFaults, IoSeen};

use super::RunConfig;
use super::power::{self, CutPlan, LiveStore, Policy};
use crate::report::RunReport;

/// Before any rate is known, the n-th write or sync that fails is drawn from 1..=this.
const FIRST_FAULT_DISTANCE: u64 = 64;

/// Where the injector stood when this round's switch was armed.
#[derive(Clone, Copy)]
struct Armed {
    faults: InjectedFaults,
    seen: IoSeen,
    at: Instant,
}

/// Operations per second an engine issues to flash, smoothed over the rounds seen so far.
#[derive(Clone, Copy, Default)]
struct IoRate {
    writes: Option<f64>,
    syncs: Option<f64>,
}

impl IoRate {
    fn observe(&mut self, writes: u64, syncs: u64, elapsed: Duration) {
        let secs = elapsed.as_secs_f64();
        if secs < 1e-3 {
            return;
        }
        let smooth = |old: Option<f64>, new: f64| Some(old.map_or(new, |o| 0.5 * o + 0.5 * new));
        self.writes = smooth(self.writes, writes as f64 / secs);
        self.syncs = smooth(self.syncs, syncs as f64 / secs);
    }

    /// How far ahead to arm a fault in operations issued at `rate` for `delay`: uniform over
    /// the operations expected before the cut (at least the first).
    fn distance(rate: Option<f64>, delay: Duration, rng: &mut ChaCha8Rng) -> u64 {
        let expected = match rate {
            None => FIRST_FAULT_DISTANCE,
            Some(r) => (r * delay.as_secs_f64()).floor().max(1.0) as u64,
        };
        rng.random_range(1..=expected)
    }
}

struct FaultPolicy {
    fault_fraction: f64,
    armed: Option<Armed>,
    rate: IoRate,
    injected: u64,
    /// Flash writes and syncs the engine issued over the run (in armed rounds).
    flash_ops: u64,
}

fn failures(f: &InjectedFaults) -> u64 {
    f.writes_failed + f.syncs_failed + f.reads_failed
}

impl Policy for FaultPolicy {
    fn plan(&mut self, rng: &mut ChaCha8Rng) -> CutPlan {
        let flash = if rng.random_bool(0.5) {
            CrashMode::DropUnsynced
        } else {
            CrashMode::TearUnsynced { seed: rng.random() }
        };
        CutPlan {
            image_seed: rng.random(),
            tear_words: false,
            flash,
        }
    }

    fn arm(&mut self, rng: &mut ChaCha8Rng, live: &LiveStore, delay: Duration) -> Option<String> {
        self.armed = None;
        let inj = live.injector.as_ref()?;
        inj.clear_failures();
        self.armed = Some(Armed {
            faults: inj.injected(),
            seen: inj.seen(),
            at: Instant::now(),
        });
        if !rng.random_bool(self.fault_fraction.clamp(0.0, 1.0)) {
            return None;
        }
        let (errno, name) = if rng.random_bool(0.5) {
            (libc::EIO, "EIO")
        } else {
            (libc::ENOSPC, "ENOSPC")
        };
        // An engine that never syncs in a round gets its fault in a write, and vice versa.
        let expected = |rate: Option<f64>| rate.is_none_or(|r| r * delay.as_secs_f64() >= 1.0);
        let fail_write = match (expected(self.rate.writes), expected(self.rate.syncs)) {
            (true, false) => true,
            (false, true) => false,
            _ => rng.random_bool(0.5),
        };
        let what = if fail_write {
            let n = IoRate::distance(self.rate.writes, delay, rng);
            inj.fail_nth_write(n, errno);
            format!("write #{n}")
        } else {
            let n = IoRate::distance(self.rate.syncs, delay, rng);
            inj.fail_nth_sync(n, errno);
            format!("sync #{n}")
        };
        Some(format!("{name} injected into flash {what}"))
    }

    fn error_was_injected(&mut self, live: &LiveStore) -> bool {
        self.fired(live) > 0
    }

    fn settle(&mut self, live: &LiveStore) {
        self.injected += self.fired(live);
        if let (Some(armed), Some(inj)) = (self.armed, live.injector.as_ref()) {
            let seen = inj.seen();
            self.flash_ops += (seen.writes - armed.seen.writes) + (seen.syncs - armed.seen.syncs);
            self.rate.observe(
                seen.writes - armed.seen.writes,
                seen.syncs - armed.seen.syncs,
                armed.at.elapsed(),
            );
        }
        self.armed = None;
    }
}

impl FaultPolicy {
    /// Faults injected since the switch was armed.
    fn fired(&self, live: &LiveStore) -> u64 {
        match (self.armed, live.injector.as_ref()) {
            (Some(armed), Some(inj)) => failures(&inj.injected()) - failures(&armed.faults),
            _ => 0,
        }
    }
}

/// Checks that the engine has something for this mode to work on.
pub fn check_engine(cfg: &RunConfig) -> anyhow::Result<()> {
    power::check_in_process_mode(
        cfg,
        "flash-faults",
        Tier::Flash,
        "writes nothing to flash, so flash-faults mode has no writes to drop and no I/O to fail; use --mode kill or --mode pmem-image",
    )
}

/// Runs the mode.
pub fn run(cfg: &RunConfig, report: &mut RunReport) -> anyhow::Result<()> {
    check_engine(cfg)?;
    let mut policy = FaultPolicy {
        fault_fraction: cfg.fault_fraction,
        armed: None,
        rate: IoRate::default(),
        injected: 0,
        flash_ops: 0,
    };
    let r = power::run_rounds(cfg, report, &mut policy);
    report.faults_injected += policy.injected;
    r?;
    // A run in which the engine never touched flash tested nothing this mode is for: say so
    // rather than pass (an engine that keeps everything in a large pool, e.g. prismdb with
    // the default 64 MiB pool and 1000 keys).
    if policy.flash_ops == 0 {
        anyhow::bail!(
            "the engine issued no flash write or sync in {} rounds, so no fault could be injected: \
             give it less pmem (--pmem-size) or more data (--keys, --value-size) so that it reaches flash",
            report.rounds
        );
    }
    Ok(())
}
