//! Tests of the `btree` variant: a model test against `BTreeMap`, and racing threads on a
//! few hot keys checking the linearizability promises of the module doc.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use proptest::prelude::*;

use super::{EpochCell, SkipIndex, SlotCell, WordCell};
use crate::common::index::ConcurrentIndex;

#[derive(Debug, Clone)]
enum Op {
    Insert(Vec<u8>, u64),
    Remove(Vec<u8>),
    /// Adds 1 when present, inserts 0 when absent; removes when the value reaches `.1`.
    Bump(Vec<u8>, u64),
    /// A compute that leaves an absent key absent (links and unlinks a vacant node).
    ComputeNone(Vec<u8>),
    Get(Vec<u8>),
    Scan(Vec<u8>, usize),
}

/// Keys from a small alphabet so that ops collide, short and long (inline and heap keys).
fn key() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(prop_oneof![Just(0u8), Just(1), Just(255)], 0..3),
        proptest::collection::vec(prop_oneof![Just(0u8), Just(7)], 15..18),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        // Below u64::MAX: the word cell's "no value" word.
        (key(), 0..u64::MAX).prop_map(|(k, v)| Op::Insert(k, v)),
        key().prop_map(Op::Remove),
        (key(), 0u64..4).prop_map(|(k, m)| Op::Bump(k, m)),
        key().prop_map(Op::ComputeNone),
        key().prop_map(Op::Get),
        (key(), 0usize..6).prop_map(|(k, n)| Op::Scan(k, n)),
    ]
}

/// Applies `op` to the index and the model; panics on any difference.
fn apply(idx: &dyn ConcurrentIndex<u64>, model: &mut BTreeMap<Vec<u8>, u64>, op: &Op) {
    match op {
        Op::Insert(k, v) => assert_eq!(idx.insert(k, *v), model.insert(k.clone(), *v)),
        Op::Remove(k) => assert_eq!(idx.remove(k), model.remove(k)),
        Op::Bump(k, max) => {
            let next = |cur: Option<&u64>| match cur {
                None => Some(0),
                Some(&c) if c + 1 >= *max => None,
                Some(&c) => Some(c + 1),
            };
            let old = model.get(k).copied();
            match next(old.as_ref()) {
                Some(v) => model.insert(k.clone(), v),
                None => model.remove(k),
            };
            assert_eq!(idx.compute(k, &mut |cur| next(cur)), old);
        }
        Op::ComputeNone(k) => {
            let old = model.remove(k);
            assert_eq!(idx.compute(k, &mut |_| None), old);
        }
        Op::Get(k) => {
            assert_eq!(idx.get(k), model.get(k).copied());
            // The borrowing form agrees, also on slots a remove left vacant or dead.
            let mut seen = None;
            let found = idx.get_with(k, &mut |v| seen = Some(*v));
            assert_eq!((found, seen), (seen.is_some(), model.get(k).copied()));
        }
        Op::Scan(start, n) => {
            let want: Vec<(Vec<u8>, u64)> = model
                .range(start.clone()..)
                .take(*n)
                .map(|(k, v)| (k.clone(), *v))
                .collect();
            assert_eq!(idx.scan(start, *n).unwrap(), want);
        }
    }
    assert_eq!(idx.len(), model.len());
}

proptest! {
    /// Single-threaded, the index is a `BTreeMap`: every op's result, `len`, and at the end
    /// `for_each` and a bulk `insert_sorted` on top.
    /// Both cells: the general one and the one-word one.
    #[test]
    fn behaves_like_a_btreemap(ops in proptest::collection::vec(op(), 1..120),
                               sorted in proptest::collection::btree_map(key(), 0..u64::MAX, 0..8)) {
        let cells: [Box<dyn ConcurrentIndex<u64>>; 2] = [
            Box::new(SkipIndex::<u64, EpochCell<u64>>::default()),
            Box::new(SkipIndex::<u64, WordCell<u64>>::default()),
        ];
        for idx in cells {
            let mut model = BTreeMap::new();
            for op in &ops {
                apply(&*idx, &mut model, op);
            }
            idx.insert_sorted(&mut sorted.iter().map(|(k, v)| (&k[..], *v)));
            model.extend(sorted.clone());
            let mut seen = Vec::new();
            idx.for_each(&mut |k, v| seen.push((k.to_vec(), *v)));
            prop_assert_eq!(seen, model.into_iter().collect::<Vec<_>>());
        }
    }
}

/// Values carry the key they were written under, so a reader can tell a value that key
/// never held; heap values (an `Arc`) so that a use after free would show up under Miri or
/// a sanitizer.
type Val = Arc<(u8, u64)>;

/// A value made of a key's number and a count, for the racing test.
trait Tagged: Clone + Send + Sync + 'static {
    fn make(i: u8, n: u64) -> Self;
    fn parts(&self) -> (u8, u64);
}

impl Tagged for Val {
    fn make(i: u8, n: u64) -> Self {
        Arc::new((i, n))
    }
    fn parts(&self) -> (u8, u64) {
        **self
    }
}

/// The one-word form: the key's number in the top byte.
impl Tagged for u64 {
    fn make(i: u8, n: u64) -> Self {
        u64::from(i) << 56 | n
    }
    fn parts(&self) -> (u8, u64) {
        ((self >> 56) as u8, self & ((1 << 56) - 1))
    }
}

fn hot(prefix: u8, i: u8) -> [u8; 2] {
    [prefix, i]
}

/// Racing threads on 4 hot keys of each kind: counters bumped by `compute` from two
/// threads (no increment may be lost), stable keys only ever replaced (a reader must never
/// find one absent), churn keys inserted and removed by two threads; readers and scanners check every
/// value they see belongs to its key and every scan is in key order and holds the stable
/// keys.
#[test]
fn racing_writers_and_readers_keep_each_key_linearizable() {
    racing::<Val, EpochCell<Val>>();
}

/// The same with values held in one atomic word.
#[test]
fn racing_writers_and_readers_keep_each_key_linearizable_in_word_cells() {
    racing::<u64, WordCell<u64>>();
}

fn racing<V: Tagged, C: SlotCell<V>>() {
    const ROUNDS: u64 = 4_000;
    const HOT: u8 = 4;
    let idx = SkipIndex::<V, C>::default();
    for i in 0..HOT {
        idx.insert(&hot(b's', i), V::make(i, 0));
    }
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let mut writers = Vec::new();
        for _ in 0..2 {
            writers.push(s.spawn(|| {
                for r in 0..ROUNDS {
                    let i = (r % u64::from(HOT)) as u8;
                    idx.compute(&hot(b'c', i), &mut |cur| {
                        Some(V::make(i, cur.map_or(0, |v| v.parts().1) + 1))
                    });
                }
            }));
        }
        for _ in 0..2 {
            writers.push(s.spawn(|| {
                for r in 0..ROUNDS {
                    let i = (r % u64::from(HOT)) as u8;
                    idx.insert(&hot(b's', i), V::make(i, r));
                    match r % 3 {
                        0 => drop(idx.insert(&hot(b'x', i), V::make(i, r))),
                        1 => drop(idx.remove(&hot(b'x', i))),
                        _ => drop(idx.compute(&hot(b'x', i), &mut |cur| match cur {
                            Some(_) => None,
                            None => Some(V::make(i, r)),
                        })),
                    }
                }
            }));
        }
        let readers: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let mut rounds = 0u64;
                    while !done.load(Ordering::Relaxed) || rounds == 0 {
                        rounds += 1;
                        for i in 0..HOT {
                            let v = idx.get(&hot(b's', i));
                            assert_eq!(
                                v.map(|v| v.parts().0),
                                Some(i),
                                "stable key {i} absent or foreign"
                            );
                            for p in [b'c', b'x'] {
                                if let Some(v) = idx.get(&hot(p, i)) {
                                    assert_eq!(v.parts().0, i, "a value {p}{i} never held");
                                }
                            }
                        }
                        let scan = idx.scan(b"", 100).unwrap();
                        assert!(
                            scan.windows(2).all(|w| w[0].0 < w[1].0),
                            "scan out of order"
                        );
                        let stable = scan.iter().filter(|(k, _)| k[0] == b's').count();
                        assert_eq!(stable, usize::from(HOT), "a scan missed a stable key");
                        assert!(
                            scan.iter().all(|(k, v)| k[1] == v.parts().0),
                            "scan value foreign"
                        );
                    }
                    rounds
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        done.store(true, Ordering::Relaxed);
        for r in readers {
            assert!(r.join().unwrap() > 0);
        }
    });
    let per_key = 2 * ROUNDS / u64::from(HOT);
    for i in 0..HOT {
        assert_eq!(
            idx.get(&hot(b'c', i)).map(|v| v.parts().1),
            Some(per_key),
            "lost increments"
        );
    }
    // Churn key i ends present iff its last op (round ROUNDS - HOT + i) left it so; count
    // what is there instead of predicting, and check `len` is exact at rest.
    let mut seen = Vec::new();
    idx.for_each(&mut |k, _| seen.push(k.to_vec()));
    assert_eq!(idx.len(), seen.len());
    assert!(seen.len() >= 2 * usize::from(HOT));
    for p in [b'c', b's', b'x'] {
        for i in 0..HOT {
            let k = hot(p, i);
            assert_eq!(idx.get(&k).is_some(), seen.contains(&k.to_vec()), "{k:?}");
        }
    }
}

/// Values still in the index are dropped with it (the cell owns its value).
#[test]
fn dropping_the_index_drops_its_values() {
    let v = Arc::new((0u8, 0u64));
    let idx = SkipIndex::<Val, EpochCell<Val>>::default();
    for k in 0u8..50 {
        idx.insert(&[k], v.clone());
    }
    assert_eq!(Arc::strong_count(&v), 51);
    drop(idx);
    assert_eq!(Arc::strong_count(&v), 1);
}

/// A bulk build of sorted keys equals inserting each, and is in order.
#[test]
fn insert_sorted_builds_the_map_in_order() {
    let idx = SkipIndex::<u64, WordCell<u64>>::default();
    let key = |i: u64| format!("k{:08}", i * 3).into_bytes();
    let keys: Vec<Vec<u8>> = (0u64..20_000).map(key).collect();
    idx.insert_sorted(&mut keys.iter().enumerate().map(|(i, k)| (&k[..], i as u64)));
    assert_eq!(idx.len(), keys.len());
    assert_eq!(idx.get(&keys[777]), Some(777));
    assert_eq!(idx.get(b"k00003001"), None);
    let s = idx.scan(b"k00003000", 3).unwrap();
    assert_eq!(
        s.iter().map(|e| e.1).collect::<Vec<_>>(),
        vec![1000, 1001, 1002]
    );
}

/// Times a bulk build of 1,000,000 8-byte keys (what recovery does) and 1,000,000 updates,
/// against the locked `std` B-tree. By hand:
/// `cargo test --release -p tierkv-core --lib -- --ignored bulk_build_timing --nocapture`.
#[test]
#[ignore = "a timing, not a check"]
fn bulk_build_timing() {
    use crate::common::index::BTreeIndex;
    use std::time::Instant;
    let keys: Vec<[u8; 8]> = (0u64..1_000_000).map(|i| i.to_le_bytes()).collect();
    let mut sorted = keys.clone();
    sorted.sort();
    let run = |name: &str, idx: &dyn ConcurrentIndex<u64>| {
        let t = Instant::now();
        idx.insert_sorted(&mut sorted.iter().enumerate().map(|(i, k)| (&k[..], i as u64)));
        let built = t.elapsed();
        let t = Instant::now();
        for (i, k) in keys.iter().enumerate() {
            idx.insert(k, i as u64);
        }
        let updated = t.elapsed();
        let t = Instant::now();
        let found = keys.iter().filter(|k| idx.get(&k[..]).is_some()).count();
        println!(
            "{name}: build {built:?}, 1M updates {updated:?}, 1M gets {:?} ({found} found)",
            t.elapsed()
        );
        assert_eq!(found, keys.len());
    };
    run("locked std B-tree", &BTreeIndex::<u64>::default());
    run(
        "btree variant",
        &SkipIndex::<u64, EpochCell<u64>>::default(),
    );
    run(
        "btree variant, word cells",
        &SkipIndex::<u64, WordCell<u64>>::default(),
    );
}
