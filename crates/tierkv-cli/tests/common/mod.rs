//! Helpers shared by the CLI's integration tests.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

/// Runs `tierkv <args> --dir <dir>`.
pub fn tierkv_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tierkv"))
        .args(args)
        .arg("--dir")
        .arg(dir)
        .output()
        .expect("run tierkv")
}

/// Standard error as text.
pub fn stderr_of(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
