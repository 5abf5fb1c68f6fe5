//! `tierkv-server`: the RESP server as a stand-alone binary (what `tierkv serve` runs), so
//! that end-to-end tests can start, signal and restart a real server process.

#![forbid(unsafe_code)]

use clap::Parser;

/// Serve a tierkv store over the Redis protocol.
#[derive(Parser, Debug)]
#[command(name = "tierkv-server", version)]
struct Cli {
    #[command(flatten)]
    serve: tierkv_server::ServeArgs,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match tierkv_server::run(&cli.serve) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "tierkv serve: error: {}",
                tierkv::core::api::error::report(e.chain())
            );
            std::process::ExitCode::FAILURE
        }
    }
}
