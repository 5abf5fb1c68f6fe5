//! Sorted sets (issue 25 item 4): ranks and score ranges over a set larger than a scan
//! page, ZRANGE's forms against each other, ZSCAN cursors, and what an unordered engine
//! answers.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers: a failure here is a test failure"
)]

mod common;

use std::collections::BTreeSet;

use redis::{Commands, cmd};

#[test]
fn ranks_and_ranges_over_a_large_sorted_set() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    // 1000 members, scores descending with the member number, with ties every 10.
    let n = 1000;
    for chunk in (0..n).collect::<Vec<i64>>().chunks(250) {
        let items: Vec<(f64, String)> = chunk
            .iter()
            .map(|i| ((-(i / 10)) as f64 - 0.5, format!("m{i:04}")))
            .collect();
        c.zadd_multiple::<_, _, _, i64>("z", &items).unwrap();
    }
    assert_eq!(c.zcard::<_, i64>("z").unwrap(), n);
    // Lowest score first; ties by member.
    let first: Vec<String> = c.zrange("z", 0, 2).unwrap();
    assert_eq!(first, ["m0990", "m0991", "m0992"]);
    assert_eq!(c.zrank::<_, _, i64>("z", "m0000").unwrap(), 990);
    assert_eq!(c.zrevrank::<_, _, i64>("z", "m0000").unwrap(), 9);
    let mid: Vec<String> = cmd("ZRANGEBYSCORE")
        .arg("z")
        .arg("(-3")
        .arg("-1")
        .query(&mut c)
        .unwrap();
    assert_eq!(mid.len(), 20, "{mid:?}");
    let via_zrange: Vec<String> = cmd("ZRANGE")
        .arg("z")
        .arg("-1")
        .arg("(-3")
        .arg("BYSCORE")
        .arg("REV")
        .query(&mut c)
        .unwrap();
    let mut reversed = mid.clone();
    reversed.reverse();
    assert_eq!(via_zrange, reversed);
    assert_eq!(
        common::run::<i64>(&mut c, "ZCOUNT z -inf +inf"),
        n,
        "ZCOUNT over everything"
    );
    assert_eq!(common::run::<i64>(&mut c, "ZREMRANGEBYRANK z 0 99"), 100);
    assert_eq!(c.zcard::<_, i64>("z").unwrap(), n - 100);
    let mut cursor = "0".to_string();
    let mut seen = BTreeSet::new();
    loop {
        let (next, page): (String, Vec<String>) = cmd("ZSCAN")
            .arg("z")
            .arg(&cursor)
            .arg("COUNT")
            .arg(128)
            .query(&mut c)
            .unwrap();
        for pair in page.chunks(2) {
            assert!(pair[1].parse::<f64>().is_ok(), "{pair:?}");
            assert!(seen.insert(pair[0].clone()), "{} twice", pair[0]);
        }
        cursor = next;
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(seen.len(), (n - 100) as usize);
}

#[test]
fn an_unordered_engine_keeps_point_operations_of_sorted_sets() {
    let srv = common::start("dram:hash");
    let mut c = srv.client();
    assert_eq!(common::run::<i64>(&mut c, "ZADD z 1 a 2 b"), 2);
    assert_eq!(common::run::<String>(&mut c, "ZSCORE z b"), "2");
    assert_eq!(common::run::<String>(&mut c, "ZINCRBY z 0.5 a"), "1.5");
    assert_eq!(common::run::<i64>(&mut c, "ZREM z a"), 1);
    assert_eq!(common::run::<i64>(&mut c, "ZCARD z"), 1);
    let e = common::error_of(&mut c, cmd("ZRANGE").arg("z").arg(0).arg(-1));
    assert!(e.contains("walks a collection's elements in order"), "{e}");
}

/// RESP3 (after `HELLO 3`, the default of redis-py 8): scores are doubles, and ranges and
/// pops given a count answer `[[member, score], ...]`; a pop without a count stays flat.
/// The expected bytes are redis-server 7.0.15's answers to the same commands. (redis-py 8
/// failed `zrevrange(..., withscores=True)` on the flat RESP2 shape: "too many values to
/// unpack".)
#[test]
fn resp3_replies_scores_as_doubles_and_ranges_as_pairs() {
    let srv = common::start("dram:btree");
    let mut s = srv.raw();
    let ends = |want: &'static [u8]| move |got: &[u8]| got.len() >= want.len();
    let hello = common::exchange(&mut s, &common::resp(&[b"HELLO", b"3"]), |g| {
        g.ends_with(b"\r\n") && g.windows(7).any(|w| w == b"modules")
    });
    assert!(
        hello.starts_with(b"%"),
        "{}",
        String::from_utf8_lossy(&hello)
    );
    let cases: &[(&[&[u8]], &[u8])] = &[
        (
            &[b"ZADD", b"z", b"1", b"a", b"2.5", b"b", b"3", b"c"],
            b":3\r\n",
        ),
        (
            &[b"ZRANGE", b"z", b"0", b"-1", b"WITHSCORES"],
            b"*3\r\n*2\r\n$1\r\na\r\n,1\r\n*2\r\n$1\r\nb\r\n,2.5\r\n*2\r\n$1\r\nc\r\n,3\r\n",
        ),
        (&[b"ZSCORE", b"z", b"b"], b",2.5\r\n"),
        (&[b"ZMSCORE", b"z", b"b", b"x"], b"*2\r\n,2.5\r\n_\r\n"),
        (&[b"ZINCRBY", b"z", b"1", b"c"], b",4\r\n"),
        (&[b"ZADD", b"z", b"INCR", b"1", b"c"], b",5\r\n"),
        (&[b"ZPOPMIN", b"z"], b"*2\r\n$1\r\na\r\n,1\r\n"),
        (
            &[b"ZPOPMIN", b"z", b"1"],
            b"*1\r\n*2\r\n$1\r\nb\r\n,2.5\r\n",
        ),
        (
            &[b"ZRANGEBYSCORE", b"z", b"-inf", b"+inf", b"WITHSCORES"],
            b"*1\r\n*2\r\n$1\r\nc\r\n,5\r\n",
        ),
        (
            &[b"ZREVRANGE", b"z", b"0", b"-1", b"WITHSCORES"],
            b"*1\r\n*2\r\n$1\r\nc\r\n,5\r\n",
        ),
        (
            &[b"ZSCAN", b"z", b"0"],
            b"*2\r\n$1\r\n0\r\n*2\r\n$1\r\nc\r\n$1\r\n5\r\n",
        ),
        (&[b"ZPOPMAX", b"nokey"], b"*0\r\n"),
    ];
    for (args, want) in cases {
        let got = common::exchange(&mut s, &common::resp(args), ends(want));
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(want),
            "{:?}",
            args.iter()
                .map(|a| String::from_utf8_lossy(a))
                .collect::<Vec<_>>()
        );
    }
}
