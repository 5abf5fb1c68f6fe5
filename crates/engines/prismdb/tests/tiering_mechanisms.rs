//! End-to-end tests of the tiering mechanisms: deletes never resurrect flash versions
//! (the authors' code could), promotions bring hot flash objects back to the fast tier
//! (and `promotions=off` does not), read-triggered compactions start in a read-only phase
//! with hot keys on flash, updates move objects between size classes, and every victim
//! policy keeps the data intact.

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tierkv_core::KvStore;
use tierkv_core::media::pmem::CrashPoint;
use tierkv_prismdb::PrismDbStore;
use tierkv_prismdb::compaction::{Trigger, compact};

use common::{Rig, assert_check, counter, value_for};

const BASE: &str = "prismdb@partitions=2,bounds=k2,chunk_size=16KiB,table_size=64KiB,\
high_watermark=0.95,low_watermark=0.9,bucket_keys=16,tracker_min=16,read_compactions=off";

fn key(i: u32) -> Vec<u8> {
    format!("k{i:05}").into_bytes()
}

/// Demotes everything it can (pinning ignored), until nothing moves.
fn demote_all(store: &PrismDbStore) {
    let sh = store.shared();
    for p in &sh.parts {
        while compact(sh, p, Trigger::Write, true)
            .unwrap()
            .is_some_and(|o| o.demoted + o.tombstones > 0)
        {}
    }
}

/// A store of `spec` (4 MiB pool) with its background threads stopped and keys 0..400
/// (values of generation 2) demoted to flash.
fn keys_on_flash(spec: &str) -> (Rig, Arc<PrismDbStore>) {
    let rig = Rig::new(spec, 4);
    let store = rig.create();
    store.stop_background();
    for i in 0..400 {
        store.put(&key(i), &value_for(&key(i), 2)).unwrap();
    }
    demote_all(&store);
    (rig, store)
}

fn fast_objects(store: &PrismDbStore) -> usize {
    store
        .shared()
        .parts
        .iter()
        .map(|p| p.state.read().index.len())
        .sum()
}

fn check(store: &PrismDbStore, model: &BTreeMap<Vec<u8>, Vec<u8>>, ctx: &str) {
    let got: BTreeMap<_, _> = store.scan(b"", usize::MAX).unwrap().into_iter().collect();
    assert_eq!(&got, model, "{ctx}");
    for i in 0..400 {
        assert_eq!(
            store.get(&key(i)).unwrap().as_ref(),
            model.get(&key(i)),
            "{ctx}: key {i}"
        );
    }
}

#[test]
fn deletes_hide_flash_versions_until_compaction_removes_both_and_never_resurrect() {
    let rig = Rig::new(BASE, 4);
    let store = rig.create();
    store.stop_background();
    let mut model = BTreeMap::new();
    for i in 0..400 {
        let v = value_for(&key(i), 1);
        store.put(&key(i), &v).unwrap();
        model.insert(key(i), v);
    }
    demote_all(&store);
    assert_eq!(fast_objects(&store), 0, "everything should be on flash");
    for i in (0..400).step_by(3) {
        store.delete(&key(i)).unwrap();
        model.remove(&key(i));
        assert_eq!(
            store.get(&key(i)).unwrap(),
            None,
            "tombstone must hide the flash version"
        );
    }
    // Deleting a key that never existed writes nothing.
    store.delete(b"k2-never").unwrap();
    let tombstones = fast_objects(&store);
    assert!(tombstones > 0);
    check(&store, &model, "tombstones on pmem");
    store.close().unwrap();
    drop(store);
    let store = rig.reopen().unwrap();
    store.stop_background();
    check(&store, &model, "reopened with tombstones");
    demote_all(&store);
    assert_eq!(
        fast_objects(&store),
        0,
        "tombstones must be dropped by compaction"
    );
    assert!(counter(&*store, "prismdb_tombstones_dropped") > 0);
    check(&store, &model, "after tombstones were compacted");
    // A delete of a flash-only key right after that compaction, then reopen.
    store.delete(&key(1)).unwrap();
    model.remove(&key(1));
    store.close().unwrap();
    drop(store);
    let store = rig.reopen().unwrap();
    check(&store, &model, "reopened again");
    assert_check(&*store);
}

/// Promoted objects, and fast / flash reads of the hot set afterwards. With
/// `writer_waiting`, a writer of the first partition counts as waiting for room while the
/// compactions run.
fn promotion_run(promotions: bool, writer_waiting: bool) -> (u64, u64, u64) {
    let spec = format!(
        "{BASE},promotions={}",
        if promotions { "on" } else { "off" }
    );
    let (_rig, store) = keys_on_flash(&spec);
    // A hot set of 20 keys, read many times (clock 3), and a cold tail read once.
    for _ in 0..5 {
        for i in 0..20 {
            store.get(&key(i * 7)).unwrap().unwrap();
        }
    }
    let sh = store.shared();
    let waiting = &sh.parts[0].pressure;
    if writer_waiting {
        waiting.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }
    for p in &sh.parts {
        compact(sh, p, Trigger::Read, false).unwrap();
    }
    if writer_waiting {
        waiting.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
    let before = store.stats();
    for i in 0..20 {
        assert_eq!(
            store.get(&key(i * 7)).unwrap(),
            Some(value_for(&key(i * 7), 2))
        );
    }
    let after = store.stats().delta_since(&before);
    assert_check(&*store);
    (
        counter(&*store, "prismdb_promoted"),
        after.reads_from_pmem,
        // Flash-table reads: from the device or, for a cached block, from DRAM.
        after.reads_from_flash + after.reads_from_dram,
    )
}

#[test]
fn promotions_bring_hot_flash_objects_back_and_can_be_switched_off() {
    let (promoted, fast, flash) = promotion_run(true, false);
    println!("promotions on: promoted {promoted}, hot reads fast {fast} flash {flash}");
    assert!(promoted >= 10, "promoted only {promoted}");
    assert!(
        fast > flash,
        "hot keys still read from flash: fast {fast}, flash {flash}"
    );
    let (promoted, fast, flash) = promotion_run(false, false);
    println!("promotions off: promoted {promoted}, hot reads fast {fast} flash {flash}");
    assert_eq!(promoted, 0);
    assert_eq!(fast, 0);
    assert_eq!(flash, 20);
}

/// A read-triggered compaction with room below the low watermark promotes the objects
/// gets noted on flash, with the values they read, instead of reading a table whole:
/// before 2026-11-27, every such compaction read its table (16 MiB at the default size)
/// to find a few hot objects, and in YCSB-C that traffic (913 MiB read from flash in 2 s,
/// most compactions promoting nothing) made promotions cost more than they gained.
#[test]
fn a_promotion_only_compaction_reads_the_hot_keys_blocks_not_the_whole_table() {
    let (_rig, store) = keys_on_flash(&format!("{BASE},promotions=on"));
    let sh = store.shared();
    let table_bytes: u64 = sh
        .parts
        .iter()
        .flat_map(|p| p.state.read().tables.tables.clone())
        .map(|t| t.file.len())
        .sum();
    // Three hot keys, each read three times from flash: the first read tracks it, the
    // second (clock 3, pinned) notes it, the third makes the note ready (`hot.rs`).
    for _ in 0..3 {
        for i in [3, 150, 333] {
            store.get(&key(i)).unwrap().unwrap();
        }
    }
    let before = sh.dev.counters();
    let mut promoted = 0;
    for p in &sh.parts {
        // Until nothing noted is left to promote.
        while let Some(o) = compact(sh, p, Trigger::Read, false).unwrap() {
            promoted += o.promoted;
        }
    }
    let now = sh.dev.counters();
    let read = now.flash_bytes_read - before.flash_bytes_read;
    println!("promoted {promoted}, flash read {read} of {table_bytes} table bytes");
    assert_eq!(promoted, 3);
    assert!(
        read < table_bytes / 4,
        "read {read} bytes of flash to promote 3 keys (tables: {table_bytes})"
    );
    assert_eq!(
        now.flash_bytes_written, before.flash_bytes_written,
        "no table rewritten"
    );
    assert!(counter(&*store, "prismdb_compactions_read") >= 1);
    // Now on the fast tier, and nothing else moved.
    let before = store.stats();
    for i in [3, 150, 333] {
        assert_eq!(store.get(&key(i)).unwrap(), Some(value_for(&key(i), 2)));
    }
    let after = store.stats().delta_since(&before);
    assert_eq!((after.reads_from_pmem, after.reads_from_flash), (3, 0));
    assert_check(&*store);
}

/// A read-triggered compaction that has to demote (no room below the low watermark for
/// its hot keys) rewrites its table only when they are at least `read_min_promote` of the
/// table's bytes; one hot key of a table is not worth a rewrite by default, and is with
/// `read_min_promote=0` (the paper's trigger).
#[test]
fn a_read_triggered_compaction_rewrites_a_table_only_for_enough_hot_keys() {
    for (min, rewrite) in [("", false), (",read_min_promote=0", true)] {
        let spec = format!(
            "prismdb@partitions=2,bounds=k2,chunk_size=16KiB,table_size=64KiB,\
             high_watermark=0.95,low_watermark=0.001,bucket_keys=16,tracker_min=16,\
             read_compactions=off{min}"
        );
        let (_rig, store) = keys_on_flash(&spec);
        // Cold objects on the fast tier in the hot key's range: the partition is above
        // its low watermark, so promoting needs a demotion.
        for j in 0..20 {
            let k = format!("k00003c{j:02}").into_bytes();
            store.put(&k, &value_for(&k, 1)).unwrap();
        }
        for _ in 0..3 {
            store.get(&key(3)).unwrap().unwrap();
        }
        let sh = store.shared();
        let written = sh.dev.counters().flash_bytes_written;
        let out = compact(sh, &sh.parts[0], Trigger::Read, false).unwrap();
        let rewrote = sh.dev.counters().flash_bytes_written > written;
        let skipped = counter(&*store, "prismdb_read_compactions_skipped");
        println!("{min:?}: {out:?}, rewrote {rewrote}, skipped {skipped}");
        assert_eq!(rewrote, rewrite, "{min:?}");
        assert_eq!(skipped, u64::from(!rewrite), "{min:?}");
        assert_eq!(out.is_some(), rewrite, "{min:?}");
        assert_eq!(store.get(&key(3)).unwrap(), Some(value_for(&key(3), 2)));
        assert_check(&*store);
    }
}

/// A write-triggered compaction promotes the hot flash objects it meets only when the
/// partition's operations since its previous write-triggered compaction were mostly reads
/// (`promote_read_share`, 0.9): in a write-heavy window each promotion takes room the
/// writes need.
#[test]
fn a_write_triggered_compaction_promotes_only_after_a_read_dominated_window() {
    for (rewrites, promotes) in [(0, true), (19, false)] {
        let (_rig, store) = keys_on_flash(BASE);
        // Twenty hot keys, read 25 times each (500 reads), and a new key beside each.
        for _ in 0..25 {
            for i in 0..20 {
                store.get(&key(i * 7)).unwrap().unwrap();
            }
        }
        for round in 0..=rewrites {
            for i in 0..20 {
                let k = format!("k{:05}w", i * 7).into_bytes();
                store.put(&k, &value_for(&k, round)).unwrap();
            }
        }
        let sh = store.shared();
        let out = compact(sh, &sh.parts[0], Trigger::Write, true)
            .unwrap()
            .unwrap();
        println!("{} writes: {out:?}", 20 * (rewrites + 1));
        assert!(out.demoted > 0);
        assert_eq!(out.promoted > 0, promotes, "{out:?}");
        assert_check(&*store);
    }
}

#[test]
fn read_triggered_compactions_start_in_a_read_only_phase_with_hot_keys_on_flash() {
    let spec = "prismdb@partitions=2,bounds=k2,chunk_size=16KiB,table_size=64KiB,\
                high_watermark=0.95,low_watermark=0.9,bucket_keys=16,tracker_min=16,\
                read_epoch=400,read_gain=0.0,read_cooldown=100000";
    let rig = Rig::new(spec, 4);
    let store = rig.create();
    for i in 0..400 {
        store.put(&key(i), &value_for(&key(i), 3)).unwrap();
    }
    // Demote with the background threads running (they only compact on triggers).
    demote_all(&store);
    let deadline = Instant::now() + Duration::from_secs(20);
    while counter(&*store, "prismdb_compactions_read") == 0 && Instant::now() < deadline {
        for i in 0..40 {
            store.get(&key(i * 3)).unwrap().unwrap();
        }
    }
    assert!(
        counter(&*store, "prismdb_compactions_read") > 0,
        "no read-triggered compaction"
    );
    assert!(counter(&*store, "prismdb_promoted") > 0, "no promotion");
    let s = store.stats();
    println!("{:?} {:?}", s.counters, s.gauges);
    for i in 0..400 {
        assert_eq!(store.get(&key(i)).unwrap(), Some(value_for(&key(i), 3)));
    }
}

#[test]
fn every_victim_policy_compacts_without_losing_data_and_updates_move_classes() {
    for victim in ["approx", "precise", "random", "unpopular"] {
        let spec = format!(
            "prismdb@partitions=2,bounds=k2,chunk_size=16KiB,table_size=64KiB,\
             high_watermark=0.06,low_watermark=0.04,bucket_keys=16,tracker_min=16,victim={victim}"
        );
        let rig = Rig::new(&spec, 4);
        let store = rig.create();
        let mut model = BTreeMap::new();
        for round in 0..6u64 {
            for i in 0..1000u32 {
                let k = key(i);
                // Sizes cycle through the first four classes.
                let mut v = value_for(&k, round);
                v.resize(
                    [20, 200, 450, 1000][((i as u64 + round) % 4) as usize],
                    b'z',
                );
                store.put(&k, &v).unwrap();
                model.insert(k, v);
            }
        }
        let got: BTreeMap<_, _> = store.scan(b"", usize::MAX).unwrap().into_iter().collect();
        assert_eq!(got, model, "victim={victim}");
        let c = counter(&*store, "prismdb_compactions_write");
        assert!(c > 0, "victim={victim}: no compaction");
        let census: Vec<(usize, u64)> = store.shared().parts[0].state.read().slabs.census();
        assert!(
            census.iter().take(4).filter(|c| c.1 > 0).count() >= 2,
            "victim={victim}: {census:?}"
        );
        assert_check(&*store);
        println!(
            "victim={victim}: {c} compactions, flash written {}",
            store.shared().dev.counters().flash_bytes_written
        );
    }
}

/// Regression (2026-11-26, CI space run of seed 2310): promotions took back the slots a
/// compaction had freed for writers waiting for room, so writers of the largest class
/// waited 30 s (`a write of the fill took 30005.5 ms`) while every compaction demoted and
/// promoted the same bytes. No promotion runs while a writer (of any partition) waits.
#[test]
fn no_promotion_while_a_writer_waits_for_room() {
    let (promoted, fast, flash) = promotion_run(true, true);
    println!("writer waiting: promoted {promoted}, hot reads fast {fast} flash {flash}");
    assert_eq!(promoted, 0, "promotions while a writer waits for room");
    assert_eq!(fast, 0);
}

/// Regression (found in review): a put that took its timestamp before a promotion of the
/// same key and published after it was dropped in favour of the promoted (older) value.
#[test]
fn a_put_in_flight_wins_over_a_promotion_of_the_same_key() {
    let spec = format!("{BASE},pin_threshold=1.0");
    let rig = Rig::new(&spec, 4);
    let store = rig.create();
    store.stop_background();
    for i in 0..100 {
        store.put(&key(i), &value_for(&key(i), 1)).unwrap();
    }
    demote_all(&store);
    let k = key(42);
    for _ in 0..3 {
        assert_eq!(store.get(&k).unwrap(), Some(value_for(&k, 1)));
    }
    let sh = store.shared().clone();
    let fired = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    {
        let (sh2, fired) = (std::sync::Arc::downgrade(&sh), fired.clone());
        let part = sh.map.partition_of(&k);
        // NOTE: this handler runs a compaction, which persists to the pool whose point it
        // serves (the crash-point rules forbid that to handlers that take images; here it
        // only interleaves a promotion with the put, deterministically).
        let handler = std::sync::Arc::new(move |cp: CrashPoint<'_>| {
            if cp == CrashPoint::Named("prismdb.put.object_persisted")
                && !fired.swap(true, std::sync::atomic::Ordering::SeqCst)
            {
                let sh = sh2.upgrade().unwrap();
                let out = compact(&sh, &sh.parts[part], Trigger::Read, false).unwrap();
                assert!(
                    out.is_some_and(|o| o.promoted > 0),
                    "no promotion ran: {out:?}"
                );
            }
        });
        sh.pool.arm_crash_points(handler).unwrap();
    }
    store.put(&k, b"new value").unwrap();
    assert!(fired.load(std::sync::atomic::Ordering::SeqCst));
    sh.pool.disarm_crash_points();
    assert_eq!(store.get(&k).unwrap(), Some(b"new value".to_vec()));
    drop(sh);
    store.close().unwrap();
    drop(store);
    let store = rig.reopen().unwrap();
    assert_eq!(store.get(&k).unwrap(), Some(b"new value".to_vec()));
    assert_check(&*store);
}

/// A note of a hot flash object (`hot.rs`) holds the value its get read: it is promoted
/// only while the key has no fast-tier version and its table is still the one the note
/// names. A key rewritten, or rewritten and demoted into a new table, keeps its new value.
#[test]
fn a_stale_note_is_never_promoted() {
    let (_rig, store) = keys_on_flash(&format!("{BASE},pin_threshold=1.0"));
    let sh = store.shared().clone();
    // `kept` in the second partition (its own table).
    let kept = b"k3kept".to_vec();
    store.put(&kept, &value_for(&kept, 2)).unwrap();
    demote_all(&store);
    // Hot: read three times from flash (tracked, then noted: the mapper pins clock 3,
    // then ready).
    let (written, demoted) = (key(10), key(200));
    for _ in 0..3 {
        for k in [&written, &demoted, &kept] {
            assert_eq!(store.get(k).unwrap(), Some(value_for(k, 2)));
        }
    }
    let noted: usize = sh.parts.iter().map(|p| p.hot.lock().len()).sum();
    assert_eq!(noted, 3);
    // `demoted` gets a new version that a compaction moves to a new table (its note names
    // the old one); `written` a fast-tier version.
    store.put(&demoted, b"demoted").unwrap();
    let part = &sh.parts[sh.map.partition_of(&demoted)];
    let hot = std::mem::take(&mut *part.hot.lock());
    demote_all(&store);
    *part.hot.lock() = hot;
    store.put(&written, b"written").unwrap();
    let before = counter(&*store, "prismdb_promoted");
    for p in &sh.parts {
        while compact(&sh, p, Trigger::Read, false).unwrap().is_some() {}
    }
    assert_eq!(
        counter(&*store, "prismdb_promoted") - before,
        1,
        "only the note whose table and key are unchanged is promoted"
    );
    assert_eq!(store.get(&written).unwrap(), Some(b"written".to_vec()));
    assert_eq!(store.get(&demoted).unwrap(), Some(b"demoted".to_vec()));
    assert_eq!(store.get(&kept).unwrap(), Some(value_for(&kept, 2)));
    assert_check(&*store);
}
