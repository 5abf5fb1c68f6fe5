//! `tierkv-stress`: the stress harness on its own (the same as `tierkv stress`), for the
//! harness's own runs and tests. Exit codes: 0 the run passed; 1 a violation or failure was
//! found; 2 the run could not start (bad arguments, an engine the mode cannot test).

#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use tierkv_stress::StressArgs;

/// tierkv-stress: crash, fault and bad-input testing of a tierkv engine.
#[derive(Parser, Debug)]
#[command(name = "tierkv-stress", version, about, long_about = None, after_help = tierkv_stress::EXAMPLES)]
struct Cli {
    #[command(flatten)]
    args: StressArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match tierkv_stress::run(&cli.args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!(
                "tierkv-stress: {}",
                tierkv::core::api::error::report(e.chain())
            );
            ExitCode::from(2)
        }
    }
}
