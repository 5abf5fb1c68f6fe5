//! Helpers shared by the CLI's integration tests.

#![allow(dead_code)]

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

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

/// Runs `tierkv <args>` with `stdin` as its standard input.
pub fn tierkv_stdin(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tierkv"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tierkv");
    let mut pipe = child.stdin.take().expect("stdin");
    pipe.write_all(stdin).expect("write stdin");
    drop(pipe);
    child.wait_with_output().expect("wait")
}
