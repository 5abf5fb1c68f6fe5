//! Write batches on a full pool (issue 24 with issue 23's room rule, `FORMAT.md` § Write
//! batch step 1): once single puts are refused with `NoSpace`, a batch of puts is refused
//! whole (none of its keys appears, before or after a reopen), a batch of deletes still
//! commits, and after the deletes have given space back a batch of puts commits whole.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use std::time::Duration;

use common::*;
use tierkv_core::media::pmem::{DurabilityMode, PmemPool};
use tierkv_core::{Error, KvStore, WriteBatch};

// Puts are refused after 200 ms without progress (the fill stays short); deletes wait
// for the compactions up to 10 s (a loaded CI machine can starve one step for 200 ms).
const PARAMS: &str = "progress_wait_ms=200,stall_timeout_ms=10000";

fn key(k: u32) -> Vec<u8> {
    format!("key{k:08}").into_bytes()
}

fn batch_of_puts(from: u32, n: u32, tag: &str) -> WriteBatch {
    let mut b = WriteBatch::new();
    for k in from..from + n {
        b.put(key(k), format!("{tag}{k}").repeat(20));
    }
    b
}

#[test]
fn a_batch_without_room_is_refused_whole_and_deletes_make_room_for_one() {
    let dir = scratch_dir();
    let path = dir.path().join("pool");
    let pool = create_pool(&path, 2 << 20, DurabilityMode::Volatile);
    let store = open(pool, PARAMS, true);
    // Fill with batches of 20 puts until three in a row are refused. A batch refused
    // between two that commit leaves its 20 keys absent (`written` says which are there).
    let (mut next, mut refused, mut committed) = (0u32, 0, 0u32);
    let mut written = std::collections::HashSet::new();
    while refused < 3 {
        match store.write_batch(&batch_of_puts(next, 20, "v")) {
            Ok(()) => {
                committed = next + 20;
                written.insert(next / 20);
                refused = 0;
            }
            Err(Error::NoSpace { .. }) => {
                refused += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("batch at {next}: {e}"),
        }
        next += 20;
        assert!(next < 200_000, "the pool never filled");
    }
    assert!(
        committed >= 200,
        "only {committed} keys before the pool was full"
    );
    let refused_from = committed + 1_000_000;
    let e = store
        .write_batch(&batch_of_puts(refused_from, 20, "r"))
        .unwrap_err();
    assert!(matches!(e, Error::NoSpace { .. }), "{e}");
    for k in refused_from..refused_from + 20 {
        assert_eq!(
            store.get(&key(k)).unwrap(),
            None,
            "key {k} of a refused batch"
        );
    }
    // Deletes always commit; they give back the space of half the keys.
    for from in (0..committed).step_by(200) {
        let mut d = WriteBatch::new();
        for k in (from..(from + 200).min(committed)).filter(|k| k % 2 == 0) {
            d.delete(key(k));
        }
        store.write_batch(&d).unwrap();
    }
    let present = |k: u32| written.contains(&(k / 20)) && k % 2 == 1;
    assert!(store.wait_idle(Duration::from_secs(30)));
    let mut ok = None;
    for attempt in 0..100 {
        match store.write_batch(&batch_of_puts(refused_from, 20, "r")) {
            Ok(()) => {
                ok = Some(attempt);
                break;
            }
            Err(Error::NoSpace { .. }) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => panic!("{e}"),
        }
    }
    assert!(
        ok.is_some(),
        "no room came back after deleting half the keys"
    );
    store.close().unwrap();
    drop(store);
    let pool = PmemPool::open(&config(&path, 0, DurabilityMode::Volatile)).unwrap();
    let store = tierkv_mio::open_store(pool, options(PARAMS), limits(), false).unwrap();
    for k in 0..committed {
        let got = store.get(&key(k)).unwrap();
        let want = present(k).then(|| format!("v{k}").repeat(20).into_bytes());
        assert_eq!(got, want, "key {k}");
    }
    for k in refused_from..refused_from + 20 {
        assert_eq!(
            store.get(&key(k)).unwrap(),
            Some(format!("r{k}").repeat(20).into_bytes())
        );
    }
    println!(
        "{committed} keys in batches before the pool was full; the refused batch committed after \
         the deletes (attempt {ok:?})"
    );
}
