//! Limits: the store's key and value limits as Redis-style errors, over-long arguments
//! refused without buffering them and without closing the connection, the request, reply
//! and client bounds, and the throttle of a client that sends without reading.

mod common;

use std::io::{ErrorKind, Write};
use std::time::{Duration, Instant};

use redis::{Commands, cmd};
use tierkv::{ByteSize, Limits, Options};
use tierkv_server::ServerConfig;

const VALUE_LIMIT: usize = 64 << 10;

fn small_limits(config: ServerConfig) -> common::TestServer {
    let options = Options::default().engine("dram:btree").limits(Limits {
        max_key_len: 1024,
        max_value_len: VALUE_LIMIT,
    });
    common::start_with(options, config)
}

#[test]
fn key_and_value_limits_are_errors_and_write_nothing() {
    let srv = small_limits(common::test_config());
    let mut c = srv.client();
    let long_key = "k".repeat(1025);
    let e = common::error_of(&mut c, cmd("SET").arg(&long_key).arg("v"));
    assert_eq!(
        e,
        "ERR key of 1025 bytes is longer than the limit of 1024 bytes"
    );
    let e = common::error_of(&mut c, cmd("SET").arg("").arg("v"));
    assert_eq!(e, "ERR empty key");
    // MSET checks every pair before writing any.
    let e = common::error_of(
        &mut c,
        cmd("MSET").arg("ok").arg("1").arg(&long_key).arg("2"),
    );
    assert!(e.contains("longer than the limit"), "{e}");
    assert!(
        !c.exists::<_, bool>("ok").unwrap(),
        "a refused MSET wrote nothing"
    );
    // Growing a value past the limit.
    c.set::<_, _, ()>("s", vec![b'x'; VALUE_LIMIT - 10])
        .unwrap();
    let e = common::error_of(&mut c, cmd("APPEND").arg("s").arg("0123456789A"));
    assert!(
        e.starts_with("ERR string exceeds maximum allowed size"),
        "{e}"
    );
    assert_eq!(
        cmd("STRLEN").arg("s").query::<usize>(&mut c).unwrap(),
        VALUE_LIMIT - 10
    );
    // A hash is stored per field (format 2): its size is not bounded by the value limit,
    // each field's value is, and a field name with its key by the key limit.
    let half = vec![b'y'; VALUE_LIMIT / 2];
    for f in ["a", "b", "c"] {
        c.hset::<_, _, _, i64>("h", f, &half).unwrap();
    }
    assert_eq!(c.hlen::<_, i64>("h").unwrap(), 3);
    let long_field = "f".repeat(1024);
    let e = common::error_of(
        &mut c,
        cmd("HSET")
            .arg("h")
            .arg("d")
            .arg("1")
            .arg(&long_field)
            .arg("v"),
    );
    assert!(
        e.contains("over the store's key limit of 1024 bytes"),
        "{e}"
    );
    assert_eq!(
        c.hlen::<_, i64>("h").unwrap(),
        3,
        "a refused HSET wrote nothing"
    );
    assert!(!c.hexists::<_, _, bool>("h", "d").unwrap());
}

#[test]
fn an_over_long_argument_is_an_error_and_the_connection_keeps_working() {
    let srv = small_limits(common::test_config());
    let mut s = srv.raw();
    let want = |len: usize| {
        format!(
            "-ERR argument of {len} bytes is too long: arguments are limited to {VALUE_LIMIT} \
             bytes (the store's value limit); the command was not run\r\n"
        )
    };
    // Just over the limit, and 2 MiB (today's default limit is 1 MiB), in one pipeline
    // with commands before and after, and one inside MULTI (which then aborts).
    let two_mib = vec![b'v'; 2 << 20];
    let over = vec![b'v'; VALUE_LIMIT + 1];
    let mut req = common::resp(&[b"SET", b"a", b"1"]);
    req.extend(common::resp(&[b"SET", b"k", &over]));
    req.extend(common::resp(&[
        b"MSET", b"x", b"1", b"y", &two_mib, b"z", b"2",
    ]));
    req.extend(common::resp(&[b"MULTI"]));
    req.extend(common::resp(&[b"SET", b"m", b"1"]));
    req.extend(common::resp(&[b"APPEND", b"m", &over]));
    req.extend(common::resp(&[b"EXEC"]));
    req.extend(common::resp(&[b"GET", b"a"]));
    let mut expected = format!("+OK\r\n{}{}", want(VALUE_LIMIT + 1), want(2 << 20));
    expected.push_str("+OK\r\n+QUEUED\r\n");
    expected.push_str(&want(VALUE_LIMIT + 1));
    expected.push_str("-EXECABORT Transaction discarded because of previous errors.\r\n");
    expected.push_str("$1\r\n1\r\n");
    let got = common::exchange(&mut s, &req, |b| b.ends_with(b"$1\r\n1\r\n"));
    assert_eq!(String::from_utf8_lossy(&got), expected);
    // Nothing of the refused commands was written.
    let mut c = srv.client();
    for k in ["k", "x", "y", "z", "m"] {
        assert!(!c.exists::<_, bool>(k).unwrap(), "{k}");
    }
    // A client library sending the whole value gets the error and keeps its connection.
    let id: i64 = cmd("CLIENT").arg("ID").query(&mut c).unwrap();
    let e = c
        .set::<_, _, ()>("k", vec![b'v'; VALUE_LIMIT + 1])
        .unwrap_err();
    assert!(e.to_string().contains("is too long"), "{e}");
    assert_eq!(cmd("CLIENT").arg("ID").query::<i64>(&mut c).unwrap(), id);
    c.set::<_, _, ()>("k", vec![b'v'; VALUE_LIMIT]).unwrap();
    assert_eq!(c.strlen::<_, usize>("k").unwrap(), VALUE_LIMIT);
    // Past Redis's proto-max-bulk-len the stream is not skipped: protocol error, closed.
    let mut s = srv.raw();
    let header = format!("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n${}\r\n", (512 << 20) + 1);
    let got = common::exchange(&mut s, header.as_bytes(), |_| false);
    assert!(
        String::from_utf8_lossy(&got).starts_with("-ERR Protocol error: invalid bulk length"),
        "{}",
        String::from_utf8_lossy(&got)
    );
}

#[test]
fn request_and_reply_bounds() {
    let srv = small_limits(ServerConfig {
        max_request_bytes: ByteSize::kib(200),
        max_reply_bytes: ByteSize::kib(300),
        ..common::test_config()
    });
    let mut c = srv.client();
    let v = vec![b'v'; VALUE_LIMIT];
    for i in 0..8 {
        c.set::<_, _, ()>(format!("v{i}"), &v).unwrap();
    }
    let keys: Vec<String> = (0..8).map(|i| format!("v{i}")).collect();
    let e = common::error_of(&mut c, cmd("MGET").arg(&keys));
    assert!(
        e.starts_with("ERR the reply would exceed max_reply_bytes"),
        "{e}"
    );
    let few: Vec<Vec<u8>> = c.mget(&keys[..2]).unwrap();
    assert_eq!(few.len(), 2, "the connection still works");
    let mut s = srv.raw();
    let pairs: Vec<&[u8]> = [&b"MSET"[..]]
        .into_iter()
        .chain((0..4).flat_map(|_| [&b"k"[..], v.as_slice()]))
        .collect();
    let got = common::exchange(&mut s, &common::resp(&pairs), |_| false);
    assert!(
        got.starts_with(b"-ERR Protocol error: request too large"),
        "{}",
        String::from_utf8_lossy(&got)
    );
}

#[test]
fn max_clients_is_enforced() {
    let srv = small_limits(ServerConfig {
        max_clients: 2,
        ..common::test_config()
    });
    let mut a = srv.client();
    let b = srv.client();
    let mut third = srv.raw();
    let got = common::read_until(&mut third, |_| false);
    assert_eq!(got, b"-ERR max number of clients reached\r\n");
    drop(b);
    // The slot frees once the server sees the departure.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut c = loop {
        let client = redis::Client::open(format!("redis://{}/", srv.addr)).unwrap();
        if let Ok(mut c) = client.get_connection()
            && cmd("PING").query::<String>(&mut c).is_ok()
        {
            break c;
        }
        assert!(
            Instant::now() < deadline,
            "the freed slot never became usable"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(cmd("PING").query::<String>(&mut c).unwrap(), "PONG");
    let info: String = cmd("INFO").arg("stats").query(&mut a).unwrap();
    assert!(!info.contains("rejected_connections:0\r\n"), "{info}");
}

#[test]
fn a_client_that_does_not_read_is_throttled_not_buffered() {
    let srv = small_limits(common::test_config());
    let mut c = srv.client();
    const VALUE: usize = 16 << 10;
    const PAD: usize = 4000;
    c.set::<_, _, ()>("mid", vec![b'b'; VALUE]).unwrap();
    // Each round is a 4 KiB ECHO and a GET of a 16 KiB value: unthrottled, the server would
    // buffer five times what the client sends, without end.
    let pad = "p".repeat(PAD);
    let mut one = format!("*2\r\n$4\r\nECHO\r\n${PAD}\r\n{pad}\r\n").into_bytes();
    one.extend_from_slice(b"*2\r\n$3\r\nGET\r\n$3\r\nmid\r\n");
    let mut s = srv.raw();
    s.set_nonblocking(true).unwrap();
    // `sent` counts bytes of the endless stream `one one one ...` written so far.
    let (mut sent, mut stalled_since) = (0usize, None::<Instant>);
    let cap = 256 << 20;
    while sent < cap {
        let at = sent % one.len();
        match s.write(&one[at..]) {
            Ok(n) => {
                sent += n;
                stalled_since = None;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                let since = *stalled_since.get_or_insert_with(Instant::now);
                if since.elapsed() > Duration::from_millis(500) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("write failed: {e}"),
        }
    }
    assert!(
        sent < cap,
        "the server kept reading a client that never reads"
    );
    let requests = sent.div_ceil(one.len());
    println!("client stalled after {sent} bytes ({requests} rounds)");
    let info: String = cmd("INFO").arg("stats").query(&mut c).unwrap();
    assert!(!info.contains("tierkv_output_throttles:0\r\n"), "{info}");
    // Now read every reply (in order, intact) while the last round is completed.
    s.set_nonblocking(false).unwrap();
    let echo_reply = PAD + format!("${PAD}\r\n").len() + 2;
    let get_reply = VALUE + format!("${VALUE}\r\n").len() + 2;
    let total = requests * (echo_reply + get_reply);
    let mut reader = s.try_clone().unwrap();
    let replies = std::thread::spawn(move || common::read_until(&mut reader, |b| b.len() >= total));
    let rest = (requests * one.len()) - sent;
    s.write_all(&one[one.len() - rest..]).unwrap();
    let got = replies.join().unwrap();
    assert_eq!(got.len(), total);
    assert!(got.ends_with(b"bbbb\r\n"));
}

/// Issue 23 finding 8: the server's value limit is the engine's own, the one `tierkv
/// engines` and the README give; a longer value is an error naming it.
#[test]
fn the_value_limit_is_the_engines_own() {
    let desc = tierkv::descriptor("hetermm").unwrap();
    let limit = desc.max_value_len.unwrap();
    let options = Options::default()
        .engine("hetermm")
        .pmem_size(ByteSize::mib(32));
    let srv = common::start_with(options, common::test_config());
    let mut c = srv.client();
    let info: String = cmd("INFO").query(&mut c).unwrap();
    assert!(info.contains(&format!("max_value_len:{limit}")), "{info}");
    let e = common::error_of(&mut c, cmd("SET").arg("k").arg(vec![b'x'; limit + 1]));
    // Refused by the parser already, with the same number.
    assert!(e.contains(&format!("limited to {limit} bytes")), "{e}");
    let fits = limit - 64;
    let mut c = srv.client();
    c.set::<_, _, ()>("k", vec![b'x'; fits]).unwrap();
    assert_eq!(c.get::<_, Vec<u8>>("k").unwrap().len(), fits);
}
