//! `space` mode (issue 23, "A stress mode for space"; DESIGN §4, failure 4: a device full):
//! what a store does when its tiers run out of room, and whether it comes back.
//!
//! Each round, on the real data directory (pools and flash sized small, so that filling
//! takes seconds):
//! 1. **fill**: the workload's threads put values of mixed sizes (with gets and scans
//!    checking reads as in every mode, racing writers with `--writers-per-key`) until
//!    `2 * threads + 8` writes were refused with `NoSpace`. A refused write stays *in
//!    flight* (its value may or may not be there, whole), but the value it would have
//!    replaced must survive. Any other error, a panic, or a fill that has not reached
//!    its refusals within `--fill-time` fails the run; so does a write slower than
//!    `--write-bound`.
//! 2. **verify** every key (gets and a full scan); the bytes live then, as a share of the
//!    capacity (pmem plus flash where the engine uses it), must reach `--min-full`.
//! 3. **delete** `--delete-share` of the live keys: on a full store every delete must
//!    succeed (an engine that needs room to record a delete must have reserved it).
//! 4. **verify**, then **write again**: new keys until they hold `--refill` of the freed
//!    bytes; a refused one is retried (backing off up to 100 ms) for up to `--gc-wait` —
//!    the engine's GC may need that long to reclaim what the deletes freed — and fails
//!    the run after that.
//! 5. **verify**, close, **reopen** (timed, a recovery), verify and resolve the in-flight
//!    writes to what was found.
//! 6. In `--kill-fraction` of the rounds, then: close, and run one round of kill mode on
//!    the store (a child process writes with refusals allowed — the store is back near
//!    full — and is SIGKILLed at a random moment; the parent reopens and verifies).
//!
//! A worker that stops making progress for `--write-bound` plus `--gc-wait` plus 5 s is a
//! hang: the report is printed with the failure and the process exits (a stuck thread
//! cannot be stopped).
//!
//! Files: this one drives the rounds (and sizes the run); `space/round.rs` is one round's
//! phases; `space/watch.rs` the hang watchdog.
//!
//! Thread safety: runs on the caller's thread plus scoped worker threads per phase.

mod round;
mod watch;

use anyhow::{Context, bail};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv::{Db, DurabilityMode, Tier};

use self::round::Round;
use super::kill::{self, KillPaths};
use super::{RunConfig, remove_path};
use crate::expected_state::KEY_LEN;
use crate::report::RunReport;
use crate::target::{Target, TierConfig};
use crate::value_codec::ValueSizes;

/// Checks that the pool mode makes sense for space mode.
pub fn check_engine(cfg: &RunConfig) -> anyhow::Result<()> {
    if matches!(
        cfg.pmem_mode,
        Some(DurabilityMode::Dax | DurabilityMode::Tracked)
    ) {
        bail!(
            "space mode runs the pool in msync or volatile mode (for power loss use kill \
             mode with --pmem-mode tracked)"
        );
    }
    Ok(())
}

/// The capacity fills are measured against: the pool, plus flash where the engine uses it.
pub fn capacity(target: &Target, tiers: &TierConfig) -> u64 {
    let pmem = if target.uses(Tier::Pmem) {
        tiers.pmem_size.bytes()
    } else {
        0
    };
    let flash = if target.uses(Tier::Flash) {
        tiers.flash_size.bytes()
    } else {
        0
    };
    pmem + flash
}

/// Space mode's default key space: enough keys of the mean size to hold twice the capacity
/// (so that fills end in refusals, not in a key space all written), at least 1000.
pub fn default_keys(target: &Target, tiers: &TierConfig, sizes: &ValueSizes) -> u32 {
    let per_key = sizes.mean_len() + KEY_LEN as f64;
    let n = 2.0 * capacity(target, tiers) as f64 / per_key;
    n.clamp(1000.0, 2_000_000.0) as u32
}

/// Runs space mode.
pub fn run(cfg: &RunConfig, report: &mut RunReport) -> anyhow::Result<()> {
    let paths = KillPaths::new(cfg);
    for d in [&paths.data, &paths.pmem_dir] {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    report.space.capacity = capacity(&cfg.target, &cfg.tiers);
    let state = cfg.new_state();
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let mut open: Option<Db> = None;
    let mut round = 0u64;
    let mut r = Round {
        cfg,
        paths: &paths,
        state: &state,
        round: 0,
    };
    while cfg.budget.more(round) {
        round += 1;
        r.round = round;
        let db = match open.take() {
            Some(db) => db,
            None => match r.open(report, None) {
                Some(db) => db,
                None => return Ok(()),
            },
        };
        // NOTE: drawn before the round, whose own draws depend on how full the store got
        // (a thread schedule), so that a seed decides which rounds end in a kill.
        let kill = rng.random_bool(cfg.space_mode.kill_fraction);
        let mut round_rng = ChaCha8Rng::seed_from_u64(rng.random());
        let Some(db) = r.run(db, &mut round_rng, report)? else {
            return Ok(());
        };
        if kill {
            close(db, round, report);
            if !report.passed() || !kill::kill_round(cfg, &state, round, &mut rng, report)? {
                return Ok(());
            }
            report.space.kills += 1;
        } else {
            report.rounds += 1;
            open = Some(db);
        }
    }
    if let Some(db) = open {
        close(db, round, report);
    }
    if report.passed() {
        if cfg.tiers.pmem_dir.is_some() {
            remove_path(&paths.pmem_dir)?;
        }
        if cfg.tiers.flash_dir.is_some() {
            remove_path(&paths.flash)?;
        }
    }
    Ok(())
}

/// Closes the store; an error is a failure of the round.
fn close(db: Db, round: u64, report: &mut RunReport) {
    if let Err(e) = db.close() {
        report.fail(format!("round {round}: closing the store: {e}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tierkv::{ByteSize, IoBackend};

    fn tiers(pmem: u64, flash: u64) -> TierConfig {
        TierConfig {
            pmem_dir: None,
            pmem_size: ByteSize(pmem),
            flash_dir: None,
            flash_size: ByteSize(flash),
            io_backend: IoBackend::Auto,
        }
    }

    #[test]
    fn the_key_space_holds_twice_the_capacity_of_the_tiers_used() {
        let sizes = ValueSizes::default();
        let prism = Target::resolve("prism").unwrap();
        let hetermm = Target::resolve("hetermm").unwrap();
        let t = tiers(16 << 20, 64 << 20);
        assert_eq!(capacity(&prism, &t), 80 << 20);
        assert_eq!(capacity(&hetermm, &t), 16 << 20);
        let keys = default_keys(&hetermm, &t, &sizes);
        let per_key = sizes.mean_len() + KEY_LEN as f64;
        let held = f64::from(keys) * per_key;
        assert!(
            (held / f64::from(32u32 << 20) - 1.0).abs() < 0.01,
            "{keys} keys"
        );
        assert!(default_keys(&prism, &t, &sizes) > 4 * keys);
        assert_eq!(default_keys(&hetermm, &tiers(1, 0), &sizes), 1000);
    }
}
