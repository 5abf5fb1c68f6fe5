//! Close and reopen with the default fanout on an Msync pool (the default durability mode):
//! every key, the leaf count and the checks survive, twice in a row, and the reopened index
//! keeps working (inserts that split leaves created before the reopen).

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod key_index_support;

use key_index_support::{Media, key};
use tierkv_core::DurabilityMode;
use tierkv_prism::key_index::{KeyRange, MAX_FANOUT, PersistentKeyIndex};

fn contents(index: &PersistentKeyIndex) -> Vec<(Vec<u8>, u64)> {
    let mut out = Vec::new();
    index
        .for_each_in(&KeyRange::all(), &mut |k, v| {
            out.push((k.to_vec(), v));
            Ok(())
        })
        .unwrap();
    out
}

#[test]
fn msync_pool_reopens_with_every_key_twice() {
    let media = Media::new(8 << 20, DurabilityMode::Msync);
    let index = PersistentKeyIndex::create(
        media.pool.clone(),
        media.alloc.clone(),
        key_index_support::ROOT,
    )
    .unwrap();
    assert_eq!(index.fanout(), MAX_FANOUT);
    for id in 0..250 {
        index
            .insert_if_absent(&key(id), u64::from(id))
            .unwrap()
            .unwrap();
    }
    for id in (0..250).step_by(7) {
        assert_eq!(index.remove(&key(id)).unwrap(), Some(u64::from(id)));
    }
    let before = contents(&index);
    let leaves = index.stats().leaves;
    assert!(leaves > 3, "{leaves} leaves");
    drop(index);

    let mut media = media;
    for round in 0..2 {
        media = media.reopen(DurabilityMode::Msync);
        let index = media.open_index();
        assert_eq!(contents(&index), before, "reopen {round}");
        assert_eq!(index.stats().leaves, leaves, "reopen {round}");
        media.assert_checks_pass(&index, "reopen");
    }
    let index = media.open_index();
    for id in 250..600 {
        index
            .insert_if_absent(&key(id), u64::from(id))
            .unwrap()
            .unwrap();
    }
    assert_eq!(index.len(), before.len() + 350);
    assert!(index.stats().leaves > leaves);
    media.assert_checks_pass(&index, "after more inserts");
}
