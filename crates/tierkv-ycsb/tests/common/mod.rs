//! Shared by the integration tests: the flags of a tiny real run whose every directory is
//! inside a temporary directory.

#![allow(dead_code)]

use std::path::Path;

use tierkv_ycsb::BenchArgs;
use tierkv_ycsb::keys::KeyFormat;
use tierkv_ycsb::runner::RunSettings;
use tierkv_ycsb::runner::phase::Quota;
use tierkv_ycsb::values::ValueShape;

/// A run of every default workload over `engines` small enough for a debug build: 2 000
/// records and 2 000 operations per workload, 2 threads, pmem and data under `tmp`.
pub fn tiny_args(tmp: &Path, engines: &str) -> BenchArgs {
    BenchArgs {
        engines: Some(engines.to_owned()),
        records: 2_000,
        ops: Some(2_000),
        threads: Some(2),
        value_size: Some(tierkv::ByteSize(256)),
        dir: tmp.join("data"),
        pmem_path: Some(tmp.join("pmem")),
        ..BenchArgs::defaults()
    }
}

/// Runner settings for a hand-made target: `records` records, `ops` operations per
/// workload, 2 threads, 16-byte values, seed 1, no crash, no settling.
pub fn runner_settings(records: u64, ops: Option<u64>) -> RunSettings {
    RunSettings {
        records,
        quota: Quota { ops, time: None },
        warmup: Quota::NONE,
        threads: 2,
        distribution: None,
        keys: KeyFormat::default(),
        values: ValueShape::Bytes(16),
        schema: None,
        seed: 1,
        crash_after_load: false,
        settle_load: None,
    }
}
