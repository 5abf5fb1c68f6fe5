//! Volatile mode on /dev/shm: data written (and "persisted", which is a no-op here)
//! survives the SIGKILL of the process that wrote it. The test re-executes its own binary
//! as the child (selected by an environment variable); the child writes, signals readiness
//! over its stdout pipe and waits to be killed.

mod pmem_common;

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use pmem_common::{config, scratch_dir};
use tierkv_core::media::pmem::{DurabilityMode, PmemAllocator, PmemPool};

const CHILD_ENV: &str = "TIERKV_PMEM_SIGKILL_CHILD_POOL";
const RECORDS: u64 = 500;
/// What the child prints once its writes are done (libtest may print the test's name
/// before it on the same line).
const READY: &str = "TIERKV-PMEM-CHILD-READY";

fn record(i: u64) -> [u8; 24] {
    let mut r = [0u8; 24];
    r[..8].copy_from_slice(&i.to_le_bytes());
    r[8..16].copy_from_slice(&(i * i).to_le_bytes());
    r[16..].copy_from_slice(b"survives");
    r
}

/// The child: opens the pool, allocates and writes records, publishes them through a root
/// word, says "ready" and waits for SIGKILL.
fn child(pool_path: &Path) -> ! {
    let pool = PmemPool::open(&config(pool_path, 0, DurabilityMode::Volatile)).expect("open");
    let region = pool.root(0).expect("root 0");
    let a = PmemAllocator::open(pool.clone(), region).expect("allocator");
    let table = a.alloc(RECORDS * 8).expect("table");
    for i in 0..RECORDS {
        let off = a.alloc(24).expect("record");
        pool.write_persist(off, &record(i)).expect("write");
        pool.store_u64(table + i * 8, off).expect("link");
    }
    pool.persist(table, (RECORDS * 8) as usize)
        .expect("persist");
    pool.set_root(1, table).expect("publish");
    println!("{READY}");
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[test]
fn volatile_pool_data_survives_sigkill_of_the_writer() {
    if let Some(p) = std::env::var_os(CHILD_ENV) {
        child(Path::new(&p));
    }
    let dir = scratch_dir();
    let path = dir.path().join("pool");
    {
        let pool = PmemPool::create(&config(&path, 1 << 20, DurabilityMode::Volatile)).unwrap();
        let start = pool.data_start();
        PmemAllocator::format(pool.clone(), start, pool.len() - start, 16 << 10).unwrap();
        pool.set_root(0, start).unwrap();
    }
    let mut kid = Command::new(std::env::current_exe().unwrap())
        .args([
            "volatile_pool_data_survives_sigkill_of_the_writer",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &path)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = BufReader::new(kid.stdout.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let ready = out.lines().map_while(Result::ok).any(|l| l.contains(READY));
        let _ = tx.send(ready);
    });
    // A child that hangs must not hang the test: give up after a minute.
    let ready = rx.recv_timeout(Duration::from_secs(60)).unwrap_or(false);
    kid.kill().unwrap(); // SIGKILL
    let status = kid.wait().unwrap();
    reader.join().unwrap();
    assert!(ready, "child never became ready (status {status})");
    assert_eq!(status.signal(), Some(libc::SIGKILL));

    let pool = PmemPool::open(&config(&path, 0, DurabilityMode::Volatile)).unwrap();
    let a = PmemAllocator::open(pool.clone(), pool.root(0).unwrap()).unwrap();
    a.check().unwrap();
    let table = pool.root(1).unwrap();
    assert_ne!(table, 0, "the child's published root is there");
    for i in 0..RECORDS {
        let off = pool.load_u64(table + i * 8).unwrap();
        assert_eq!(pool.read(off, 24).unwrap(), &record(i)[..], "record {i}");
    }
    assert_eq!(a.iter_allocated().count() as u64, RECORDS + 1);
}
