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

const PUT_EXAMPLES: &str = "Examples:
  tierkv put --dir my-store greeting hello            # creates a prism store if none
  tierkv put --dir small --pmem-size 16MiB --flash-size 64MiB k v
  tierkv put --dir my-store --hex 00ff 68656c6c6f      # key and value in hex
  tierkv put --dir my-store photo --stdin < photo.jpg  # the value from a file";
const GET_EXAMPLES: &str = "Examples:
  tierkv get --dir my-store greeting                  # prints hello (exit 3 if absent)
  tierkv get --dir my-store --hex 00ff                # key given, value printed, in hex";
const DEL_EXAMPLES: &str = "Examples:
  tierkv del --dir my-store greeting
  tierkv del --dir my-store --hex 00ff";
const SCAN_EXAMPLES: &str = "Examples:
  tierkv scan --dir my-store                          # the first 100 pairs
  tierkv scan --dir my-store user: --end user; --limit 1000
  tierkv scan --dir my-store --hex 00 --limit 10";
const STATS_EXAMPLES: &str = "Examples:
  tierkv stats --dir my-store                         # a table: value, unit, meaning
  tierkv stats --dir my-store --json                  # the same numbers as JSON
Counters count what the stats process itself did (they start at 0 in every process);
gauges such as keys describe the store.";
const CHECK_EXAMPLES: &str = "Examples:
  tierkv check --dir my-store                         # one ok line per thing checked";

const BATCH_EXAMPLES: &str = "Examples:
  printf 'put user:1 alice\\nput idx:alice 1\\ndel user:0\\n' | tierkv batch --dir my-store
  tierkv batch --dir my-store --in ops.txt           # the same lines from a file
  tierkv batch --dir my-store --hex --in ops.hex     # keys and values in hex
Lines: `put <key> <value>` (the value is the rest of the line) or `del <key>`; blank lines
and `#` comments are skipped. All of them are applied as one crash-atomic batch (after a
crash: all or none); engines without atomic batches refuse it and nothing is written.";

const DUMP_EXAMPLES: &str = "Examples:
  tierkv dump --dir my-store > my-store.dump         # every record, key order, hex
  tierkv dump --dir damaged --out rescued.dump       # the readable records; skipped ones listed
  tierkv dump --dir damaged --salvage > rescued.dump # read the files directly, never open the store
When the store does not open (damage its recovery cannot get past), dump salvages it: it
reads the files read-only and yields every record it can validate (prism only).
Exit codes: 0 every record dumped, 4 some damaged records skipped, 1 error.";
const LOAD_EXAMPLES: &str = "Examples:
  tierkv load --dir new-store --in rescued.dump
  tierkv dump --dir old | tierkv load --dir new --pmem-size 1GiB   # copy into a new store";

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
    #[command(after_help = PUT_EXAMPLES)]
    Put(PutArgs),
    /// Print a value followed by a newline (exit code 3 if the key is absent).
    #[command(after_help = GET_EXAMPLES)]
    Get(GetArgs),
    /// Delete a key (no error if it is absent).
    #[command(after_help = DEL_EXAMPLES)]
    Del(KeyArgs),
    /// Print key/value pairs in key order, one per line, tab-separated.
    #[command(after_help = SCAN_EXAMPLES)]
    Scan(ScanArgs),
    /// Print the store's counters, with units and meanings (counters are per process).
    #[command(after_help = STATS_EXAMPLES)]
    Stats(StatsArgs),
    /// Verify a data directory: manifest, media headers, engine invariants.
    #[command(after_help = CHECK_EXAMPLES)]
    Check(CheckArgs),
    /// Write every readable record, in key order, in the format `load` reads; on a damaged
    /// store, the readable ones and a `# skipped` line for each damaged one (exit code 4).
    #[command(after_help = DUMP_EXAMPLES)]
    Dump(DumpArgs),
    /// Put every record of a dump into a store (creating it if the directory holds none).
    #[command(after_help = LOAD_EXAMPLES)]
    Load(LoadArgs),
    /// Apply `put k v` / `del k` lines (stdin or --in FILE) as one crash-atomic batch
    /// (creates the store if the directory holds none).
    #[command(after_help = BATCH_EXAMPLES)]
    Batch(BatchArgs),
    /// List the engines of this build (with each one's value-size limit).
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
    /// flash faults, full tiers (space), every acknowledged write checked against an
    /// expected-state oracle.
    #[command(after_help = tierkv_stress::EXAMPLES)]
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

#[derive(Args, Debug)]
pub struct DumpArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Write the dump to FILE instead of standard output.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Do not open the store: read its files read-only and yield every record that
    /// validates (what `dump` falls back to when the store does not open; prism only).
    #[arg(long)]
    pub salvage: bool,
}

#[derive(Args, Debug)]
pub struct BatchArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Read the lines from FILE instead of standard input.
    #[arg(long = "in", value_name = "FILE")]
    pub input: Option<PathBuf>,
    /// Keys and values are given in hex.
    #[arg(long)]
    pub hex: bool,
}

#[derive(Args, Debug)]
pub struct LoadArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Read the dump from FILE instead of standard input.
    #[arg(long = "in", value_name = "FILE")]
    pub input: Option<PathBuf>,
}
