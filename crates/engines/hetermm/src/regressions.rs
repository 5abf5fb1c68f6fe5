//! Regression tests of the second review (issue 22), each named after what it reproduces,
//! on a memory without background threads (the test decides when blocks are flushed,
//! marked and reorganised) and with a plain variable or a tierkv index standing in for the
//! plugged-in index.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tierkv_core::EngineSpec;
use tierkv_core::media::pmem::PmemPool;

use crate::mem::HeterMem;
use crate::options::HeterOptions;
use crate::recovery::open_memory;
use crate::recovery::tests::pool_config;
use crate::reorg::Reason;

/// A memory of 64 DRAM pages of 4 KiB, blocks of 32 KiB, in an 8 MiB pool.
struct Rig {
    mem: Arc<HeterMem>,
    pool: Arc<PmemPool>,
    dir: tempfile::TempDir,
}

fn options(extra: &str) -> HeterOptions {
    let spec = format!("hetermm@page_bits=12,block_bits=15{extra}");
    let spec: EngineSpec = spec.parse().unwrap();
    HeterOptions::from_params(spec.params(), 64 * 4096).unwrap()
}

impl Rig {
    fn new(extra: &str) -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let pool = PmemPool::create(&pool_config(dir.path().join("pool"))).unwrap();
        let (mem, _) = open_memory(pool.clone(), options(extra), true).unwrap();
        Rig {
            mem: Arc::new(mem),
            pool,
            dir,
        }
    }

    /// A whole put under one guard (`old` is the key's current address); its new address.
    fn put(&self, key: &[u8], value: &[u8], old: Option<u64>) -> u64 {
        let g = self.mem.pin().unwrap();
        self.mem.reserve(&g, key.len(), value.len()).unwrap();
        self.mem.write_value(&g, old, key, value).unwrap()
    }

    fn flush_oldest(&self) {
        let mut st = self.mem.flusher.lock();
        self.mem.flush_oldest(&mut st).unwrap();
    }
}

/// Polls `done` for up to two seconds.
fn eventually(what: &str, done: impl Fn() -> bool) {
    let until = Instant::now() + Duration::from_secs(2);
    while !done() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Bug 1: a reader pinned while the key was updated still holds the old address; the old
/// record is marked (its replacement flushed) and its block reorganised away while the
/// reader is still pinned — the reader must still read it, not get `Corruption`.
///
/// The interleaving: the writer holds its reservation (pinned) in block 1; the flusher
/// begins to flush block 1 (it moves off_ReadOnly and waits for the writer's epoch); the
/// reader pins only now — so the flusher does not wait for it — and reads the index; the
/// writer installs the new version and unpins; the flusher flushes block 1 and marks the
/// old record in block 0; block 0 is reorganised; the reader reads.
#[test]
fn a_reader_pinned_before_an_update_reads_the_old_record_after_its_block_is_reorganised() {
    let rig = Rig::new("");
    let mem = rig.mem.clone();
    let x = rig.put(b"k", b"old value", None);
    rig.flush_oldest();
    assert!(x < mem.off_dram(), "the old version is in pmem");
    let g = mem.pin().unwrap();
    mem.reserve(&g, 1, 9).unwrap();
    let marks_before = mem.counters.marks.get();
    let reorganised = AtomicBool::new(false);
    let read_now = AtomicBool::new(false);
    let pinned = AtomicBool::new(false);
    std::thread::scope(|s| {
        let flusher = s.spawn(|| {
            let mut st = mem.flusher.lock();
            mem.flush_oldest(&mut st).unwrap();
        });
        eventually("off_ReadOnly to move", || mem.off_read_only() > x);
        // The reader pins after the flusher's synchronization began.
        let reader = s.spawn(|| {
            let r = mem.pin().unwrap();
            pinned.store(true, Ordering::SeqCst);
            eventually("the test to let the reader read", || {
                read_now.load(Ordering::SeqCst)
            });
            let got = mem.read_value(&r, x, b"k");
            drop(r);
            got
        });
        eventually("the reader to pin", || pinned.load(Ordering::SeqCst));
        mem.write_value(&g, Some(x), b"k", b"new value").unwrap();
        drop(g);
        eventually("the old record's mark", || {
            mem.counters.marks.get() > marks_before
        });
        let reorganiser = s.spawn(|| {
            let done = mem.reorganise(0, Reason::Sparse).unwrap();
            reorganised.store(true, Ordering::SeqCst);
            done
        });
        // Before the fix the reorganisation finished here, with the reader still pinned.
        let until = Instant::now() + Duration::from_millis(300);
        while !reorganised.load(Ordering::SeqCst) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
        read_now.store(true, Ordering::SeqCst);
        let got = reader.join().unwrap();
        assert_eq!(
            got.unwrap(),
            b"old value",
            "a pinned reader lost the record it was reading"
        );
        assert!(reorganiser.join().unwrap(), "block 0 was reorganised");
        flusher.join().unwrap();
    });
    let _ = (&rig.pool, &rig.dir);
}
