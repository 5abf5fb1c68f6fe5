//! Flash faults during compactions (DESIGN §4, failure model items 3 and 4):
//! - EIO or ENOSPC on the n-th write of a compaction: the compaction fails, nothing is
//!   lost, the store keeps serving and a later compaction succeeds;
//! - a failed sync at each sync of a compaction (table, manifest, directory) followed by a
//!   power cut that drops or tears every unsynced write (tables and manifests): the
//!   recovered store holds exactly the acknowledged data;
//! - every write failing with ENOSPC: once the fast tier is full, puts fail with a clear
//!   `NoSpace` error, and the store reopens consistent.

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use std::collections::BTreeMap;

use tierkv_core::media::flash::CrashMode;
use tierkv_core::{Error, KvStore};
use tierkv_prismdb::PrismDbStore;
use tierkv_prismdb::compaction::{Trigger, compact};

use common::{Rig, assert_check, value_for};

const SPEC: &str = "prismdb@partitions=2,bounds=k2,chunk_size=16KiB,table_size=64KiB,\
high_watermark=0.95,low_watermark=0.9,bucket_keys=16,tracker_min=16,read_compactions=off";
const EIO: i32 = 5;
const ENOSPC: i32 = 28;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn fill(store: &PrismDbStore, model: &mut Model, round: u64, n: u32) {
    for i in 0..n {
        let k = format!("k{}", (i * 7 + round as u32) % 300).into_bytes();
        let v = value_for(&k, round * 1000 + u64::from(i));
        store.put(&k, &v).unwrap();
        model.insert(k, v);
    }
}

fn compact_all(store: &PrismDbStore) -> Vec<tierkv_core::Result<()>> {
    let sh = store.shared();
    sh.parts
        .iter()
        .map(|p| compact(sh, p, Trigger::Write, true).map(|_| ()))
        .collect()
}

fn assert_model(store: &dyn KvStore, model: &Model, ctx: &str) {
    let got: Model = store.scan(b"", usize::MAX).unwrap().into_iter().collect();
    assert_eq!(got.len(), model.len(), "{ctx}: key count");
    for (k, v) in model {
        assert_eq!(
            got.get(k),
            Some(v),
            "{ctx}: key {:?}",
            String::from_utf8_lossy(k)
        );
        assert_eq!(
            store.get(k).unwrap().as_ref(),
            Some(v),
            "{ctx}: get {:?}",
            String::from_utf8_lossy(k)
        );
    }
}

#[test]
fn eio_and_enospc_mid_compaction_lose_nothing_and_a_later_compaction_succeeds() {
    for (errno, nth) in [(EIO, 1), (EIO, 2), (ENOSPC, 1), (ENOSPC, 3)] {
        let ctx = format!("errno {errno} on write {nth}");
        let rig = Rig::new(SPEC, 4).with_faults();
        let inj = rig.injector.clone().unwrap();
        let store = rig.create();
        store.stop_background();
        let mut model = Model::new();
        fill(&store, &mut model, 0, 300);
        assert!(compact_all(&store).iter().all(Result::is_ok), "{ctx}");
        fill(&store, &mut model, 1, 300);
        inj.fail_nth_write(nth, errno);
        let results = compact_all(&store);
        assert!(
            results.iter().any(Result::is_err),
            "{ctx}: no compaction failed: {results:?}"
        );
        assert!(store.stats().counters["prismdb_compactions_failed"] > 0);
        assert_model(&*store, &model, &ctx);
        assert_check(&*store);
        inj.clear_failures();
        // The store still takes writes, and compacts once the device works again.
        fill(&store, &mut model, 2, 100);
        assert!(
            compact_all(&store).iter().all(Result::is_ok),
            "{ctx}: compaction after the fault"
        );
        assert_model(&*store, &model, &ctx);
        store.close().unwrap();
        drop(store);
        let store = rig.reopen().unwrap();
        assert_model(&*store, &model, &format!("{ctx}, reopened"));
        assert_check(&*store);
    }
}

#[test]
fn a_failed_sync_then_a_power_cut_at_each_sync_of_a_compaction_recovers_the_acknowledged_data() {
    // A compaction of a partition with one table syncs: each new table, the manifest, the
    // directory (commit), then the directory again (cleanup). Fail each in turn.
    for nth in 1..=4u64 {
        for mode in [
            CrashMode::DropUnsynced,
            CrashMode::TearUnsynced { seed: nth * 7 },
        ] {
            let ctx = format!("sync {nth} fails, then {mode:?}");
            let rig = Rig::new(SPEC, 4).with_faults();
            let inj = rig.injector.clone().unwrap();
            let store = rig.create();
            store.stop_background();
            let mut model = Model::new();
            fill(&store, &mut model, 0, 300);
            assert!(compact_all(&store).iter().all(Result::is_ok), "{ctx}");
            fill(&store, &mut model, 1, 300);
            inj.fail_nth_sync(nth, EIO);
            let _ = compact_all(&store);
            inj.crash(mode).unwrap();
            store.close().unwrap();
            drop(store);
            let store = rig
                .reopen()
                .unwrap_or_else(|e| panic!("{ctx}: recovery failed: {e}"));
            assert_model(&*store, &model, &ctx);
            assert_check(&*store);
        }
    }
}

#[test]
fn a_full_flash_makes_puts_fail_with_no_space_once_the_fast_tier_is_full() {
    let spec = "prismdb@partitions=2,bounds=k2,chunk_size=16KiB,table_size=64KiB,\
                high_watermark=0.5,low_watermark=0.4,tracker_min=16";
    let rig = Rig::new(spec, 4).with_faults();
    let inj = rig.injector.clone().unwrap();
    let store = rig.create();
    inj.fail_all_writes(ENOSPC);
    let mut model = Model::new();
    let mut refused = None;
    for i in 0..20_000u32 {
        let k = format!("k{i:06}").into_bytes();
        let v = value_for(&k, u64::from(i));
        match store.put(&k, &v) {
            Ok(()) => {
                model.insert(k, v);
            }
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    let e = refused.expect("puts never failed although flash refuses every write");
    assert!(matches!(e, Error::NoSpace { .. }), "unexpected error {e}");
    assert_model(&*store, &model, "full");
    inj.clear_failures();
    store.close().unwrap();
    drop(store);
    let store = rig.reopen().unwrap();
    assert_model(&*store, &model, "full, reopened");
    assert_check(&*store);
}

/// `tierkv stress --mode flash-faults --seed 3292` (2026-11-29) brought a key back after an
/// acknowledged delete: "ENOSPC injected into flash sync #7, then a clean close". A
/// compaction whose directory sync (its commit point) fails cannot remove its manifest (the
/// device refuses everything after a failed sync), so flash lists its new tables while the
/// partition keeps the old ones and the victims. It poisons the store, then lets go of its
/// range. A delete of a victim that passed the store's poison check just before, and reached
/// the partition lock just after, found the key in no table and no compaction and freed its
/// slot without a tombstone, acknowledged: the next open read the key's version from the
/// manifest's table. Here the delete's thread runs that compaction itself, at the named
/// point between the two. (Before the fix: the reopened store held 300 keys, the deleted
/// one among them.)
#[test]
fn a_delete_that_meets_a_compaction_failed_at_its_commit_is_refused_and_nothing_comes_back() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use tierkv_core::media::pmem::CrashPoint;

    let rig = Rig::new(SPEC, 4).with_faults();
    let inj = rig.injector.clone().unwrap();
    let (store, pool) = rig.create_with_pool();
    store.stop_background();
    let mut model = Model::new();
    fill(&store, &mut model, 0, 300);
    let victim = b"k100".to_vec();
    assert!(model.contains_key(&victim));
    let fired = Arc::new(AtomicBool::new(false));
    let results = Arc::new(parking_lot::Mutex::new(Vec::new()));
    {
        let (store, inj, fired, results) = (
            Arc::downgrade(&store),
            inj.clone(),
            fired.clone(),
            results.clone(),
        );
        pool.arm_crash_points(Arc::new(move |cp| {
            let CrashPoint::Named(name) = cp else { return };
            if name == "prismdb.compaction.tables_synced" && fired.load(Ordering::Acquire) {
                // The syncs left: the manifest file's, then the directory's (the commit
                // point). The second fails: the device refuses everything after it, the
                // manifest's removal included, so the manifest stays.
                inj.fail_nth_sync(2, ENOSPC);
                return;
            }
            if name != "prismdb.delete.accepted" || fired.swap(true, Ordering::AcqRel) {
                return;
            }
            let Some(store) = store.upgrade() else { return };
            let sh = store.shared();
            for p in &sh.parts {
                let r = compact(sh, p, Trigger::Write, true);
                inj.clear_failures();
                let failed = r.is_err();
                results
                    .lock()
                    .push(r.map(|o| o.is_some()).map_err(|e| e.to_string()));
                if failed {
                    break;
                }
            }
        }))
        .unwrap();
    }
    let deleted = store.delete(&victim);
    pool.disarm_crash_points();
    assert!(
        fired.load(Ordering::Acquire),
        "the named point was not reached"
    );
    let results = results.lock().clone();
    assert!(
        results.iter().any(Result::is_err),
        "no compaction failed at its manifest: {results:?}"
    );
    // An acknowledged delete must hold after the reopen whatever else happened.
    if deleted.is_ok() {
        model.remove(&victim);
    }
    store.close().unwrap();
    drop(store);
    drop(pool);
    let store = rig.reopen().unwrap();
    assert_model(&*store, &model, "reopened");
    assert_check(&*store);
    // And the store, poisoned by the compaction, refused this delete (it passed the first
    // check before the poison).
    assert!(
        matches!(deleted, Err(Error::Poisoned(_))),
        "the delete was not refused: {deleted:?} (compactions: {results:?})"
    );
}
