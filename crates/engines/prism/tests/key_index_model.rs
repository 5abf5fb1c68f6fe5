//! Model-based test of the key index from several threads: random get / insert_if_absent /
//! remove / scan, each thread checked against its own `BTreeMap` model, on a small fanout
//! so that leaves split all the time. Each thread owns the keys `id % THREADS == t`, so the
//! result of every operation on its own keys is exact; scans cover everyone's keys and must
//! be strictly ordered and exact on the scanning thread's own keys. At the end the union of
//! the models is the index, before and after a reopen.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod key_index_support;

use std::collections::BTreeMap;
use std::ops::Bound;

use key_index_support::{Media, key, seed};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv_core::DurabilityMode;
use tierkv_prism::key_index::PersistentKeyIndex;

const THREADS: u32 = 4;
const OPS: usize = 5_000;
const KEYS: u32 = 1_200;

type Model = BTreeMap<Vec<u8>, u64>;

fn run_thread(index: &PersistentKeyIndex, t: u32, seed: u64) -> Model {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ u64::from(t) << 32);
    let mut model = Model::new();
    for i in 0..OPS {
        let id = rng.random_range(0..KEYS / THREADS) * THREADS + t;
        let k = key(id);
        match rng.random_range(0..100) {
            0..45 => {
                let slot = rng.random::<u64>() >> 8;
                let want = match model.get(&k) {
                    Some(&old) => Err(old),
                    None => Ok(()),
                };
                assert_eq!(
                    index.insert_if_absent(&k, slot).unwrap(),
                    want,
                    "t{t} op {i} insert"
                );
                model.entry(k).or_insert(slot);
            }
            45..70 => {
                assert_eq!(
                    index.remove(&k).unwrap(),
                    model.remove(&k),
                    "t{t} op {i} remove"
                );
            }
            70..92 => {
                assert_eq!(
                    index.get(&k).unwrap(),
                    model.get(&k).copied(),
                    "t{t} op {i} get"
                );
            }
            _ => check_scan(index, &model, t, &k, rng.random_range(1..40)),
        }
    }
    model
}

/// A scan from `start`: strictly increasing keys, and exactly this thread's model on its own
/// keys between `start` and the last key returned (or the end, if the scan ran short).
fn check_scan(index: &PersistentKeyIndex, model: &Model, t: u32, start: &[u8], limit: usize) {
    let got = index.scan(start, limit).unwrap();
    assert!(got.len() <= limit);
    assert!(
        got.windows(2).all(|w| w[0].0 < w[1].0),
        "t{t}: scan out of order"
    );
    assert!(got.first().is_none_or(|(k, _)| k.as_slice() >= start));
    let upper = match got.last() {
        Some((k, _)) if got.len() == limit => Bound::Included(k.clone()),
        _ => Bound::Unbounded,
    };
    let mine: Vec<(Vec<u8>, u64)> = got
        .iter()
        .filter(|(k, _)| model_owns(t, k))
        .cloned()
        .collect();
    let want: Vec<(Vec<u8>, u64)> = model
        .range::<Vec<u8>, _>((Bound::Included(start.to_vec()), upper))
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    assert_eq!(
        mine,
        want,
        "t{t}: scan from {:?}",
        String::from_utf8_lossy(start)
    );
}

/// True if key `k` belongs to thread `t` (keys are generated from ids; find it back).
fn model_owns(t: u32, k: &[u8]) -> bool {
    OWNER.with(|map| map.get(k).is_some_and(|&owner| owner == t))
}

thread_local! {
    static OWNER: BTreeMap<Vec<u8>, u32> = (0..KEYS).map(|id| (key(id), id % THREADS)).collect();
}

#[test]
fn concurrent_operations_match_per_thread_models_across_many_splits() {
    let seed = seed("key_index_model");
    let media = Media::new(8 << 20, DurabilityMode::Volatile);
    let index = media.create_index(4);
    let models: Vec<Model> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let index = &index;
                s.spawn(move || run_thread(index, t, seed))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let union: Model = models.into_iter().flatten().collect();
    let all = index.scan(b"", usize::MAX).unwrap();
    assert_eq!(all, union.clone().into_iter().collect::<Vec<_>>());
    assert_eq!(index.len(), union.len());
    assert!(
        index.stats().splits > 50,
        "splits: {}",
        index.stats().splits
    );
    media.assert_checks_pass(&index, "after the run");
    println!(
        "keys {} leaves {} splits {}",
        index.len(),
        index.stats().leaves,
        index.stats().splits
    );

    drop(index);
    let media = media.reopen(DurabilityMode::Volatile);
    let index = media.open_index();
    assert_eq!(index.scan(b"", usize::MAX).unwrap(), all);
    media.assert_checks_pass(&index, "after reopen");
}

#[test]
fn racing_inserts_of_one_key_have_one_winner_that_everyone_sees() {
    let media = Media::new(8 << 20, DurabilityMode::Volatile);
    let index = media.create_index(4);
    let ids: Vec<u32> = (0..400).collect();
    let outcomes: Vec<Vec<Result<(), u64>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (index, ids) = (&index, &ids);
                s.spawn(move || {
                    ids.iter()
                        .map(|&id| index.insert_if_absent(&key(id), u64::from(t)).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, &id) in ids.iter().enumerate() {
        let winners: Vec<u64> = (0..THREADS as usize)
            .filter(|&t| outcomes[t][i].is_ok())
            .map(|t| t as u64)
            .collect();
        assert_eq!(winners.len(), 1, "key {id}: winners {winners:?}");
        for (t, outcome) in outcomes.iter().enumerate() {
            if let Err(seen) = outcome[i] {
                assert_eq!(seen, winners[0], "key {id}, thread {t}");
            }
        }
        assert_eq!(index.get(&key(id)).unwrap(), Some(winners[0]));
    }
    // Racing removes: each key is removed by exactly one thread.
    let removed: Vec<usize> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                let (index, ids) = (&index, &ids);
                s.spawn(move || {
                    ids.iter()
                        .filter(|&&id| index.remove(&key(id)).unwrap().is_some())
                        .count()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(removed.iter().sum::<usize>(), ids.len());
    assert!(index.is_empty());
    media.assert_checks_pass(&index, "after racing removes");
}
