//! The `tierkv` command-line tool: put / get / del / scan / stats / check on a data
//! directory, schema / row for the field-level API (and bench, bench-io, stress, serve).
//!
//! Exit codes: 0 success; 1 an error (one line on stderr); 2 a usage error; 3 `get` of a
//! key that is not there; 4 a `dump` that skipped damaged records. Never a panic or a backtrace: a panic hook turns the unexpected
//! into one line and exit code 70.

#![forbid(unsafe_code)]

mod args;
mod cmd;
mod output;

use std::process::ExitCode;

use clap::Parser;

use args::{Cli, Command};

/// Exit code of `get` when the key is absent.
pub const EXIT_NOT_FOUND: u8 = 3;
/// Exit code of `dump` when it skipped damaged records.
pub const EXIT_PARTIAL: u8 = 4;
/// Exit code after an internal error (a bug).
pub const EXIT_INTERNAL: u8 = 70;

fn main() -> ExitCode {
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_owned());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("tierkv: internal error (a bug, please report it): {msg}{at}");
        std::process::exit(i32::from(EXIT_INTERNAL));
    }));
    let cli = Cli::parse();
    let result: anyhow::Result<u8> = match &cli.command {
        Command::Put(a) => cmd::put(&a.store, a).map_err(Into::into),
        Command::Get(a) => cmd::get(&a.store, a).map_err(Into::into),
        Command::Del(a) => cmd::del(&a.store, a).map_err(Into::into),
        Command::Scan(a) => cmd::scan(&a.store, a).map_err(Into::into),
        Command::Stats(a) => cmd::stats(&a.store, a).map_err(Into::into),
        Command::Check(a) => cmd::check(&a.store).map_err(Into::into),
        Command::Dump(a) => cmd::dump(&a.store, a).map_err(Into::into),
        Command::Load(a) => cmd::load(&a.store, a).map_err(Into::into),
        Command::Batch(a) => cmd::batch(a).map_err(Into::into),
        Command::Engines => cmd::engines().map_err(Into::into),
        Command::Bench(a) => tierkv_ycsb::run(a).map(|()| 0),
        Command::BenchIo(a) => tierkv_iobench::run(a).map(|()| 0),
        Command::Serve(a) => tierkv_server::run(a).map(|()| 0),
        Command::Stress(a) => tierkv_stress::run(a).map(|passed| if passed { 0 } else { 1 }),
        Command::Schema(a) => cmd::schema::schema(a).map_err(Into::into),
        Command::Row(a) => cmd::schema::row(a).map_err(Into::into),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("tierkv: {}", tierkv::core::api::error::report(e.chain()));
            ExitCode::from(1)
        }
    }
}
