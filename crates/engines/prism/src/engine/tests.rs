//! Unit tests of the engine's failure and race handling, driven through the crate's fault
//! points (`faults.rs`) so that each interleaving is deterministic.

use std::sync::Arc;
use std::time::Duration;

use tierkv_core::{Error, KvStore};

use crate::PrismStore;
use crate::faults::{Point, fail_next, fail_nth, hook_next};
use crate::hsit::entry::Location;
use crate::test_support::store_fixture;
use crate::value_storage::ValueLocation;

/// Small chunks and buffers; background reclamation left to the tests (high watermark).
const SPEC: &str = "prism@pwb_count=1,pwb_size=256KiB,chunk_size=16KiB,svc_size=64KiB";

fn value(key: &str, n: usize) -> Vec<u8> {
    let mut v = format!("{key}:").into_bytes();
    v.resize(n, b'v');
    v
}

/// Where `key`'s HSIT entry points now.
fn location(store: &PrismStore, key: &[u8]) -> Location {
    let core = store.core();
    let slot = core.index.get(key).unwrap().unwrap();
    core.hsit.load(slot).unwrap().location().unwrap()
}

/// A store where each of `keys` was put (a 900-byte value) and flushed to its own chunk.
fn flushed_one_by_one(keys: &[&str]) -> crate::test_support::StoreFixture {
    let fx = store_fixture(SPEC);
    for k in keys {
        fx.store.put(k.as_bytes(), &value(k, 900)).unwrap();
        fx.store.flush().unwrap();
    }
    fx
}

/// GC on the (only) Value Storage, needed or not; a failure poisons (as `gc_now` does).
fn gc_now(store: &PrismStore) -> tierkv_core::Result<bool> {
    let core = store.core();
    core.poison_on_failure(core.gc_storage(&core.storages[0]))
}

/// Defect 1 of issue 21: a chunk written by PWB reclamation is sealed with its validity
/// bits set before the reclaimer moves the HSIT pointers into it. A GC step in that window
/// takes it as a victim, loses every CAS (HSIT still points at the PWB) and cannot retire
/// it; the reclaimer's CASes then win. The chunk must not stay a victim (GC only looks at
/// sealed chunks, so a victim would never be collected again).
#[test]
fn gc_during_reclamation_leaves_no_chunk_a_victim_forever() {
    let fx = store_fixture(SPEC);
    let store = fx.store.clone();
    store.put(b"a", &value("a", 900)).unwrap();
    store.flush().unwrap();
    store.put(b"b", &value("b", 900)).unwrap();
    store.put(b"c", &value("c", 900)).unwrap();
    let in_hook = store.clone();
    hook_next(Point::ReclaimChunkWritten, move || {
        // The chunk of b and c is sealed, their HSIT entries still point at the PWB.
        gc_now(&in_hook).unwrap();
    });
    store.flush().unwrap();
    for k in ["a", "b", "c"] {
        assert!(matches!(location(&store, k.as_bytes()), Location::Flash(_)));
        assert_eq!(store.get(k.as_bytes()).unwrap(), Some(value(k, 900)));
    }
    if let Err(e) = store.check() {
        panic!("check after the race: {e}");
    }
    assert_eq!(
        store.core().storages[0].victim_chunks(),
        Vec::<u32>::new(),
        "a chunk stayed a GC victim after the step"
    );
    // And GC can still collect it.
    gc_now(&store).unwrap();
    store.check().unwrap();
}

/// Defect 2 of issue 21: `Hsit::relocate` whose CAS won but whose persist failed must not
/// make GC invalidate the copy the HSIT entry now points to.
#[test]
fn failed_relocate_persist_never_invalidates_the_copy_hsit_points_to() {
    let fx = flushed_one_by_one(&["a", "b"]);
    let store = &fx.store;
    fail_next(Point::HsitRelocatePersist);
    assert!(
        gc_now(store).is_err(),
        "the injected persist failure is reported"
    );
    for k in ["a", "b"] {
        let Location::Flash(p) = location(store, k.as_bytes()) else {
            panic!("{k} is on flash");
        };
        let at = ValueLocation::unpack(p);
        assert!(
            store.core().storages[0].is_valid(at).unwrap(),
            "{k}: HSIT points at {at:?}, which GC invalidated"
        );
        assert_eq!(store.get(k.as_bytes()).unwrap(), Some(value(k, 900)));
    }
    assert!(matches!(store.put(b"c", b"v"), Err(Error::Poisoned(_))));
}

/// A store whose delete of `k` failed at `point`; asserts that a put of `k` (on its own
/// thread) is then refused as poisoned within 5 s (a put that hangs is left running).
fn put_after_a_failed_delete(point: Point) -> crate::test_support::StoreFixture {
    let fx = store_fixture(SPEC);
    fx.store.put(b"k", &value("k", 100)).unwrap();
    fail_next(point);
    assert!(fx.store.delete(b"k").is_err());
    let (tx, rx) = crossbeam::channel::bounded(1);
    let s = Arc::clone(&fx.store);
    std::thread::spawn(move || {
        let _ = tx.send(s.put(b"k", &value("k", 200)));
    });
    match rx.recv_timeout(Duration::from_secs(5)) {
        Ok(Err(Error::Poisoned(_))) => {}
        Ok(other) => panic!("put after the failed delete returned {other:?}"),
        Err(_) => panic!("put after the failed delete still waits after 5 s"),
    }
    fx
}

/// Defect 3 of issue 21: a delete whose key-index removal fails leaves a "none" pointer
/// behind an index entry; a later put of that key must not wait forever for the removal.
#[test]
fn put_after_a_failed_index_removal_does_not_hang() {
    let fx = put_after_a_failed_delete(Point::IndexRemove);
    let store = &fx.store;
    assert!(matches!(store.put(b"other", b"v"), Err(Error::Poisoned(_))));
    // Reads still work.
    let _ = store.get(b"k").unwrap();
}

/// Defect 3 of issue 21, the persist case: a delete whose pointer persist fails leaves a
/// dirty "none" pointer behind an index entry (a later load helps it to pmem, so the key
/// looks deleted but the index still maps it); a later put of the key must not wait
/// forever for the removal.
#[test]
fn put_after_a_delete_whose_pointer_persist_failed_does_not_hang() {
    let fx = put_after_a_failed_delete(Point::HsitPublishPersist);
    let store = &fx.store;
    // What it would have waited on: the index still maps the key to a slot whose pointer
    // (helped to pmem by the load) is none.
    let core = store.core();
    let slot = core
        .index
        .get(b"k")
        .unwrap()
        .expect("the index still maps the key");
    assert!(core.load_for_use(slot).unwrap().is_none());
    assert_eq!(store.get(b"k").unwrap(), None);
}

/// Defect 1 of issue 21, the `tierkv check` side: a chunk left in GC's victim state
/// outside a GC step (its space would leak until reopen) is a problem the store's check
/// reports, naming the chunk.
#[test]
fn store_check_reports_a_chunk_stuck_as_gc_victim() {
    let fx = flushed_one_by_one(&["a"]);
    let store = &fx.store;
    store.check().unwrap();
    let Location::Flash(p) = location(store, b"a") else {
        panic!("a is on flash after the flush");
    };
    let chunk = ValueLocation::unpack(p).chunk;
    assert!(store.core().storages[0].strand_as_victim(chunk));
    let e = store.check().unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains(&format!("chunk {chunk} is a GC victim outside a GC step")),
        "{text}"
    );
    assert!(matches!(e, Error::Corruption { .. }), "{e:?}");
}

/// Defect 5 of issue 21: PWB reclamation whose HSIT move fails part-way through a chunk
/// leaves no valid copy that nothing points to (the bitmaps agree with HSIT).
#[test]
fn reclamation_failing_part_way_leaves_no_valid_garbage() {
    let fx = store_fixture(SPEC);
    let store = &fx.store;
    for k in ["a", "b", "c", "d"] {
        store.put(k.as_bytes(), &value(k, 700)).unwrap();
    }
    // The first key moves; the second fails before its CAS; the rest are never tried.
    fail_nth(Point::HsitRelocateCas, 2);
    assert!(store.flush().is_err());
    assert!(matches!(store.put(b"e", b"v"), Err(Error::Poisoned(_))));
    if let Err(e) = store.check() {
        panic!("check after the failed reclamation: {e}");
    }
    let live = store.core().storages[0].stats().live_values;
    let on_flash = ["a", "b", "c", "d"]
        .iter()
        .filter(|k| matches!(location(store, k.as_bytes()), Location::Flash(_)))
        .count() as u64;
    assert_eq!((live, on_flash), (1, 1));
    for k in ["a", "b", "c", "d"] {
        assert_eq!(store.get(k.as_bytes()).unwrap(), Some(value(k, 700)));
    }
}

/// Defect 5 of issue 21: the DRAM use a store reports counts the key index's search layer
/// (one DRAM entry per leaf, with its anchor), which grows with the keys.
#[test]
fn reported_dram_use_counts_the_key_index_search_layer() {
    let fx = store_fixture(SPEC);
    let store = &fx.store;
    let core = store.core();
    let before = core.index.dram_bytes();
    for i in 0..2000u32 {
        store.put(format!("key{i:06}").as_bytes(), b"v").unwrap();
    }
    let layer = core.index.dram_bytes();
    assert!(
        layer > before,
        "the search layer did not grow ({layer} bytes)"
    );
    let c = core.component_stats();
    let others = core.hsit.dram_bytes()
        + core
            .storages
            .iter()
            .map(|s| s.stats().dram_bytes)
            .sum::<u64>();
    assert_eq!(c.dram_bytes, others + layer);
    assert!(store.stats().dram_bytes >= c.dram_bytes);
}

/// A scan caches the values it reads from scattered places on flash (on its chain, §4.4)
/// but not values already in a run of key-order neighbours (a chain write-back's work),
/// which the next scan reads again in one merged read; both count as SVC misses.
#[test]
fn a_scan_caches_scattered_values_and_not_runs_of_neighbours() {
    let fx = store_fixture(SPEC);
    let store = &fx.store;
    let core = store.core();
    // a00..a09 flushed together: one run in key order.
    let run: Vec<String> = (0..10).map(|i| format!("a{i:02}")).collect();
    for k in &run {
        store.put(k.as_bytes(), &value(k, 900)).unwrap();
    }
    store.flush().unwrap();
    // b00..b09 flushed one by one: each in its own chunk.
    let scattered: Vec<String> = (0..10).map(|i| format!("b{i:02}")).collect();
    for k in &scattered {
        store.put(k.as_bytes(), &value(k, 900)).unwrap();
        store.flush().unwrap();
    }
    for k in run.iter().chain(&scattered) {
        assert!(
            matches!(location(store, k.as_bytes()), Location::Flash(_)),
            "{k}"
        );
    }
    let svc = || {
        core.svc.quiesce();
        core.svc.stats()
    };
    let before = svc();
    let rows = store.scan(b"a", 10).unwrap();
    assert_eq!(rows.len(), 10);
    for ((k, v), want) in rows.iter().zip(&run) {
        assert_eq!((k.as_slice(), v), (want.as_bytes(), &value(want, 900)));
    }
    let after_run = svc();
    assert_eq!(after_run.entries, before.entries, "a run is not cached");
    assert_eq!(after_run.misses - before.misses, 10, "its reads are misses");
    let rows = store.scan(b"b", 10).unwrap();
    for ((k, v), want) in rows.iter().zip(&scattered) {
        assert_eq!((k.as_slice(), v), (want.as_bytes(), &value(want, 900)));
    }
    let after = svc();
    assert_eq!(
        after.entries,
        after_run.entries + 10,
        "scattered values are cached"
    );
    assert_eq!(after.misses - after_run.misses, 10);
    // The scattered ones now come from the cache, the run from flash again.
    let hits = after.hits;
    assert_eq!(store.scan(b"b", 10).unwrap().len(), 10);
    assert_eq!(store.scan(b"a", 10).unwrap().len(), 10);
    let last = svc();
    assert_eq!(last.hits - hits, 10);
    assert_eq!(last.misses - after.misses, 10);
}
