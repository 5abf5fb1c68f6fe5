//! End to end with the real binary: start `tierkv-server` on a temp dir, write through it,
//! stop it with SIGTERM while a pipeline is in flight (it must answer whole replies and
//! exit 0), restart it on the same directory, read back.
//!
//! The engine is a parameter: `TIERKV_E2E_ENGINES=spec,spec` (default: `dram:btree`,
//! `dram:hash` and `prism` with small buffers, so PWB reclamation runs during the test). For a volatile engine the
//! restarted store must be empty and healthy; for a persistent one every acknowledged
//! write must be there.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers: a failure here is a test failure"
)]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use redis::{Commands, cmd};

use common::proc::Proc;

fn start(dir: &Path, engine: Option<&str>) -> Proc {
    Proc::start_small(dir, engine)
}

fn engines() -> Vec<String> {
    std::env::var("TIERKV_E2E_ENGINES")
        .map(|v| v.split(',').map(str::to_owned).collect())
        .unwrap_or_else(|_| {
            vec![
                "dram:btree".into(),
                "dram:hash".into(),
                "prism@pwb_count=2,pwb_size=256KiB,chunk_size=64KiB".into(),
            ]
        })
}

#[test]
fn sigterm_finishes_in_flight_work_exits_0_and_the_store_reopens() {
    for engine in engines() {
        let name = engine.split([':', '@']).next().unwrap();
        let volatile = tierkv::descriptor(name).unwrap().volatile;
        let dir = tempfile::tempdir().unwrap();
        let p = start(dir.path(), Some(&engine));
        let mut c = p.client();
        c.set::<_, _, ()>("greeting", "hello").unwrap();
        c.hset::<_, _, _, i64>("h", "f", "v").unwrap();
        c.incr::<_, _, i64>("n", 41).unwrap();
        let acked = sigterm_during_a_pipeline(&p);
        let (status, log) = p.wait();
        assert!(status.success(), "{engine}: exit status {status}\n{log}");
        assert!(
            log.contains("SIGTERM: finishing in-flight commands"),
            "{log}"
        );
        assert!(log.contains("stopped; the store is closed"), "{log}");

        // Restart without --engine: the store's own engine is used.
        let p = start(dir.path(), None);
        let mut c = p.client();
        if volatile {
            assert_eq!(cmd("DBSIZE").query::<i64>(&mut c).unwrap(), 0, "{engine}");
            assert_eq!(c.get::<_, Option<String>>("greeting").unwrap(), None);
        } else {
            assert_eq!(c.get::<_, String>("greeting").unwrap(), "hello", "{engine}");
            assert_eq!(c.hget::<_, _, String>("h", "f").unwrap(), "v");
            assert_eq!(c.get::<_, i64>("n").unwrap(), 41);
            for i in 0..acked {
                assert!(
                    c.exists::<_, bool>(format!("p{i}")).unwrap(),
                    "{engine}: acked p{i} lost"
                );
            }
        }
        // Healthy either way.
        c.set::<_, _, ()>("after", "restart").unwrap();
        assert_eq!(c.get::<_, String>("after").unwrap(), "restart");
        drop(c);
        p.sigterm();
        let (status, log) = p.wait();
        assert!(status.success(), "{engine}: second exit {status}\n{log}");
    }
}

/// Sends a large pipeline, SIGTERMs the server once replies flow, reads what comes back;
/// returns how many writes were acknowledged (all replies must be whole).
fn sigterm_during_a_pipeline(p: &Proc) -> usize {
    let mut s = TcpStream::connect(p.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut burst = Vec::new();
    for i in 0..50_000 {
        burst.extend(common::resp(&[b"SET", format!("p{i}").as_bytes(), b"x"]));
    }
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        let _ = w.write_all(&burst);
    });
    let mut first = [0u8; 5];
    s.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"+OK\r\n");
    p.sigterm();
    let rest = common::read_until(&mut s, |_| false);
    assert_eq!(rest.len() % 5, 0, "a torn reply");
    assert!(rest.chunks(5).all(|r| r == b"+OK\r\n"));
    writer.join().unwrap();
    1 + rest.len() / 5
}

/// kill -9 of `serve --engine prism` during a stream of EXECs and expiring writes: after a
/// restart every acknowledged write is there with its deadline (TTLs survive a crash).
/// The one EXEC in flight at the kill is all-or-nothing: prism applies it as one write
/// batch (`crash_atomic_exec.rs` checks this over many clients and rounds).
#[test]
fn kill_9_during_execs_and_expiring_writes_keeps_every_acked_ttl() {
    let engine = "prism@pwb_count=2,pwb_size=256KiB,chunk_size=64KiB";
    let dir = tempfile::tempdir().unwrap();
    let mut p = start(dir.path(), Some(engine));
    let acked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let writer = {
        let (addr, acked) = (p.addr, acked.clone());
        std::thread::spawn(move || {
            let mut c = redis::Client::open(format!("redis://{addr}/"))
                .unwrap()
                .get_connection()
                .unwrap();
            for i in 0.. {
                let r1 = cmd("SETEX")
                    .arg(format!("t{i}"))
                    .arg(1000)
                    .arg(i)
                    .query::<()>(&mut c);
                let r2 = redis::pipe()
                    .atomic()
                    .set(format!("a{i}"), i)
                    .set(format!("b{i}"), i)
                    .cmd("PEXPIRE")
                    .arg(format!("a{i}"))
                    .arg(500_000)
                    .query::<(String, String, i64)>(&mut c);
                if r1.is_err() || r2.is_err() {
                    return;
                }
                acked.store(i + 1, std::sync::atomic::Ordering::SeqCst);
            }
        })
    };
    while acked.load(std::sync::atomic::Ordering::SeqCst) < 200 {
        std::thread::sleep(Duration::from_millis(10));
    }
    p.kill9();
    writer.join().unwrap();
    let acked = acked.load(std::sync::atomic::Ordering::SeqCst);

    let p = start(dir.path(), None);
    let mut c = p.client();
    for i in 0..acked {
        let ttl: i64 = cmd("TTL").arg(format!("t{i}")).query(&mut c).unwrap();
        assert!((900..=1000).contains(&ttl), "acked t{i}: TTL {ttl}");
        assert_eq!(c.get::<_, usize>(format!("b{i}")).unwrap(), i, "acked b{i}");
        let pttl: i64 = cmd("PTTL").arg(format!("a{i}")).query(&mut c).unwrap();
        assert!(pttl > 400_000, "acked a{i}: PTTL {pttl}");
    }
    let in_flight: (Option<String>, Option<String>) = (
        c.get(format!("a{acked}")).unwrap(),
        c.get(format!("b{acked}")).unwrap(),
    );
    println!("{acked} acknowledged rounds intact; the round in flight left {in_flight:?}");
    assert_eq!(
        in_flight.0.is_some(),
        in_flight.1.is_some(),
        "the EXEC in flight was half applied: {in_flight:?}"
    );
    drop(c);
    p.sigterm();
    let (status, log) = p.wait();
    assert!(status.success(), "exit {status}\n{log}");
}
