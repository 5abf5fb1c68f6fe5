//! `pmem-image` mode (issue 5, item 3; DESIGN §4, failure 2): in-process, on a Tracked pool
//! injected through `Options::media`. At a random moment of each round, while the workers
//! run, a crash image of the pool is taken — each 64-byte line its persisted or its live
//! content, or (in `--tear-fraction` of the images) each aligned 8-byte word chosen
//! independently — and a fresh engine recovers on it (with the MANIFEST and the flash
//! directory's crash state copied beside it), then every key is verified. Many images per
//! run: one per round, each recovered store carrying the next round.
//!
//! The round machinery is in `power.rs`; this module is the policy: how each image is cut.
//! Engines without a pmem tier are refused (the mode has nothing to take an image of).
//!
//! Thread safety: runs on the caller's thread.

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use tierkv::Tier;
use tierkv::core::media::flash::CrashMode;

use super::RunConfig;
use super::power::{self, CutPlan, Policy};
use crate::report::RunReport;

struct ImagePolicy {
    tear_fraction: f64,
}

impl Policy for ImagePolicy {
    fn plan(&mut self, rng: &mut ChaCha8Rng) -> CutPlan {
        let tear_words = rng.random_bool(self.tear_fraction.clamp(0.0, 1.0));
        let image_seed = rng.random();
        // Whatever the engine keeps on flash is cut too, with its unsynced writes lost
        // (whole or torn at 4 KiB).
        let flash = if rng.random_bool(0.5) {
            CrashMode::DropUnsynced
        } else {
            CrashMode::TearUnsynced { seed: rng.random() }
        };
        CutPlan {
            image_seed,
            tear_words,
            flash,
        }
    }
}

/// Checks that the engine has something for this mode to work on.
pub fn check_engine(cfg: &RunConfig) -> anyhow::Result<()> {
    power::check_in_process_mode(
        cfg,
        "pmem-image",
        Tier::Pmem,
        "keeps nothing on pmem, so pmem-image mode has no pool to take crash images of; use --mode kill or --mode flash-faults",
    )
}

/// Runs the mode.
pub fn run(cfg: &RunConfig, report: &mut RunReport) -> anyhow::Result<()> {
    check_engine(cfg)?;
    power::run_rounds(
        cfg,
        report,
        &mut ImagePolicy {
            tear_fraction: cfg.tear_fraction,
        },
    )
}
