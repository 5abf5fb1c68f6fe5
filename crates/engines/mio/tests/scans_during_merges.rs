//! A scan while a zero-copy merge is under way (`zerocopy.rs`, "Readers"): a scan reads
//! every buffer table for tens of microseconds, so its lock-free try would race the
//! merge's moves and be thrown away; while a table of its version is merging it pauses the
//! merges at once. The merge thread is held at its named point `mio.zerocopy.before_finish`
//! (every node has moved, the pair is still marked as merging, no lock is held) while another
//! thread scans: every scan is a paused read, none a spoiled lock-free try, and each
//! returns every key.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::*;
use tierkv_core::KvStore;
use tierkv_core::media::pmem::{CrashPoint, DurabilityMode};

const PARAMS: &str = "memtable=4KiB,levels=3,stall_timeout_ms=60000,progress_wait_ms=60000";
const KEYS: u32 = 60;
const SCANS: u64 = 20;

fn key(k: u32) -> Vec<u8> {
    format!("key{k:03}").into_bytes()
}

/// (paused reads, spoiled lock-free tries, scans that returned every key) of the scans.
type Seen = (u64, u64, u64);

#[test]
fn scans_of_a_merging_version_pause_the_merge_instead_of_racing_it() {
    let dir = scratch_dir();
    let pool = create_pool(&dir.path().join("pool"), 4 << 20, DurabilityMode::Tracked);
    let store = open(pool.clone(), PARAMS, true);
    let fired = Arc::new(AtomicBool::new(false));
    let seen: Arc<parking_lot::Mutex<Option<Seen>>> = Arc::default();
    {
        let (store, fired, seen) = (Arc::downgrade(&store), fired.clone(), seen.clone());
        pool.arm_crash_points(Arc::new(move |cp| {
            if !matches!(cp, CrashPoint::Named("mio.zerocopy.before_finish"))
                || fired.swap(true, Ordering::AcqRel)
            {
                return;
            }
            let Some(store) = store.upgrade() else { return };
            // Another thread scans while this (the merge) thread waits here.
            let scanned = std::thread::spawn(move || {
                let before = store.stats();
                let whole = (0..SCANS)
                    .filter(|_| store.scan(b"", 10_000).unwrap().len() == KEYS as usize)
                    .count() as u64;
                let after = store.stats();
                let delta = |name| counter(&after, name) - counter(&before, name);
                (delta("paused_reads"), delta("optimistic_retries"), whole)
            })
            .join()
            .unwrap();
            *seen.lock() = Some(scanned);
        }))
        .unwrap();
    }
    for round in 0..40u32 {
        for k in 0..KEYS {
            store.put(&key(k), format!("r{round}").as_bytes()).unwrap();
        }
        store.flush().unwrap();
        if fired.load(Ordering::Acquire) {
            break;
        }
    }
    assert!(store.wait_idle(std::time::Duration::from_secs(60)));
    pool.disarm_crash_points();
    let got = seen.lock().take();
    assert_eq!(
        got,
        Some((SCANS, 0, SCANS)),
        "(paused reads, spoiled tries, whole scans) while the merge was under way"
    );
    store.check().unwrap();
    store.close().unwrap();
}
