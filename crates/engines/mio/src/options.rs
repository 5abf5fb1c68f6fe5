//! MioDB's options, parsed from the engine spec (`mio@memtable=4MiB,levels=6`) and checked
//! before anything is opened. Defaults are the paper's (§5: 64 MB MemTables, 8 levels, a
//! level compacts at 2 tables, 16 bits per key), scaled down only where a small pool
//! could not hold them.
//!
//! | option | paper | default | meaning |
//! |---|---|---|---|
//! | `memtable` | 64 MB | 64 MiB, at most pool / 64 | MemTable size; a MemTable is full above it |
//! | `levels` | 8 | 8 | levels including the repository (L0 .. L(n-1) buffer, Ln repository) |
//! | `trigger` | 2 | 2 | a buffer level compacts when it holds this many tables |
//! | `bloom` | on | on | Bloom filters on buffer tables |
//! | `bloom_bits` | 16 | 16 | bits per key |
//! | `compaction` | zero-copy | `zero_copy` | `zero_copy` (relink, §4.3) or `copy` (merge buffer levels by copying into a new table: the baseline of the WA comparison) |
//! | `stall_timeout_ms` | - | 3000 | the longest a write waits for room while the background makes progress (`space.rs`; a wait for the previous MemTable's flush, which needs no room, is capped at 60 s instead) |
//! | `merge_share` | - | 50 | percent of the time a zero-copy merge runs while gets or puts are being served and its level holds fewer than twice `trigger` tables; it sleeps the rest, leaving the CPU to the foreground (with a backlog, or an idle foreground, it runs flat out). 100 never sleeps (measured in STATUS.md, 2026-11-28) |
//! | `progress_wait_ms` | - | 400 | a put waiting for room is refused with `NoSpace` once the background made no progress for this long (a delete waits up to `stall_timeout_ms`) |
//!
//! The SSD extension (`mio:flash`, §4.1, §5.4; `flash.rs`) adds, accepted only with that
//! variant (the authors' `ssd_extension` branch runs LevelDB's leveled compaction with 64 MB
//! tables; the rest are LevelDB's and RocksDB's defaults):
//!
//! | option | default | meaning |
//! |---|---|---|
//! | `sst_size` | flash capacity / 64, a power of two in 64 KiB ..= 64 MiB (64 MiB from 4 GiB up) | target bytes of a sorted table on flash |
//! | `flash_l0_trigger` | 4 | flash level 0 (one table per PMTable written out, overlapping) compacts into level 1 at this many tables |
//! | `flash_base` | 4 x `sst_size` (256 MiB with 64 MiB tables, RocksDB's) | bytes flash level 1 may hold; level i+1 holds `flash_ratio` times level i |
//! | `flash_ratio` | 10 | size ratio between flash levels |
//! | `flash_levels` | 7 | flash levels (F0 .. F6) |
//! | `block_cache` | DRAM budget − 2 MemTables − budget / 8 (at least budget / 4) | DRAM block cache for flash tables |
//!
//! Thread safety: plain data.

use tierkv_core::{ByteSize, EngineParams, Error, Result, Switch};

/// How levels are merged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compaction {
    /// Relink the newtable's nodes into the oldtable (§4.3).
    ZeroCopy,
    /// Copy the newest versions into a new table (the baseline of §5.3's WA figure).
    Copy,
}

/// Everything the engine is configured with.
#[derive(Clone, Debug, PartialEq)]
pub struct MioOptions {
    /// MemTable bytes (None: the default for the pool).
    pub memtable: Option<u64>,
    /// Levels including the repository (>= 2).
    pub levels: usize,
    /// Tables that make a buffer level compact.
    pub trigger: usize,
    /// Bloom filters on.
    pub bloom: bool,
    /// Bits per key.
    pub bloom_bits: u32,
    /// The compaction scheme.
    pub compaction: Compaction,
    /// Longest wait of a write for room (while the background makes progress), in
    /// milliseconds.
    pub stall_timeout_ms: u64,
    /// A write waiting for room is refused once no background progress was seen for this
    /// many milliseconds.
    pub progress_wait_ms: u64,
    /// Percent of the time a zero-copy merge without backlog runs while the foreground
    /// is busy (1 ..= 100).
    pub merge_share: u32,
    /// The SSD extension's shape: `Some` with the `flash` variant (set at open), or when a
    /// flash option was given (which the `pmem` variant then refuses).
    pub flash: Option<FlashShape>,
}

/// The shape of the flash repository (`mio:flash`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlashShape {
    /// Target bytes of a table (0 until [`FlashShape::resolve`]: from the device).
    pub sst_size: u64,
    /// Tables in flash level 0 that make it compact.
    pub l0_trigger: usize,
    /// Bytes flash level 1 may hold (0 until [`FlashShape::resolve`]: 4 tables).
    pub base: u64,
    /// Size ratio between flash levels.
    pub ratio: u64,
    /// Flash levels (level 0 included).
    pub levels: usize,
    /// Block cache bytes (None: set at open from the DRAM budget, `lib.rs`).
    pub block_cache: Option<u64>,
}

impl Default for FlashShape {
    fn default() -> Self {
        FlashShape {
            sst_size: 0,
            l0_trigger: 4,
            base: 0,
            ratio: 10,
            levels: 7,
            block_cache: None,
        }
    }
}

impl FlashShape {
    /// Fills in what the spec left to the device of `capacity` bytes: tables of a 64th of
    /// it (a power of two in 64 KiB ..= 64 MiB: the room rule keeps about nine tables free
    /// for compactions, `flash.rs` `compaction_headroom`, which 64 MiB tables on a small
    /// device would make most of it) and a level 1 of four tables.
    pub fn resolve(&mut self, capacity: u64) -> Result<()> {
        if self.sst_size == 0 {
            self.sst_size = (capacity / 64)
                .clamp(64 << 10, 64 << 20)
                .next_power_of_two()
                .min(64 << 20);
        }
        if self.base == 0 {
            self.base = 4 * self.sst_size;
        }
        if self.base < self.sst_size {
            return Err(Error::invalid(format!(
                "mio: flash_base={} must be at least sst_size={}",
                self.base, self.sst_size
            )));
        }
        Ok(())
    }

    /// Bytes flash level `level` (>= 1) may hold before it compacts into the next.
    pub fn level_limit(&self, level: usize) -> u64 {
        let mut limit = self.base;
        for _ in 1..level {
            limit = limit.saturating_mul(self.ratio);
        }
        limit
    }
}

/// The paper's MemTable size.
pub const DEFAULT_MEMTABLE: u64 = 64 << 20;
/// Smallest MemTable.
pub const MIN_MEMTABLE: u64 = 4 << 10;

impl Default for MioOptions {
    fn default() -> Self {
        MioOptions {
            memtable: None,
            levels: 8,
            trigger: 2,
            bloom: true,
            bloom_bits: 16,
            compaction: Compaction::ZeroCopy,
            stall_timeout_ms: 3_000,
            progress_wait_ms: 400,
            merge_share: 50,
            flash: None,
        }
    }
}

impl MioOptions {
    /// Parses the spec's parameters (rejecting unknown ones) and checks them.
    pub fn from_params(mut p: EngineParams) -> Result<MioOptions> {
        let d = MioOptions::default();
        let memtable: Option<ByteSize> = match p.take("memtable", String::new())? {
            s if s.is_empty() => None,
            s => Some(s.parse()?),
        };
        let compaction = match p.take("compaction", "zero_copy".to_owned())?.as_str() {
            "copy" => Compaction::Copy,
            "zero_copy" | "zero-copy" => Compaction::ZeroCopy,
            other => {
                return Err(Error::invalid(format!(
                    "mio: compaction={other}: expected zero_copy or copy"
                )));
            }
        };
        let fd = FlashShape::default();
        let given = [
            "sst_size",
            "flash_l0_trigger",
            "flash_base",
            "flash_ratio",
            "flash_levels",
            "block_cache",
        ]
        .iter()
        .any(|k| p.contains(k));
        let (p_sst_given, p_base_given) = (p.contains("sst_size"), p.contains("flash_base"));
        let flash = FlashShape {
            sst_size: p
                .take::<ByteSize>("sst_size", ByteSize(fd.sst_size))?
                .bytes(),
            l0_trigger: p.take_checked(
                "flash_l0_trigger",
                fd.l0_trigger,
                |t| (1..=64).contains(t),
                "must be 1 ..= 64",
            )?,
            base: p.take::<ByteSize>("flash_base", ByteSize(fd.base))?.bytes(),
            ratio: p.take_checked(
                "flash_ratio",
                fd.ratio,
                |r| (2..=100).contains(r),
                "must be 2 ..= 100",
            )?,
            levels: p.take_checked(
                "flash_levels",
                fd.levels,
                |l| (2..=16).contains(l),
                "must be 2 ..= 16",
            )?,
            block_cache: match p.take("block_cache", String::new())? {
                s if s.is_empty() => None,
                s => Some(s.parse::<ByteSize>()?.bytes()),
            },
        };
        if p_sst_given && flash.sst_size < 16 << 10 {
            return Err(Error::invalid(format!(
                "mio: sst_size={}: at least 16 KiB",
                flash.sst_size
            )));
        }
        if p_base_given && flash.base == 0 {
            return Err(Error::invalid("mio: flash_base=0: must be positive"));
        }
        let o = MioOptions {
            flash: given.then_some(flash),
            memtable: memtable.map(ByteSize::bytes),
            levels: p.take_checked(
                "levels",
                d.levels,
                |l| (2..=32).contains(l),
                "must be 2 ..= 32",
            )?,
            trigger: p.take_checked(
                "trigger",
                d.trigger,
                |t| (2..=64).contains(t),
                "must be 2 ..= 64",
            )?,
            bloom: p.take("bloom", Switch(d.bloom))?.0,
            bloom_bits: p.take_checked(
                "bloom_bits",
                d.bloom_bits,
                |b| (1..=64).contains(b),
                "must be 1 ..= 64",
            )?,
            compaction,
            stall_timeout_ms: p.take("stall_timeout_ms", d.stall_timeout_ms)?,
            progress_wait_ms: p.take("progress_wait_ms", d.progress_wait_ms)?,
            merge_share: p.take_checked(
                "merge_share",
                d.merge_share,
                |s| (1..=100).contains(s),
                "must be 1 ..= 100 (percent)",
            )?,
        };
        p.finish()?;
        if let Some(m) = o.memtable
            && m < MIN_MEMTABLE
        {
            return Err(Error::invalid(format!(
                "mio: memtable={m}: at least {MIN_MEMTABLE} bytes"
            )));
        }
        Ok(o)
    }

    /// The MemTable size for a pool whose allocator holds `capacity` bytes: the paper's
    /// 64 MB, at most a 64th of the pool. About six MemTable-sized runs are held at any
    /// time (the active MemTable's log and flush target, an immutable one's, and the spare
    /// pair kept for deletes on a full pool), so a 16th took ~37% of a small pool and racing
    /// writers saw writes refused at 9.5% of a 16 MiB pool live (stress space seed 3364); a
    /// 64th keeps that under 10% (17-20% live at refusal).
    pub fn memtable_for(&self, capacity: u64) -> u64 {
        self.memtable
            .unwrap_or_else(|| DEFAULT_MEMTABLE.min(capacity / 64).max(MIN_MEMTABLE))
    }

    /// The allocator chunk size for a pool of `pool_len` bytes: pool / 256, a power of
    /// two in 4 KiB ..= 1 MiB.
    pub fn chunk_size_for(pool_len: u64) -> u64 {
        (pool_len / 256)
            .clamp(4 << 10, 1 << 20)
            .next_power_of_two()
            .min(1 << 20)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tierkv_core::EngineSpec;

    fn parse(s: &str) -> Result<MioOptions> {
        MioOptions::from_params(s.parse::<EngineSpec>()?.params())
    }

    #[test]
    fn defaults_and_overrides() {
        let d = parse("mio").unwrap();
        assert_eq!(d, MioOptions::default());
        assert_eq!(d.memtable_for(1 << 40), DEFAULT_MEMTABLE);
        assert_eq!(d.memtable_for(4 << 20), 64 << 10);
        assert_eq!(d.memtable_for(16 << 20), 256 << 10);
        let o = parse("mio@memtable=16KiB,levels=4,trigger=3,bloom=off,bloom_bits=10").unwrap();
        assert_eq!(
            (o.memtable, o.levels, o.trigger, o.bloom, o.bloom_bits),
            (Some(16 << 10), 4, 3, false, 10)
        );
    }

    #[test]
    fn flash_tables_follow_the_device_unless_given() {
        let shape = |spec: &str, capacity: u64| {
            let mut f = parse(spec).unwrap().flash.unwrap_or_default();
            f.resolve(capacity).map(|()| (f.sst_size, f.base))
        };
        assert_eq!(shape("mio", 16 << 20).unwrap(), (256 << 10, 1 << 20));
        assert_eq!(shape("mio", 4 << 30).unwrap(), (64 << 20, 256 << 20));
        assert_eq!(shape("mio", 1 << 40).unwrap(), (64 << 20, 256 << 20));
        assert_eq!(shape("mio", 1 << 20).unwrap(), (64 << 10, 256 << 10));
        assert_eq!(
            shape("mio@sst_size=1MiB", 16 << 20).unwrap(),
            (1 << 20, 4 << 20)
        );
        assert_eq!(
            shape("mio@flash_base=8MiB", 16 << 20).unwrap(),
            (256 << 10, 8 << 20)
        );
        assert!(shape("mio@sst_size=4MiB,flash_base=1MiB", 16 << 20).is_err());
        assert!(parse("mio@sst_size=8KiB").is_err());
        assert!(parse("mio@flash_ratio=1").is_err());
        assert!(parse("mio@flash_levels=1").is_err());
        assert!(parse("mio@flash_l0_trigger=0").is_err());
    }

    #[test]
    fn bad_options_are_refused() {
        for bad in [
            "mio@levels=1",
            "mio@trigger=1",
            "mio@memtable=1KiB",
            "mio@typo=1",
            "mio@compaction=magic",
            "mio@bloom_bits=0",
            "mio@merge_share=0",
            "mio@merge_share=101",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse("mio@compaction=copy").unwrap().compaction,
            Compaction::Copy
        );
        assert_eq!(MioOptions::chunk_size_for(4 << 20), 16 << 10);
        assert_eq!(MioOptions::chunk_size_for(1 << 34), 1 << 20);
    }
}
