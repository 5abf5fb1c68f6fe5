//! P1 with reserved log records (issue 18): a writer takes its record's bytes and seq
//! under the writer lock and writes and persists the record after releasing it. A writer
//! stopped between the two (the scheduler took it off its core; here it is paused at the
//! named point `mio.put.after_reserve`) delays no other writer, and a power failure then
//! leaves a hole in the log before records that were acknowledged: recovery must replay
//! them, and must not replay the write that was never made durable.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use common::*;
use tierkv_core::KvStore;
use tierkv_core::media::pmem::{CrashImageOptions, CrashPoint, DurabilityMode, PmemPool};

const PARAMS: &str = "memtable=256KiB,levels=3,stall_timeout_ms=60000,progress_wait_ms=60000";

fn key(i: u32) -> Vec<u8> {
    format!("key{i:04}").into_bytes()
}

fn value(i: u32, round: u32) -> Vec<u8> {
    let mut v = format!("v{i}-r{round}-").into_bytes();
    v.resize(40 + (i as usize * 7) % 200, b'x');
    v
}

#[test]
fn a_writer_stopped_before_its_record_blocks_no_one_and_its_hole_is_replayed_past() {
    let dir = scratch_dir();
    let pool = create_pool(&dir.path().join("pool"), 16 << 20, DurabilityMode::Tracked);
    let store = open(pool.clone(), PARAMS, true);
    for i in 0..20 {
        store.put(&key(i), &value(i, 0)).unwrap();
    }
    // The thread named "stuck" stops at the point between its reservation and its record
    // until the test lets it go.
    let (arrived, at_point) = mpsc::channel::<()>();
    let (release, released) = mpsc::channel::<()>();
    let arrived = parking_lot::Mutex::new(arrived);
    let released = parking_lot::Mutex::new(released);
    pool.arm_crash_points(Arc::new(move |cp| {
        let CrashPoint::Named("mio.put.after_reserve") = cp else {
            return;
        };
        if std::thread::current().name() != Some("stuck") {
            return;
        }
        let _ = arrived.lock().send(());
        let _ = released.lock().recv_timeout(Duration::from_secs(60));
    }))
    .unwrap();
    let stuck = {
        let store = store.clone();
        std::thread::Builder::new()
            .name("stuck".into())
            .spawn(move || store.put(&key(5), &value(5, 1)))
            .unwrap()
    };
    at_point
        .recv_timeout(Duration::from_secs(30))
        .expect("the stuck writer reached its point");
    // Other writers go on while it holds its reservation (they used to wait for the
    // writer lock it held across its log append): a put of the same key, other keys and a
    // delete, each acknowledged, from another thread with a deadline.
    let (done, finished) = mpsc::channel();
    {
        let store = store.clone();
        std::thread::spawn(move || {
            for i in 0..20 {
                store.put(&key(i), &value(i, 2)).unwrap();
            }
            store.delete(&key(7)).unwrap();
            store.put(&key(100), &value(100, 2)).unwrap();
            let _ = done.send(());
        });
    }
    finished
        .recv_timeout(Duration::from_secs(30))
        .expect("writers were blocked by a writer stopped before its log record");
    // A power failure now: the stuck writer's record was never written (a hole), and
    // every later record was acknowledged.
    for (n, opts) in [CrashImageOptions::lines(), CrashImageOptions::torn_words()]
        .into_iter()
        .enumerate()
    {
        let image = pool.crash_image(n as u64 + 1, opts).unwrap();
        let path = dir.path().join(format!("image-{n}"));
        std::fs::write(&path, &image).unwrap();
        let img = PmemPool::open(&config(&path, 0, DurabilityMode::Volatile)).unwrap();
        let recovered = open(img, PARAMS, false);
        for i in 0..20 {
            let want = (i != 7).then(|| value(i, 2));
            assert_eq!(recovered.get(&key(i)).unwrap(), want, "image {n}: key {i}");
        }
        assert_eq!(recovered.get(&key(100)).unwrap(), Some(value(100, 2)));
        recovered.check().unwrap();
        recovered.close().unwrap();
    }
    // The stuck write completes; its seq is below the later put of key 5, so that put's
    // value stays the newest, now and after a reopen.
    release.send(()).unwrap();
    stuck.join().unwrap().unwrap();
    pool.disarm_crash_points();
    assert_eq!(store.get(&key(5)).unwrap(), Some(value(5, 2)));
    store.close().unwrap();
    drop(store);
    let store = open(pool, PARAMS, false);
    assert_eq!(store.get(&key(5)).unwrap(), Some(value(5, 2)));
    assert_eq!(store.get(&key(7)).unwrap(), None);
    store.check().unwrap();
}
