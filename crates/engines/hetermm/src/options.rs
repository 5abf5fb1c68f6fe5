//! HeterMM's options, parsed from the engine spec (`hetermm:hash@page_bits=12,oplog=off`)
//! and checked before anything is opened. Defaults follow the paper where our machines
//! allow it (SampleFreq = 100, 50% reorganisation threshold, freePages = 2^(m-k)); the page
//! and block sizes are scaled down (see `page_bits`, `block_bits`).
//!
//! | option | paper | default | meaning |
//! |---|---|---|---|
//! | `page_bits` (k) | 20 | 15 | DRAM pages are 2^k bytes; a record (24 + key + value, rounded to 8) must fit one page |
//! | `block_bits` (m) | 30 | 21 (less in small pools) | pmem blocks are 2^m bytes; fixed when the store is created; every flushed block (and every `flush()`) takes a block number, and a store has min(2^48, 2^(63-m)) of them: using them up means writing 8 EiB to pmem (FORMAT.md § Counters) |
//! | `free_pages` | 2^(m-k) | 2^(m-k) | the flusher starts when fewer DRAM pages are free |
//! | `overlap_blocks` | - | 1 | blocks kept read-only in DRAM before they are persisted (the overlap region) |
//! | `oplog` | on | on | the operation log; `off` trades durability of writes still in DRAM for speed |
//! | `read_cache` | on | on | the sampled-FIFO read cache (§5.1) |
//! | `sample_freq` | 100 | 100 | one in this many pmem reads is admitted to the cache |
//! | `reorg_threshold` | 0.5 | 0.5 | a block more invalid than this is reorganised |
//! | `recovery_threads` | 16 | cores | threads of the parallel recovery |
//! | `log_blocks` | - | auto | live log blocks before the oldest is compressed (§5.3.1) |
//! | `durable_reads` | - | on | a get that finds a DRAM version whose log entry is not durable yet waits for it (FORMAT.md § Readers and in-flight puts); `off` returns it at once, as the paper does — a crash may then take back a value a reader returned |
//! | `two_step_write` | on | off | log entries in the paper's two steps (§5.3.2: the entry with ts = 0, persisted; the ts, persisted); `off`: one persist of the whole entry, whose checksum covers its ts (`format::log` § Commit) — half the persists per write |
//! | `group_commit` | - | on | concurrent writers' log persists are grouped where it pays (emulated persist latency; tracked mode; `groupsync.rs`); `off`: each writer persists its own |
//!
//! Why smaller pages and blocks: with k = 20 and m = 30 one block is 1 GiB, so a 1 GiB pool
//! would hold a single block and nothing could be reorganised; and every client thread owns
//! a page (Algorithm 2), which the alarm may abandon half-used, so 1 MiB pages waste
//! megabytes per thread. 32 KiB pages and 2 MiB blocks keep 64 pages per block (the paper
//! has 1024), waste little, fit hundreds of blocks in a 1 GiB pool, and still allow values
//! up to about 32 KiB (raise `page_bits` for larger values).
//!
//! Thread safety: plain data.

use std::str::FromStr;

use tierkv_core::{EngineParams, Error, Result, Switch};

use crate::format::block::prefix_len;

/// Smallest k.
pub const MIN_PAGE_BITS: u32 = 12;
/// Largest k.
pub const MAX_PAGE_BITS: u32 = 24;
/// Smallest m.
pub const MIN_BLOCK_BITS: u32 = 14;
/// Largest m.
pub const MAX_BLOCK_BITS: u32 = 30;
/// Default k.
pub const DEFAULT_PAGE_BITS: u32 = 15;
/// Default m.
pub const DEFAULT_BLOCK_BITS: u32 = 21;
/// Default SampleFreq (§5.1).
pub const DEFAULT_SAMPLE_FREQ: u32 = 100;
/// Blocks a pool should hold at least when m is chosen for it.
pub const BLOCKS_PER_POOL: u64 = 32;
/// Default reorganisation threshold (§5.2).
pub const DEFAULT_REORG_THRESHOLD: f64 = 0.5;

/// Everything the engine is configured with.
#[derive(Clone, Debug, PartialEq)]
pub struct HeterOptions {
    /// k.
    pub page_bits: u32,
    /// m, if the spec sets it (a reopened store keeps the m it was created with).
    pub block_bits: Option<u32>,
    /// freePages; `None` = 2^(m-k).
    pub free_pages: Option<u64>,
    /// Blocks in the overlap region.
    pub overlap_blocks: u64,
    /// Operation log on.
    pub oplog: bool,
    /// Read cache on.
    pub read_cache: bool,
    /// SampleFreq.
    pub sample_freq: u32,
    /// Invalid fraction above which a block is reorganised.
    pub reorg_threshold: f64,
    /// Recovery threads (0 = one per core).
    pub recovery_threads: usize,
    /// Live log blocks before compression (0 = derived from the DRAM and pool sizes).
    pub log_blocks: u64,
    /// Log persists of concurrent writers grouped (`groupsync.rs`).
    pub group_commit: bool,
    /// Log entries written in the paper's two steps (§5.3.2) instead of one persist.
    pub two_step_write: bool,
    /// Gets wait for a DRAM version's log entry to be durable (`mem/access.rs`).
    pub durable_reads: bool,
    /// DRAM for pages and the read cache (from `Options::dram_budget`).
    pub dram_budget: u64,
    /// Logical block numbers the store may use (0 = all the block table holds). Not an
    /// engine-spec option: tests lower it to run out of block numbers in a short run.
    pub max_blocks: u64,
}

impl Default for HeterOptions {
    fn default() -> Self {
        HeterOptions {
            page_bits: DEFAULT_PAGE_BITS,
            block_bits: None,
            free_pages: None,
            overlap_blocks: 1,
            oplog: true,
            read_cache: true,
            sample_freq: DEFAULT_SAMPLE_FREQ,
            reorg_threshold: DEFAULT_REORG_THRESHOLD,
            recovery_threads: 0,
            log_blocks: 0,
            group_commit: true,
            two_step_write: false,
            durable_reads: true,
            max_blocks: 0,
            dram_budget: 256 << 20,
        }
    }
}

/// Takes an option that has no default value of its own.
fn take_opt<T>(p: &mut EngineParams, key: &str) -> Result<Option<T>>
where
    T: FromStr,
    T::Err: std::fmt::Display,
{
    let raw: String = p.take(key, String::new())?;
    if raw.is_empty() {
        return Ok(None);
    }
    raw.parse()
        .map(Some)
        .map_err(|e| Error::invalid(format!("option {key}={raw}: {e}")))
}

impl HeterOptions {
    /// Parses the spec's parameters (rejecting unknown ones) and checks them.
    pub fn from_params(mut p: EngineParams, dram_budget: u64) -> Result<HeterOptions> {
        let d = HeterOptions::default();
        let o = HeterOptions {
            page_bits: p.take("page_bits", d.page_bits)?,
            block_bits: take_opt(&mut p, "block_bits")?,
            free_pages: take_opt(&mut p, "free_pages")?,
            overlap_blocks: p.take("overlap_blocks", d.overlap_blocks)?,
            oplog: p.take("oplog", Switch(d.oplog))?.0,
            read_cache: p.take("read_cache", Switch(d.read_cache))?.0,
            sample_freq: p.take("sample_freq", d.sample_freq)?,
            reorg_threshold: p.take("reorg_threshold", d.reorg_threshold)?,
            recovery_threads: p.take("recovery_threads", d.recovery_threads)?,
            log_blocks: p.take("log_blocks", d.log_blocks)?,
            group_commit: p.take("group_commit", Switch(d.group_commit))?.0,
            two_step_write: p.take("two_step_write", Switch(d.two_step_write))?.0,
            durable_reads: p.take("durable_reads", Switch(d.durable_reads))?.0,
            max_blocks: d.max_blocks,
            dram_budget,
        };
        p.finish()?;
        o.validate()?;
        Ok(o)
    }

    /// m for a new store in a pool whose allocator region holds `capacity` bytes: the one
    /// given, or the largest m from k + 1 up to [`DEFAULT_BLOCK_BITS`] for which the region
    /// holds at least [`BLOCKS_PER_POOL`] blocks (so that small pools still work).
    pub fn block_bits_for(&self, capacity: u64) -> u32 {
        if let Some(m) = self.block_bits {
            return m;
        }
        let k = self.page_bits;
        (k + 1..=DEFAULT_BLOCK_BITS.max(k + 1))
            .rev()
            .find(|m| capacity >= BLOCKS_PER_POOL << m)
            .unwrap_or(k + 1)
    }

    /// Checks ranges and the relations between the options (m, when it is not given, is
    /// chosen valid for k and checked again once it is known).
    pub fn validate(&self) -> Result<()> {
        let range = |what: &str, v: String, req: &str| {
            Err(Error::invalid(format!("hetermm option {what}={v}: {req}")))
        };
        if !(MIN_PAGE_BITS..=MAX_PAGE_BITS).contains(&self.page_bits) {
            return range("page_bits", self.page_bits.to_string(), "must be 12..=24");
        }
        if self.sample_freq == 0 {
            return range("sample_freq", "0".into(), "must be at least 1");
        }
        if !(self.reorg_threshold > 0.0 && self.reorg_threshold < 1.0) {
            return range(
                "reorg_threshold",
                self.reorg_threshold.to_string(),
                "must be between 0 and 1 (exclusive)",
            );
        }
        if self.overlap_blocks == 0 {
            return range("overlap_blocks", "0".into(), "must be at least 1");
        }
        if self.free_pages == Some(0) {
            return range("free_pages", "0".into(), "must be at least 1");
        }
        match self.block_bits {
            Some(m) => self.check_geometry(m),
            None => Ok(()),
        }
    }

    /// Checks k against the store's m: 2^(m-k) pages per block, and a block's header and
    /// invalid bitmap fit in half a page.
    pub fn check_geometry(&self, block_bits: u32) -> Result<()> {
        let k = self.page_bits;
        if !(MIN_BLOCK_BITS..=MAX_BLOCK_BITS).contains(&block_bits) || block_bits <= k {
            return Err(Error::invalid(format!(
                "hetermm block_bits={block_bits} must be 14..=30 and larger than page_bits={k}"
            )));
        }
        if prefix_len(block_bits) > (1 << k) / 2 {
            return Err(Error::invalid(format!(
                "hetermm block_bits={block_bits} is too large for page_bits={k}: a block's \
                 header and invalid bitmap ({} bytes) must fit in half a page (raise page_bits \
                 or lower block_bits; block_bits <= page_bits + 7)",
                prefix_len(block_bits)
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tierkv_core::EngineSpec;

    fn parse(spec: &str) -> Result<HeterOptions> {
        let s: EngineSpec = spec.parse()?;
        HeterOptions::from_params(s.params(), 1 << 20)
    }

    #[test]
    fn defaults_follow_the_paper_where_they_can() {
        let o = parse("hetermm").unwrap();
        assert_eq!(o.sample_freq, 100);
        assert_eq!(o.reorg_threshold, 0.5);
        assert!(o.oplog && o.read_cache && o.group_commit && o.durable_reads);
        assert!(!o.two_step_write);
        assert_eq!((o.page_bits, o.block_bits_for(1 << 30)), (15, 21));
        let o = parse("hetermm@group_commit=off,durable_reads=off,two_step_write=on").unwrap();
        assert!(!o.group_commit && !o.durable_reads && o.two_step_write);
        assert_eq!(o.block_bits, None);
    }

    #[test]
    fn options_parse_from_the_spec() {
        let o =
            parse("hetermm:hash@page_bits=12,block_bits=15,oplog=off,read_cache=off,sample_freq=7")
                .unwrap();
        assert_eq!(
            (
                o.page_bits,
                o.block_bits,
                o.oplog,
                o.read_cache,
                o.sample_freq
            ),
            (12, Some(15), false, false, 7)
        );
    }

    #[test]
    fn blocks_shrink_to_fit_small_pools_unless_given() {
        let o = parse("hetermm").unwrap();
        assert_eq!(o.block_bits_for(1 << 30), 21);
        assert_eq!(o.block_bits_for((4 << 20) - (12 << 10)), 16, "a 4 MiB pool");
        assert_eq!(o.block_bits_for(4 << 20), 17);
        assert_eq!(o.block_bits_for(1 << 20), 16, "never below k + 1");
        assert_eq!(
            parse("hetermm@block_bits=18")
                .unwrap()
                .block_bits_for(4 << 20),
            18
        );
        assert_eq!(
            parse("hetermm@page_bits=24")
                .unwrap()
                .block_bits_for(1 << 40),
            25
        );
    }

    #[test]
    fn bad_options_are_invalid_arguments() {
        for bad in [
            "hetermm@page_bits=30",
            "hetermm@page_bits=12,block_bits=12",
            "hetermm@page_bits=12,block_bits=20",
            "hetermm@sample_freq=0",
            "hetermm@reorg_threshold=1.5",
            "hetermm@oplog=maybe",
            "hetermm@overlap_blocks=0",
            "hetermm@free_pages=0",
            "hetermm@no_such_option=1",
        ] {
            assert!(
                matches!(parse(bad), Err(Error::InvalidArgument(_))),
                "{bad} accepted"
            );
        }
    }
}
