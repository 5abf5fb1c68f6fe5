//! A real `redis-server` (Debian's) on a free loopback port, for the tests that compare
//! replies with Redis's (the spec is Redis's behaviour): found at `REDIS_SERVER` or the
//! usual paths, started without persistence, killed on drop.

#![allow(
    dead_code,
    reason = "each test file uses a different subset of these helpers"
)]

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running redis-server, killed on drop.
pub struct Redis {
    child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The redis-server binary, if there is one.
pub fn redis_binary() -> Option<String> {
    if let Ok(p) = std::env::var("REDIS_SERVER") {
        return Some(p);
    }
    ["/usr/bin/redis-server", "/usr/local/bin/redis-server"]
        .iter()
        .find(|p| std::path::Path::new(p).exists())
        .map(|p| (*p).to_string())
}

/// Starts `bin` on a free port and waits until it answers PING.
pub fn start_redis(bin: &str) -> Redis {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(bin)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let r = Redis { child, port };
    let t = Instant::now();
    loop {
        if let Ok(c) = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
            && let Ok(mut con) = c.get_connection()
            && redis::cmd("PING").query::<String>(&mut con).is_ok()
        {
            return r;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "redis-server did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Redis {
    /// A RESP2 client.
    pub fn client(&self) -> redis::Connection {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))
            .and_then(|c| c.get_connection())
            .unwrap_or_else(|e| panic!("connect to redis-server: {e}"))
    }
}
