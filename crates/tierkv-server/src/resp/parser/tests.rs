//! Unit tests of the request parser: framing, resumption across reads, every limit.

use bytes::BytesMut;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::*;

fn limits() -> ParserLimits {
    ParserLimits {
        max_bulk_len: 1000,
        max_args: 100,
        max_request_bytes: 5000,
        max_commands: 1000,
    }
}

fn encode(cmd: &[&[u8]]) -> Vec<u8> {
    let mut v = format!("*{}\r\n", cmd.len()).into_bytes();
    for a in cmd {
        v.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        v.extend_from_slice(a);
        v.extend_from_slice(b"\r\n");
    }
    v
}

/// Parses everything in `buf`, returning the commands and leaving the rest in `buf`.
fn drain(p: &mut RequestParser, buf: &mut BytesMut) -> Result<Vec<Vec<Vec<u8>>>, ProtocolError> {
    let mut out = Vec::new();
    loop {
        p.parse(buf)?;
        if p.complete_commands() == 0 {
            return Ok(out);
        }
        let mut b = Batch::default();
        p.take_batch(buf, &mut b);
        for i in 0..b.len() {
            let a = b.command(i).unwrap();
            out.push(a.iter_from(0).map(<[u8]>::to_vec).collect());
        }
    }
}

fn parse_all(input: &[u8]) -> Result<Vec<Vec<Vec<u8>>>, ProtocolError> {
    let mut p = RequestParser::new(limits(), true);
    drain(&mut p, &mut BytesMut::from(input))
}

#[test]
fn pipelined_arrays_parse_in_one_pass() {
    let mut input = encode(&[b"SET", b"k", b"v"]);
    input.extend(encode(&[b"GET", b"k"]));
    let mut p = RequestParser::new(limits(), true);
    p.parse(&input).unwrap();
    assert_eq!(p.complete_commands(), 2);
    let mut buf = BytesMut::from(&input[..]);
    let mut b = Batch::default();
    p.take_batch(&mut buf, &mut b);
    assert!(buf.is_empty());
    assert_eq!(b.command(0).unwrap().get(2), b"v");
    assert_eq!(b.command(1).unwrap().get(0), b"GET");
}

#[test]
fn command_arriving_byte_by_byte_is_resumed_not_rescanned() {
    let input = encode(&[b"SET", b"key", b"value with spaces"]);
    let mut p = RequestParser::new(limits(), true);
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    for &byte in &input {
        buf.extend_from_slice(&[byte]);
        got.extend(drain(&mut p, &mut buf).unwrap());
    }
    assert_eq!(
        got,
        vec![vec![
            b"SET".to_vec(),
            b"key".to_vec(),
            b"value with spaces".to_vec()
        ]]
    );
    assert!(buf.is_empty());
}

#[test]
fn half_received_command_survives_taking_a_batch() {
    let mut input = encode(&[b"GET", b"a"]);
    let second = encode(&[b"SET", b"b", b"xyz"]);
    input.extend_from_slice(&second[..9]);
    let mut p = RequestParser::new(limits(), true);
    let mut buf = BytesMut::from(&input[..]);
    assert_eq!(drain(&mut p, &mut buf).unwrap().len(), 1);
    assert_eq!(&buf[..], &second[..9]);
    buf.extend_from_slice(&second[9..]);
    let rest = drain(&mut p, &mut buf).unwrap();
    assert_eq!(
        rest,
        vec![vec![b"SET".to_vec(), b"b".to_vec(), b"xyz".to_vec()]]
    );
}

#[test]
fn random_commands_in_random_chunks_round_trip() {
    let seed = tierkv_testkit::rig::seed("resp_parser_random_chunks");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let cmds: Vec<Vec<Vec<u8>>> = (0..200)
        .map(|_| {
            (0..rng.random_range(1..6))
                .map(|_| {
                    let n = rng.random_range(0..40);
                    (0..n).map(|_| rng.random()).collect()
                })
                .collect()
        })
        .collect();
    let mut input = Vec::new();
    for c in &cmds {
        let refs: Vec<&[u8]> = c.iter().map(Vec::as_slice).collect();
        input.extend(encode(&refs));
    }
    let mut p = RequestParser::new(limits(), true);
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    let mut at = 0;
    while at < input.len() {
        let n = rng.random_range(1..64).min(input.len() - at);
        buf.extend_from_slice(&input[at..at + n]);
        at += n;
        got.extend(drain(&mut p, &mut buf).unwrap());
    }
    assert_eq!(got, cmds);
}

#[test]
fn inline_commands_and_empty_requests() {
    let got = parse_all(b"PING\r\n\r\n*0\r\nECHO \"a b\"\nGET k\r\n").unwrap();
    assert_eq!(
        got,
        vec![
            vec![b"PING".to_vec()],
            vec![b"ECHO".to_vec(), b"a b".to_vec()],
            vec![b"GET".to_vec(), b"k".to_vec()]
        ]
    );
}

#[test]
fn an_over_long_argument_refuses_its_command_and_the_stream_goes_on() {
    let big = vec![b'v'; 3000];
    let mut input = encode(&[b"SET", b"k", &big, b"tail"]);
    input.extend(encode(&[b"GET", b"k"]));
    let mut p = RequestParser::new(limits(), true);
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    let mut most_buffered = 0;
    let mut refused = 0;
    for chunk in input.chunks(100) {
        buf.extend_from_slice(chunk);
        most_buffered = most_buffered.max(buf.len());
        p.parse(&buf).unwrap();
        if p.complete_commands() > 0 {
            let mut b = Batch::default();
            p.take_batch(&mut buf, &mut b);
            for i in 0..b.len() {
                refused += usize::from(b.refused(i));
                got.push(
                    b.command(i)
                        .unwrap()
                        .iter_from(0)
                        .map(<[u8]>::to_vec)
                        .collect::<Vec<_>>(),
                );
            }
        }
        p.discard_refused(&mut buf);
    }
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(refused, 1);
    let error = String::from_utf8_lossy(&got[0][0]).into_owned();
    assert!(
        error.starts_with("ERR argument of 3000 bytes is too long: arguments are limited to 1000"),
        "{error}"
    );
    assert_eq!(got[1], vec![b"GET".to_vec(), b"k".to_vec()]);
    assert!(buf.is_empty());
    // The skipped value was dropped as it came, never buffered whole.
    assert!(most_buffered < 300, "{most_buffered}");
}

#[test]
fn an_argument_over_the_skippable_bound_is_a_protocol_error() {
    let header = format!("*2\r\n$3\r\nGET\r\n${}\r\n", MAX_SKIPPABLE_BULK + 1);
    let e = parse_all(header.as_bytes()).unwrap_err();
    assert!(e.to_string().contains("invalid bulk length"), "{e}");
    // Not authenticated: Redis's rule, the connection closes.
    let mut p = RequestParser::new(limits(), false);
    let e = drain(
        &mut p,
        &mut BytesMut::from(&b"*2\r\n$3\r\nGET\r\n$20000\r\n"[..]),
    )
    .unwrap_err();
    assert!(e.to_string().contains("unauthenticated bulk length"), "{e}");
}

#[test]
fn malformed_frames_are_protocol_errors() {
    let cases: &[(&[u8], &str)] = &[
        (b"*2\r\n+GET\r\n", "expected '$', got '+'"),
        (b"*1\r\n$-5\r\n", "invalid bulk length"),
        (b"*1\r\n$x\r\n", "invalid bulk length"),
        (b"*x\r\n", "invalid multibulk length"),
        (b"*101\r\n", "invalid multibulk length"),
        (b"*1\r\n$3\r\nGETxx", "not followed by CRLF"),
        (b"*1\r\n$3\rx", "not ended by CRLF"),
        (b"SET \"k v\r\n", "unbalanced quotes"),
    ];
    for (input, want) in cases {
        let e = parse_all(input).unwrap_err().to_string();
        assert!(
            e.contains(want),
            "{:?}: {e}",
            String::from_utf8_lossy(input)
        );
    }
}

#[test]
fn endless_header_or_inline_line_is_refused() {
    let mut star = b"*".to_vec();
    star.extend(std::iter::repeat_n(b'1', MAX_HEADER_LINE));
    assert!(parse_all(&star).unwrap_err().to_string().contains("mbulk"));
    let inline = vec![b'a'; MAX_INLINE_LEN + 1];
    assert!(
        parse_all(&inline)
            .unwrap_err()
            .to_string()
            .contains("inline")
    );
    // Not yet over the bound: simply incomplete.
    assert!(parse_all(b"*12").unwrap().is_empty());
}

#[test]
fn request_bytes_are_bounded_across_arguments() {
    let big = vec![b'x'; 900];
    let refs: Vec<&[u8]> = std::iter::once(&b"MSET"[..])
        .chain(std::iter::repeat_n(&big[..], 6))
        .collect();
    let e = parse_all(&encode(&refs)).unwrap_err();
    assert!(e.to_string().contains("request too large"), "{e}");
}

#[test]
fn unauthenticated_clients_get_tight_limits_and_one_command_per_batch() {
    let mut input = encode(&[b"AUTH", b"pw"]);
    input.extend(encode(&[b"PING"]));
    let mut p = RequestParser::new(limits(), false);
    p.parse(&input).unwrap();
    assert_eq!(p.complete_commands(), 1);
    let eleven: Vec<&[u8]> = std::iter::repeat_n(&b"a"[..], 11).collect();
    let mut p = RequestParser::new(limits(), false);
    let e = p.parse(&encode(&eleven)).unwrap_err();
    assert!(e.to_string().contains("unauthenticated multibulk"), "{e}");
    let mut p = RequestParser::new(limits(), true);
    p.parse(&encode(&eleven)).unwrap();
    assert_eq!(p.complete_commands(), 1);
}

#[test]
fn wanted_len_announces_a_large_argument() {
    let mut p = RequestParser::new(limits(), true);
    p.parse(b"*2\r\n$3\r\nGET\r\n$900\r\nab").unwrap();
    assert_eq!(p.wanted_len(), Some(19 + 900 + 2));
}

proptest::proptest! {
    /// Arbitrary bytes in arbitrary chunks: the parser returns commands or an error, never
    /// panics, and every argument it hands out lies inside the batch's bytes.
    #[test]
    fn arbitrary_input_never_panics_and_spans_stay_inside(
        input in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600),
        chunk in 1usize..64,
        prefix_resp in proptest::prelude::any::<bool>(),
    ) {
        let mut input = input;
        if prefix_resp {
            input.splice(0..0, b"*3\r\n$3\r\nSET\r\n$".iter().copied());
        }
        let mut p = RequestParser::new(limits(), true);
        let mut buf = BytesMut::new();
        'feed: for piece in input.chunks(chunk) {
            buf.extend_from_slice(piece);
            loop {
                if p.parse(&buf).is_err() {
                    break 'feed;
                }
                if p.complete_commands() == 0 {
                    break;
                }
                let mut b = Batch::default();
                p.take_batch(&mut buf, &mut b);
                let room = b.data.len() + b.extra.len();
                for i in 0..b.len() {
                    let a = b.command(i).unwrap();
                    proptest::prop_assert!(!a.is_empty());
                    let used: usize = a.iter_from(0).map(<[u8]>::len).sum();
                    proptest::prop_assert!(used <= room);
                }
            }
            p.discard_refused(&mut buf);
        }
    }
}
