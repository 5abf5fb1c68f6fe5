//! # tierkv-ycsb: the benchmark harness behind `tierkv bench`
//!
//! YCSB's core workloads (Load, A-F) against every tierkv engine and the peers it is
//! compared with, on the same generated workload, with HDR latency histograms, the engines'
//! counters as deltas over the measured phase, and three reports: a table, JSON and an SVG
//! chart (DESIGN §6, issue 4).
//!
//! | module | what |
//! |---|---|
//! | [`generator`] | YCSB's zipfian, scrambled zipfian, skewed-latest, uniform and counter generators |
//! | [`keys`], [`values`] | YCSB keys (`"user"` + FNV hash; 8-byte binary), values and field records |
//! | [`workload`] | workloads as named mixes; per-thread operation streams; the shared key space |
//! | [`histogram`] | latency histograms per operation kind |
//! | [`peer`] | [`BenchTarget`]: `tierkv::Db` and the RocksDB peer (feature `rocksdb`) |
//! | [`runner`] | client threads, warm-up, measured phase, counters |
//! | [`plan`] | where each target's data goes, and running every target in turn |
//! | [`report`] | header, table, JSON, SVG chart |
//! | [`cli`] | [`BenchArgs`] (the flags) and [`run`] |
//!
//! ```no_run
//! use clap::Parser;
//! #[derive(Parser)]
//! struct Cli {
//!     #[command(flatten)]
//!     bench: tierkv_ycsb::BenchArgs,
//! }
//! fn main() -> anyhow::Result<()> {
//!     tierkv_ycsb::run(&Cli::parse().bench)
//! }
//! ```
//!
//! Thread safety: [`run`] blocks its caller and owns every thread it starts; all are joined
//! before it returns.

#![deny(unsafe_code)]

pub mod cli;
pub mod generator;
pub mod histogram;
pub mod keys;
pub mod peer;
pub mod plan;
pub mod report;
pub mod runner;
pub mod schema;
pub mod values;
pub mod workload;

pub use cli::{BenchArgs, run, run_with};
pub use peer::BenchTarget;
