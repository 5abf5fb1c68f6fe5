//! What a benchmark drives: [`BenchTarget`], implemented by [`tierkv::Db`] (every engine of
//! the registry, through the one `KvStore` API) and by the peers other stores are compared
//! through (RocksDB, behind the `rocksdb` feature: module `rocksdb`).
//!
//! A target is named on the command line by a [`TargetSpec`]: an engine spec string as
//! `Options` takes it (`dram:btree`, `prism@queue_depth=1`), or a peer's name (`rocksdb`,
//! `rocksdb@placement=pmem`: [`RocksPlacement`]).
//! The same string labels it in every report.
//!
//! Each target is opened in its own fresh directories ([`TargetPlacement`]) with the same
//! media settings ([`MediaSettings`]): the same DRAM budget, pmem pool and flash capacity.
//!
//! Thread safety: a `BenchTarget` is `Send + Sync` and called from every client thread at
//! once, as `KvStore` is.

#[cfg(feature = "rocksdb")]
pub mod rocksdb;
#[cfg(feature = "rocksdb")]
mod slow_pmem;

use std::path::PathBuf;
use std::sync::Arc;

use tierkv::core::schema::{Consolidated, Scattered};
use tierkv::{
    ByteSize, Db, DurabilityMode, EmulatedLatency, EngineSpec, Options, SchemaStore, Stats, Tier,
    WriteBatch,
};

use crate::schema::SchemaLayout;

/// The name of the RocksDB peer in `--engines`.
pub const ROCKSDB: &str = "rocksdb";

/// The operations a benchmark issues, and the counters it reads.
pub trait BenchTarget: Send + Sync {
    /// The value under `key`.
    fn get(&self, key: &[u8]) -> tierkv::Result<Option<Vec<u8>>>;
    /// Stores `value` under `key`; returns once acknowledged (durable under the target's
    /// durability settings).
    fn put(&self, key: &[u8], value: &[u8]) -> tierkv::Result<()>;
    /// Reads up to `limit` pairs from `start` in key order; returns how many it read.
    /// [`tierkv::Error::Unsupported`] when the target cannot scan.
    fn scan(&self, start: &[u8], limit: usize) -> tierkv::Result<usize>;
    /// Applies `batch` as one crash-atomic write, with the durability of [`BenchTarget::put`];
    /// [`tierkv::Error::Unsupported`] when the target has no atomic batches (the default).
    fn write_batch(&self, batch: &WriteBatch) -> tierkv::Result<()> {
        let _ = batch;
        Err(tierkv::Error::Unsupported(
            "this target has no crash-atomic write batches".to_owned(),
        ))
    }
    /// The field-level API over this target, holding rows as `layout` says (called once
    /// per run, before the load); [`tierkv::Error::Unsupported`] by default.
    fn schema_store(&self, layout: SchemaLayout) -> tierkv::Result<Arc<dyn SchemaStore>> {
        Err(tierkv::Error::Unsupported(format!(
            "this target has no schema API ({layout} layout)"
        )))
    }
    /// The target's counters now.
    fn stats(&self) -> Stats;
    /// Closes the target (joins its threads, makes everything durable).
    fn close(&self) -> tierkv::Result<()>;
}

impl BenchTarget for Db {
    fn get(&self, key: &[u8]) -> tierkv::Result<Option<Vec<u8>>> {
        Db::get(self, key)
    }
    fn put(&self, key: &[u8], value: &[u8]) -> tierkv::Result<()> {
        Db::put(self, key, value)
    }
    fn scan(&self, start: &[u8], limit: usize) -> tierkv::Result<usize> {
        Db::scan(self, start.., limit).map(|rows| rows.len())
    }
    fn write_batch(&self, batch: &WriteBatch) -> tierkv::Result<()> {
        Db::write(self, batch)
    }
    fn schema_store(&self, layout: SchemaLayout) -> tierkv::Result<Arc<dyn SchemaStore>> {
        Ok(match layout {
            SchemaLayout::Native => Db::schema_store(self)?,
            SchemaLayout::Consolidated => Arc::new(Consolidated::open(self.store())?),
            SchemaLayout::Scattered => Arc::new(Scattered::open(self.store())?),
        })
    }
    fn stats(&self) -> Stats {
        Db::stats(self)
    }
    fn close(&self) -> tierkv::Result<()> {
        Db::close(self)
    }
}

/// What a target is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetKind {
    /// An engine of this build's registry ([`tierkv::ENGINES`]).
    Engine(EngineSpec),
    /// The RocksDB peer, with its files placed as said.
    RocksDb(RocksPlacement),
}

/// Where the RocksDB peer keeps its files (`rocksdb@placement=...`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RocksPlacement {
    /// `tiered` (the default): the WAL and L0 on the pmem path, L1 and below on the flash
    /// path — the placement our three-tier engines are measured against.
    #[default]
    Tiered,
    /// `pmem`: the WAL and every level on the pmem path, nothing on flash — the baseline of
    /// the pmem-only papers (MioDB, FOCUS), whose RocksDB keeps all its data on NVM.
    Pmem,
}

impl RocksPlacement {
    /// Parses `rocksdb` or `rocksdb@placement=tiered|pmem`; `None` when `label` does not name
    /// the RocksDB peer at all.
    fn parse(label: &str) -> Option<Result<Self, String>> {
        let rest = label.strip_prefix(ROCKSDB)?;
        if rest.is_empty() {
            return Some(Ok(RocksPlacement::Tiered));
        }
        let params = rest.strip_prefix('@')?;
        let mut placement = RocksPlacement::Tiered;
        for p in params.split(',') {
            match p.split_once('=') {
                Some(("placement", "tiered")) => placement = RocksPlacement::Tiered,
                Some(("placement", "pmem")) => placement = RocksPlacement::Pmem,
                Some(("placement", other)) => {
                    return Some(Err(format!(
                        "rocksdb: unknown placement `{other}` (expected `tiered` or `pmem`)"
                    )));
                }
                _ => {
                    return Some(Err(format!(
                        "rocksdb: unknown option `{p}` (the peer takes `placement=tiered|pmem`)"
                    )));
                }
            }
        }
        Some(Ok(placement))
    }
}

/// A target as named on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetSpec {
    /// The string as given: the label of every report line.
    pub label: String,
    /// What it names.
    pub kind: TargetKind,
}

impl TargetSpec {
    /// Parses one target: a peer name or an engine spec of a registered engine with a valid
    /// variant (engine options are checked when it opens).
    pub fn parse(label: &str) -> Result<Self, String> {
        let label = label.trim();
        if let Some(placement) = RocksPlacement::parse(label) {
            let placement = placement?;
            if !cfg!(feature = "rocksdb") {
                return Err(
                    "the rocksdb peer is not in this build: build tierkv with `--features rocksdb` \
                     (it compiles RocksDB from source: clang and libclang-dev, ~11 minutes on 2 cores)"
                        .to_owned(),
                );
            }
            return Ok(TargetSpec {
                label: label.to_owned(),
                kind: TargetKind::RocksDb(placement),
            });
        }
        let spec: EngineSpec = label.parse().map_err(|e: tierkv::Error| e.to_string())?;
        let desc = tierkv::descriptor(&spec.name).map_err(|e| e.to_string())?;
        desc.variant(&spec).map_err(|e| e.to_string())?;
        Ok(TargetSpec {
            label: label.to_owned(),
            kind: TargetKind::Engine(spec),
        })
    }

    /// True when the target keeps data on `tier`.
    pub fn uses(&self, tier: Tier) -> bool {
        match &self.kind {
            TargetKind::Engine(spec) => {
                tierkv::descriptor(&spec.name).is_ok_and(|d| d.spec_uses(spec, tier))
            }
            TargetKind::RocksDb(RocksPlacement::Tiered) => matches!(tier, Tier::Pmem | Tier::Flash),
            TargetKind::RocksDb(RocksPlacement::Pmem) => tier == Tier::Pmem,
        }
    }

    /// One line for the report header: what it is and where it keeps data.
    pub fn describe(&self) -> String {
        match &self.kind {
            TargetKind::RocksDb(RocksPlacement::Tiered) => {
                "RocksDB peer: WAL and L0 on the pmem path, L1 and below on the flash path, \
                 direct I/O, every write synced"
                    .to_owned()
            }
            TargetKind::RocksDb(RocksPlacement::Pmem) => {
                "RocksDB peer: WAL and every level on the pmem path, nothing on flash, direct \
                 I/O, every write synced"
                    .to_owned()
            }
            TargetKind::Engine(spec) => match tierkv::descriptor(&spec.name) {
                Err(e) => e.to_string(),
                Ok(d) => {
                    let variant = d.variant(spec).unwrap_or_default();
                    let tiers: Vec<String> = d
                        .tiers_of(variant)
                        .iter()
                        .map(ToString::to_string)
                        .collect();
                    let tiers = if tiers.is_empty() {
                        "DRAM only".to_owned()
                    } else {
                        format!("DRAM + {}", tiers.join(" + "))
                    };
                    let volatile = if d.volatile {
                        "; VOLATILE: nothing survives the process"
                    } else {
                        ""
                    };
                    format!("{} ({tiers}{volatile})", d.summary)
                }
            },
        }
    }
}

/// Parses `--engines`: specs separated by commas. A piece of the form `key=value` without
/// `@` continues the previous spec's options, so `prism@a=1,b=2,dram` is two targets.
pub fn parse_targets(list: &str) -> Result<Vec<TargetSpec>, String> {
    let mut labels: Vec<String> = Vec::new();
    for piece in list.split(',').map(str::trim) {
        let continues_options = piece.contains('=') && !piece.contains('@');
        match labels.last_mut() {
            Some(prev) if continues_options && prev.contains('@') => {
                prev.push(',');
                prev.push_str(piece);
            }
            _ => labels.push(piece.to_owned()),
        }
    }
    labels.iter().map(|l| TargetSpec::parse(l)).collect()
}

/// Every engine of this build's registry, by name (the default of `--engines`).
pub fn default_targets() -> Vec<TargetSpec> {
    tierkv::ENGINES
        .iter()
        .map(|d| TargetSpec {
            label: d.name.to_owned(),
            kind: TargetKind::Engine(EngineSpec::named(d.name)),
        })
        .collect()
}

/// Where one target keeps its data (all fresh, all its own).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetPlacement {
    /// The data directory.
    pub data_dir: PathBuf,
    /// The directory of its pmem pool (or, for RocksDB, its WAL and L0 tables).
    pub pmem_dir: PathBuf,
    /// Its flash directory.
    pub flash_dir: PathBuf,
}

/// The media every target gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MediaSettings {
    /// DRAM budget (caches and buffers).
    pub dram: ByteSize,
    /// Pmem pool size (for RocksDB: the target size of the pmem path).
    pub pmem_size: ByteSize,
    /// Pmem durability mode.
    pub pmem_mode: DurabilityMode,
    /// Emulated pmem latency (off by default): of the engines' pools, and of the RocksDB
    /// peer's files on the pmem path (`slow_pmem`).
    pub pmem_latency: EmulatedLatency,
    /// Flash capacity.
    pub flash_size: ByteSize,
}

impl MediaSettings {
    /// The `Options` an engine is opened with.
    pub fn options(&self, spec: &EngineSpec, place: &TargetPlacement) -> Options {
        Options::default()
            .engine(&spec.to_string())
            .dram_budget(self.dram)
            .pmem_dir(&place.pmem_dir)
            .pmem_size(self.pmem_size)
            .pmem_mode(self.pmem_mode)
            .pmem_latency(self.pmem_latency)
            .flash_dir(&place.flash_dir)
            .flash_size(self.flash_size)
    }
}

/// Opens `spec` in `place` with `media`.
pub fn open_target(
    spec: &TargetSpec,
    place: &TargetPlacement,
    media: &MediaSettings,
) -> anyhow::Result<Box<dyn BenchTarget>> {
    use anyhow::Context as _;
    match &spec.kind {
        TargetKind::Engine(engine) => {
            if spec.uses(Tier::Pmem) {
                std::fs::create_dir_all(&place.pmem_dir).with_context(|| {
                    format!("creating pmem directory {}", place.pmem_dir.display())
                })?;
            }
            let db =
                Db::open(&place.data_dir, media.options(engine, place)).with_context(|| {
                    format!("opening {} in {}", spec.label, place.data_dir.display())
                })?;
            Ok(Box::new(db))
        }
        TargetKind::RocksDb(placement) => open_rocksdb(place, media, *placement),
    }
}

#[cfg(feature = "rocksdb")]
fn open_rocksdb(
    place: &TargetPlacement,
    media: &MediaSettings,
    placement: RocksPlacement,
) -> anyhow::Result<Box<dyn BenchTarget>> {
    Ok(Box::new(rocksdb::RocksDbPeer::open(
        place, media, placement,
    )?))
}

#[cfg(not(feature = "rocksdb"))]
fn open_rocksdb(
    _place: &TargetPlacement,
    _media: &MediaSettings,
    _placement: RocksPlacement,
) -> anyhow::Result<Box<dyn BenchTarget>> {
    anyhow::bail!("the rocksdb peer is not in this build (build with --features rocksdb)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_lists_split_on_commas_but_keep_spec_options_together() {
        let t = parse_targets("dram:btree,dram@x=1,y=2,dram:hash").unwrap();
        let labels: Vec<&str> = t.iter().map(|t| t.label.as_str()).collect();
        assert_eq!(labels, ["dram:btree", "dram@x=1,y=2", "dram:hash"]);
    }

    #[test]
    fn unknown_engines_and_variants_are_refused_before_anything_runs() {
        let e = parse_targets("dram,nosuchengine").unwrap_err();
        assert!(e.contains("unknown engine"), "{e}");
        let e = parse_targets("dram:nosuchvariant").unwrap_err();
        assert!(e.contains("no variant"), "{e}");
    }

    #[test]
    fn defaults_are_every_registered_engine() {
        let names: Vec<String> = default_targets().into_iter().map(|t| t.label).collect();
        let registry: Vec<&str> = tierkv::ENGINES.iter().map(|d| d.name).collect();
        assert_eq!(names, registry);
    }

    #[test]
    fn rocksdb_is_refused_with_a_rebuild_hint_when_not_built() {
        for (label, placement) in [
            (ROCKSDB, RocksPlacement::Tiered),
            ("rocksdb@placement=tiered", RocksPlacement::Tiered),
            ("rocksdb@placement=pmem", RocksPlacement::Pmem),
        ] {
            let r = TargetSpec::parse(label);
            if cfg!(feature = "rocksdb") {
                assert_eq!(r.unwrap().kind, TargetKind::RocksDb(placement));
            } else {
                assert!(r.unwrap_err().contains("--features rocksdb"), "{label}");
            }
        }
    }

    #[test]
    fn rocksdb_options_other_than_a_known_placement_are_refused() {
        let e = TargetSpec::parse("rocksdb@placement=flash").unwrap_err();
        assert!(e.contains("unknown placement `flash`"), "{e}");
        let e = TargetSpec::parse("rocksdb@cache=1").unwrap_err();
        assert!(e.contains("unknown option `cache=1`"), "{e}");
        // Not the peer: an engine name that merely starts with its name is an engine spec.
        let e = TargetSpec::parse("rocksdbx").unwrap_err();
        assert!(e.contains("unknown engine"), "{e}");
    }

    #[test]
    fn dram_engine_is_described_as_volatile() {
        let t = TargetSpec::parse("dram:btree").unwrap();
        assert!(t.describe().contains("VOLATILE"), "{}", t.describe());
        assert!(!t.uses(Tier::Pmem));
    }
}
