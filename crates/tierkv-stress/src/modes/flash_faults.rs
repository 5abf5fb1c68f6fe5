//! `flash-faults` mode (issue 5, item 3; DESIGN §4, failures 3 and 4): in-process, on flash
//! devices opened with a fault injector (LevelDB's fault-injection env, RocksDB's fault
//! injection file system).
//! - At each power cut, every write not yet synced is dropped whole or torn at 4 KiB
//!   granularity, and files created since the last directory sync vanish; a pool, if the
//!   engine has one, is cut too (a line-level crash image).
//! - In `--fault-fraction` of the rounds, the n-th write or sync from the start of the
//!   round (n random) fails with EIO or ENOSPC — whether the engine is writing for a
//!   client or in the background (reclamation, GC, compaction, flushing). The engine must
//!   report the error; the harness then verifies the live store as it stands (it must still
//!   be consistent: nothing acknowledged lost), then either cuts the power or closes the
//!   store cleanly, and reopens it (it must reopen and lose nothing acknowledged).
//!
//! The round machinery is in `power.rs`; this module is the policy. Engines without a flash
//! tier are refused (the mode has nothing to inject faults into).
//!
//! Thread safety: runs on the caller's thread.

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use tierkv::Tier;
use tierkv::core::media::flash::{CrashMode, InjectedFaults};

use super::RunConfig;
use super::power::{self, CutPlan, LiveStore, Policy};
use crate::report::RunReport;

/// The n-th write or sync that fails is drawn from 1..=this.
const MAX_FAULT_DISTANCE: u64 = 64;

struct FaultPolicy {
    fault_fraction: f64,
    armed_at: Option<InjectedFaults>,
    injected: u64,
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

    fn arm(&mut self, rng: &mut ChaCha8Rng, live: &LiveStore) -> Option<String> {
        self.armed_at = None;
        let inj = live.injector.as_ref()?;
        inj.clear_failures();
        if !rng.random_bool(self.fault_fraction.clamp(0.0, 1.0)) {
            return None;
        }
        let n = rng.random_range(1..=MAX_FAULT_DISTANCE);
        let (errno, name) = if rng.random_bool(0.5) {
            (libc::EIO, "EIO")
        } else {
            (libc::ENOSPC, "ENOSPC")
        };
        let what = if rng.random_bool(0.5) {
            inj.fail_nth_write(n, errno);
            "write"
        } else {
            inj.fail_nth_sync(n, errno);
            "sync"
        };
        self.armed_at = Some(inj.injected());
        Some(format!("{name} injected into flash {what} #{n}"))
    }

    fn error_was_injected(&mut self, live: &LiveStore) -> bool {
        self.fired(live) > 0
    }

    fn settle(&mut self, live: &LiveStore) {
        self.injected += self.fired(live);
        self.armed_at = None;
    }
}

impl FaultPolicy {
    /// Faults injected since the switch was armed.
    fn fired(&self, live: &LiveStore) -> u64 {
        match (self.armed_at, live.injector.as_ref()) {
            (Some(before), Some(inj)) => failures(&inj.injected()) - failures(&before),
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
        armed_at: None,
        injected: 0,
    };
    let r = power::run_rounds(cfg, report, &mut policy);
    report.faults_injected += policy.injected;
    r
}
