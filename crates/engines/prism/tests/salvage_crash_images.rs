//! Salvage of power-failure images (FORMAT.md, § Salvage): on a crash image of an
//! undamaged store taken between operations, the salvage walk yields exactly the
//! acknowledged contents (every acknowledged write was persisted, and a crash only loses
//! unpersisted lines), the same records recovery then finds, while PWB reclamation runs
//! in the background. The flash device is large enough that no chunk is ever freed, so
//! each image reads the flash file as it stands.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use std::collections::BTreeMap;

use common::Rig;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv_core::media::pmem::CrashImageOptions;
use tierkv_core::{CollectSink, KvStore};
use tierkv_prism::salvage::salvage_sources;
use tierkv_prism::salvage::source::Source;
use tierkv_prism::value_storage::chunk_format::storage_file_name;

const SPEC: &str = "prism@pwb_count=2,pwb_size=16KiB,chunk_size=8KiB,svc_size=16KiB";

#[test]
fn salvage_of_a_crash_image_is_the_acknowledged_contents() {
    let seed = tierkv_testkit::rig::seed("salvage_of_a_crash_image");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let rig = Rig::new(SPEC, 8, 32);
    let (store, pool) = rig.create_with_pool();
    let mut acked: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut images = 0;
    for step in 0..1500u32 {
        let k = format!("key{:03}", rng.random_range(0..120u32)).into_bytes();
        if rng.random_bool(0.15) {
            store.delete(&k).unwrap();
            acked.remove(&k);
        } else {
            let mut v = format!("{step}:").into_bytes();
            v.resize(v.len() + rng.random_range(0..700), b'v');
            store.put(&k, &v).unwrap();
            acked.insert(k, v);
        }
        if step % 150 == 149 {
            let opts = if images % 2 == 0 {
                CrashImageOptions::lines()
            } else {
                CrashImageOptions::torn_words()
            };
            let img = pool.crash_image(seed + u64::from(step), opts).unwrap();
            let vs = std::fs::read(rig.flash_dir().join(storage_file_name(0))).unwrap();
            let flash: &dyn Source = &vs;
            let mut sink = CollectSink::default();
            let report = salvage_sources(&img, &[Some(flash)], None, &mut sink).unwrap();
            let want: Vec<_> = acked.clone().into_iter().collect();
            assert_eq!(
                sink.records, want,
                "seed {seed} step {step}: salvage differs from the acknowledged contents ({report:?})"
            );
            assert!(
                sink.skipped.is_empty(),
                "seed {seed} step {step}: {:?}",
                sink.skipped
            );
            images += 1;
        }
    }
    assert!(
        store.stats().counters["pwb_reclaims"] > 0,
        "reclamation ran"
    );
    assert_eq!(store.stats().counters["gc_runs"], 0, "no chunk was freed");
    // Recovery of the last state agrees with a salvage of the closed store.
    store.close().unwrap();
    drop((store, pool));
    let img = std::fs::read(rig.pool_path()).unwrap();
    let vs = std::fs::read(rig.flash_dir().join(storage_file_name(0))).unwrap();
    let flash: &dyn Source = &vs;
    let mut sink = CollectSink::default();
    salvage_sources(&img, &[Some(flash)], None, &mut sink).unwrap();
    let reopened = rig.reopen().unwrap();
    assert_eq!(sink.records, reopened.scan(b"", usize::MAX).unwrap());
    assert_eq!(images, 10);
}
