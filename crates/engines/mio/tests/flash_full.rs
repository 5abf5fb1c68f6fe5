//! `mio:flash` on a full flash device (issue 18, item 9: writes slow, then fail with
//! `NoSpace`, never a hang; deletes always possible): puts of 1 KiB values until one is
//! refused — for flash, not pmem: the pool is a third of the device — then half of the keys
//! deleted (every delete must succeed), then new keys worth a quarter of the freed bytes
//! written (the deletes gave flash back through the compactions); every acknowledged write
//! read back, then again after a reopen, and `check` passes.

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use tierkv_core::media::pmem::{DurabilityMode, PmemPool};
use tierkv_core::{Error, KvStore, Tier};

const PARAMS: &str = "memtable=64KiB,levels=3";
const FLASH: u64 = 24 << 20;

fn value(k: u32, round: u8) -> Vec<u8> {
    let mut v = format!("{k}:{round}:").into_bytes();
    v.resize(1000, b'a' + round);
    v
}

/// Retries a put refused for room while the background makes room (up to 20 s).
fn put_eventually(store: &tierkv_mio::MioStore, k: &[u8], v: &[u8]) {
    let started = Instant::now();
    loop {
        match store.put(k, v) {
            Ok(()) => return,
            Err(Error::NoSpace { .. }) if started.elapsed() < Duration::from_secs(20) => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("put after deletes: {e}"),
        }
    }
}

#[test]
fn a_full_device_refuses_puts_for_flash_takes_deletes_and_gives_room_back() {
    let dir = scratch_dir();
    let path = dir.path().join("pool");
    let flash_dir = dir.path().join("flash");
    let pool = create_pool(&path, 8 << 20, DurabilityMode::Volatile);
    let store = open_flash(pool, flash_device(&flash_dir, FLASH), PARAMS, true);
    let mut model: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
    let key = |k: u32| format!("k{k:07}").into_bytes();
    let mut refused = None;
    for k in 0..200_000u32 {
        match store.put(&key(k), &value(k, 0)) {
            Ok(()) => {
                model.insert(k, value(k, 0));
            }
            Err(Error::NoSpace { tier, .. }) => {
                refused = Some((k, tier));
                break;
            }
            Err(e) => panic!("put {k}: {e}"),
        }
    }
    let (n, tier) = refused.expect("24 MiB of flash held 200 MB");
    println!(
        "put {n} refused (tier {tier:?}); {:?}",
        store.stats().gauges
    );
    assert_eq!(
        tier,
        Tier::Flash,
        "the device is what is full, not the pool"
    );
    assert!(
        n as u64 * 1000 > FLASH / 3,
        "refused too early: {n} values of 1000 bytes on a {FLASH}-byte device"
    );
    // Every second key deleted: each delete succeeds on the full store.
    for k in (0..n).step_by(2) {
        store.delete(&key(k)).unwrap();
        model.remove(&k);
    }
    assert!(store.wait_idle(Duration::from_secs(60)));
    // New keys worth a quarter of the freed bytes.
    let fresh = n / 8;
    for k in 0..fresh {
        let k = 1_000_000 + k;
        put_eventually(&store, &key(k), &value(k, 1));
        model.insert(k, value(k, 1));
    }
    let s = store.stats();
    println!(
        "{fresh} new keys written; tombstones dropped {}, flash compactions f0 {} f1 {}",
        counter(&s, "flash_tombstones_dropped"),
        counter(&s, "flash_compactions_f0"),
        counter(&s, "flash_compactions_f1")
    );
    let check = |store: &tierkv_mio::MioStore| {
        for (k, v) in &model {
            assert_eq!(store.get(&key(*k)).unwrap().as_ref(), Some(v), "key {k}");
        }
        for k in (0..n).step_by(2) {
            assert_eq!(store.get(&key(k)).unwrap(), None, "deleted key {k}");
        }
        println!("{}", store.check().unwrap().join("\n"));
    };
    check(&store);
    store.close().unwrap();
    drop(store);
    let pool = PmemPool::open(&config(&path, 0, DurabilityMode::Volatile)).unwrap();
    let store = open_flash(pool, flash_device(&flash_dir, FLASH), PARAMS, false);
    check(&store);
    store.close().unwrap();
}
