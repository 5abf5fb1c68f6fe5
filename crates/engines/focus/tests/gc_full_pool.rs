//! A pool full of live data (FORMAT.md § Garbage collection, "When"): writes fail with
//! `NoSpace` and GC, which has no room for its rewrites either, must leave the store
//! usable: deletes still work and, once GC has collected their chunks, puts work again.
//! (Before the fix GC's own `NoSpace` poisoned the store: every later write, deletes
//! included, failed with `Poisoned` until a reopen.)

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use std::time::{Duration, Instant};

use tierkv_core::media::pmem::DurabilityMode;
use tierkv_core::{Error, KvStore};

fn key(i: usize) -> Vec<u8> {
    format!("full/{i:05}").into_bytes()
}

#[test]
fn gc_out_of_room_in_a_full_pool_does_not_poison_the_store() {
    let dir = common::scratch_dir();
    let s = common::new_store(
        dir.path(),
        1 << 20,
        DurabilityMode::Volatile,
        "chunk_size=16KiB,gc_threshold=0.3,log_shards=1",
    );
    let value = vec![b'x'; 1000];
    let mut n = 0;
    let full = loop {
        match s.put(&key(n), &value) {
            Ok(()) => n += 1,
            Err(e) => break e,
        }
        assert!(n < 10_000, "a 1 MiB pool took 10 MB of live data");
    };
    assert!(
        matches!(full, Error::NoSpace { .. }),
        "a full pool refused a put with {full:?}, not NoSpace"
    );
    // GC runs now (free chunks are below its threshold) and finds no room either.
    std::thread::sleep(Duration::from_millis(300));
    // A refusal comes once a GC pass that began after the writer started waiting gave
    // up, not after a fixed wait (it was 5 s; the backstop is 4 s).
    for i in 0..3 {
        let t = Instant::now();
        let e = s.put(&key(n + i), &value).unwrap_err();
        assert!(matches!(e, Error::NoSpace { .. }), "{e:?}");
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "a put on a full pool was refused only after {:?}",
            t.elapsed()
        );
    }
    for i in 0..n {
        s.delete(&key(i))
            .unwrap_or_else(|e| panic!("delete {i} of {n} in a full pool: {e}"));
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match s.put(b"after", &value) {
            Ok(()) => break,
            Err(Error::NoSpace { .. }) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("put after deleting everything: {e}"),
        }
    }
    assert_eq!(s.get(b"after").unwrap(), Some(value));
    assert_eq!(s.get(&key(0)).unwrap(), None);
    s.check().unwrap();
}
