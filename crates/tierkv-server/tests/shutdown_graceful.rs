//! Graceful shutdown of an in-process server: the burst in flight is finished and
//! answered whole, idle clients are closed, the store is closed cleanly, new clients are
//! refused.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

#[test]
fn shutdown_finishes_the_burst_in_flight_and_closes_everything() {
    let srv = common::start("dram:btree");
    let addr = srv.addr;
    let mut idle = srv.raw();
    let mut busy = srv.raw();
    let mut burst = Vec::new();
    for i in 0..20_000 {
        burst.extend(common::resp(&[b"SET", format!("k{i}").as_bytes(), b"v"]));
    }
    let writer = {
        let mut w = busy.try_clone().unwrap();
        std::thread::spawn(move || {
            let _ = w.write_all(&burst);
        })
    };
    // Wait for the first reply: the server is working on the burst.
    let mut first = [0u8; 5];
    busy.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"+OK\r\n");
    let stopper = std::thread::spawn(move || srv.shutdown());
    let rest = common::read_until(&mut busy, |_| false);
    // Whatever was answered was answered whole: only complete "+OK" replies.
    assert_eq!(rest.len() % 5, 0, "a torn reply");
    assert!(rest.chunks(5).all(|r| r == b"+OK\r\n"));
    println!(
        "{} replies before the connection closed",
        1 + rest.len() / 5
    );
    stopper.join().unwrap().expect("the store closes cleanly");
    writer.join().unwrap();
    assert!(common::closed_by_peer(&mut idle), "idle clients are closed");
    let refused = TcpStream::connect_timeout(&addr, Duration::from_secs(1));
    assert!(refused.is_err(), "no new clients after shutdown");
}
