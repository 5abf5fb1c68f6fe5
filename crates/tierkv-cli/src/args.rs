//! Command-line arguments (clap).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use tierkv::{ByteSize, DurabilityMode};

/// tierkv: a crash-consistent key-value store for DRAM + persistent memory + flash.
#[derive(Parser, Debug)]
#[command(name = "tierkv", version, about, long_about = None, after_help = EXIT_CODES)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

const EXIT_CODES: &str = "Exit codes: 0 success, 1 error, 2 usage error, 3 key not found (get).";

/// Where the store is and how to open it.
#[derive(Args, Debug, Clone)]
pub struct StoreArgs {
    /// The data directory.
    #[arg(long, default_value = "tierkv-data", value_name = "DIR")]
    pub dir: PathBuf,
    /// Engine spec (`dram`, `dram:hash`, ...; see `tierkv engines`). Used when `put` creates
    /// the store; for an existing store it must match the manifest.
    #[arg(long, value_name = "SPEC")]
    pub engine: Option<String>,
    /// Options file (TOML, the `Options` struct); flags override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// DRAM budget for caches and buffers (e.g. 256MiB).
    #[arg(long, value_name = "SIZE")]
    pub dram: Option<ByteSize>,
    /// Directory of the pmem pool file (default: the data directory).
    #[arg(long, value_name = "DIR")]
    pub pmem_path: Option<PathBuf>,
    /// Pmem pool size, fixed at creation (e.g. 1GiB).
    #[arg(long, value_name = "SIZE")]
    pub pmem_size: Option<ByteSize>,
    /// Pmem durability mode: dax, msync (default), volatile or tracked.
    #[arg(long, value_name = "MODE")]
    pub pmem_mode: Option<DurabilityMode>,
    /// A flash directory (repeat for several devices; default: DIR/flash).
    #[arg(long, value_name = "DIR")]
    pub flash_path: Vec<PathBuf>,
    /// Flash capacity per directory, fixed at creation (e.g. 4GiB).
    #[arg(long, value_name = "SIZE")]
    pub flash_size: Option<ByteSize>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Store a value (creates the store if the directory holds none).
    Put(PutArgs),
    /// Print a value followed by a newline (exit code 3 if the key is absent).
    Get(GetArgs),
    /// Delete a key (no error if it is absent).
    Del(KeyArgs),
    /// Print key/value pairs in key order, one per line, tab-separated.
    Scan(ScanArgs),
    /// Print the store's counters.
    Stats(StatsArgs),
    /// Verify a data directory: manifest, media headers, engine invariants.
    Check(CheckArgs),
    /// List the engines of this build.
    Engines,
    /// YCSB benchmark (Load, A-F) of one or more engines on the same generated workload, with
    /// ratios against the first; `rocksdb` is a peer when built with `--features rocksdb`.
    Bench(Box<tierkv_ycsb::BenchArgs>),
    /// Flash I/O microbenchmark: random 4 KiB reads/writes and sequential 512 KiB writes
    /// through tierkv's flash tier (io_uring + O_DIRECT), in fio's units.
    BenchIo(tierkv_iobench::IoBenchArgs),
    /// Serve a store over the Redis protocol (RESP2/RESP3), so Redis clients, redis-cli and
    /// redis-benchmark work unchanged. Binds to 127.0.0.1:6379 by default.
    Serve(tierkv_server::ServeArgs),
    /// Crash, fault and bad-input testing of an engine: kill loops, pmem crash images,
    /// flash faults, every acknowledged write checked against an expected-state oracle.
    Stress(tierkv_stress::StressArgs),
    /// Declare and list schemas (the field-level API; FOCUS).
    Schema(crate::cmd::schema::SchemaArgs),
    /// Put, read, update and delete rows of a schema field by field.
    Row(crate::cmd::schema::RowArgs),
}

/// A key, as text or hex.
#[derive(Args, Debug)]
pub struct KeyArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// The key.
    pub key: String,
    /// The key is given in hex.
    #[arg(long)]
    pub hex: bool,
}

#[derive(Args, Debug)]
pub struct PutArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// The key.
    pub key: String,
    /// The value (omit it with --stdin).
    #[arg(required_unless_present = "stdin")]
    pub value: Option<String>,
    /// Key and value are given in hex.
    #[arg(long)]
    pub hex: bool,
    /// Read the value's bytes from standard input.
    #[arg(long, conflicts_with = "value")]
    pub stdin: bool,
}

#[derive(Args, Debug)]
pub struct GetArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// The key.
    pub key: String,
    /// Key given and value printed in hex.
    #[arg(long)]
    pub hex: bool,
}

#[derive(Args, Debug)]
pub struct ScanArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// First key (inclusive; default: the smallest).
    pub start: Option<String>,
    /// Stop before this key.
    #[arg(long)]
    pub end: Option<String>,
    /// At most this many pairs.
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    /// Keys given and pairs printed in hex.
    #[arg(long)]
    pub hex: bool,
}

#[derive(Args, Debug)]
pub struct StatsArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    #[command(flatten)]
    pub store: StoreArgs,
}
