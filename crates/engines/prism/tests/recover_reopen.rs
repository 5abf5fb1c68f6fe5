//! Reopen after a clean close: values in the PWBs, in Value Storage and deleted keys come
//! back exactly; recovery time is reported; a second reopen sees the same.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use std::collections::BTreeMap;

use common::{Rig, SMALL, assert_check, value_for};
use tierkv_core::KvStore;

#[test]
fn reopen_restores_pwb_and_flash_values_and_deletes() {
    let rig = Rig::new(SMALL, 32, 4);
    let store = rig.create();
    let mut model = BTreeMap::new();
    for round in 0..4u64 {
        for i in 0..300u64 {
            let k = format!("key{i:05}").into_bytes();
            if (i + round).is_multiple_of(7) {
                store.delete(&k).unwrap();
                model.remove(&k);
            } else {
                let v = value_for(&k, round);
                store.put(&k, &v).unwrap();
                model.insert(k, v);
            }
        }
        if round == 1 {
            // Push everything written so far to flash; the rest stays in the PWBs.
            store.flush().unwrap();
        }
    }
    let s = store.stats();
    assert!(s.counters["pwb_reclaim_values"] > 0);
    drop(store);

    for _ in 0..2 {
        let store = rig.reopen().unwrap();
        let s = store.stats();
        assert!(s.recovery_micros > 0);
        assert_eq!(s.counters["keys"], model.len() as u64);
        let all = store.scan(b"", usize::MAX).unwrap();
        let want: Vec<(Vec<u8>, Vec<u8>)> = model.clone().into_iter().collect();
        assert!(all == want, "scan after reopen differs from the model");
        for (k, v) in &model {
            assert_eq!(store.get(k).unwrap().as_ref(), Some(v));
        }
        // Deleted in the last round ((4 + 3) % 7 == 0), after being written before.
        assert!(!model.contains_key(&b"key00004"[..]));
        assert_eq!(
            store.get(b"key00004").unwrap(),
            None,
            "deleted key came back"
        );
        assert_check(&*store);
    }
}

#[test]
fn writes_after_reopen_append_after_the_recovered_tail() {
    let rig = Rig::new(SMALL, 32, 4);
    let store = rig.create();
    for i in 0..50u64 {
        store
            .put(format!("a{i}").as_bytes(), &value_for(b"a", i))
            .unwrap();
    }
    drop(store);
    let store = rig.reopen().unwrap();
    // Overwrite half and add new keys: nothing written before the reopen may be clobbered.
    for i in 0..25u64 {
        store.put(format!("a{i}").as_bytes(), b"new").unwrap();
        store.put(format!("b{i}").as_bytes(), b"fresh").unwrap();
    }
    drop(store);
    let store = rig.reopen().unwrap();
    for i in 0..50u64 {
        let want = if i < 25 {
            b"new".to_vec()
        } else {
            value_for(b"a", i)
        };
        assert_eq!(
            store.get(format!("a{i}").as_bytes()).unwrap(),
            Some(want),
            "a{i}"
        );
    }
    for i in 0..25u64 {
        assert_eq!(
            store.get(format!("b{i}").as_bytes()).unwrap().as_deref(),
            Some(&b"fresh"[..])
        );
    }
    assert_check(&*store);
}
