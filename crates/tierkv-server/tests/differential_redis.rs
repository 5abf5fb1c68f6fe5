//! Differential test: randomized command sequences sent to `tierkv serve` and to a real
//! `redis-server` (Debian's, started here on a free loopback port), replies compared. The
//! spec is Redis's behaviour, not ours.
//!
//! Allowed differences (documented in the README): KEYS is compared as a set (Redis's
//! order is its hash table's); replies of TTL/PTTL/EXPIRETIME/
//! PEXPIRETIME that are positive are compared as "positive" (the two servers read their
//! clocks a few ms apart); INCRBYFLOAT is only given binary fractions on a key of its own
//! (Redis computes in x87 long double, tierkv in f64, so e.g. 0.1 + 0.2 or a 19-digit
//! integer plus 0.5 print differently).
//!
//! Without a `redis-server` binary the test prints a loud message and passes (`.ci/run`
//! installs it). Knobs: `TIERKV_DIFF_SEQUENCES` (default 2000), `TIERKV_TEST_SEED`
//! (default a fixed seed, so CI is reproducible), `REDIS_SERVER` (binary path).

#![allow(
    clippy::unwrap_used,
    reason = "test helpers: a failure here is a test failure"
)]

mod common;

use std::time::Instant;

use common::redis_server::{redis_binary, start_redis};
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use redis::Value;

const KEYS: &[&str] = &["k0", "k1", "k2", "k3", "h0", "h1"];
const FIELDS: &[&str] = &["f0", "f1", "f2", "f3"];
const VALUES: &[&str] = &[
    "",
    "a",
    "hello",
    "10",
    "-3",
    "0",
    "9223372036854775807",
    "1.5",
];
const FLOATS: &[&str] = &["0.5", "-1.25", "3", "2.75", "-0.5", "abc"];

fn pick<'a>(rng: &mut ChaCha8Rng, from: &[&'a str]) -> &'a str {
    from.choose(rng).copied().unwrap_or("x")
}

/// One random command over the implemented commands (names in random case now and then).
/// KEYS and TTL-like commands only outside transactions (their replies are normalised at
/// the top level only).
fn random_command(rng: &mut ChaCha8Rng, in_tx: bool) -> Vec<String> {
    let k = pick(rng, KEYS).to_string();
    let k2 = pick(rng, KEYS).to_string();
    let f = pick(rng, FIELDS).to_string();
    let v = pick(rng, VALUES).to_string();
    let n = rng.random_range(-5i64..20).to_string();
    let words: Vec<String> = match rng.random_range(0..119) {
        0 => vec!["GET".into(), k],
        1 => vec!["SET".into(), k, v],
        2 => {
            let mut w = vec!["SET".into(), k, v];
            for opt in ["NX", "XX", "GET", "KEEPTTL"] {
                if rng.random_bool(0.3) {
                    w.push(opt.into());
                }
            }
            if rng.random_bool(0.3) {
                w.push(pick(rng, &["EX", "PX", "EXAT"]).into());
                w.push(pick(rng, &["100000", "0", "-1", "x", "99999999999"]).into());
            }
            w
        }
        3 => vec!["SETNX".into(), k, v],
        4 => vec!["GETSET".into(), k, v],
        5 => vec!["MGET".into(), k, k2],
        6 => vec!["MSET".into(), k, v, k2, pick(rng, VALUES).into()],
        7 => vec!["MSETNX".into(), k, v, k2, pick(rng, VALUES).into()],
        8 => vec![pick(rng, &["DEL", "UNLINK"]).into(), k, k2],
        9 => vec!["EXISTS".into(), k.clone(), k2, k],
        10 => vec!["INCR".into(), k],
        11 => vec![
            "INCRBY".into(),
            k,
            pick(rng, &["5", "-7", "x", "9223372036854775807"]).into(),
        ],
        12 => vec!["DECR".into(), k],
        13 => vec!["DECRBY".into(), k, n],
        14 => vec!["APPEND".into(), k, v],
        15 => vec!["STRLEN".into(), k],
        16 => vec!["GETDEL".into(), k],
        17 => vec![
            "GETRANGE".into(),
            k,
            n,
            rng.random_range(-6i64..8).to_string(),
        ],
        18 => vec![
            "SETRANGE".into(),
            k,
            rng.random_range(0i64..6).to_string(),
            v,
        ],
        // Its own key: the others may hold integers beyond 2^53, where long double and f64
        // round differently (a documented difference).
        19 => match rng.random_range(0..3) {
            0 => vec!["GET".into(), "fl".into()],
            _ => vec!["INCRBYFLOAT".into(), "fl".into(), pick(rng, FLOATS).into()],
        },
        20 | 21 => vec!["HSET".into(), k, f, v],
        22 => vec!["HSET".into(), k, f, v, pick(rng, FIELDS).into(), "z".into()],
        23 => vec!["HGET".into(), k, f],
        24 => vec!["HMGET".into(), k, f, pick(rng, FIELDS).into()],
        25 => vec!["HDEL".into(), k, f, pick(rng, FIELDS).into()],
        26 => vec!["HEXISTS".into(), k, f],
        27 => vec!["HLEN".into(), k],
        28 => vec!["HINCRBY".into(), k, f, pick(rng, &["2", "-9", "x"]).into()],
        // Replies compared as sets: at the top level only.
        29..=31 if in_tx => vec!["HLEN".into(), k],
        29 => vec!["HKEYS".into(), k],
        30 => vec!["HVALS".into(), k],
        31 => vec!["HGETALL".into(), k],
        32 => vec!["TYPE".into(), k],
        33 => vec!["RENAME".into(), k, k2],
        34 => vec!["RENAMENX".into(), k, k2],
        35 => {
            // GT/LT compare deadlines: relative ones set a few ms apart would compare by
            // timing, so those flags get absolute times only.
            let absolute = rng.random_bool(0.5);
            let mut w: Vec<String> = if absolute {
                let (name, times) = if rng.random_bool(0.5) {
                    ("EXPIREAT", ["4000000000", "4100000000", "-1", "x"])
                } else {
                    ("PEXPIREAT", ["4000000000000", "4100000000000", "5", "x"])
                };
                vec![name.into(), k, pick(rng, &times).into()]
            } else {
                vec![
                    pick(rng, &["EXPIRE", "PEXPIRE"]).into(),
                    k,
                    pick(rng, &["100000", "200000", "-1", "x"]).into(),
                ]
            };
            if rng.random_bool(0.4) {
                let flags: &[&str] = if absolute {
                    &["NX", "XX", "GT", "LT", "BAD"]
                } else {
                    &["NX", "XX", "BAD"]
                };
                w.push(pick(rng, flags).into());
            }
            w
        }
        // Clock-dependent replies are normalised at the top level only.
        36 if in_tx => vec!["PERSIST".into(), k],
        36 => vec![
            pick(rng, &["TTL", "PTTL", "EXPIRETIME", "PEXPIRETIME"]).into(),
            k,
        ],
        37 => vec!["PERSIST".into(), k],
        38 => vec!["SETEX".into(), k, pick(rng, &["100", "0", "x"]).into(), v],
        39 => vec!["PSETEX".into(), k, pick(rng, &["100000", "-5"]).into(), v],
        40 => {
            let mut w = vec!["GETEX".into(), k];
            match rng.random_range(0..4) {
                0 => w.push("PERSIST".into()),
                1 => w.extend(["EX".into(), pick(rng, &["100", "0"]).into()]),
                _ => {}
            }
            w
        }
        41 => match rng.random_range(0..4) {
            0 => vec!["SET".into(), k],
            1 if in_tx => vec!["DBSIZE".into()],
            1 => vec![
                "KEYS".into(),
                pick(rng, &["*", "k*", "h?", "[kh]1", "*0", "nomatch"]).into(),
            ],
            2 => {
                let mut w = vec!["COPY".into(), k, k2];
                if rng.random_bool(0.5) {
                    w.push("REPLACE".into());
                }
                w
            }
            _ if in_tx => vec!["HSTRLEN".into(), k, f],
            _ => {
                let mut w = vec!["HSCAN".into(), k, "0".into()];
                if rng.random_bool(0.5) {
                    w.extend(["MATCH".into(), pick(rng, &["f[01]", "*", "x*"]).into()]);
                }
                w
            }
        },
        42 => vec!["NOSUCHCMD".into(), k],
        43 => vec!["HSETNX".into(), k, f, v],
        44 if in_tx || rng.random_bool(0.5) => vec!["HSTRLEN".into(), k, f],
        // Random picks: only a count larger than any hash (the whole hash, any order).
        44 => {
            let mut w = vec![
                "HRANDFIELD".into(),
                k,
                pick(rng, &["100", "100", "0", "x"]).into(),
            ];
            if rng.random_bool(0.5) {
                w.push("WITHVALUES".into());
            }
            w
        }
        // Its own key, binary fractions only (see INCRBYFLOAT).
        45 => match rng.random_range(0..3) {
            0 => vec!["HGETALL".into(), "hf".into()],
            _ => vec![
                "HINCRBYFLOAT".into(),
                "hf".into(),
                pick(rng, &["a", "b"]).into(),
                pick(rng, FLOATS).into(),
            ],
        },
        46 => vec![
            "SELECT".into(),
            pick(rng, &["0", "0", "1", "2", "16", "-1", "x"]).into(),
        ],
        47 => {
            let mut w = vec![
                "COPY".into(),
                k,
                k2,
                "DB".into(),
                pick(rng, &["0", "1", "2", "16"]).into(),
            ];
            if rng.random_bool(0.5) {
                w.push("REPLACE".into());
            }
            w
        }
        48 if in_tx => vec!["DBSIZE".into()],
        48 => {
            let mut w = vec!["SCAN".into(), "0".into(), "COUNT".into(), "1000".into()];
            if rng.random_bool(0.5) {
                w.extend([
                    "TYPE".into(),
                    pick(rng, &["string", "hash", "list", "set", "zset"]).into(),
                ]);
            }
            w
        }
        49 if rng.random_bool(0.5) => {
            vec!["MOVE".into(), k, pick(rng, &["0", "1", "2", "16"]).into()]
        }
        49 => vec!["FLUSHDB".into()],
        50..=69 => list_command(rng, k, k2, v, in_tx),
        70..=85 => set_command(rng, k, k2, in_tx),
        // ZSCAN pages are normalised at the top level only (their order is the servers' own).
        86..=109 => match zset_command(rng, k, k2) {
            w if in_tx && w[0] == "ZSCAN" => vec!["ZCARD".into(), w[1].clone()],
            w => w,
        },
        110..=112 => vec![
            "SWAPDB".into(),
            pick(rng, &["0", "0", "1", "2", "16", "x"]).into(),
            pick(rng, &["0", "1", "1", "2", "-1"]).into(),
        ],
        113..=118 => bit_command(rng, k),
        _ => vec!["DBSIZE".into()],
    };
    words
        .into_iter()
        .enumerate()
        .map(|(i, w)| {
            if i == 0 && rng.random_bool(0.1) {
                w.to_lowercase()
            } else {
                w
            }
        })
        .collect()
}

/// SETBIT, GETBIT or BITCOUNT, with offsets and ranges around the values' lengths and
/// now and then a bad argument.
fn bit_command(rng: &mut ChaCha8Rng, k: String) -> Vec<String> {
    let offset = |rng: &mut ChaCha8Rng| {
        pick(
            rng,
            &[
                "0",
                "1",
                "7",
                "8",
                "13",
                "31",
                "64",
                "100",
                "-1",
                "x",
                "4294967296",
            ],
        )
        .to_string()
    };
    let index = |rng: &mut ChaCha8Rng| rng.random_range(-12i64..14).to_string();
    match rng.random_range(0..5) {
        0 | 1 => vec![
            "SETBIT".into(),
            k,
            offset(rng),
            pick(rng, &["1", "0", "1", "2", "x"]).into(),
        ],
        2 => vec!["GETBIT".into(), k, offset(rng)],
        3 => vec!["BITCOUNT".into(), k],
        _ => {
            let mut w = vec!["BITCOUNT".into(), k, index(rng)];
            if rng.random_bool(0.9) {
                w.push(index(rng));
            }
            if rng.random_bool(0.5) {
                w.push(pick(rng, &["BIT", "BYTE", "bit", "BITS"]).into());
            }
            w
        }
    }
}

/// A list command (blocking ones with a short timeout on keys that may be empty).
fn list_command(
    rng: &mut ChaCha8Rng,
    k: String,
    k2: String,
    v: String,
    in_tx: bool,
) -> Vec<String> {
    let e = pick(rng, &["a", "b", "c", "a"]).to_string();
    let idx = rng.random_range(-4i64..5).to_string();
    let idx2 = rng.random_range(-4i64..5).to_string();
    let end = |rng: &mut ChaCha8Rng| pick(rng, &["LEFT", "RIGHT", "left", "UP"]).to_string();
    match rng.random_range(0..22) {
        0..=2 => vec![pick(rng, &["LPUSH", "RPUSH"]).into(), k, e, v],
        3 => vec![pick(rng, &["LPUSHX", "RPUSHX"]).into(), k, e],
        4 => vec![pick(rng, &["LPOP", "RPOP"]).into(), k],
        5 => vec![
            pick(rng, &["LPOP", "RPOP"]).into(),
            k,
            pick(rng, &["0", "1", "2", "10", "-1", "x"]).into(),
        ],
        6 => vec!["LLEN".into(), k],
        7 | 8 => vec!["LRANGE".into(), k, idx, idx2],
        9 => vec!["LINDEX".into(), k, idx],
        10 => vec!["LSET".into(), k, idx, e],
        11 => vec![
            "LREM".into(),
            k,
            pick(rng, &["0", "1", "-1", "2", "x"]).into(),
            e,
        ],
        12 => vec!["LTRIM".into(), k, idx, idx2],
        13 => vec![
            "LINSERT".into(),
            k,
            pick(rng, &["BEFORE", "AFTER", "after", "NEAR"]).into(),
            e,
            v,
        ],
        14 => {
            let mut w = vec!["LPOS".into(), k, e];
            for (opt, vals) in [
                ("RANK", &["1", "-1", "2", "0", "-2"][..]),
                ("COUNT", &["0", "1", "2", "-1"][..]),
                ("MAXLEN", &["0", "2", "-1"][..]),
            ] {
                if rng.random_bool(0.3) {
                    w.push(opt.into());
                    w.push(pick(rng, vals).into());
                }
            }
            w
        }
        15 => vec!["LMOVE".into(), k, k2, end(rng), end(rng)],
        16 => vec!["RPOPLPUSH".into(), k, k2],
        // Blocking on an empty key costs its timeout on both servers: kept rare.
        17..=19 if !in_tx && rng.random_bool(0.85) => vec!["LLEN".into(), k],
        // Short timeouts: an empty key blocks for 10 ms on both servers, then answers nil.
        17 => {
            let t = if in_tx {
                "0"
            } else {
                pick(rng, &["0.01", "-1", "x"])
            };
            vec![pick(rng, &["BLPOP", "BRPOP"]).into(), k, k2, t.into()]
        }
        18 => {
            let t = if in_tx {
                "0"
            } else {
                pick(rng, &["0.01", "-1"])
            };
            vec!["BLMOVE".into(), k, k2, end(rng), end(rng), t.into()]
        }
        19 => vec![
            "BRPOPLPUSH".into(),
            k,
            k2,
            if in_tx { "0" } else { "0.01" }.into(),
        ],
        _ => vec!["RPUSH".into(), k, e, v, pick(rng, VALUES).into()],
    }
}

/// A set command (random members only where the whole set is returned).
fn set_command(rng: &mut ChaCha8Rng, k: String, k2: String, in_tx: bool) -> Vec<String> {
    let m = pick(rng, &["a", "b", "c", "d", "1", "2"]).to_string();
    let m2 = pick(rng, &["a", "b", "c", "d", "1", "2"]).to_string();
    let k3 = pick(rng, KEYS).to_string();
    match rng.random_range(0..18) {
        0..=3 => vec!["SADD".into(), k, m, m2],
        4 => vec!["SREM".into(), k, m, m2],
        5 => vec!["SISMEMBER".into(), k, m],
        6 => vec!["SMISMEMBER".into(), k, m, m2],
        7 => vec!["SCARD".into(), k],
        // Replies compared as sets: at the top level only.
        8..=12 if in_tx => vec!["SCARD".into(), k],
        8 => vec!["SMEMBERS".into(), k],
        9 => vec![pick(rng, &["SINTER", "SUNION", "SDIFF"]).into(), k, k2, k3],
        10 => vec![pick(rng, &["SRANDMEMBER", "SPOP"]).into(), k, "100".into()],
        11 => vec!["SSCAN".into(), k, "0".into(), "COUNT".into(), "100".into()],
        12 => vec!["SRANDMEMBER".into(), k, pick(rng, &["0", "x"]).into()],
        13 => vec![
            pick(rng, &["SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE"]).into(),
            k,
            k2,
            k3,
        ],
        14 => vec!["SMOVE".into(), k, k2, m],
        15 => {
            let mut w = vec![
                "SINTERCARD".into(),
                pick(rng, &["2", "1", "0", "5"]).into(),
                k,
                k2,
            ];
            if rng.random_bool(0.4) {
                w.extend(["LIMIT".into(), pick(rng, &["0", "1", "-1"]).into()]);
            }
            w
        }
        _ => vec!["SADD".into(), k, m],
    }
}

/// A sorted-set command. BYLEX ranges go to `zl`, whose scores are all 0 (Redis defines
/// them for equal scores only).
fn zset_command(rng: &mut ChaCha8Rng, k: String, k2: String) -> Vec<String> {
    let m = pick(rng, &["a", "b", "c", "d", "e"]).to_string();
    let m2 = pick(rng, &["a", "b", "c", "d", "e"]).to_string();
    let score = |rng: &mut ChaCha8Rng| {
        pick(
            rng,
            &["1", "2", "2.5", "-1", "0", "0.1", "inf", "-inf", "1e3", "x"],
        )
        .to_string()
    };
    let bound = |rng: &mut ChaCha8Rng| {
        pick(
            rng,
            &["-inf", "+inf", "0", "(0", "1", "(2", "2.5", "-1", "x"],
        )
        .to_string()
    };
    let lex =
        |rng: &mut ChaCha8Rng| pick(rng, &["-", "+", "[a", "(b", "[c", "(e", "x"]).to_string();
    let rank = |rng: &mut ChaCha8Rng| rng.random_range(-4i64..5).to_string();
    let limit = |rng: &mut ChaCha8Rng, w: &mut Vec<String>| {
        if rng.random_bool(0.3) {
            w.extend([
                "LIMIT".into(),
                pick(rng, &["0", "1", "-1"]).into(),
                pick(rng, &["1", "2", "-1", "0"]).into(),
            ]);
        }
    };
    match rng.random_range(0..24) {
        0..=3 => {
            let mut w = vec!["ZADD".into(), k];
            for flag in ["NX", "XX", "GT", "LT", "CH", "INCR"] {
                if rng.random_bool(0.12) {
                    w.push(flag.into());
                }
            }
            w.extend([score(rng), m]);
            if rng.random_bool(0.5) {
                w.extend([score(rng), m2]);
            }
            w
        }
        4 => vec!["ZINCRBY".into(), k, score(rng), m],
        5 => vec!["ZSCORE".into(), k, m],
        6 => vec!["ZMSCORE".into(), k, m, m2],
        7 => vec![pick(rng, &["ZRANK", "ZREVRANK"]).into(), k, m],
        8 => vec!["ZCARD".into(), k],
        9 => vec!["ZCOUNT".into(), k, bound(rng), bound(rng)],
        10 | 11 => {
            let mut w = vec![
                pick(rng, &["ZRANGE", "ZREVRANGE"]).into(),
                k,
                rank(rng),
                rank(rng),
            ];
            if rng.random_bool(0.5) {
                w.push("WITHSCORES".into());
            }
            w
        }
        12 | 13 => {
            let mut w = vec![
                pick(rng, &["ZRANGEBYSCORE", "ZREVRANGEBYSCORE"]).into(),
                k,
                bound(rng),
                bound(rng),
            ];
            if rng.random_bool(0.5) {
                w.push("WITHSCORES".into());
            }
            limit(rng, &mut w);
            w
        }
        14 => {
            let mut w = vec!["ZRANGE".into(), k, bound(rng), bound(rng), "BYSCORE".into()];
            if rng.random_bool(0.5) {
                w.push("REV".into());
            }
            limit(rng, &mut w);
            if rng.random_bool(0.3) {
                w.push("WITHSCORES".into());
            }
            w
        }
        15 => match rng.random_range(0..4) {
            0 => vec!["ZADD".into(), "zl".into(), "0".into(), m, "0".into(), m2],
            1 => {
                let mut w = vec![
                    pick(rng, &["ZRANGEBYLEX", "ZREVRANGEBYLEX"]).into(),
                    "zl".into(),
                    lex(rng),
                    lex(rng),
                ];
                limit(rng, &mut w);
                w
            }
            2 => vec!["ZLEXCOUNT".into(), "zl".into(), lex(rng), lex(rng)],
            _ => vec!["ZREMRANGEBYLEX".into(), "zl".into(), lex(rng), lex(rng)],
        },
        16 => vec![
            pick(rng, &["ZPOPMIN", "ZPOPMAX"]).into(),
            k,
            pick(rng, &["1", "2", "0", "-1"]).into(),
        ],
        17 => vec![pick(rng, &["ZPOPMIN", "ZPOPMAX"]).into(), k],
        18 => vec!["ZREM".into(), k, m, m2],
        19 => vec!["ZREMRANGEBYSCORE".into(), k, bound(rng), bound(rng)],
        20 => vec!["ZREMRANGEBYRANK".into(), k, rank(rng), rank(rng)],
        21 => vec!["ZSCAN".into(), k, "0".into(), "COUNT".into(), "100".into()],
        22 => vec!["ZRANGE".into(), k, "0".into(), "-1".into(), "BYLEX".into()],
        _ => vec!["ZADD".into(), k2, score(rng), m],
    }
}

/// How a command's reply is compared.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Order {
    /// As it is.
    Exact,
    /// As a set of items (Redis answers in hash-table or insertion order).
    Items,
    /// As a set of (field, value) pairs.
    Pairs,
}

fn order_of(command: &str) -> Order {
    let is = |names: &[&str]| names.iter().any(|n| command.eq_ignore_ascii_case(n));
    if is(&[
        "KEYS",
        "HKEYS",
        "HVALS",
        "SMEMBERS",
        "SINTER",
        "SUNION",
        "SDIFF",
        "SRANDMEMBER",
        "SPOP",
    ]) {
        Order::Items
    } else if is(&["HGETALL"]) {
        Order::Pairs
    } else {
        Order::Exact
    }
}

fn sorted(items: Vec<String>, order: Order) -> Vec<String> {
    match order {
        Order::Exact => items,
        Order::Items => {
            let mut items = items;
            items.sort();
            items
        }
        Order::Pairs => {
            let mut pairs: Vec<String> = items.chunks(2).map(|c| c.join(" => ")).collect();
            pairs.sort();
            pairs
        }
    }
}

/// The reply, normalised where the servers may differ legitimately.
fn normalise(words: &[String], v: Value) -> String {
    let command = words.first().map_or("", String::as_str);
    let clocked = ["TTL", "PTTL", "EXPIRETIME", "PEXPIRETIME"]
        .iter()
        .any(|c| command.eq_ignore_ascii_case(c));
    let scan = ["SCAN", "HSCAN", "SSCAN", "ZSCAN"]
        .iter()
        .any(|c| command.eq_ignore_ascii_case(c));
    match v {
        Value::Int(n) if clocked && n > 0 => "positive".into(),
        Value::Array(items) if scan && items.len() == 2 => {
            // [cursor, page]: the page's order is the servers' own.
            let mut it = items.into_iter();
            let cursor = it.next().map(|c| normalise(&[], c)).unwrap_or_default();
            let page = match it.next() {
                Some(Value::Array(page)) => page,
                _ => Vec::new(),
            };
            let values = command.eq_ignore_ascii_case("HSCAN")
                && !words.iter().any(|w| w.eq_ignore_ascii_case("NOVALUES"));
            let order = if values { Order::Pairs } else { Order::Items };
            let page: Vec<String> = page.into_iter().map(|i| normalise(&[], i)).collect();
            format!("[{cursor}, [{}]]", sorted(page, order).join(", "))
        }
        Value::Array(items) => {
            let inner: Vec<String> = items.into_iter().map(|i| normalise(&[], i)).collect();
            let order = if command.eq_ignore_ascii_case("HRANDFIELD") {
                if words.iter().any(|w| w.eq_ignore_ascii_case("WITHVALUES")) {
                    Order::Pairs
                } else {
                    Order::Items
                }
            } else {
                order_of(command)
            };
            format!("[{}]", sorted(inner, order).join(", "))
        }
        Value::BulkString(b) => format!("{:?}", String::from_utf8_lossy(&b)),
        Value::ServerError(e) => format!("error {} {}", e.code(), e.details().unwrap_or("")),
        other => format!("{other:?}"),
    }
}

fn send(con: &mut redis::Connection, words: &[String]) -> String {
    let mut c = redis::Cmd::new();
    for w in words {
        c.arg(w.as_str());
    }
    match c.query::<Value>(con) {
        Ok(v) => normalise(words, v),
        Err(e) => format!(
            "error {} {}",
            e.code().unwrap_or("?"),
            e.detail().unwrap_or_default()
        ),
    }
}

#[test]
fn random_sequences_answer_as_redis_does() {
    let Some(bin) = redis_binary() else {
        eprintln!(
            "\n\n!!!!! SKIPPED: no redis-server binary (install Debian's redis-server, as \
             .ci/run does, or set REDIS_SERVER) — the differential test did not run !!!!!\n"
        );
        return;
    };
    let redis = start_redis(&bin);
    let srv = common::start("dram:btree");
    let mut ours = srv.client();
    let mut theirs = redis::Client::open(format!("redis://127.0.0.1:{}/", redis.port))
        .unwrap()
        .get_connection()
        .unwrap();
    let seed = std::env::var("TIERKV_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x7e57_5eed_u64);
    let sequences: usize = std::env::var("TIERKV_DIFF_SEQUENCES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    println!("seed {seed}, {sequences} sequences (TIERKV_TEST_SEED, TIERKV_DIFF_SEQUENCES)");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let started = Instant::now();
    let mut commands = 0usize;
    for seq in 0..sequences {
        for reset in [
            vec!["SELECT".to_string(), "0".into()],
            vec!["FLUSHALL".to_string()],
        ] {
            assert_eq!(send(&mut ours, &reset), send(&mut theirs, &reset));
        }
        let mut history: Vec<String> = Vec::new();
        let len = rng.random_range(5..25);
        let mut i = 0;
        while i < len {
            // Now and then a transaction of a few commands (some with queuing errors).
            let block: Vec<Vec<String>> = if rng.random_bool(0.1) {
                let mut b = vec![vec!["MULTI".to_string()]];
                for _ in 0..rng.random_range(1..5) {
                    b.push(random_command(&mut rng, true));
                }
                b.push(vec![
                    pick(&mut rng, &["EXEC", "EXEC", "EXEC", "DISCARD"]).into(),
                ]);
                b
            } else {
                vec![random_command(&mut rng, false)]
            };
            for words in block {
                let (a, b) = (send(&mut ours, &words), send(&mut theirs, &words));
                history.push(format!("{} -> {b}", words.join(" ")));
                commands += 1;
                assert_eq!(
                    a,
                    b,
                    "sequence {seq} (seed {seed}) differs at `{}`:\ntierkv: {a}\nredis:  {b}\nhistory:\n{}",
                    words.join(" "),
                    history.join("\n")
                );
            }
            i += 1;
        }
    }
    println!(
        "{sequences} sequences, {commands} commands, identical replies, in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
