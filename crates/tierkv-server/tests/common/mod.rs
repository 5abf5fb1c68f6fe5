//! Shared helpers of the integration tests: an in-process server on an ephemeral loopback
//! port over a fresh store, `redis` crate clients, and raw TCP for malformed input.

#![allow(
    dead_code,
    reason = "each test file uses a different subset of these helpers"
)]
#![allow(
    clippy::unwrap_used,
    reason = "test helpers: a failure here is a test failure"
)]

pub mod proc;
pub mod redis_server;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use tierkv::{Db, DurabilityMode, Options};
use tierkv_server::{ServerConfig, ServerHandle};

/// A running in-process server and the directory of its store.
pub struct TestServer {
    handle: Option<ServerHandle>,
    pub addr: SocketAddr,
    _dir: tempfile::TempDir,
}

/// The settings every test starts from: loopback, port chosen by the OS, small pools.
pub fn test_config() -> ServerConfig {
    ServerConfig {
        bind: "127.0.0.1:0".parse().unwrap(),
        io_threads: 2,
        workers: 2,
        shutdown_grace_secs: 2,
        ..ServerConfig::default()
    }
}

/// A server over a new store of `engine`.
pub fn start(engine: &str) -> TestServer {
    start_with(Options::default().engine(engine), test_config())
}

/// A server over a new store opened with `options`, configured by `config`.
pub fn start_with(options: Options, config: ServerConfig) -> TestServer {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options).unwrap();
    let handle = tierkv_server::spawn(db, DurabilityMode::default(), config).unwrap();
    TestServer {
        addr: handle.addr(),
        handle: Some(handle),
        _dir: dir,
    }
}

impl TestServer {
    /// A RESP2 client.
    pub fn client(&self) -> redis::Connection {
        self.client_url(&format!("redis://{}/", self.addr))
    }

    /// A RESP3 client (it says `HELLO 3` first).
    pub fn client_resp3(&self) -> redis::Connection {
        self.client_url(&format!("redis://{}/?protocol=resp3", self.addr))
    }

    /// A client of a URL (with a password, for example).
    pub fn client_url(&self, url: &str) -> redis::Connection {
        let c = redis::Client::open(url).unwrap().get_connection().unwrap();
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        c
    }

    /// A raw TCP connection with a read timeout.
    pub fn raw(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.set_nodelay(true).unwrap();
        s
    }

    /// Shuts the server down gracefully; returns the store's close result.
    pub fn shutdown(mut self) -> anyhow::Result<()> {
        self.handle.take().map_or(Ok(()), ServerHandle::shutdown)
    }
}

/// The error a command gets, as `CODE detail`; panics if it succeeds.
pub fn error_of(con: &mut redis::Connection, cmd: &redis::Cmd) -> String {
    match cmd.query::<redis::Value>(con) {
        Ok(redis::Value::ServerError(e)) => {
            format!("{} {}", e.code(), e.details().unwrap_or_default())
        }
        Err(e) => format!(
            "{} {}",
            e.code().unwrap_or("?"),
            e.detail().unwrap_or_default()
        ),
        Ok(v) => panic!("expected an error, got {v:?}"),
    }
}

/// Runs a command given as space-separated words.
pub fn run<T: redis::FromRedisValue>(c: &mut redis::Connection, words: &str) -> T {
    let mut command = redis::Cmd::new();
    for w in words.split(' ') {
        command.arg(w);
    }
    command.query(c).unwrap()
}

/// Writes `request` and reads until the peer closes or `done` says the answer is complete.
pub fn exchange(s: &mut TcpStream, request: &[u8], done: impl Fn(&[u8]) -> bool) -> Vec<u8> {
    s.write_all(request).unwrap();
    read_until(s, done)
}

/// Reads until the peer closes or `done` is true of what was read.
pub fn read_until(s: &mut TcpStream, done: impl Fn(&[u8]) -> bool) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 64 << 10];
    while !done(&got) {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("read failed after {} bytes: {e}", got.len()),
        }
    }
    got
}

/// True when the peer has closed the connection (reads EOF or a reset, within the timeout).
pub fn closed_by_peer(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

/// A command encoded as a RESP array of bulk strings.
pub fn resp(args: &[&[u8]]) -> Vec<u8> {
    let mut v = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        v.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        v.extend_from_slice(a);
        v.extend_from_slice(b"\r\n");
    }
    v
}

/// A seed for a random test (`tierkv_testkit::rig::seed`: from the environment, fixed in CI, else random), printed.
pub fn seed() -> u64 {
    tierkv_testkit::rig::seed("tierkv-server")
}
