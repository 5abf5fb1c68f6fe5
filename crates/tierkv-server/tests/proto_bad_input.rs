//! Bad input over raw TCP: malformed frames, absurd lengths, half-sent commands, clients
//! that leave mid-pipeline, random garbage. The server answers or drops the connection,
//! never crashes, and the store is left holding exactly what complete commands wrote.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers: a failure here is a test failure"
)]

mod common;

use std::io::Write;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use redis::{Commands, cmd};

/// A valid command first, then the bad bytes: the valid one runs, the bad one gets a
/// protocol error, the connection closes.
#[test]
fn malformed_frames_get_a_protocol_error_and_close() {
    let srv = common::start("dram:btree");
    let mut long_header = b"*1\r\n$".to_vec();
    long_header.extend(std::iter::repeat_n(b'7', 70));
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"*2\r\n+GET\r\n".to_vec(), "expected '$', got '+'"),
        (b"*1\r\n$-5\r\n".to_vec(), "invalid bulk length"),
        (b"*abc\r\n".to_vec(), "invalid multibulk length"),
        (b"*3000000\r\n".to_vec(), "invalid multibulk length"),
        (
            b"*1\r\n$3\r\nGETxx".to_vec(),
            "bulk string not followed by CRLF",
        ),
        (
            b"*1\r\n$99999999999999999999\r\n".to_vec(),
            "invalid bulk length",
        ),
        (b"*1\r\n$2147483648\r\n".to_vec(), "invalid bulk length"),
        (long_header, "too big bulk count string"),
        (
            b"SET \"unbalanced\r\n".to_vec(),
            "unbalanced quotes in request",
        ),
        (vec![b'a'; 70 << 10], "too big inline request"),
    ];
    for (i, (bad, want)) in cases.iter().enumerate() {
        let mut s = srv.raw();
        let mut req = common::resp(&[b"SET", format!("before{i}").as_bytes(), b"ok"]);
        req.extend_from_slice(bad);
        let got = common::exchange(&mut s, &req, |_| false);
        let got = String::from_utf8_lossy(&got);
        let prefix = format!("+OK\r\n-ERR Protocol error: {want}");
        assert!(got.starts_with(&prefix), "case {i}: {got:?}");
        assert!(
            got.ends_with("\r\n") && got.lines().count() == 2,
            "case {i}: {got:?}"
        );
    }
    let mut c = srv.client();
    for i in 0..cases.len() {
        assert_eq!(c.get::<_, String>(format!("before{i}")).unwrap(), "ok");
    }
    let info: String = cmd("INFO").arg("stats").query(&mut c).unwrap();
    assert!(
        info.contains(&format!("tierkv_protocol_errors:{}\r\n", cases.len())),
        "{info}"
    );
}

#[test]
fn half_sent_command_then_disconnect_runs_nothing() {
    let srv = common::start("dram:btree");
    let full = common::resp(&[b"SET", b"half", b"0123456789"]);
    for cut in 1..full.len() {
        let mut s = srv.raw();
        s.write_all(&full[..cut]).unwrap();
        drop(s);
    }
    let mut c = srv.client();
    assert!(!c.exists::<_, bool>("half").unwrap());
    c.set::<_, _, ()>("alive", 1).unwrap();
}

/// Waits until `key`'s value stops changing (the server has drained a dead client).
fn settled(c: &mut redis::Connection, key: &str) -> Option<i64> {
    let mut last = c.get::<_, Option<i64>>(key).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        std::thread::sleep(Duration::from_millis(150));
        let now = c.get::<_, Option<i64>>(key).unwrap();
        if now == last {
            return now;
        }
        assert!(Instant::now() < deadline, "{key} never settled");
        last = now;
    }
}

#[test]
fn disconnect_mid_pipeline_leaves_a_consistent_prefix() {
    let seed = common::seed();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let srv = common::start("dram:hash");
    let mut c = srv.client();
    for round in 0..5 {
        let (counter, last) = (format!("n{round}"), format!("last{round}"));
        let mut pipeline = Vec::new();
        for i in 0..20_000 {
            pipeline.extend(common::resp(&[b"INCR", counter.as_bytes()]));
            pipeline.extend(common::resp(&[
                b"SET",
                last.as_bytes(),
                i.to_string().as_bytes(),
            ]));
        }
        // Cut anywhere, even inside a command, and leave without reading a reply.
        let cut = rng.random_range(1..pipeline.len());
        let mut s = srv.raw();
        let _ = s.write_all(&pipeline[..cut]);
        drop(s);
        let n = settled(&mut c, &counter).unwrap_or(0);
        let l: Option<i64> = c.get(&last).unwrap();
        // Commands run in order: after n INCRs, the SET of pair n-1 ran or not yet.
        let ok = match (n, l) {
            (0, None) | (1, None) => true,
            (n, Some(l)) => l == n - 1 || l == n - 2,
            _ => false,
        };
        assert!(
            ok,
            "round {round}: counter {n}, last {l:?} after a cut at byte {cut}"
        );
    }
}

#[test]
fn random_garbage_never_takes_the_server_down() {
    let seed = common::seed();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    c.set::<_, _, ()>("sentinel", "intact").unwrap();
    for _ in 0..150 {
        let len = rng.random_range(1..2048);
        let mut junk: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        if rng.random_bool(0.5) {
            // Make it look like RESP for a while.
            junk.splice(0..0, b"*3\r\n$3\r\nSET\r\n$".iter().copied());
        }
        let mut s = srv.raw();
        s.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let _ = s.write_all(&junk);
        // Half-close: the server sees the end of the stream after the junk.
        let _ = s.shutdown(std::net::Shutdown::Write);
        let _ = common::closed_by_peer(&mut s);
    }
    assert_eq!(c.get::<_, String>("sentinel").unwrap(), "intact");
    assert_eq!(cmd("PING").query::<String>(&mut c).unwrap(), "PONG");
}
