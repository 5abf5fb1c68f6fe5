//! Micro-benchmark of the Persistent Key Index: N inserts, then N gets, then N/100 scans of
//! 50 keys, from T threads, on a Volatile pool in /dev/shm (or the temp dir when there is
//! none), with YCSB-style keys ("user" + a hashed id, 23 bytes: inline) in random order.
//!
//! ```text
//! cargo bench -p tierkv-prism --bench key_index            # N = 1,000,000, T = 2
//! KI_N=200000 KI_THREADS=4 cargo bench -p tierkv-prism --bench key_index
//! ```
//! The pool is Volatile (no flush): this measures the index's CPU and memory cost, not a
//! device. Numbers are printed, never asserted (STYLE §9).

#![allow(
    clippy::unwrap_used,
    reason = "benchmark driver: an unwrap is an assertion"
)]

use std::sync::Arc;
use std::time::Instant;

use tierkv_core::media::pmem::{DEFAULT_CHUNK_SIZE, PmemAllocator, PmemConfig, PmemPool};
use tierkv_core::{DurabilityMode, EmulatedLatency};
use tierkv_prism::key_index::PersistentKeyIndex;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// YCSB's key for record `i`: "user" followed by a 64-bit FNV hash of `i`.
fn ycsb_key(i: u64) -> Vec<u8> {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in i.to_le_bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("user{h}").into_bytes()
}

/// Runs `f(thread, i)` for every i in 0..n split over `threads`; returns ops/s.
fn phase(threads: usize, n: usize, f: impl Fn(usize) + Sync) -> f64 {
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let f = &f;
            s.spawn(move || (t..n).step_by(threads).for_each(f));
        }
    });
    n as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let n = env("KI_N", 1_000_000);
    let threads = env("KI_THREADS", 2);
    let base = std::path::Path::new("/dev/shm");
    let dir = if base.is_dir() {
        tempfile::tempdir_in(base)
    } else {
        tempfile::tempdir()
    }
    .unwrap();
    let size = ((n as u64 * 160) + (64 << 20)).next_multiple_of(4096);
    let pool = PmemPool::create(&PmemConfig {
        path: dir.path().join("pool"),
        size,
        mode: DurabilityMode::Volatile,
        latency: EmulatedLatency::default(),
    })
    .unwrap();
    let start = pool.data_start();
    let alloc = Arc::new(
        PmemAllocator::format(pool.clone(), start, pool.len() - start, DEFAULT_CHUNK_SIZE).unwrap(),
    );
    let index = PersistentKeyIndex::create(pool.clone(), alloc.clone(), 0).unwrap();
    println!(
        "key index: {n} keys, {threads} threads, fanout {}, Volatile pool in {} (no flush)",
        index.fanout(),
        dir.path().display()
    );

    let ins = phase(threads, n, |i| {
        index
            .insert_if_absent(&ycsb_key(i as u64), i as u64)
            .unwrap()
            .unwrap();
    });
    let get = phase(threads, n, |i| {
        assert_eq!(index.get(&ycsb_key(i as u64)).unwrap(), Some(i as u64));
    });
    let scan = phase(threads, n / 100, |i| {
        assert_eq!(index.scan(&ycsb_key(i as u64), 50).unwrap().len().min(1), 1);
    });
    let stats = index.stats();
    println!("insert      {:>12.0} ops/s", ins);
    println!("get         {:>12.0} ops/s", get);
    println!("scan(50)    {:>12.0} ops/s", scan);
    println!(
        "leaves {} splits {} pmem {:.1} MiB ({:.1} B/key)",
        stats.leaves,
        stats.splits,
        stats.pmem_bytes as f64 / (1 << 20) as f64,
        stats.pmem_bytes as f64 / n as f64
    );
    drop(index);
    let t = Instant::now();
    let index = PersistentKeyIndex::open(pool, alloc, 0).unwrap();
    println!(
        "reopen      {:>12.1} ms ({} keys)",
        t.elapsed().as_secs_f64() * 1e3,
        index.len()
    );
}
