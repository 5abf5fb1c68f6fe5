//! A full pool (issue 23, `src/space.rs`): puts are refused with `NoSpace` promptly (no
//! fixed stall), every delete on the full store succeeds, the space of the deleted keys
//! comes back (tombstones reach the repository, the lazy copy frees the older versions),
//! new keys fit again, and everything survives a reopen; puts slow down before they are
//! refused. Three writer threads, so that writers queued behind a refused one are
//! measured too.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv_core::media::pmem::{DurabilityMode, PmemPool};
use tierkv_core::{Error, KvStore};

/// The default options: the 3 s cap and the 400 ms no-progress wait are what is tested.
const PARAMS: &str = "";
/// No refused or accepted write may take this long.
const WRITE_BOUND: Duration = Duration::from_millis(2_500);

fn value(k: u32, round: u32, rng: &mut ChaCha8Rng) -> Vec<u8> {
    let len = if rng.random_range(0..10) == 0 {
        rng.random_range(2_000..4_000)
    } else {
        rng.random_range(10..200)
    };
    let mut v = format!("{k}:{round}:").into_bytes();
    v.resize(len, b'a' + (k % 26) as u8);
    v
}

/// Puts new keys from three threads until each has seen 5 refusals; returns what was
/// acknowledged and the longest write.
fn fill(
    store: &dyn KvStore,
    model: &Mutex<BTreeMap<u32, Vec<u8>>>,
    first: u32,
    round: u32,
) -> Duration {
    let longest = Mutex::new(Duration::ZERO);
    std::thread::scope(|s| {
        for t in 0..3u32 {
            let longest = &longest;
            s.spawn(move || {
                let mut rng = ChaCha8Rng::seed_from_u64(u64::from(round * 10 + t));
                let mut refused = 0;
                let mut k = first + t;
                while refused < 5 {
                    let v = value(k, round, &mut rng);
                    // A refusal counts once the put was refused 3 times 20 ms apart (on a
                    // loaded machine the background may be starved for a moment).
                    let mut r = Ok(());
                    for attempt in 0..3 {
                        if attempt > 0 {
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        let t0 = Instant::now();
                        r = store.put(format!("key{k:010}").as_bytes(), &v);
                        let took = t0.elapsed();
                        let mut l = longest.lock().unwrap();
                        *l = (*l).max(took);
                        drop(l);
                        if !matches!(r, Err(Error::NoSpace { .. })) {
                            break;
                        }
                    }
                    match r {
                        Ok(()) => {
                            model.lock().unwrap().insert(k, v);
                        }
                        Err(Error::NoSpace { .. }) => refused += 1,
                        Err(e) => panic!("put of key {k}: {e}"),
                    }
                    k += 3;
                }
            });
        }
    });
    longest.into_inner().unwrap()
}

fn verify(store: &dyn KvStore, model: &BTreeMap<u32, Vec<u8>>, what: &str) {
    let all = store.scan(b"", usize::MAX).unwrap();
    assert_eq!(all.len(), model.len(), "{what}: keys");
    for ((k, v), (mk, mv)) in all.iter().zip(model.iter()) {
        assert_eq!(k, format!("key{mk:010}").as_bytes(), "{what}");
        assert_eq!(v, mv, "{what}: key {mk}");
    }
}

#[test]
fn a_full_pool_refuses_puts_promptly_takes_every_delete_and_gives_the_space_back() {
    let dir = scratch_dir();
    let path = dir.path().join("pool");
    let pool = create_pool(&path, 4 << 20, DurabilityMode::Volatile);
    let mut store = open(pool, PARAMS, true);
    let model = Mutex::new(BTreeMap::new());
    let mut next = 0u32;
    for round in 0..8u32 {
        let longest = fill(&*store, &model, next, round);
        next += 1_000_000;
        let live: usize = model.lock().unwrap().values().map(Vec::len).sum();
        println!(
            "round {round}: full with {} keys, {live} value bytes live ({:.1}% of the pool); longest put {longest:?}; stats {:?}",
            model.lock().unwrap().len(),
            100.0 * live as f64 / f64::from(4u32 << 20),
            store.stats().counters.get("mio_writes_refused")
        );
        assert!(longest < WRITE_BOUND, "a put took {longest:?}");
        // Writes slowed down before they were refused (`space.rs`, "Writes slow first").
        let throttled = store.stats().counters.get("mio_throttle_micros").copied();
        assert!(
            throttled.unwrap_or(0) > 0,
            "round {round}: puts filled the pool without slowing down ({throttled:?} us)"
        );
        assert!(
            live as f64 > 0.10 * f64::from(4u32 << 20),
            "refused with only {live} bytes live"
        );
        verify(&*store, &model.lock().unwrap(), "after the fill");
        // Delete half the keys: every delete succeeds, promptly.
        let mut m = model.lock().unwrap();
        let doomed: Vec<u32> = m.keys().copied().step_by(2).collect();
        for k in &doomed {
            let t0 = Instant::now();
            store
                .delete(format!("key{k:010}").as_bytes())
                .unwrap_or_else(|e| panic!("delete of key {k} on the full store: {e}"));
            assert!(
                t0.elapsed() < WRITE_BOUND,
                "a delete took {:?}",
                t0.elapsed()
            );
            m.remove(k);
        }
        verify(&*store, &m, "after the deletes");
        // New keys fit again within 10 s (the tombstones drain to the repository).
        let freed_bytes: usize = doomed.len() * 100;
        let mut written = 0usize;
        let mut rng = ChaCha8Rng::seed_from_u64(u64::from(round) + 77);
        let until = Instant::now() + Duration::from_secs(10);
        while written < freed_bytes / 4 {
            let v = value(next, round, &mut rng);
            match store.put(format!("key{next:010}").as_bytes(), &v) {
                Ok(()) => {
                    written += v.len();
                    m.insert(next, v);
                    next += 1;
                }
                Err(Error::NoSpace { .. }) => {
                    assert!(
                        Instant::now() < until,
                        "new keys still refused 10 s after deleting {} keys ({written} bytes written again)",
                        doomed.len()
                    );
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("{e}"),
            }
        }
        verify(&*store, &m, "after writing again");
        drop(m);
        store.close().unwrap();
        drop(store);
        let pool = PmemPool::open(&config(&path, 0, DurabilityMode::Volatile)).unwrap();
        store = open(pool, PARAMS, false);
        verify(&*store, &model.lock().unwrap(), "after a reopen");
        next += 1_000_000;
    }
    store.close().unwrap();
}
