//! Runs the flash I/O microbenchmark standalone, with the flags of `tierkv bench-io`:
//! `cargo run --release -p tierkv-iobench --example bench_io -- --dir /mnt/nvme --fio`.

use clap::Parser;

/// The flash I/O microbenchmark (same flags as `tierkv bench-io`).
#[derive(Parser)]
#[command(name = "bench_io")]
struct Cli {
    #[command(flatten)]
    io: tierkv_iobench::IoBenchArgs,
}

fn main() {
    if let Err(e) = tierkv_iobench::run(&Cli::parse().io) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
