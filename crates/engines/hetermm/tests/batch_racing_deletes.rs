//! A single delete racing a write batch that deletes the same key (issue 24's stress
//! failure, `--writers-per-key 4`: "expected absent (a delete, acknowledged); found an older
//! put"). A batch removes its keys from the index when it applies them and logs them only
//! at its commit; a single delete that came in between found the key absent, did nothing
//! and returned — acknowledged, with nothing durable behind it. A crash before the batch's
//! commit then brought the key's older put back. The test takes a Tracked crash image at
//! the batch's `hetermm.batch.applied` point, after a racing single delete of the batch's
//! key has been given time to return: if it returned (acknowledged), the key must be absent
//! in the recovered image. Every index.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use common::{batch_options, create_pool, scratch_dir, try_open};
use tierkv_core::media::pmem::{CrashImageOptions, CrashPoint, DurabilityMode, PmemPool};
use tierkv_core::{KvStore, WriteBatch};
use tierkv_testkit::rig::config;

/// What the handler saw: whether the racing delete had returned, and the image.
type Cut = (bool, Vec<u8>);

#[test]
fn a_delete_acknowledged_while_a_batch_deleting_its_key_is_uncommitted_survives_a_crash() {
    for variant in ["btree", "hash", "lockfree"] {
        let tmp = scratch_dir();
        let pool = create_pool(&tmp.path().join("pool"), 8 << 20, DurabilityMode::Tracked);
        let store: Arc<dyn KvStore> =
            try_open(pool.clone(), batch_options(), variant, true).unwrap();
        store.put(b"k", b"old").unwrap();
        let cuts: Arc<parking_lot::Mutex<Vec<Cut>>> = Arc::default();
        let (weak_pool, weak_store, taken) =
            (Arc::downgrade(&pool), Arc::downgrade(&store), cuts.clone());
        let racer: Arc<parking_lot::Mutex<Option<std::thread::JoinHandle<()>>>> = Arc::default();
        let racer2 = racer.clone();
        pool.arm_crash_points(Arc::new(move |p: CrashPoint<'_>| {
            if p != CrashPoint::Named("hetermm.batch.applied") {
                return;
            }
            let (Some(pool), Some(store)) = (weak_pool.upgrade(), weak_store.upgrade()) else {
                return;
            };
            let (tx, rx) = mpsc::channel();
            // The racing single delete, on a thread of its own (this handler runs inside the
            // batch, between its apply and its commit).
            *racer2.lock() = Some(std::thread::spawn(move || {
                store.delete(b"k").unwrap();
                let _ = tx.send(());
            }));
            let acked = rx.recv_timeout(Duration::from_millis(300)).is_ok();
            let image = pool.crash_image(7, CrashImageOptions::lines()).unwrap();
            taken.lock().push((acked, image));
        }))
        .unwrap();
        let mut b = WriteBatch::new();
        b.delete("k").put("j", "batch");
        store.write_batch(&b).unwrap();
        pool.disarm_crash_points();
        if let Some(h) = racer.lock().take() {
            h.join().unwrap();
        }
        assert_eq!(store.get(b"k").unwrap(), None);
        let cuts = std::mem::take(&mut *cuts.lock());
        assert_eq!(cuts.len(), 1, "{variant}: one image at the batch's apply");
        for (acked, image) in cuts {
            let path = tmp.path().join("img");
            std::fs::write(&path, &image).unwrap();
            let p = PmemPool::open(&config(&path, 0, DurabilityMode::Volatile)).unwrap();
            let r = try_open(p, batch_options(), variant, false).unwrap();
            let k = r.get(b"k").unwrap();
            println!(
                "{variant}: racing delete acknowledged before the commit: {acked}; key k after recovery: {k:?}"
            );
            if acked {
                assert_eq!(k, None, "{variant}: an acknowledged delete was lost");
            }
            r.close().unwrap();
        }
        store.close().unwrap();
    }
}
