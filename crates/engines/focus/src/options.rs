//! FOCUS's options, parsed from the engine spec (`focus@restore_point=8,swim=off`) and
//! checked before anything is opened.
//!
//! | option | paper | default | meaning |
//! |---|---|---|---|
//! | `chunk_size` | unspecified | 1 MiB | bytes of a CLog/DLog chunk (§V-A); fixed at creation |
//! | `log_shards` | - | 4 | pairs of open CLog/DLog chunks; writer threads map onto them by a thread id, each pair appends under its own lock |
//! | `restore_point` | 5 (§V-B) | 5 | deltas a chain may hold; the next update of the row rewrites it whole (a restore point) |
//! | `swim` | on | on | `off`: every update rewrites the whole record in the CLog (the ablation of §VI-C) |
//!
//! Not yet offered (FORMAT.md § Not yet implemented): the in-place merge, SeaCache and GC.
//!
//! Thread safety: plain values.

use tierkv_core::{ByteSize, EngineParams, Error, Result, Switch};

/// Default chunk size.
pub const DEFAULT_CHUNK_SIZE: u64 = 1 << 20;
/// Smallest and largest chunk size.
pub const CHUNK_SIZE_RANGE: (u64, u64) = (16 << 10, 64 << 20);
/// The paper's restore point: "a threshold, typically set at 5" (§V-B).
pub const DEFAULT_RESTORE_POINT: u32 = 5;
/// Default pairs of open chunks.
pub const DEFAULT_LOG_SHARDS: usize = 4;

/// Everything the engine is configured with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FocusOptions {
    /// Bytes per chunk (a new store; a reopened one keeps its own).
    pub chunk_size: u64,
    /// Pairs of open CLog/DLog chunks.
    pub log_shards: usize,
    /// Deltas a chain may hold before an update writes a restore point.
    pub restore_point: u32,
    /// swim on (deltas) or off (whole-record updates).
    pub swim: bool,
}

impl Default for FocusOptions {
    fn default() -> Self {
        FocusOptions {
            chunk_size: DEFAULT_CHUNK_SIZE,
            log_shards: DEFAULT_LOG_SHARDS,
            restore_point: DEFAULT_RESTORE_POINT,
            swim: true,
        }
    }
}

impl FocusOptions {
    /// Parses the spec's parameters (rejecting unknown ones) and checks them.
    pub fn from_params(mut p: EngineParams) -> Result<FocusOptions> {
        let d = FocusOptions::default();
        let o = FocusOptions {
            chunk_size: p.take("chunk_size", ByteSize(d.chunk_size))?.bytes(),
            log_shards: p.take("log_shards", d.log_shards)?,
            restore_point: p.take("restore_point", d.restore_point)?,
            swim: p.take("swim", Switch(d.swim))?.0,
        };
        p.finish()?;
        o.validate()?;
        Ok(o)
    }

    /// Checks ranges.
    pub fn validate(&self) -> Result<()> {
        let (lo, hi) = CHUNK_SIZE_RANGE;
        if !self.chunk_size.is_power_of_two() || !(lo..=hi).contains(&self.chunk_size) {
            return Err(Error::invalid(format!(
                "focus chunk_size {} must be a power of two in {lo}..={hi}",
                self.chunk_size
            )));
        }
        if !(1..=64).contains(&self.log_shards) {
            return Err(Error::invalid("focus log_shards must be in 1..=64"));
        }
        if !(1..=1000).contains(&self.restore_point) {
            return Err(Error::invalid("focus restore_point must be in 1..=1000"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tierkv_core::EngineSpec;

    fn parse(s: &str) -> Result<FocusOptions> {
        let spec: EngineSpec = s.parse()?;
        FocusOptions::from_params(spec.params())
    }

    #[test]
    fn options_parse_defaults_and_reject_bad_values() {
        assert_eq!(parse("focus").ok(), Some(FocusOptions::default()));
        let o = parse("focus@restore_point=8,swim=off,chunk_size=64KiB").unwrap_or_default();
        assert_eq!(
            (o.restore_point, o.swim, o.chunk_size),
            (8, false, 64 << 10)
        );
        for bad in [
            "focus@restore_point=0",
            "focus@chunk_size=3000",
            "focus@nope=1",
            "focus@log_shards=0",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
