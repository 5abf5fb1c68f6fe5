//! The twemproxy setup (issue 25 item 6): `scripts/twemproxy.sh` starts three shards of
//! this crate's server behind Debian's `nutcracker`; `redis-benchmark` writes through the
//! proxy, and every shard must hold keys (DBSIZE per shard), their sum being what the
//! benchmark wrote. Commands the proxy refuses (MULTI, blocking pops) are checked to be
//! refused by the proxy, not half-run. Skipped loudly without nutcracker or
//! redis-benchmark (`scripts/test.sh` installs both).

#![allow(
    clippy::unwrap_used,
    reason = "test helpers: a failure here is a test failure"
)]

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The script's process group, ended on drop (the script stops its shards and proxy).
struct Setup(Child);

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.0.id().to_string()).status();
        let _ = self.0.wait();
    }
}

fn found(bin: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {bin} || test -x /usr/sbin/{bin}"))
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A base port whose +0..=3 and +10 are free now.
fn free_base() -> u16 {
    for _ in 0..200 {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = l.local_addr().unwrap().port();
        drop(l);
        if base > 60000 {
            continue;
        }
        let free = [0, 1, 2, 3, 10]
            .iter()
            .all(|d| TcpListener::bind(("127.0.0.1", base + d)).is_ok());
        if free {
            return base;
        }
    }
    panic!("no free ports");
}

fn client(port: u16) -> redis::Connection {
    let c = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .unwrap()
        .get_connection()
        .unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c
}

/// `redis-cli -p port args...`: its reply, trimmed ("" when the proxy closed the
/// connection).
fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn redis_benchmark_through_twemproxy_spreads_keys_over_three_shards() {
    if !found("nutcracker") || !found("redis-benchmark") || !found("redis-cli") {
        eprintln!(
            "\n\n!!!!! SKIPPED: nutcracker or redis-benchmark missing (apt-get install \
             nutcracker redis-tools, as scripts/test.sh does) — the twemproxy test did not run !!!!!\n"
        );
        return;
    }
    let base = free_base();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/twemproxy.sh");
    let mut child = Command::new("bash")
        .arg(script)
        .arg("")
        .arg("dram:btree")
        .arg(base.to_string())
        .env("TIERKV_SERVE", env!("CARGO_BIN_EXE_tierkv-server"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let setup = Setup(child);
    let mut line = String::new();
    BufReader::new(out).read_line(&mut line).unwrap();
    assert!(line.starts_with("twemproxy ready"), "script said: {line:?}");

    let bench = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &base.to_string()])
        .args([
            "-t", "set", "-n", "30000", "-r", "1000000", "-c", "20", "-P", "16", "-q",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&bench.stdout);
    assert!(bench.status.success() && text.contains("SET:"), "{text}");
    println!(
        "through the proxy: {}",
        text.trim().rsplit('\r').next().unwrap_or("").trim()
    );

    let counts: Vec<i64> = (1..=3)
        .map(|i| redis::cmd("DBSIZE").query(&mut client(base + i)).unwrap())
        .collect();
    println!("keys per shard: {counts:?}");
    assert!(counts.iter().all(|n| *n > 1000), "{counts:?}");
    // Random keys from 1,000,000 names, 30,000 writes: about 29,500 distinct keys.
    let total: i64 = counts.iter().sum();
    assert!((28_000..=30_000).contains(&total), "{total}");

    // Point commands go through, to the shard that owns the key (redis-cli: the redis
    // crate's connection set-up sends CLIENT SETINFO, which the proxy refuses).
    let proxy = |args: &[&str]| cli(base, args);
    for i in 0..20 {
        assert_eq!(proxy(&["SET", &format!("user:{i}"), &i.to_string()]), "OK");
    }
    for i in 0..20 {
        assert_eq!(proxy(&["GET", &format!("user:{i}")]), i.to_string());
    }
    assert_eq!(proxy(&["RPUSH", "q", "job"]), "1");
    assert_eq!(proxy(&["LPOP", "q"]), "job");
    // MULTI and a blocking pop are refused by the proxy (it closes the connection): no
    // reply comes back, and nothing ran on a shard.
    assert_eq!(proxy(&["MULTI"]), "");
    assert_eq!(proxy(&["BLPOP", "q", "1"]), "");
    drop(setup);
}
