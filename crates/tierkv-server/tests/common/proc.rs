//! A `tierkv-server` process of the real binary on a loopback port chosen by the OS: its
//! address, clients, SIGTERM, and its stderr.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A running `tierkv-server` process.
pub struct Proc {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
    log: Option<std::thread::JoinHandle<String>>,
}

impl Drop for Proc {
    /// A test that fails leaves no server behind (it would hold the test's stdout open).
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    /// Starts `tierkv-server --dir DIR --bind 127.0.0.1:0 ARGS` and waits until it listens.
    pub fn start(dir: &Path, args: &[&str]) -> Proc {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tierkv-server"));
        c.arg("--dir").arg(dir).arg("--bind").arg("127.0.0.1:0");
        c.args(args);
        let mut child = c.stderr(Stdio::piped()).spawn().unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut seen = String::new();
        let addr = loop {
            let line = lines
                .next()
                .unwrap_or_else(|| panic!("server exited before listening:\n{seen}"))
                .unwrap();
            seen.push_str(&line);
            seen.push('\n');
            if let Some(a) = line.strip_prefix("tierkv serve: listening on ") {
                break a.parse().unwrap();
            }
        };
        let log = std::thread::spawn(move || {
            for l in lines.map_while(Result::ok) {
                seen.push_str(&l);
                seen.push('\n');
            }
            seen
        });
        Proc {
            child,
            addr,
            log: Some(log),
        }
    }

    /// Starts the server with small tiers (64 MiB pmem, 256 MiB flash, 64 MiB DRAM) and the
    /// pool in volatile mode: it survives the server process, which is what a restart or a
    /// kill tests, without an msync per write. `engine`: `--engine`, or the store's own.
    pub fn start_small(dir: &Path, engine: Option<&str>) -> Proc {
        let mut args = vec!["--pmem-mode", "volatile", "--pmem-size", "64MiB"];
        args.extend_from_slice(&["--flash-size", "256MiB", "--dram", "64MiB"]);
        if let Some(e) = engine {
            args.extend_from_slice(&["--engine", e]);
        }
        Proc::start(dir, &args)
    }

    /// A RESP2 client.
    pub fn client(&self) -> redis::Connection {
        let c = redis::Client::open(format!("redis://{}/", self.addr))
            .unwrap()
            .get_connection()
            .unwrap();
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        c
    }

    /// Sends SIGKILL and reaps the process (a crash: nothing is flushed or closed).
    pub fn kill9(&mut self) {
        self.child.kill().unwrap();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM.
    pub fn sigterm(&self) {
        let ok = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(ok.success());
    }

    /// Waits for the process to exit; returns its status and its stderr.
    pub fn wait(mut self) -> (ExitStatus, String) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let log = self.log.take().map(|l| l.join().unwrap());
                return (status, log.unwrap_or_default());
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("the server did not exit after SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
