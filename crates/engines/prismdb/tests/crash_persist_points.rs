//! Power failure at every persist point (FORMAT.md §3): a single-threaded script of puts
//! (values moving between size classes), deletes (freed slots and tombstones),
//! write-triggered compactions and promotions runs with the engine's crash hook set; at each
//! persist point the hook takes a Tracked crash image of the pool (whole lines or torn
//! words, alternately) and a copy of the flash directory, recovers a store from them and
//! checks it against the model: every completed operation is there, the operation in flight
//! is wholly done or not done, and a compaction or promotion changes nothing visible.

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv_core::KvStore;
use tierkv_core::media::pmem::{CrashPoint, PmemPool};
use tierkv_prismdb::compaction::{Trigger, compact};

use common::{BACKGROUND, FOREGROUND, Rig, value_for};

/// Every named crash point of the engine (FORMAT.md §3 "Named crash points").
fn named() -> impl Iterator<Item = &'static str> {
    BACKGROUND.into_iter().chain(FOREGROUND)
}

const SPEC: &str = "prismdb@partitions=2,bounds=k2,chunk_size=16KiB,table_size=64KiB,\
high_watermark=0.95,low_watermark=0.9,bucket_keys=16,tracker_min=16,pin_threshold=0.5,\
read_compactions=off,promote_read_share=0";

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// What the hook checks recovered stores against.
#[derive(Default)]
struct Expect {
    before: Model,
    /// The key written by the operation in flight and its new value (`None`: delete).
    in_flight: Option<(Vec<u8>, Option<Vec<u8>>)>,
    /// Persist points seen and verified, by name.
    seen: BTreeMap<&'static str, (u64, u64)>,
}

/// Recovers a store from a crash image of `pool` plus a copy of `flash` and checks it.
fn verify_image(rig: &Rig, pool: &PmemPool, point: &str, seed: u64, exp: &Expect) {
    let ctx = format!("crash at {point:?}, image seed {seed}");
    let (_dir, store) = rig
        .recover_image(pool, seed, SPEC)
        .unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let got: Model = store.scan(b"", usize::MAX).unwrap().into_iter().collect();
    let mut keys: BTreeSet<&Vec<u8>> = exp.before.keys().collect();
    keys.extend(got.keys());
    for k in keys {
        let want = exp.before.get(k);
        let have = got.get(k);
        let ok = match &exp.in_flight {
            Some((fk, new)) if fk == k => have == want || have == new.as_ref(),
            _ => have == want,
        };
        assert!(
            ok,
            "{ctx}: key {:?}: recovered {:?}, expected {:?} (in flight {:?})",
            String::from_utf8_lossy(k),
            have.map(|v| v.len()),
            want.map(|v| v.len()),
            exp.in_flight.as_ref().map(|f| (
                String::from_utf8_lossy(&f.0).into_owned(),
                f.1.as_ref().map(Vec::len)
            ))
        );
        assert_eq!(
            store.get(k).unwrap().as_ref(),
            have,
            "{ctx}: get differs from scan"
        );
    }
    store.close().unwrap();
}

#[test]
fn every_persist_point_of_put_class_move_delete_compaction_and_promotion_recovers() {
    let seed = common::seed("crash_persist_points", 0xC4A5);
    let rig = Arc::new(Rig::new(SPEC, 4));
    let (store, pool) = rig.create_with_pool();
    store.stop_background();
    let expect = Arc::new(Mutex::new(Expect::default()));
    let images = Arc::new(AtomicU64::new(0));
    {
        let (rig, pool, expect, images) =
            (rig.clone(), pool.clone(), expect.clone(), images.clone());
        let hook_pool = Arc::downgrade(&pool);
        pool.arm_crash_points(Arc::new(move |cp: CrashPoint<'_>| {
            let CrashPoint::Named(point) = cp else {
                return;
            };
            let (Some(point), Some(pool)) = (named().find(|p| *p == point), hook_pool.upgrade())
            else {
                panic!("unknown crash point {point:?}");
            };
            let mut exp = expect.lock();
            let entry = exp.seen.entry(point).or_insert((0, 0));
            entry.0 += 1;
            // The first 40 of each compaction and promotion point, then one in 2; the first 20
            // of each foreground point, then one in 8 (TIERKV_CRASH_ALL=1: every one).
            let n = entry.0;
            let always =
                point.starts_with("prismdb.compaction") || point.starts_with("prismdb.promotion");
            let sampled = if always {
                n <= 40 || n % 2 == 0
            } else {
                n <= 20 || n % 8 == 0
            };
            if !(sampled || std::env::var_os("TIERKV_CRASH_ALL").is_some()) {
                return;
            }
            entry.1 += 1;
            let s = seed.wrapping_add(images.fetch_add(1, Ordering::Relaxed));
            verify_image(&rig, &pool, point, s, &exp);
        }))
        .unwrap();
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut model = Model::new();
    let sh = store.shared().clone();
    for op in 0..200u64 {
        let k = format!("k{}", rng.random_range(0..40u32)).into_bytes();
        let r = rng.random_range(0..100);
        if r < 70 {
            let v = value_for(&k, op + rng.random_range(0..1000));
            {
                let mut e = expect.lock();
                e.before = model.clone();
                e.in_flight = Some((k.clone(), Some(v.clone())));
            }
            store.put(&k, &v).unwrap();
            model.insert(k, v);
        } else if r < 85 {
            {
                let mut e = expect.lock();
                e.before = model.clone();
                e.in_flight = Some((k.clone(), None));
            }
            store.delete(&k).unwrap();
            model.remove(&k);
        } else {
            // Reads make keys hot (promotions); no persist point.
            assert_eq!(store.get(&k).unwrap().as_ref(), model.get(&k));
        }
        if op % 50 == 7 {
            // A key that never reached flash: its delete frees the slot (no tombstone).
            let z = format!("z{op}").into_bytes();
            let v = value_for(&z, op);
            {
                let mut e = expect.lock();
                e.before = model.clone();
                e.in_flight = Some((z.clone(), Some(v.clone())));
            }
            store.put(&z, &v).unwrap();
            model.insert(z.clone(), v);
            {
                let mut e = expect.lock();
                e.before = model.clone();
                e.in_flight = Some((z.clone(), None));
            }
            store.delete(&z).unwrap();
            model.remove(&z);
        }
        if op % 20 == 19 {
            let mut e = expect.lock();
            e.before = model.clone();
            e.in_flight = None;
            drop(e);
            for part in &sh.parts {
                compact(&sh, part, Trigger::Write, true).unwrap();
                compact(&sh, part, Trigger::Read, false).unwrap();
            }
        }
    }
    let seen = expect.lock().seen.clone();
    println!("persist points (seen, verified): {seen:?}");
    for point in named() {
        assert!(
            seen.get(point).is_some_and(|s| s.1 > 0),
            "persist point {point:?} never verified: {seen:?}"
        );
    }
    let stats = store.stats();
    assert!(stats.counters["prismdb_promoted"] > 0);
    assert!(stats.counters["prismdb_tombstones_dropped"] > 0);
    pool.disarm_crash_points();
    store.close().unwrap();
    drop(store);
    drop(pool);
    drop(sh);
    let store = rig.reopen().unwrap();
    let got: Model = store.scan(b"", usize::MAX).unwrap().into_iter().collect();
    assert_eq!(got, model);
}
