//! A full store (FORMAT.md §3 "Room for deletes", "Room on flash"; issue 23): a small pool
//! over a small flash device is filled until puts are refused with `NoSpace`; then every
//! delete must succeed (tombstones take the slots reserved for them, and compactions that
//! drop tombstones use the flash reserve), the deleted keys are gone and the others intact,
//! new keys fit again once compactions have dropped the tombstones, and all of it survives
//! a reopen. (Before the fix every delete of a key on flash failed on the full store with
//! "fast tier full and compaction failed: no space left on flash".)

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tierkv_core::media::pmem::{CrashPoint, DurabilityMode};
use tierkv_core::{Error, KvStore, WriteBatch};
use tierkv_prismdb::compaction::{Trigger, compact};

use common::{BACKGROUND, Rig, assert_check, counter, value_for};

const SPEC: &str = "prismdb@partitions=3,bounds=k1|k2,chunk_size=16KiB,bucket_keys=16,\
tracker_min=16";

/// Key `i`, spread over the three partitions.
fn key(i: u32) -> Vec<u8> {
    format!("k{}{i:06}", i % 3).into_bytes()
}

/// A value of 40..2000 bytes (several slab classes).
fn value(i: u32) -> Vec<u8> {
    let mut v = value_for(&key(i), u64::from(i));
    v.resize(40 + (i as usize * 7919) % 1960, b'v');
    v
}

/// Checks `store` against the model: every key there with its value, every deleted key
/// absent, and a full scan of exactly the model's keys.
fn check_model(
    store: &dyn KvStore,
    model: &BTreeMap<Vec<u8>, Vec<u8>>,
    deleted: &[Vec<u8>],
) -> Result<(), String> {
    for (k, v) in model {
        let got = store.get(k).map_err(|e| format!("get {k:?}: {e}"))?;
        if got.as_ref() != Some(v) {
            return Err(format!("key {k:?}: found {:?} bytes", got.map(|g| g.len())));
        }
    }
    for k in deleted {
        if store.get(k).map_err(|e| e.to_string())?.is_some() {
            return Err(format!("deleted key {k:?} is back"));
        }
    }
    let all = store.scan(b"", usize::MAX).map_err(|e| e.to_string())?;
    if all.len() != model.len() {
        return Err(format!(
            "a full scan: {} keys, {} expected",
            all.len(),
            model.len()
        ));
    }
    Ok(())
}

fn verify(store: &dyn KvStore, model: &BTreeMap<Vec<u8>, Vec<u8>>, deleted: &[Vec<u8>]) {
    check_model(store, model, deleted).unwrap();
}

/// Puts until 10 are refused with `NoSpace`; the model of what was acknowledged.
fn fill(store: &dyn KvStore) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut model = BTreeMap::new();
    let mut refused = 0;
    let mut i = 0u32;
    while refused < 10 {
        let (k, v) = (key(i), value(i));
        match store.put(&k, &v) {
            Ok(()) => {
                model.insert(k, v);
            }
            Err(Error::NoSpace { .. }) => refused += 1,
            Err(e) => panic!("put {i}: {e}"),
        }
        i += 1;
        assert!(i < 200_000, "6 MiB of tiers took 200,000 values");
    }
    model
}

#[test]
fn deletes_on_a_full_store_succeed_and_make_room_for_new_keys() {
    let mut rig = Rig::new(SPEC, 2).with_flash(4);
    rig.mode = DurabilityMode::Volatile;
    let store = rig.create();
    let capacity = (2u64 + 4) << 20;
    let mut model = fill(store.as_ref());
    let live: u64 = model.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum();
    println!(
        "full at {live} live bytes ({:.1}% of the tiers), {} keys",
        100.0 * live as f64 / capacity as f64,
        model.len()
    );
    // Refusing early is a defect too: the tiers hold at least a quarter of their room.
    assert!(live * 4 >= capacity, "refused at {live} live bytes");
    verify(store.as_ref(), &model, &[]);

    // A batch of puts (new keys and updates, in every partition) does not fit: refused
    // whole. A batch of deletes does, as single deletes do.
    let mut b = WriteBatch::new();
    for (i, k) in model.keys().take(30).enumerate() {
        b.put(key(2_000_000 + i as u32), value(i as u32))
            .put(k.clone(), b"updated".to_vec());
    }
    let e = store.write_batch(&b).unwrap_err();
    assert!(
        matches!(e, Error::NoSpace { .. }),
        "a batch on a full store: {e}"
    );
    assert!(
        (0..30).all(|i| store.get(&key(2_000_000 + i)).unwrap().is_none()),
        "part of a refused batch is visible"
    );
    verify(store.as_ref(), &model, &[]);
    let gone: Vec<Vec<u8>> = model.keys().skip(1).step_by(97).take(12).cloned().collect();
    let b: WriteBatch = gone.iter().map(|k| (k.clone(), None)).collect();
    store
        .write_batch(&b)
        .unwrap_or_else(|e| panic!("a batch of deletes on a full store: {e}"));
    for k in &gone {
        model.remove(k);
    }
    verify(store.as_ref(), &model, &gone);

    // Delete every other key: each delete must succeed on the full store.
    let victims: Vec<Vec<u8>> = model.keys().step_by(2).cloned().collect();
    let mut freed = 0u64;
    for k in &victims {
        store
            .delete(k)
            .unwrap_or_else(|e| panic!("delete of {k:?} on a full store: {e}"));
        let v = model.remove(k).unwrap();
        freed += (k.len() + v.len()) as u64;
    }
    verify(store.as_ref(), &model, &victims);

    // New keys worth a quarter of the freed bytes fit again (each retried for up to 10 s
    // while compactions drop the tombstones).
    let mut written = 0u64;
    let mut j = 1_000_000u32;
    while written * 4 < freed {
        let (k, v) = (key(j), value(j));
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match store.put(&k, &v) {
                Ok(()) => break,
                Err(Error::NoSpace { .. }) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("new key after deleting {freed} bytes, {written} written: {e}"),
            }
        }
        written += (k.len() + v.len()) as u64;
        model.insert(k, v);
        j += 1;
    }
    verify(store.as_ref(), &model, &victims);
    assert!(
        counter(store.as_ref(), "prismdb_tombstones_dropped") > 0,
        "no compaction dropped a tombstone"
    );
    assert_check(store.as_ref());
    store.close().unwrap();
    drop(store);
    let store = rig.reopen().unwrap();
    verify(store.as_ref(), &model, &victims);
    assert_check(store.as_ref());
}

/// Crash images (Tracked pool, whole lines or torn words, and the flash directory as it
/// stands) at the named points of the compactions that run on a full store after deletes:
/// flash has no room beyond its reserve, so they drop tombstones only, using the reserve.
/// Every image recovers with every acknowledged delete and every other key intact.
#[test]
fn crash_images_of_tombstone_only_compactions_keep_every_delete() {
    let rig = Arc::new(Rig::new(SPEC, 2).with_flash(4));
    let (store, pool) = rig.create_with_pool();
    let model = fill(store.as_ref());
    let deleted: Vec<Vec<u8>> = model.keys().step_by(2).cloned().collect();
    let mut model = model;
    for k in &deleted {
        store.delete(k).unwrap();
        model.remove(k);
    }
    store.stop_background();
    let sh = store.shared().clone();
    let dropped_before = sh.counters.tombstones_dropped.get();
    let seen: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let failures: Arc<Mutex<Vec<String>>> = Arc::default();
    {
        let (rig, seen, failures, model, deleted) = (
            rig.clone(),
            seen.clone(),
            failures.clone(),
            Arc::new(model.clone()),
            Arc::new(deleted.clone()),
        );
        let weak = Arc::downgrade(&pool);
        pool.arm_crash_points(Arc::new(move |cp: CrashPoint<'_>| {
            let CrashPoint::Named(name) = cp else {
                return;
            };
            if !BACKGROUND.contains(&name) {
                return;
            }
            let n = {
                let mut s = seen.lock();
                let n = s.entry(name.to_owned()).or_insert(0);
                *n += 1;
                *n
            };
            // The first three of each point, then one in 40 (a free per tombstone).
            if n > 3 && n % 40 != 0 {
                return;
            }
            let Some(pool) = weak.upgrade() else { return };
            let r = rig
                .recover_image(&pool, n, SPEC)
                .and_then(|(_dir, s)| check_model(s.as_ref(), &model, &deleted));
            if let Err(e) = r {
                failures.lock().push(format!("{name} #{n}: {e}"));
            }
        }))
        .unwrap();
    }
    let mut rounds = 0;
    for part in &sh.parts {
        while rounds < 200 {
            rounds += 1;
            match compact(&sh, part, Trigger::Write, true) {
                Ok(Some(_)) => {}
                Ok(None) | Err(Error::NoSpace { .. }) => break,
                Err(e) => panic!("compaction of partition {}: {e}", part.id),
            }
        }
    }
    pool.disarm_crash_points();
    let failures = failures.lock().clone();
    assert!(failures.is_empty(), "{failures:#?}");
    let seen = seen.lock().clone();
    println!("{rounds} compactions; points reached: {seen:?}");
    for p in &BACKGROUND[..4] {
        assert!(seen.get(*p).copied().unwrap_or(0) > 0, "{p} never reached");
    }
    assert!(
        sh.counters.compactions_no_room.get() > 0,
        "flash always had room"
    );
    assert!(sh.counters.tombstones_dropped.get() > dropped_before);
    verify(store.as_ref(), &model, &deleted);
    assert_check(store.as_ref());
}
