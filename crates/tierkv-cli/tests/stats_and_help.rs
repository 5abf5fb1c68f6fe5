//! `tierkv stats` explains itself and `--help` shows examples (issue 23, finding 9).

use std::path::Path;
use std::process::{Command, Output};

fn tierkv(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tierkv"))
        .args(args)
        .output()
        .expect("run tierkv")
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn small_store(dir: &Path) {
    let d = dir.to_str().expect("utf-8");
    let args = [
        "put",
        "--dir",
        d,
        "--pmem-size",
        "16MiB",
        "--flash-size",
        "16MiB",
        "k",
        "v",
    ];
    let o = tierkv(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn stats_gives_units_meanings_and_says_counters_are_per_process() {
    let d = tempfile::tempdir().expect("test setup");
    small_store(d.path());
    let o = tierkv(&["stats", "--dir", d.path().to_str().expect("test setup")]);
    assert!(o.status.success());
    let out = text(&o);
    assert!(out.contains("per process"), "no per-process note:\n{out}");
    let line = |name: &str| {
        out.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no {name} line:\n{out}"))
            .to_owned()
    };
    for (name, unit) in [
        ("user_bytes_written", "bytes"),
        ("pmem_persists", "calls"),
        ("recovery_micros", "µs"),
        ("keys", "keys"),
    ] {
        let l = line(name);
        assert!(l.contains(unit), "{name} has no unit {unit}: {l}");
        assert!(
            l.split_whitespace().count() >= 4,
            "{name} has no explanation: {l}"
        );
    }
    // Every counter line has a unit and a meaning.
    for l in out
        .lines()
        .filter(|l| l.contains("  ") && !l.starts_with(' '))
    {
        assert!(l.split_whitespace().count() >= 4, "bare counter: {l}");
    }
}

#[test]
fn every_store_command_help_has_examples() {
    for cmd in [
        "put", "get", "del", "scan", "stats", "check", "dump", "load",
    ] {
        let o = tierkv(&[cmd, "--help"]);
        assert!(o.status.success(), "{cmd} --help");
        let h = text(&o);
        assert!(
            h.contains("Examples:"),
            "{cmd} --help has no examples:\n{h}"
        );
        assert!(h.contains(&format!("tierkv {cmd} ")), "{cmd}: {h}");
    }
}
