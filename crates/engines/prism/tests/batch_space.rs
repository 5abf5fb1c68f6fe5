//! Write batches on full tiers (issues 23 and 24; `FORMAT.md` § Write batches): a batch
//! reserves everything it applies with — PWB room for its records, HSIT slots and
//! key-index room for its new keys — before its commit point, so a batch that does not fit
//! is refused with `NoSpace` with none of its keys changed, and the engine stays writable.
//! Before the reservation, a batch refused by a full PWB after its commit point came back
//! half applied (`tierkv stress --mode space --seed 3`), and was finished at the next open
//! over the writes made since.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use std::collections::BTreeMap;

use common::{Rig, SMALL, assert_all_present, assert_check};
use tierkv_core::{Error, KvStore, WriteBatch};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn value(tag: &str, i: u64, len: usize) -> Vec<u8> {
    let mut v = format!("{tag}#{i}#").into_bytes();
    v.resize(len, b'a' + (i % 26) as u8);
    v
}

/// Single puts of new keys `prefix.NNNNNN` until one is refused.
fn fill(store: &dyn KvStore, model: &mut Model, prefix: &str, len: usize) -> Error {
    for i in 0..1_000_000u64 {
        let k = format!("{prefix}.{i:06}").into_bytes();
        let v = value(prefix, i, len);
        match store.put(&k, &v) {
            Ok(()) => {
                model.insert(k, v);
            }
            Err(e) => return e,
        }
    }
    panic!("the store never filled");
}

/// Writes `rounds` batches, each overwriting `old` keys of `model` and adding `new` keys
/// named `prefix.<round>.<n>`; a batch is applied whole (the model follows) or refused
/// with `NoSpace`, in which case every one of its keys must read as before. Returns the
/// batches applied and refused.
fn batches(
    store: &dyn KvStore,
    model: &mut Model,
    prefix: &str,
    rounds: u64,
    (old, new, len): (usize, usize, usize),
) -> (u64, u64) {
    let (mut applied, mut refused) = (0, 0);
    for r in 0..rounds {
        let mut b = WriteBatch::new();
        let olds: Vec<Vec<u8>> = model
            .keys()
            .skip((r as usize * 7) % model.len().max(1))
            .take(old)
            .cloned()
            .collect();
        for (i, k) in olds.iter().enumerate() {
            if i % 5 == 4 {
                b.delete(k.clone());
            } else {
                b.put(k.clone(), value(prefix, r * 1000 + i as u64, len));
            }
        }
        for n in 0..new {
            let k = format!("{prefix}.{r:04}.{n:03}").into_bytes();
            b.put(k, value(prefix, r * 1000 + 500 + n as u64, len));
        }
        match store.write_batch(&b) {
            Ok(()) => {
                applied += 1;
                for (k, op) in b.iter() {
                    match op.value() {
                        Some(v) => model.insert(k.to_vec(), v.to_vec()),
                        None => model.remove(k),
                    };
                }
            }
            Err(Error::NoSpace { .. }) => refused += 1,
            Err(e) => panic!("batch {r} of {prefix}: {e}"),
        }
        for (k, _) in b.iter() {
            assert_eq!(
                store.get(k).unwrap().as_ref(),
                model.get(k),
                "batch {r} of {prefix} (applied {applied}, refused {refused}): key {}",
                String::from_utf8_lossy(k)
            );
        }
    }
    (applied, refused)
}

/// Deletes every second key of the model (each must be accepted on the full store).
fn delete_half(store: &dyn KvStore, model: &mut Model) {
    let doomed: Vec<Vec<u8>> = model.keys().step_by(2).cloned().collect();
    for k in doomed {
        store.delete(&k).unwrap();
        model.remove(&k);
    }
}

#[test]
fn a_batch_that_finds_the_flash_full_is_refused_whole_and_the_store_stays_writable() {
    // 2 MiB of flash in 16 KiB chunks, 4 PWBs of 64 KiB: the PWBs cannot drain once the
    // device is full, so a batch cannot get PWB room.
    let rig = Rig::new(SMALL, 16, 2);
    let store = rig.create();
    let mut model = Model::new();
    let err = fill(&*store, &mut model, "a", 600);
    assert!(matches!(err, Error::NoSpace { .. }), "{err}");
    let (applied, refused) = batches(&*store, &mut model, "b", 12, (12, 6, 600));
    println!("full flash: {applied} batches applied, {refused} refused");
    assert!(refused > 0, "no batch was refused on a full device");
    // Not poisoned: deletes are accepted, and once they freed space batches fit again.
    delete_half(&*store, &mut model);
    let mut fitted = 0;
    for attempt in 0..200 {
        let (a, _) = batches(&*store, &mut model, &format!("c{attempt}"), 1, (4, 2, 600));
        fitted += a;
        if fitted >= 3 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(fitted >= 3, "batches never fitted again after the deletes");
    assert_all_present(&*store, &model);
    drop(store);
    let store = rig.reopen().unwrap();
    assert_all_present(&*store, &model);
    assert_eq!(store.stats().counters["batches_replayed"], 0);
    assert_check(&*store);
}

#[test]
fn a_batch_of_new_keys_on_a_full_pool_is_refused_whole() {
    // A 4 MiB pool: the HSIT and the key index run out long before the flash does.
    let rig = Rig::new("prism@svc_size=128KiB", 4, 64);
    let store = rig.create();
    let mut model = Model::new();
    let err = fill(&*store, &mut model, "a", 100);
    assert!(matches!(err, Error::NoSpace { .. }), "{err}");
    // Long keys need key-index blobs as well.
    let (applied, refused) = batches(&*store, &mut model, &"L".repeat(60), 8, (6, 40, 100));
    println!("full pool: {applied} batches applied, {refused} refused");
    assert!(
        refused > 0,
        "no batch of new keys was refused on a full pool"
    );
    store.delete(b"a.000000").unwrap();
    model.remove(b"a.000000".as_slice());
    drop(store);
    let store = rig.reopen().unwrap();
    assert_all_present(&*store, &model);
    assert_eq!(store.stats().counters["batches_replayed"], 0);
    assert_check(&*store);
}

/// Key `i` of `len` bytes (the number first, so that lengths interleave in key order).
fn sized_key(prefix: &str, i: u64, len: usize) -> Vec<u8> {
    let mut k = format!("{prefix}{i:06}.").into_bytes();
    let len = len.max(k.len());
    k.resize(len, b'k');
    k
}

#[test]
fn a_batch_of_10_000_new_keys_of_several_blob_classes_commits_in_a_64_mib_pool() {
    // Issue 24: the key-index reservation counted a leaf slot per new key and, per blob
    // class in use, a blob slot per new key (10,000 leaves of 3.7 KiB alone are 37 MiB),
    // so this batch was refused with `NoSpace`. It now counts the splits the keys can
    // cause in the leaves they fall into (key_index/reserve.rs).
    let rig = Rig::new("prism", 64, 64);
    let store = rig.create();
    let mut model = Model::new();
    // Long keys of three blob classes (64, 128 and 256-byte slots) already in the index.
    let lens = [12, 50, 100, 200];
    for i in 0..400u64 {
        let k = sized_key("k", 25 * i, lens[i as usize % 4]);
        let v = value("old", i, 32);
        store.put(&k, &v).unwrap();
        model.insert(k, v);
    }
    // Two batches of 10,000 new keys, interleaved with those and with each other, of
    // those lengths and two more blob classes (512 and 1024-byte slots).
    let lens = [12, 50, 100, 200, 400, 900];
    for round in 0..2u64 {
        let mut b = WriteBatch::new();
        for i in 0..10_000u64 {
            let n = (i / 12) * 25 + 1 + (i % 12) * 2 + round;
            let k = sized_key("k", n, lens[(i + round) as usize % lens.len()]);
            b.put(k, value("new", i, 32));
        }
        assert_eq!(b.len(), 10_000);
        store
            .write_batch(&b)
            .unwrap_or_else(|e| panic!("batch {round} of 10,000 new keys: {e}"));
        for (k, op) in b.iter() {
            assert!(
                model
                    .insert(k.to_vec(), op.value().unwrap().to_vec())
                    .is_none()
            );
        }
    }
    assert_eq!(model.len(), 20_400);
    assert_all_present(&*store, &model);
    assert_check(&*store);
    drop(store);
    let store = rig.reopen().unwrap();
    assert_all_present(&*store, &model);
    assert_eq!(store.stats().counters["batches_replayed"], 0);
    assert_check(&*store);
}
