//! Emulated latency: when on, reads pay per 64-byte line and persists per call, exactly as
//! configured (accounted) and measurably (elapsed time, with generous margins); when off it
//! injects nothing.

mod pmem_common;

use std::time::Instant;

use pmem_common::{config, create_pool, scratch_dir};
use tierkv_core::media::pmem::{DurabilityMode, EmulatedLatency, PmemPool};

#[test]
fn latency_slows_reads_and_persists_when_on() {
    let dir = scratch_dir();
    let mut cfg = config(dir.path().join("slow"), 1 << 20, DurabilityMode::Volatile);
    cfg.latency = EmulatedLatency {
        read_ns_per_line: 2_000,
        persist_ns: 20_000,
    };
    let slow = PmemPool::create(&cfg).unwrap();
    let base = slow.data_start();
    let before = slow.emulated_latency_ns(); // creation persisted the header

    let t = Instant::now();
    let mut buf = vec![0u8; 64 * 100];
    for _ in 0..10 {
        slow.read_into(base, &mut buf).unwrap(); // 100 lines
    }
    let read_elapsed = t.elapsed();
    assert_eq!(slow.emulated_latency_ns() - before, 10 * 100 * 2_000);

    let t = Instant::now();
    for i in 0..50 {
        slow.persist(base + i * 64, 64).unwrap();
    }
    let persist_elapsed = t.elapsed();
    assert_eq!(
        slow.emulated_latency_ns() - before,
        10 * 100 * 2_000 + 50 * 20_000
    );
    println!(
        "2 ms of read latency took {read_elapsed:?}; 1 ms of persist latency took {persist_elapsed:?}"
    );
    // Lower bounds only (the spin runs to a deadline, so never shorter than injected).
    assert!(read_elapsed.as_micros() >= 2_000, "{read_elapsed:?}");
    assert!(persist_elapsed.as_micros() >= 1_000, "{persist_elapsed:?}");
}

#[test]
fn latency_off_injects_nothing() {
    let dir = scratch_dir();
    let fast = create_pool(dir.path(), "fast", 1 << 20, DurabilityMode::Volatile);
    let base = fast.data_start();
    for i in 0..100 {
        fast.read(base, 4096).unwrap();
        fast.persist(base + i * 64, 64).unwrap();
    }
    assert_eq!(fast.latency(), EmulatedLatency::default());
    assert_eq!((fast.emulated_latency_ns(), fast.latency_spins()), (0, 0));
}
