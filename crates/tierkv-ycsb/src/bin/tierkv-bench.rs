//! `tierkv-bench`: the benchmark harness on its own, with exactly the flags of
//! `tierkv bench` (for runs without the full `tierkv` binary).

#![forbid(unsafe_code)]

use clap::Parser;

/// YCSB Load and A-F against tierkv's engines and peers.
#[derive(Parser)]
#[command(name = "tierkv-bench", version)]
struct Cli {
    #[command(flatten)]
    bench: tierkv_ycsb::BenchArgs,
}

fn main() -> anyhow::Result<()> {
    tierkv_ycsb::run(&Cli::parse().bench)
}
