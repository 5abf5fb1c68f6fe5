//! [`ClientRegistry`]: the connected clients, for `CLIENT LIST` and `CLIENT INFO`.
//!
//! A connection registers itself when it starts and unregisters when it ends; the
//! commands that change what CLIENT LIST shows (CLIENT SETNAME, CLIENT SETINFO, HELLO)
//! copy the session's fields here. The lines follow Redis's `CLIENT LIST` format with the
//! fields that mean something here (`id addr laddr fd name age idle flags db sub psub ssub
//! multi cmd user resp lib-name lib-ver`); `fd` is -1 and `idle` 0 (not tracked).
//!
//! `CLIENT KILL` sets a connection's [`KillSwitch`]: the connection closes once the burst
//! it is running (if any) has been answered, and at once if it is waiting for input or
//! blocked in BLPOP & co.
//!
//! Thread-safety: one mutex around the map; touched at connect, disconnect and the rare
//! commands above.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use parking_lot::Mutex;

use crate::shared::Session;

/// What CLIENT LIST shows of one connection.
#[derive(Debug, Clone)]
struct Entry {
    addr: String,
    laddr: String,
    since: Instant,
    name: Vec<u8>,
    lib_name: Vec<u8>,
    lib_ver: Vec<u8>,
    resp: i64,
    /// The selected database.
    db: u8,
    kill: KillSwitch,
}

/// Set by `CLIENT KILL`; watched by the connection (module doc).
#[derive(Debug, Clone, Default)]
pub struct KillSwitch(Arc<(AtomicBool, tokio::sync::Notify)>);

impl KillSwitch {
    /// Asks the connection to close.
    pub fn kill(&self) {
        self.0.0.store(true, Ordering::Release);
        self.0.1.notify_one();
    }

    /// True once killed.
    pub fn is_set(&self) -> bool {
        self.0.0.load(Ordering::Acquire)
    }

    /// Returns once killed.
    pub async fn wait(&self) {
        while !self.is_set() {
            self.0.1.notified().await;
        }
    }
}

/// Which clients `CLIENT KILL` closes (each field `None`: any).
#[derive(Debug, Default)]
pub struct KillFilter {
    /// `ID`.
    pub id: Option<u64>,
    /// `ADDR` (ip:port of the client).
    pub addr: Option<String>,
    /// `LADDR` (ip:port of the server's side).
    pub laddr: Option<String>,
    /// `SKIPME`: the client `me` is left alone.
    pub skip: Option<u64>,
}

/// The connected clients.
#[derive(Debug, Default)]
pub struct ClientRegistry {
    clients: Mutex<BTreeMap<u64, Entry>>,
}

impl ClientRegistry {
    /// Adds a connection; its kill switch.
    pub fn register(&self, id: u64, addr: String, laddr: String) -> KillSwitch {
        let kill = KillSwitch::default();
        let e = Entry {
            addr,
            laddr,
            since: Instant::now(),
            name: Vec::new(),
            lib_name: Vec::new(),
            lib_ver: Vec::new(),
            resp: 2,
            db: 0,
            kill: kill.clone(),
        };
        self.clients.lock().insert(id, e);
        kill
    }

    /// Kills every client `f` selects; how many.
    pub fn kill(&self, f: &KillFilter) -> usize {
        let map = self.clients.lock();
        let mut n = 0;
        for (&id, e) in map.iter() {
            let selected = f.id.is_none_or(|i| i == id)
                && f.addr.as_ref().is_none_or(|a| *a == e.addr)
                && f.laddr.as_ref().is_none_or(|a| *a == e.laddr)
                && f.skip != Some(id);
            if selected {
                e.kill.kill();
                n += 1;
            }
        }
        n
    }

    /// Removes a connection.
    pub fn unregister(&self, id: u64) {
        self.clients.lock().remove(&id);
    }

    /// Copies what a session shows (name, library, protocol) into its entry.
    pub fn sync(&self, s: &Session, resp: i64) {
        if let Some(e) = self.clients.lock().get_mut(&s.id) {
            e.name = s.name.clone().unwrap_or_default();
            e.lib_name = s.lib_name.clone().unwrap_or_default();
            e.lib_ver = s.lib_ver.clone().unwrap_or_default();
            e.resp = resp;
            e.db = s.db;
        }
    }

    /// The CLIENT LIST line of client `id` (`multi`: commands queued, or -1), if connected.
    pub fn line(&self, id: u64, multi: i64, cmd: &str) -> Option<String> {
        let map = self.clients.lock();
        map.get(&id).map(|e| format_line(id, e, multi, cmd))
    }

    /// Every client's line; `me` is described with `multi` and `cmd`, others as idle.
    pub fn list(&self, me: u64, multi: i64, cmd: &str) -> String {
        let map = self.clients.lock();
        let mut out = String::new();
        for (&id, e) in map.iter() {
            let (m, c) = if id == me { (multi, cmd) } else { (-1, "NULL") };
            out.push_str(&format_line(id, e, m, c));
        }
        out
    }

    /// Number of registered clients.
    pub fn len(&self) -> usize {
        self.clients.lock().len()
    }

    /// True when no client is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn format_line(id: u64, e: &Entry, multi: i64, cmd: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "id={id} addr={} laddr={} fd=-1 name={} age={} idle=0 flags={} db={} sub=0 psub=0 \
         ssub=0 multi={multi} cmd={cmd} user=default resp={} lib-name={} lib-ver={}",
        e.addr,
        e.laddr,
        String::from_utf8_lossy(&e.name),
        e.since.elapsed().as_secs(),
        if multi >= 0 { "x" } else { "N" },
        e.db,
        e.resp,
        String::from_utf8_lossy(&e.lib_name),
        String::from_utf8_lossy(&e.lib_ver),
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_follow_the_registry() {
        let r = ClientRegistry::default();
        r.register(7, "127.0.0.1:5000".into(), "127.0.0.1:6379".into());
        r.register(9, "127.0.0.1:5001".into(), "127.0.0.1:6379".into());
        let mut s = Session::new(7, false);
        s.name = Some(b"worker".to_vec());
        s.db = 4;
        r.sync(&s, 3);
        let line = r.line(7, -1, "client|info").unwrap();
        assert!(line.starts_with("id=7 addr=127.0.0.1:5000 "), "{line}");
        assert!(
            line.contains(" name=worker ") && line.contains(" resp=3 ") && line.contains(" db=4 "),
            "{line}"
        );
        assert!(line.ends_with('\n'));
        let all = r.list(9, 2, "exec");
        assert_eq!(all.lines().count(), 2);
        assert!(
            all.contains("id=9 ") && all.contains("multi=2 cmd=exec"),
            "{all}"
        );
        r.unregister(7);
        assert!(r.line(7, -1, "x").is_none());
        assert_eq!(r.len(), 1);
    }
}
