//! Write batches against the oracle (issue 24; FORMAT.md §3 "Write batches"): the testkit's
//! batch model (batches mixed with puts, deletes, gets and `multi_get`s from several
//! threads, plus group writers whose batches `multi_get` readers must see whole) on a store
//! whose partitions split every thread's keys, so batches span partitions, and whose fast
//! tier is tiny, so compactions demote and drop tombstones inside batches; then the store
//! is checked, reopened and compared. And bad input: empty batches, batches over the core
//! limits or larger than the fast tier, objects larger than a slot — each refused whole.

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use common::{Rig, assert_check, counter, reopen_unchanged};
use tierkv_core::{Error, KvStore, MAX_BATCH_OPS, WriteBatch};
use tierkv_testkit::{BatchModelConfig, run_batch_model};

/// Bounds inside the model's key spaces (`bg<g>/..`, `bm<t>/..`): a batch of a thread
/// spans two partitions, the groups two more.
const SPEC: &str = "prismdb@partitions=5,bounds=bg2|bm0/032|bm1/032|bm2/032,chunk_size=16KiB,\
table_size=64KiB,high_watermark=0.004,low_watermark=0.002,bucket_keys=16,tracker_min=16,\
block_cache=256KiB";

#[test]
fn batches_puts_deletes_and_multi_gets_match_the_oracle_under_compactions() {
    let rig = Rig::new(SPEC, 4);
    let store = rig.create();
    let cfg = BatchModelConfig {
        threads: 3,
        ops_per_thread: 600,
        seed: tierkv_testkit::rig::seed("batch_model"),
        ..BatchModelConfig::default()
    };
    let report = run_batch_model(store.clone(), &cfg);
    println!("{report:?}");
    println!("{:?}", store.stats().counters);
    assert!(report.batches > 100 && report.group_reads > 0, "{report:?}");
    assert!(
        counter(&*store, "prismdb_compactions_write") > 0,
        "no compaction ran during the batches"
    );
    assert!(
        counter(&*store, "prismdb_batches") >= report.batches + report.group_batches,
        "batches not counted"
    );
    let (store, _) = reopen_unchanged(&rig, store);
    assert_eq!(counter(&*store, "prismdb_batches_rolled_back"), 0);
}

/// Every key of `keys` absent.
fn assert_absent(store: &dyn KvStore, keys: &[Vec<u8>], what: &str) {
    let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    assert!(
        store.multi_get(&refs).unwrap().iter().all(Option::is_none),
        "{what}: part of a refused batch is visible"
    );
}

#[test]
fn bad_batches_are_refused_whole_and_an_empty_one_is_a_no_op() {
    let rig = Rig::new(SPEC, 4);
    let store = rig.create();
    store.put(b"bm0/000", b"before").unwrap();
    let written = || store.shared().pool.counters().pmem_bytes_written;
    let used = written();
    store.write_batch(&WriteBatch::new()).unwrap();
    assert_eq!(written(), used, "an empty batch wrote");

    // Over the core's operation limit.
    let b: WriteBatch = (0..=MAX_BATCH_OPS)
        .map(|i| (format!("bm1/{i:05}"), Some(b"v".to_vec())))
        .collect();
    let e = store.write_batch(&b).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    assert!(e.to_string().contains("operations"), "{e}");

    // An object larger than the largest slot (a 1 KiB key and a 4 KiB value fit; more
    // does not) refuses the whole batch, the small puts with it.
    let mut b = WriteBatch::new();
    b.put("bm0/000", "after").put("bm2/001", "small");
    let mut long_key = b"bm1/".to_vec();
    long_key.resize(1024, b'z');
    b.put(long_key, vec![7u8; 4200]);
    let e = store.write_batch(&b).unwrap_err();
    assert!(e.to_string().contains("larger than"), "{e}");
    assert_eq!(store.get(b"bm0/000").unwrap().unwrap(), b"before");
    assert_absent(&*store, &[b"bm2/001".to_vec()], "slot too small");

    // More slots than the whole fast tier (4 MiB pool): NoSpace at once, nothing applied.
    let big: Vec<(Vec<u8>, Option<Vec<u8>>)> = (0..1200)
        .map(|i| (format!("bm2/{i:04}").into_bytes(), Some(vec![b'x'; 4000])))
        .collect();
    let keys: Vec<Vec<u8>> = big.iter().map(|(k, _)| k.clone()).collect();
    let b: WriteBatch = big.into_iter().collect();
    let e = store.write_batch(&b).unwrap_err();
    assert!(matches!(e, Error::NoSpace { .. }), "{e}");
    assert_absent(&*store, &keys, "larger than the fast tier");
    assert_check(&*store);

    // The store goes on: a batch that fits is applied, and survives a reopen.
    let mut b = WriteBatch::new();
    b.put("bm0/000", "after")
        .delete("bm0/000")
        .put("bm2/001", "small");
    store.write_batch(&b).unwrap();
    assert_eq!(store.get(b"bm0/000").unwrap(), None, "the later op wins");
    store.close().unwrap();
    drop(store);
    let store = rig.reopen().unwrap();
    assert_check(&*store);
    assert_eq!(store.get(b"bm0/000").unwrap(), None);
    assert_eq!(store.get(b"bm2/001").unwrap().unwrap(), b"small");
}

/// A pending batch record (good checksum) that names something other than a slab slot is
/// reported as corruption at open, never followed to zero an arbitrary pool word; one that
/// names a slot voids the object there.
#[test]
fn a_pending_record_is_followed_only_to_slab_slots() {
    use tierkv_prismdb::batch::record::{RECORD_TAG, encode_record};
    for bad in [true, false] {
        let rig = Rig::new(SPEC, 4);
        let (store, pool) = rig.create_with_pool();
        store.put(b"bm0/001", b"kept").unwrap();
        store.put(b"bm0/002", b"voided").unwrap();
        let sh = store.shared().clone();
        let slot = sh.parts[1]
            .state
            .read()
            .index
            .get(&b"bm0/002"[..])
            .unwrap()
            .off;
        let run = sh.alloc.alloc_chunks(RECORD_TAG, 1).unwrap();
        let rec = encode_record(&[if bad { slot + 8 } else { slot }]);
        pool.write(run, &rec).unwrap();
        pool.persist(run, rec.len()).unwrap();
        drop(sh);
        store.close().unwrap();
        drop((store, pool));
        match (bad, rig.reopen()) {
            (true, Err(e)) => assert!(
                e.is_corruption() && e.to_string().contains("not a slab slot"),
                "{e}"
            ),
            (false, Ok(s)) => {
                assert_check(&*s);
                assert_eq!(counter(&*s, "prismdb_batches_rolled_back"), 1);
                assert_eq!(s.get(b"bm0/002").unwrap(), None);
                assert_eq!(s.get(b"bm0/001").unwrap().unwrap(), b"kept");
                assert_eq!(s.shared().alloc.iter_chunks(RECORD_TAG).count(), 0);
            }
            (bad, r) => panic!("bad {bad}: reopen gave {:?}", r.map(|_| ())),
        }
    }
}
