//! A chunk that held a committed batch's record and is taken again for a later record run
//! (FORMAT.md §3 "Write batches", "Reuse of a record chunk").
//!
//! The CI failure this reproduces (`tierkv-stress --engine prismdb --mode kill --seed 2407
//! --rounds 3 --round-time 200ms --threads 3 --keys 300 --pmem-size 4MiB --mix
//! 30,10,20,10,30 --batch-size 24 --pmem-mode volatile`, about 1 run in 500): a batch
//! commits by zeroing its record's magic word, and the rest of the record (count,
//! checksum, slot offsets) stayed in the chunk. The next batch whose record run got that
//! chunk writes its record word by word, magic first; a SIGKILL after that first word left
//! the new magic in front of the old record, whose checksum still matched, and recovery
//! voided the slots of the committed batch: 12 acknowledged keys lost at once. A power
//! failure can do the same, since the lines of one persist reach the media in any order.
//!
//! Both tests commit a batch, give its record chunk to a new record run, let only the new
//! record's first word land, recover, and expect every key of the committed batch.

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use std::sync::Arc;

use parking_lot::Mutex;
use tierkv_core::media::pmem::{CrashPoint, PmemPool};
use tierkv_core::{KvStore, WriteBatch};
use tierkv_prismdb::PrismDbStore;
use tierkv_prismdb::batch::record::{RECORD_MAGIC, RECORD_TAG};

use common::{Rig, value_for};

const SPEC: &str = "prismdb@partitions=2,bounds=k5,chunk_size=16KiB,bucket_keys=16,tracker_min=16";

fn key(i: u32) -> Vec<u8> {
    format!("k{i}{i:04}").into_bytes()
}

/// Writes a batch of 14 puts on a fresh store and returns the offset of the run that held
/// its record (seen at the batch's named point `prismdb.batch.intent_persisted`).
fn commit_a_batch(store: &Arc<PrismDbStore>, pool: &Arc<PmemPool>) -> u64 {
    let runs: Arc<Mutex<Vec<u64>>> = Arc::default();
    {
        let (runs, weak) = (runs.clone(), Arc::downgrade(store));
        pool.arm_crash_points(Arc::new(move |cp: CrashPoint<'_>| {
            if let (CrashPoint::Named("prismdb.batch.intent_persisted"), Some(s)) =
                (cp, weak.upgrade())
            {
                runs.lock()
                    .extend(s.shared().alloc.iter_chunks(RECORD_TAG).map(|a| a.offset));
            }
        }))
        .unwrap();
    }
    let mut b = WriteBatch::new();
    for i in 0..14 {
        b.put(key(i), value_for(&key(i), 1));
    }
    store.write_batch(&b).unwrap();
    pool.disarm_crash_points();
    let runs = runs.lock().clone();
    assert_eq!(
        runs.len(),
        1,
        "one record run while the batch was in flight"
    );
    runs[0]
}

/// Takes record runs until the allocator hands out the chunk at `run` again (the others
/// are freed), so the store holds it as a record run as a later batch would.
fn take_again_for_a_record(store: &PrismDbStore, run: u64) {
    let alloc = &store.shared().alloc;
    let mut others = Vec::new();
    loop {
        let off = alloc.alloc_chunk(RECORD_TAG).unwrap();
        if off == run {
            break;
        }
        others.push(off);
    }
    for off in others {
        alloc.free_chunk(off).unwrap();
    }
}

fn assert_batch_whole(store: &dyn KvStore, what: &str) {
    let lost: Vec<u32> = (0..14)
        .filter(|&i| store.get(&key(i)).unwrap() != Some(value_for(&key(i), 1)))
        .collect();
    assert!(
        lost.is_empty(),
        "{what}: keys {lost:?} of an acknowledged batch are lost after recovery"
    );
}

/// SIGKILL: what survives is every store made, persisted or not (the pool's live bytes).
#[test]
fn a_kill_after_the_first_word_of_a_record_in_a_reused_chunk_keeps_the_committed_batch() {
    let rig = Rig::new(SPEC, 4);
    let (store, pool) = rig.create_with_pool();
    let run = commit_a_batch(&store, &pool);
    take_again_for_a_record(&store, run);
    // The new record's first word, as `PmemPool::write` stores it (word by word, in order).
    pool.store_u64(run, RECORD_MAGIC).unwrap();
    let image = pool.read(0, pool.len() as usize).unwrap().to_vec();
    let dir = rig.image_dir(&image).unwrap();
    let recovered = rig.open_snapshot(dir.path(), SPEC).unwrap();
    assert_batch_whole(&*recovered, "killed");
    recovered.close().unwrap();
    drop(store);
}

/// Power failure: of the new record's persist, only the line of its first word reached
/// the media.
#[test]
fn a_power_failure_with_only_the_first_word_of_a_new_record_durable_keeps_the_committed_batch() {
    let rig = Rig::new(SPEC, 4);
    let (store, pool) = rig.create_with_pool();
    let run = commit_a_batch(&store, &pool);
    take_again_for_a_record(&store, run);
    pool.store_u64(run, RECORD_MAGIC).unwrap();
    pool.persist(run, 8).unwrap();
    let dir = rig.snapshot(&pool, 2).unwrap();
    let recovered = rig.open_snapshot(dir.path(), SPEC).unwrap();
    assert_batch_whole(&*recovered, "power failure");
    recovered.close().unwrap();
    drop(store);
}
