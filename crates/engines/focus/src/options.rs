//! FOCUS's options, parsed from the engine spec (`focus@restore_point=8,swim=off`) and
//! checked before anything is opened.
//!
//! | option | paper | default | meaning |
//! |---|---|---|---|
//! | `chunk_size` | unspecified | pool / 64, 64 KiB..1 MiB | bytes of a CLog/DLog chunk (§V-A); fixed at creation; a value or row must fit one |
//! | `log_shards` | - | 4 | pairs of open CLog/DLog chunks; writer threads map onto them by a thread id, each pair appends under its own lock |
//! | `restore_point` | 5 (§V-B) | 5 | deltas a chain may hold; the next update of the row rewrites it whole (a restore point) |
//! | `swim` | on | on | `off`: every update rewrites the whole record in the CLog (the ablation of §VI-C) |
//! | `merge` | on (Alg. 1) | `cacheline` | `cacheline`: the in-place merge persists each dirty line once; `naive`: one persist per field; `off`: no merge |
//! | `seacache` | on | on | SeaCache (§V-C): hot rows in DRAM, found through the index |
//! | `seacache_size` | 500 MB (§VI-A) | `Options::dram_budget` | bytes of cache pages (the paper's 500 MB is 5% of its 10 GB of rows; the global index is DRAM outside the budget, as the paper leaves its memory out) |
//! | `cache_page_size` | - | 64 KiB | bytes per cache page; rows over half a page are not cached |
//! | `hit_threshold` | 0.5 (§VI-A) | 0.5 | a schema whose hit ratio exceeds it has every missed row admitted |
//! | `cache_lifetime_ms` | - (formula lost) | 1000 | base idle lifetime of a cached row (see `seacache.rs`) |
//! | `evict_target` | 80% (§V-C3) | 0.8 | use (rows, in pages' worth) eviction brings the pool down to |
//! | `cache_doorkeeper` | - (ours) | on | admit a missed row only when it was asked for before within a recent window (TinyLFU's doorkeeper; see `seacache.rs`) |
//! | `cache_sightings` | - (ours) | 2 | how many times before: a missed row is queued for admission once it was asked for this many times within the doorkeeper's window (1..=7) |
//! | `gc_threshold` | - | 0.25 | GC collects chunks while fewer than this fraction of the region's chunks are free |
//!
//! Plain key-value pairs (schema 0) are not cached.
//!
//! Thread safety: plain values.

use tierkv_core::{ByteSize, EngineParams, Error, Result, Switch};

/// Largest default chunk size.
pub const DEFAULT_CHUNK_SIZE: u64 = 1 << 20;
/// Smallest default chunk size (values up to about 60 KiB fit).
pub const MIN_DEFAULT_CHUNK_SIZE: u64 = 64 << 10;
/// Default GC threshold.
pub const DEFAULT_GC_THRESHOLD: f64 = 0.25;
/// Smallest and largest chunk size.
pub const CHUNK_SIZE_RANGE: (u64, u64) = (16 << 10, 64 << 20);
/// The paper's restore point: "a threshold, typically set at 5" (§V-B).
pub const DEFAULT_RESTORE_POINT: u32 = 5;
/// Default pairs of open chunks.
pub const DEFAULT_LOG_SHARDS: usize = 4;

/// Everything the engine is configured with.
#[derive(Clone, Debug, PartialEq)]
pub struct FocusOptions {
    /// Bytes per chunk, if the spec sets it (a reopened store keeps its own).
    pub chunk_size: Option<u64>,
    /// Pairs of open CLog/DLog chunks.
    pub log_shards: usize,
    /// Deltas a chain may hold before an update writes a restore point.
    pub restore_point: u32,
    /// swim on (deltas) or off (whole-record updates).
    pub swim: bool,
    /// Free fraction of chunks below which GC runs.
    pub gc_threshold: f64,
    /// How the in-place merge persists (or whether it runs).
    pub merge: crate::merge::MergeMode,
    /// SeaCache on.
    pub seacache: bool,
    /// SeaCache's pages and policy.
    pub cache: crate::seacache::CacheConfig,
}

impl Default for FocusOptions {
    fn default() -> Self {
        FocusOptions {
            chunk_size: None,
            log_shards: DEFAULT_LOG_SHARDS,
            restore_point: DEFAULT_RESTORE_POINT,
            swim: true,
            gc_threshold: DEFAULT_GC_THRESHOLD,
            merge: crate::merge::MergeMode::Cacheline,
            seacache: true,
            cache: crate::seacache::CacheConfig {
                size: 128 << 20,
                page_size: 64 << 10,
                hit_threshold: 0.5,
                lifetime_ms: 1000,
                evict_target: 0.8,
                doorkeeper: true,
                sightings: crate::seacache::DEFAULT_SIGHTINGS,
            },
        }
    }
}

impl FocusOptions {
    /// Parses the spec's parameters (rejecting unknown ones) and checks them.
    pub fn from_params(mut p: EngineParams, dram_budget: u64) -> Result<FocusOptions> {
        let d = FocusOptions::default();
        let o = FocusOptions {
            chunk_size: match p.take("chunk_size", ByteSize(0))?.bytes() {
                0 => None,
                n => Some(n),
            },
            log_shards: p.take("log_shards", d.log_shards)?,
            restore_point: p.take("restore_point", d.restore_point)?,
            swim: p.take("swim", Switch(d.swim))?.0,
            gc_threshold: p.take("gc_threshold", d.gc_threshold)?,
            merge: match p.take("merge", "cacheline".to_string())?.as_str() {
                "cacheline" => crate::merge::MergeMode::Cacheline,
                "naive" => crate::merge::MergeMode::Naive,
                "off" => crate::merge::MergeMode::Off,
                other => {
                    return Err(Error::invalid(format!(
                        "focus merge={other}: cacheline, naive or off"
                    )));
                }
            },
            seacache: p.take("seacache", Switch(d.seacache))?.0,
            cache: crate::seacache::CacheConfig {
                size: p.take("seacache_size", ByteSize(dram_budget))?.bytes(),
                page_size: p
                    .take("cache_page_size", ByteSize(d.cache.page_size))?
                    .bytes(),
                hit_threshold: p.take("hit_threshold", d.cache.hit_threshold)?,
                lifetime_ms: p.take("cache_lifetime_ms", d.cache.lifetime_ms)?,
                evict_target: p.take("evict_target", d.cache.evict_target)?,
                doorkeeper: p.take("cache_doorkeeper", Switch(d.cache.doorkeeper))?.0,
                sightings: p.take("cache_sightings", d.cache.sightings)?,
            },
        };
        p.finish()?;
        o.validate()?;
        Ok(o)
    }

    /// The chunk size of a new store in a pool of `pool_len` bytes: the one given, or
    /// 1/64 of the pool rounded down to a power of two, within 64 KiB ..= 1 MiB.
    pub fn chunk_size_for(&self, pool_len: u64) -> u64 {
        self.chunk_size.unwrap_or_else(|| {
            let c = (pool_len / 64).max(1);
            (1u64 << (63 - c.leading_zeros())).clamp(MIN_DEFAULT_CHUNK_SIZE, DEFAULT_CHUNK_SIZE)
        })
    }

    /// Checks ranges.
    pub fn validate(&self) -> Result<()> {
        let (lo, hi) = CHUNK_SIZE_RANGE;
        if let Some(c) = self.chunk_size
            && (!c.is_power_of_two() || !(lo..=hi).contains(&c))
        {
            return Err(Error::invalid(format!(
                "focus chunk_size {c} must be a power of two in {lo}..={hi}"
            )));
        }
        let c = &self.cache;
        if c.page_size < 4096 || c.page_size > (16 << 20) || c.size < c.page_size && self.seacache {
            return Err(Error::invalid(
                "focus cache_page_size must be 4 KiB..16 MiB and seacache_size at least one page",
            ));
        }
        if !(0.0..=1.0).contains(&c.hit_threshold) || !(0.0..1.0).contains(&c.evict_target) {
            return Err(Error::invalid(
                "focus hit_threshold must be in 0..=1 and evict_target in 0..1",
            ));
        }
        if !(1..=crate::seacache::MAX_SIGHTINGS).contains(&c.sightings) {
            return Err(Error::invalid(format!(
                "focus cache_sightings must be in 1..={}",
                crate::seacache::MAX_SIGHTINGS
            )));
        }
        if !(0.0..=0.9).contains(&self.gc_threshold) {
            return Err(Error::invalid("focus gc_threshold must be in 0..=0.9"));
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
        FocusOptions::from_params(spec.params(), 256 << 20)
    }

    #[test]
    fn options_parse_defaults_and_reject_bad_values() {
        let mut d = FocusOptions::default();
        d.cache.size = 256 << 20;
        assert_eq!(
            parse("focus").ok(),
            Some(d),
            "the cache takes the DRAM budget"
        );
        let o = parse("focus@restore_point=8,swim=off,chunk_size=64KiB").unwrap_or_default();
        assert_eq!(
            (o.restore_point, o.swim, o.chunk_size),
            (8, false, Some(64 << 10))
        );
        let d = FocusOptions::default();
        assert_eq!(d.chunk_size_for(4 << 20), 64 << 10);
        assert_eq!(d.chunk_size_for(40 << 20), 512 << 10);
        assert_eq!(d.chunk_size_for(1 << 40), 1 << 20);
        for bad in [
            "focus@restore_point=0",
            "focus@chunk_size=3000",
            "focus@nope=1",
            "focus@log_shards=0",
            "focus@gc_threshold=2",
            "focus@merge=fast",
            "focus@hit_threshold=2",
            "focus@cache_page_size=100",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
