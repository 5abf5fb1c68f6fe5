//! `check` on a live store while GC frees chunks (found by `crash_named_points`: a store
//! recovered from a crash image starts collecting at once, and its `check` read records
//! in chunks GC had meanwhile freed and reused — "checksum mismatch", or a "read of
//! 774790288 bytes" through a length taken from another record's bytes). `check` must
//! hold off reclamation like any reader.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};

use tierkv_core::KvStore;
use tierkv_core::media::pmem::DurabilityMode;

#[test]
fn check_while_gc_frees_and_reuses_chunks_reads_no_freed_record() {
    let dir = common::scratch_dir();
    let s = common::new_store(
        dir.path(),
        2 << 20,
        DurabilityMode::Volatile,
        "chunk_size=16KiB,gc_threshold=0.3",
    );
    // Live data in every chunk, so that GC rewrites rows while check walks them.
    for i in 0..300 {
        s.put(
            format!("cold/{i:04}").as_bytes(),
            &vec![b'c'; 100 + i % 700],
        )
        .unwrap();
    }
    let stop = AtomicBool::new(false);
    let checks = std::thread::scope(|sc| {
        let writers: Vec<_> = (0..2)
            .map(|t| {
                let s = &s;
                sc.spawn(move || {
                    for n in 0..6_000usize {
                        let k = format!("hot/{t}/{}", n % 16);
                        s.put(k.as_bytes(), &vec![t as u8; 200 + n % 900]).unwrap();
                    }
                })
            })
            .collect();
        let checker = sc.spawn(|| {
            let mut n = 0u64;
            while !stop.load(Ordering::SeqCst) {
                if let Err(e) = s.check() {
                    return Err(format!("check {n} during GC: {e}"));
                }
                n += 1;
            }
            Ok(n)
        });
        for w in writers {
            w.join().unwrap();
        }
        stop.store(true, Ordering::SeqCst);
        checker.join().unwrap()
    });
    let checks = checks.unwrap_or_else(|e| panic!("{e}"));
    let gc = s.stats().counters["focus_gc_chunks"];
    println!("{checks} checks while GC collected {gc} chunks");
    assert!(gc > 50, "GC collected only {gc} chunks");
    assert!(checks > 5, "only {checks} checks ran");
}
