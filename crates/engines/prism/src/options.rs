//! PRISM's options, parsed from the engine spec (`prism@queue_depth=1,read_batching=timeout`)
//! and [`Options`], with the paper's defaults (§7.1, §4.3, §5.1, §5.3, §7.6).
//!
//! | option | default | meaning |
//! |---|---|---|
//! | `pwb_count` | 16 | Persistent Write Buffers (writer threads map onto them by a thread-local id) |
//! | `pwb_size` | pool / 2 / `pwb_count`, 64 KiB..256 MiB | bytes per PWB ring |
//! | `pwb_watermark` | 0.5 | used fraction of a PWB that triggers its reclamation (§4.3) |
//! | `pwb_retain` | 0.25 | used fraction a watermark-triggered reclamation leaves in the PWB: only the oldest records move to flash, the newest stay readable on pmem (0: drain) |
//! | `chunk_size` | 512 KiB | Value Storage chunk (§5.1) |
//! | `queue_depth` | 64 | thread-combining limit: reads coalesced into one batch (§5.3) |
//! | `read_batching` | `combining` | `combining` (TC), `single` (batch size 1) or `timeout` (§7.6 "TA") |
//! | `batch_timeout_us` | 100 | how long timeout batching waits for more reads (§7.6) |
//! | `svc_size` | 3/4 of `Options::dram_budget` | Scan-aware Value Cache capacity (§4.4) |
//! | `block_aligned` | on | PWB reclamation starts a value that would cross a 4 KiB flash block at the next block instead (one block per point read, not two); `off` packs them |
//! | `scan_writeback` | on | write the scattered members of an evicted scan chain back together, in key order (§4.4); `off` to measure what it buys |
//! | `gc_threshold` | 0.1 | GC runs when free chunks fall below this fraction of a Value Storage (§5.2) |
//! | `recovery_threads` | available cores | threads walking key-index partitions at open (§5.5) |
//! | `reclaim_threads` | 2 | background threads reclaiming PWBs in parallel (§5.2) |
//!
//! `pwb_count`, `pwb_size` and `chunk_size` shape the media and are fixed when the store is
//! created (recorded in the superblock); on reopen they may be left out, and giving a
//! different value is an error.
//!
//! Thread safety: plain values.

use std::fmt;
use std::str::FromStr;

use tierkv_core::{ByteSize, EngineSpec, Error, Options, Result, Switch};

/// Paper default: PWB reclamation starts at 50% utilisation (§4.3).
pub const DEFAULT_PWB_WATERMARK: f64 = 0.5;
/// Reclamation moves the oldest records until this fraction of the PWB is left in use.
/// The paper moves "values in the PWB" without saying how many; keeping the newest
/// quarter makes the PWB a read cache of recent writes on pmem and absorbs their
/// overwrites (fewer flash reads and writes), at the cost of reclaiming twice as often.
pub const DEFAULT_PWB_RETAIN: f64 = 0.25;
/// Paper default: 512 KiB Value Storage chunks (§5.1).
pub const DEFAULT_CHUNK_SIZE: u64 = 512 << 10;
/// Paper default: coalesce up to 64 reads (§5.3, "queue depth of 64 as KVell").
pub const DEFAULT_QUEUE_DEPTH: u32 = 64;
/// Paper default: timeout batching waits 100 µs (§7.6).
pub const DEFAULT_BATCH_TIMEOUT_US: u32 = 100;
/// Default number of PWBs.
pub const DEFAULT_PWB_COUNT: u32 = 16;
/// Default GC trigger: free chunks below 10% of the device.
pub const DEFAULT_GC_THRESHOLD: f64 = 0.1;
/// Default number of reclaimer threads.
pub const DEFAULT_RECLAIM_THREADS: usize = 2;
/// Smallest PWB (a few records of the largest value must fit in half of it).
pub const MIN_PWB_SIZE: u64 = 16 << 10;
/// Smallest and largest chunk (the largest is what a packed value location can address,
/// `value_storage::location::MAX_CHUNK_SIZE`, FORMAT.md).
pub const CHUNK_SIZE_RANGE: (u64, u64) = (8 << 10, 1 << 20);

/// How reads from Value Storage are batched (§5.3, §7.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadBatching {
    /// Opportunistic thread combining (TC, the paper's design).
    Combining,
    /// One read per submission (batch size 1).
    Single,
    /// Timeout-based batching (the paper's "TA" baseline).
    Timeout,
}

impl FromStr for ReadBatching {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "combining" | "tc" => Ok(ReadBatching::Combining),
            "single" => Ok(ReadBatching::Single),
            "timeout" | "ta" => Ok(ReadBatching::Timeout),
            _ => Err(Error::invalid(format!(
                "read_batching {s:?}: expected combining, single or timeout"
            ))),
        }
    }
}

impl fmt::Display for ReadBatching {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ReadBatching::Combining => "combining",
            ReadBatching::Single => "single",
            ReadBatching::Timeout => "timeout",
        })
    }
}

/// A fraction strictly between 0 and 1, as an option value.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Fraction(f64);

impl FromStr for Fraction {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let f: f64 = s
            .parse()
            .map_err(|_| Error::invalid(format!("{s:?} is not a number")))?;
        Ok(Fraction(f))
    }
}

impl fmt::Display for Fraction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Every PRISM option, resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct PrismOptions {
    /// Number of PWBs, if given (else the default at creation, the superblock's on reopen).
    pub pwb_count: Option<u32>,
    /// Bytes per PWB, if given.
    pub pwb_size: Option<u64>,
    /// Reclamation watermark.
    pub pwb_watermark: f64,
    /// What a watermark-triggered reclamation leaves in the PWB (below the watermark).
    pub pwb_retain: f64,
    /// Value Storage chunk size, if given.
    pub chunk_size: Option<u64>,
    /// Thread-combining limit.
    pub queue_depth: u32,
    /// Read batching mode.
    pub read_batching: ReadBatching,
    /// Timeout batching wait, in microseconds.
    pub batch_timeout_us: u32,
    /// SVC capacity in bytes.
    pub svc_size: u64,
    /// Evicted scan chains are written back together (§4.4).
    pub scan_writeback: bool,
    /// PWB reclamation writes block-aligned chunks.
    pub block_aligned: bool,
    /// GC trigger (fraction of chunks free).
    pub gc_threshold: f64,
    /// Recovery threads.
    pub recovery_threads: usize,
    /// Reclaimer threads.
    pub reclaim_threads: usize,
}

impl PrismOptions {
    /// Parses the spec's parameters; rejects unknown or out-of-range ones.
    pub fn parse(spec: &EngineSpec, options: &Options) -> Result<PrismOptions> {
        let mut p = spec.params();
        let pwb_count = p.take_checked(
            "pwb_count",
            Opt(None),
            |v: &Opt<u32>| v.0.is_none_or(|n| (1..=1024).contains(&n)),
            "must be between 1 and 1024",
        )?;
        let pwb_size = p.take_checked(
            "pwb_size",
            Opt(None),
            |v: &Opt<ByteSize>| {
                v.0.is_none_or(|s| s.bytes() >= MIN_PWB_SIZE && s.bytes().is_multiple_of(4096))
            },
            "must be a multiple of 4 KiB and at least 16 KiB",
        )?;
        let watermark = p.take_checked(
            "pwb_watermark",
            Fraction(DEFAULT_PWB_WATERMARK),
            |f| f.0 > 0.0 && f.0 < 1.0,
            "must be strictly between 0 and 1",
        )?;
        let retain = p.take_checked(
            "pwb_retain",
            Fraction(DEFAULT_PWB_RETAIN.min(watermark.0 / 2.0)),
            |f| f.0 >= 0.0 && f.0 < 1.0,
            "must be at least 0 and below 1",
        )?;
        if retain.0 >= watermark.0 {
            return Err(Error::invalid(format!(
                "pwb_retain {} must be below pwb_watermark {}",
                retain.0, watermark.0
            )));
        }
        let chunk_size = p.take_checked(
            "chunk_size",
            Opt(None),
            |v: &Opt<ByteSize>| {
                v.0.is_none_or(|s| {
                    (CHUNK_SIZE_RANGE.0..=CHUNK_SIZE_RANGE.1).contains(&s.bytes())
                        && s.bytes().is_multiple_of(4096)
                })
            },
            "must be a multiple of 4 KiB between 8 KiB and 1 MiB",
        )?;
        let queue_depth = p.take_checked(
            "queue_depth",
            DEFAULT_QUEUE_DEPTH,
            |q| (1..=4096).contains(q),
            "must be between 1 and 4096",
        )?;
        let read_batching = p.take("read_batching", ReadBatching::Combining)?;
        let batch_timeout_us = p.take_checked(
            "batch_timeout_us",
            DEFAULT_BATCH_TIMEOUT_US,
            |t| (1..=1_000_000).contains(t),
            "must be between 1 and 1000000",
        )?;
        let svc_default = ByteSize(options.dram_budget.bytes() / 4 * 3);
        let svc_size = p.take("svc_size", svc_default)?;
        let scan_writeback = p.take("scan_writeback", Switch(true))?.0;
        let block_aligned = p.take("block_aligned", Switch(true))?.0;
        let gc_threshold = p.take_checked(
            "gc_threshold",
            Fraction(DEFAULT_GC_THRESHOLD),
            |f| f.0 > 0.0 && f.0 < 1.0,
            "must be strictly between 0 and 1",
        )?;
        let cores = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
        let recovery_threads = p.take_checked(
            "recovery_threads",
            cores,
            |n| (1..=256).contains(n),
            "must be between 1 and 256",
        )?;
        let reclaim_threads = p.take_checked(
            "reclaim_threads",
            DEFAULT_RECLAIM_THREADS,
            |n| (1..=64).contains(n),
            "must be between 1 and 64",
        )?;
        p.finish()?;
        Ok(PrismOptions {
            pwb_count: pwb_count.0,
            pwb_size: pwb_size.0.map(ByteSize::bytes),
            pwb_watermark: watermark.0,
            pwb_retain: retain.0,
            chunk_size: chunk_size.0.map(ByteSize::bytes),
            queue_depth,
            read_batching,
            batch_timeout_us,
            svc_size: svc_size.bytes(),
            scan_writeback,
            block_aligned,
            gc_threshold: gc_threshold.0,
            recovery_threads,
            reclaim_threads,
        })
    }

    /// When PWBs are reclaimed, and how much.
    pub fn reclaim_limits(&self) -> crate::pwb::ReclaimLimits {
        crate::pwb::ReclaimLimits {
            watermark: self.pwb_watermark,
            retain: self.pwb_retain,
        }
    }

    /// The PWB count to create a store with.
    pub fn pwb_count_or_default(&self) -> u32 {
        self.pwb_count.unwrap_or(DEFAULT_PWB_COUNT)
    }

    /// The PWB size to create a store with in a pool of `pool_len` bytes: the option, or a
    /// half of the pool shared by the PWBs (between 64 KiB and 256 MiB, 4 KiB multiple); the
    /// other half holds the key index and HSIT. (The paper provisions 16 GB of NVM for
    /// 100 GB of data, of which the index and HSIT of 100M keys take 5.4 GB, §7 "Size of NVM space": two
    /// thirds are write buffer. Values in a PWB are read from pmem, so a larger PWB also
    /// means fewer flash reads.)
    pub fn pwb_size_or_default(&self, pool_len: u64) -> u64 {
        self.pwb_size.unwrap_or_else(|| {
            let share = pool_len / 2 / u64::from(self.pwb_count_or_default());
            share.clamp(64 << 10, 256 << 20) / 4096 * 4096
        })
    }

    /// The chunk size to create a store with.
    pub fn chunk_size_or_default(&self) -> u64 {
        self.chunk_size.unwrap_or(DEFAULT_CHUNK_SIZE)
    }

    /// Checks the options that shape the media against what the store was created with.
    pub fn check_matches(&self, pwb_count: u32, pwb_size: u64, chunk_size: u64) -> Result<()> {
        let clash = |name: &str, given: u64, have: u64| {
            Err(Error::invalid(format!(
                "prism option {name}={given}: the store was created with {name}={have}, which \
                 cannot change"
            )))
        };
        match (self.pwb_count, self.pwb_size, self.chunk_size) {
            (Some(n), _, _) if n != pwb_count => clash("pwb_count", n.into(), pwb_count.into()),
            (_, Some(s), _) if s != pwb_size => clash("pwb_size", s, pwb_size),
            (_, _, Some(c)) if c != chunk_size => clash("chunk_size", c, chunk_size),
            _ => Ok(()),
        }
    }
}

/// An optional option value (so that "not given" differs from "given as the default").
#[derive(Clone, Copy, Debug, PartialEq)]
struct Opt<T>(Option<T>);

impl<T: FromStr> FromStr for Opt<T> {
    type Err = T::Err;
    fn from_str(s: &str) -> std::result::Result<Self, T::Err> {
        s.parse().map(|v| Opt(Some(v)))
    }
}

impl<T: fmt::Display> fmt::Display for Opt<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Some(v) => v.fmt(f),
            None => f.write_str("(default)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(spec: &str) -> Result<PrismOptions> {
        let s: EngineSpec = spec.parse().unwrap();
        PrismOptions::parse(&s, &Options::default().dram_budget(ByteSize::mib(128)))
    }

    #[test]
    fn defaults_are_the_papers() {
        let o = parse("prism").unwrap();
        assert_eq!(o.pwb_watermark, 0.5);
        assert_eq!(o.chunk_size_or_default(), 512 << 10);
        assert_eq!(o.queue_depth, 64);
        assert_eq!(o.read_batching, ReadBatching::Combining);
        assert_eq!(o.batch_timeout_us, 100);
        assert_eq!(o.svc_size, 96 << 20);
        assert!(o.scan_writeback);
        assert!(o.block_aligned);
        assert_eq!(o.pwb_count, None);
        assert_eq!(o.reclaim_threads, 2);
    }

    #[test]
    fn spec_parameters_override_defaults() {
        let o = parse(
            "prism@queue_depth=1,read_batching=timeout,pwb_size=64KiB,pwb_count=2,chunk_size=16KiB,svc_size=1MiB,pwb_watermark=0.25,scan_writeback=off,block_aligned=off",
        )
        .unwrap();
        assert_eq!(o.queue_depth, 1);
        assert_eq!(o.read_batching, ReadBatching::Timeout);
        assert_eq!(o.pwb_size, Some(64 << 10));
        assert_eq!(o.pwb_count, Some(2));
        assert_eq!(o.chunk_size, Some(16 << 10));
        assert_eq!(o.svc_size, 1 << 20);
        assert_eq!(o.pwb_watermark, 0.25);
        assert!(!o.scan_writeback);
        assert!(!o.block_aligned);
    }

    #[test]
    fn the_largest_chunk_size_is_what_a_value_location_addresses() {
        use crate::value_storage::location::MAX_CHUNK_SIZE;
        assert_eq!(CHUNK_SIZE_RANGE.1, u64::from(MAX_CHUNK_SIZE));
        assert_eq!(
            parse("prism@chunk_size=1MiB").unwrap().chunk_size,
            Some(1 << 20)
        );
    }

    #[test]
    fn bad_values_and_unknown_options_are_invalid_arguments() {
        for spec in [
            "prism@pwb_watermark=1",
            "prism@pwb_watermark=0",
            "prism@queue_depth=0",
            "prism@read_batching=fast",
            "prism@chunk_size=1000",
            "prism@chunk_size=2MiB",
            "prism@pwb_size=4KiB",
            "prism@pwb_count=0",
            "prism@bogus=1",
            "prism@scan_writeback=maybe",
        ] {
            assert!(
                matches!(parse(spec), Err(Error::InvalidArgument(_))),
                "{spec} was accepted"
            );
        }
    }

    #[test]
    fn default_pwb_size_is_half_of_the_pool_shared() {
        let o = parse("prism").unwrap();
        assert_eq!(o.pwb_size_or_default(1 << 30), 32 << 20);
        assert_eq!(o.pwb_size_or_default(8 << 20), 256 << 10);
        assert_eq!(o.pwb_size_or_default(4 << 20), 128 << 10);
        assert_eq!(o.pwb_size_or_default(2 << 20), 64 << 10);
        assert_eq!(o.pwb_size_or_default(1 << 40), 256 << 20);
    }

    #[test]
    fn shape_options_must_match_the_store_on_reopen() {
        let o = parse("prism@pwb_count=2").unwrap();
        assert!(o.check_matches(2, 1 << 20, 512 << 10).is_ok());
        assert!(o.check_matches(3, 1 << 20, 512 << 10).is_err());
        let none = parse("prism").unwrap();
        assert!(none.check_matches(9, 12345, 4096).is_ok());
    }
}
