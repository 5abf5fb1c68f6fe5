//! [`Settings`]: what `CONFIG GET` reports and `CONFIG SET` may change while the server
//! runs.
//!
//! Three kinds of parameters:
//! - **changeable**: `maxclients` (checked by the accept loop at every connection);
//! - **fixed at start** (`bind`, `port`, `databases`, `proto-max-bulk-len`,
//!   `client-query-buffer-limit`, `protected-mode`, and `save`/`appendonly`, whose meaning
//!   here is the engine's durability): `CONFIG SET` to the value they have is accepted (test
//!   fixtures write `CONFIG SET save ""`), to another value refused with Redis's
//!   "can't set immutable config" and a word on where the setting comes from;
//! - **accepted without effect** (`ACCEPTED`: eviction, keyspace events, encodings'
//!   thresholds, logging, timers): tierkv has no such mechanism; the value is checked as
//!   Redis checks it (integer, memory size, yes/no or one of a set), kept, and reported by
//!   `CONFIG GET`, so that clients and fixtures that configure them run unchanged.
//!
//! A `CONFIG SET` of several parameters checks them all before it changes any.
//!
//! Thread-safety: an atomic and a mutex; `CONFIG SET` is rare.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

/// How a parameter accepted without effect is checked.
#[derive(Clone, Copy)]
enum Kind {
    Int,
    Memory,
    YesNo,
    OneOf(&'static [&'static str]),
    Flags(&'static str),
}

/// The parameters accepted without effect, with Redis 7.0's defaults.
const ACCEPTED: &[(&str, &str, Kind)] = &[
    ("maxmemory", "0", Kind::Memory),
    (
        "maxmemory-policy",
        "noeviction",
        Kind::OneOf(&[
            "volatile-lru",
            "volatile-lfu",
            "volatile-random",
            "volatile-ttl",
            "allkeys-lru",
            "allkeys-lfu",
            "allkeys-random",
            "noeviction",
        ]),
    ),
    ("maxmemory-samples", "5", Kind::Int),
    ("notify-keyspace-events", "", Kind::Flags("AKEg$lshzxetmdn")),
    ("hz", "10", Kind::Int),
    ("timeout", "0", Kind::Int),
    ("tcp-keepalive", "300", Kind::Int),
    (
        "loglevel",
        "notice",
        Kind::OneOf(&["debug", "verbose", "notice", "warning", "nothing"]),
    ),
    ("slowlog-log-slower-than", "10000", Kind::Int),
    ("slowlog-max-len", "128", Kind::Int),
    ("latency-monitor-threshold", "0", Kind::Int),
    ("lazyfree-lazy-eviction", "no", Kind::YesNo),
    ("lazyfree-lazy-expire", "no", Kind::YesNo),
    ("lazyfree-lazy-server-del", "no", Kind::YesNo),
    ("lazyfree-lazy-user-del", "no", Kind::YesNo),
    ("activerehashing", "yes", Kind::YesNo),
    ("list-max-listpack-size", "-2", Kind::Int),
    ("hash-max-listpack-entries", "128", Kind::Int),
    ("hash-max-listpack-value", "64", Kind::Int),
    ("set-max-intset-entries", "512", Kind::Int),
    ("zset-max-listpack-entries", "128", Kind::Int),
    ("zset-max-listpack-value", "64", Kind::Int),
    ("busy-reply-threshold", "5000", Kind::Int),
    ("lua-time-limit", "5000", Kind::Int),
];

/// The runtime settings (module doc).
#[derive(Debug)]
pub struct Settings {
    max_clients: AtomicUsize,
    accepted: Mutex<BTreeMap<&'static str, String>>,
}

/// A refused `CONFIG SET`, with Redis's error text.
#[derive(Debug, PartialEq, Eq)]
pub struct SetError(pub String);

fn failed(name: &str, why: &str) -> SetError {
    SetError(format!(
        "ERR CONFIG SET failed (possibly related to argument '{name}') - {why}"
    ))
}

/// Redis's memory sizes: a number with an optional unit (k, kb, m, mb, g, gb).
fn memory(v: &str) -> Option<u64> {
    let v = v.to_ascii_lowercase();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (n, unit) = v.split_at(split);
    let n: u64 = n.parse().ok()?;
    let mul: u64 = match unit {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1000 * 1000,
        "mb" => 1024 * 1024,
        "g" => 1000 * 1000 * 1000,
        "gb" => 1024 * 1024 * 1024,
        _ => return None,
    };
    n.checked_mul(mul)
}

fn check(name: &str, value: &str, kind: Kind) -> Result<String, SetError> {
    match kind {
        Kind::Int => value
            .parse::<i64>()
            .map(|_| value.to_owned())
            .map_err(|_| failed(name, "argument couldn't be parsed into an integer")),
        Kind::Memory => memory(value)
            .map(|n| n.to_string())
            .ok_or_else(|| failed(name, "argument must be a memory value")),
        Kind::YesNo => match value.to_ascii_lowercase().as_str() {
            v @ ("yes" | "no") => Ok(v.to_owned()),
            _ => Err(failed(name, "argument must be 'yes' or 'no'")),
        },
        Kind::OneOf(values) => {
            let v = value.to_ascii_lowercase();
            if values.contains(&v.as_str()) {
                Ok(v)
            } else {
                Err(failed(name, "argument(s) must be one of the following: ")
                    .with(&values.join(", ")))
            }
        }
        Kind::Flags(allowed) => {
            if value.chars().all(|c| allowed.contains(c)) {
                Ok(value.to_owned())
            } else {
                Err(failed(
                    name,
                    "Invalid event class character. Use 'Ag$lshzxeKEtmdn'.",
                ))
            }
        }
    }
}

impl SetError {
    fn with(mut self, more: &str) -> SetError {
        self.0.push_str(more);
        self
    }
}

impl Settings {
    /// The settings of a server started with `max_clients`.
    pub fn new(max_clients: usize) -> Settings {
        Settings {
            max_clients: AtomicUsize::new(max_clients),
            accepted: Mutex::new(
                ACCEPTED
                    .iter()
                    .map(|(n, v, _)| (*n, (*v).to_owned()))
                    .collect(),
            ),
        }
    }

    /// The connection limit now.
    pub fn max_clients(&self) -> usize {
        self.max_clients.load(Ordering::Relaxed)
    }

    /// `(name, value)` of every parameter accepted without effect.
    pub fn accepted(&self) -> Vec<(&'static str, String)> {
        self.accepted
            .lock()
            .iter()
            .map(|(n, v)| (*n, v.clone()))
            .collect()
    }

    /// Applies `CONFIG SET name value ...` (`fixed`: the parameters fixed at start with
    /// their values): every pair is checked before any is applied.
    pub fn set(
        &self,
        pairs: &[(String, String)],
        fixed: &[(&str, String)],
    ) -> Result<(), SetError> {
        enum Change {
            MaxClients(usize),
            Accepted(&'static str, String),
            Nothing,
        }
        let mut changes = Vec::with_capacity(pairs.len());
        for (name, value) in pairs {
            let name = name.to_ascii_lowercase();
            if name == "maxclients" {
                let n = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| {
                        failed(&name, "argument must be between 1 and 4294967295 inclusive")
                    })?;
                changes.push(Change::MaxClients(n));
            } else if let Some((_, now)) = fixed.iter().find(|(n, _)| *n == name) {
                if value.eq_ignore_ascii_case(now) {
                    changes.push(Change::Nothing);
                } else {
                    return Err(failed(
                        &name,
                        "can't set immutable config (tierkv sets it at start: `tierkv serve` \
                         flags or --config FILE; durability is the engine's --pmem-mode)",
                    ));
                }
            } else if let Some((n, _, kind)) = ACCEPTED.iter().find(|(n, _, _)| *n == name) {
                changes.push(Change::Accepted(n, check(n, value, *kind)?));
            } else {
                return Err(SetError(format!(
                    "ERR Unknown option or number of arguments for CONFIG SET - '{name}'"
                )));
            }
        }
        let mut accepted = self.accepted.lock();
        for c in changes {
            match c {
                Change::MaxClients(n) => self.max_clients.store(n, Ordering::Relaxed),
                Change::Accepted(n, v) => {
                    accepted.insert(n, v);
                }
                Change::Nothing => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect()
    }

    #[test]
    fn accepted_parameters_are_checked_kept_and_reported() {
        let s = Settings::new(10);
        let fixed = [("save", String::new()), ("databases", "16".to_owned())];
        s.set(
            &pairs(&[
                ("maxmemory", "100mb"),
                ("MAXMEMORY-POLICY", "allkeys-LRU"),
                ("save", ""),
            ]),
            &fixed,
        )
        .unwrap();
        let a = s.accepted();
        assert!(a.contains(&("maxmemory", (100 << 20).to_string())));
        assert!(a.contains(&("maxmemory-policy", "allkeys-lru".to_owned())));
        s.set(&pairs(&[("maxclients", "3")]), &fixed).unwrap();
        assert_eq!(s.max_clients(), 3);
    }

    #[test]
    fn a_bad_pair_changes_nothing() {
        let s = Settings::new(10);
        let fixed = [("databases", "16".to_owned())];
        for (bad, why) in [
            (("hz", "x"), "couldn't be parsed into an integer"),
            (("maxmemory", "12qb"), "memory value"),
            (("maxmemory-policy", "lru"), "must be one of"),
            (("activerehashing", "maybe"), "'yes' or 'no'"),
            (("databases", "20"), "immutable"),
            (("maxclients", "0"), "between 1"),
            (("nonsense", "1"), "Unknown option"),
        ] {
            let e = s
                .set(&pairs(&[("maxclients", "4"), ("hz", "50"), bad]), &fixed)
                .unwrap_err();
            assert!(e.0.contains(why), "{bad:?}: {}", e.0);
            assert_eq!(s.max_clients(), 10);
            assert!(s.accepted().contains(&("hz", "10".to_owned())));
        }
    }
}
