//! `Db::range`, `Db::range_rev` and `Db::delete_range` (issue 24 item 2) against a
//! `BTreeMap` model, on every ordered engine of the registry: random bounds (empty,
//! inverted, unbounded, excluded), page sizes from one entry up, both directions, and puts
//! and deletes made while an iterator runs, checked against what `tierkv::range` promises
//! (its module doc): keys strictly monotone and within the bounds, every key left alone
//! during the iteration returned with its value, nothing returned that the key did not hold
//! at some moment of the iteration. Also: unordered engines refuse, the registry's list of
//! unordered variants agrees with the engines, laziness, use after close.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use tierkv::{Db, ENGINES, RangeOptions, is_ordered};
use tierkv_core::Error;

type Key = Vec<u8>;
type Model = BTreeMap<Key, Key>;

/// Bytes keys are made of: 0 exercises the successor key (`k` + 0), 0xFE the top.
const ALPHABET: &[u8] = &[0, 1, b'a', b'b', b'c', 0xFE];

fn key() -> impl Strategy<Value = Key> {
    prop::collection::vec(prop::sample::select(ALPHABET), 1..=3)
}

fn value() -> impl Strategy<Value = Key> {
    prop::collection::vec(any::<u8>(), 0..48)
}

fn bound() -> impl Strategy<Value = Bound<Key>> {
    prop_oneof![
        1 => Just(Bound::Unbounded),
        2 => key().prop_map(Bound::Included),
        2 => key().prop_map(Bound::Excluded),
    ]
}

/// One iteration: bounds, paging, and writes made before the `i`-th `next()`.
#[derive(Clone, Debug)]
struct Query {
    lo: Bound<Key>,
    hi: Bound<Key>,
    reverse: bool,
    page_entries: usize,
    page_bytes: usize,
    writes: Vec<(usize, Key, Option<Key>)>,
}

fn query() -> impl Strategy<Value = Query> {
    let write = (0usize..40, key(), prop::option::weighted(0.6, value()));
    (
        bound(),
        bound(),
        any::<bool>(),
        1usize..12,
        prop_oneof![Just(usize::MAX), 1usize..400],
        prop::collection::vec(write, 0..6),
    )
        .prop_map(
            |(lo, hi, reverse, page_entries, page_bytes, writes)| Query {
                lo,
                hi,
                reverse,
                page_entries,
                page_bytes: page_bytes.max(1),
                writes,
            },
        )
}

#[derive(Clone, Debug)]
struct Case {
    initial: Vec<(Key, Key)>,
    queries: Vec<Query>,
    delete: (Bound<Key>, Bound<Key>),
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec((key(), value()), 0..60),
        prop::collection::vec(query(), 1..5),
        (bound(), bound()),
    )
        .prop_map(|(initial, queries, delete)| Case {
            initial,
            queries,
            delete,
        })
}

fn contains(lo: &Bound<Key>, hi: &Bound<Key>, k: &[u8]) -> bool {
    let above = match lo {
        Bound::Unbounded => true,
        Bound::Included(s) => k >= s.as_slice(),
        Bound::Excluded(s) => k > s.as_slice(),
    };
    let below = match hi {
        Bound::Unbounded => true,
        Bound::Included(e) => k <= e.as_slice(),
        Bound::Excluded(e) => k < e.as_slice(),
    };
    above && below
}

fn apply(db: &Db, model: &mut Model, k: &[u8], v: Option<&Key>) -> Result<(), TestCaseError> {
    match v {
        Some(v) => {
            db.put(k, v).map_err(fail)?;
            model.insert(k.to_vec(), v.clone());
        }
        None => {
            db.delete(k).map_err(fail)?;
            model.remove(k);
        }
    }
    Ok(())
}

fn fail(e: Error) -> TestCaseError {
    TestCaseError::fail(e.to_string())
}

/// Runs one query against the store and checks it against the model.
fn check_query(db: &Db, model: &mut Model, q: &Query) -> Result<(), TestCaseError> {
    let opts = RangeOptions::default()
        .reverse(q.reverse)
        .page_entries(q.page_entries)
        .page_bytes(q.page_bytes);
    // Every value (None: absent) each key held at some moment of the iteration.
    let mut held: BTreeMap<Key, BTreeSet<Option<Key>>> = BTreeMap::new();
    let start = model.clone();
    let mut touched = BTreeSet::new();
    for (_, k, v) in &q.writes {
        touched.insert(k.clone());
        held.entry(k.clone())
            .or_default()
            .insert(start.get(k).cloned());
        held.entry(k.clone()).or_default().insert(v.clone());
    }
    let mut it = db.range_with((q.lo.clone(), q.hi.clone()), opts);
    let mut out: Vec<(Key, Key)> = Vec::new();
    for step in 0.. {
        for (_, k, v) in q.writes.iter().filter(|w| w.0 == step) {
            apply(db, model, k, v.as_ref())?;
        }
        match it.next() {
            None => break,
            Some(kv) => out.push(kv.map_err(fail)?),
        }
        prop_assert!(
            it.buffered() < q.page_entries,
            "{} entries buffered, pages of {}",
            it.buffered(),
            q.page_entries
        );
    }
    prop_assert!(it.next().is_none(), "the iterator is fused");
    for w in out.windows(2) {
        let ordered = if q.reverse {
            w[0].0 > w[1].0
        } else {
            w[0].0 < w[1].0
        };
        prop_assert!(ordered, "out of order: {:?} then {:?}", w[0].0, w[1].0);
    }
    let returned: BTreeMap<&Key, &Key> = out.iter().map(|(k, v)| (k, v)).collect();
    for (k, v) in &out {
        prop_assert!(contains(&q.lo, &q.hi, k), "{k:?} is outside the bounds");
        let ok = if touched.contains(k) {
            held[k].contains(&Some(v.clone()))
        } else {
            start.get(k) == Some(v)
        };
        prop_assert!(ok, "{k:?} returned with a value it never held: {v:?}");
    }
    for (k, v) in start.iter().filter(|(k, _)| contains(&q.lo, &q.hi, k)) {
        if !touched.contains(k) {
            prop_assert_eq!(returned.get(k).copied(), Some(v), "{:?} missed", k);
        }
    }
    Ok(())
}

fn run_case(db: &Db, model: &mut Model, c: &Case) -> Result<(), TestCaseError> {
    // A fresh store for each case: delete what the previous one left.
    for k in std::mem::take(model).keys() {
        db.delete(k).map_err(fail)?;
    }
    prop_assert_eq!(db.scan(&b""[..].., 1000).map_err(fail)?, vec![]);
    for (k, v) in &c.initial {
        apply(db, model, k, Some(v))?;
    }
    for q in &c.queries {
        check_query(db, model, q)?;
    }
    let (lo, hi) = &c.delete;
    let want: Vec<Key> = model
        .keys()
        .filter(|k| contains(lo, hi, k))
        .cloned()
        .collect();
    let n = db.delete_range((lo.clone(), hi.clone())).map_err(fail)?;
    prop_assert_eq!(n, want.len() as u64);
    for k in &want {
        model.remove(k);
    }
    let all: Vec<(Key, Key)> = db
        .range::<&[u8], _>(..)
        .collect::<tierkv::Result<_>>()
        .map_err(fail)?;
    let expect: Vec<(Key, Key)> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    prop_assert_eq!(all, expect);
    Ok(())
}

fn spec_for(name: &str) -> &str {
    if name == "prism" {
        common::SMALL_PRISM
    } else {
        name
    }
}

fn model_test(spec: &str, cases: u32) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let db = Db::open(dir.path(), common::small_options(spec)).unwrap();
    assert!(db.ordered(), "{spec}");
    let model = std::cell::RefCell::new(Model::new());
    let config = Config {
        failure_persistence: None,
        ..Config::with_cases(cases)
    };
    let mut runner = TestRunner::new(config);
    let result = runner.run(&case(), |c| run_case(&db, &mut model.borrow_mut(), &c));
    if let Err(e) = result {
        panic!("{spec}: {e}");
    }
    db.close().unwrap();
}

#[test]
fn range_matches_the_model_on_dram() {
    model_test("dram:btree", 1024);
}

#[test]
fn range_matches_the_model_on_prism() {
    model_test(common::SMALL_PRISM, 256);
}

#[test]
fn range_matches_the_model_on_every_other_ordered_engine() {
    for d in ENGINES {
        if !matches!(d.name, "prism" | "dram") {
            model_test(spec_for(d.name), 64);
        }
    }
}

#[test]
fn unordered_variants_are_the_engines_own_answer_refuse_ranges_and_iterate_by_cursor() {
    for d in ENGINES {
        let variants: Vec<&str> = if d.variants.is_empty() {
            vec![""]
        } else {
            d.variants.to_vec()
        };
        for v in variants {
            let spec = if v.is_empty() {
                spec_for(d.name).to_owned()
            } else {
                format!("{}:{v}", d.name)
            };
            let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
            let db = Db::open(dir.path(), common::small_options(&spec)).unwrap();
            db.put(b"k", b"v").unwrap();
            let engine_scans = !matches!(db.store().scan(b"", 10), Err(Error::Unsupported(_)));
            assert_eq!(is_ordered(d.name, v), engine_scans, "{spec}");
            assert_eq!(db.ordered(), engine_scans, "{spec}");
            // Exactly one way to enumerate the keys: a scan in order or a cursor.
            match db.scan_cursor(0, 10) {
                Ok(page) => {
                    assert!(!engine_scans, "{spec}: both a scan and a cursor");
                    assert_eq!(page.entries, vec![(b"k".to_vec(), b"v".to_vec())], "{spec}");
                    assert_eq!(page.next, 0, "{spec}: one key, one page");
                }
                Err(Error::Unsupported(_)) => assert!(engine_scans, "{spec}: neither"),
                Err(e) => panic!("{spec}: {e}"),
            }
            let items: Vec<_> = db.range(&b"a"[..]..).collect();
            if engine_scans {
                assert_eq!(items.len(), 1, "{spec}");
                assert_eq!(items[0].as_ref().unwrap(), &(b"k".to_vec(), b"v".to_vec()));
            } else {
                assert_eq!(items.len(), 1, "{spec}: one error, then the end");
                match &items[0] {
                    Err(Error::Unsupported(why)) => {
                        assert!(why.contains(&spec) && why.contains("unordered"), "{why}")
                    }
                    other => panic!("{spec}: {other:?}"),
                }
                assert!(matches!(
                    db.delete_range(&b"a"[..]..),
                    Err(Error::Unsupported(_))
                ));
            }
            db.close().unwrap();
        }
    }
}

#[test]
fn a_large_range_holds_one_page_at_a_time() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let db = Db::open(dir.path(), common::small_options("dram:btree")).unwrap();
    let n = 20_000u32;
    for i in 0..n {
        db.put(format!("k{i:06}").as_bytes(), &[7u8; 100]).unwrap();
    }
    let mut it = db.range_with::<&[u8], _>(.., RangeOptions::default().page_entries(64));
    let first: Vec<_> = it.by_ref().take(100).map(Result::unwrap).collect();
    assert_eq!(first[99].0, b"k000099");
    // The first page assumes entries of the largest allowed size (1 KiB + 1 MiB), so it
    // fetches one; the next ones are sized from what was seen (64 entries of 107 bytes).
    assert_eq!(it.pages_fetched(), 3);
    assert_eq!(it.entries_fetched(), 1 + 64 + 64);
    assert_eq!(it.count() + 100, n as usize);
    // Pages shrink to the byte budget: 100-byte values, 1 KiB pages hold at most 10.
    let mut it = db.range_with::<&[u8], _>(.., RangeOptions::default().page_bytes(1024));
    it.by_ref().take(50).for_each(drop);
    assert!(it.buffered() < 10, "{}", it.buffered());
    // Backwards: one forward pass first, then one page held at a time.
    let mut rev =
        db.range_with::<&[u8], _>(.., RangeOptions::default().page_entries(64).reverse(true));
    let last: Vec<_> = rev.by_ref().take(3).map(|kv| kv.unwrap().0).collect();
    assert_eq!(last, [b"k019999", b"k019998", b"k019997"]);
    assert!(rev.buffered() < 64);
    assert_eq!(rev.count() + 3, n as usize);
}

#[test]
fn empty_and_inverted_bounds_yield_nothing_and_bad_pages_an_error() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let db = Db::open(dir.path(), common::small_options("dram:btree")).unwrap();
    for k in ["a", "b", "c"] {
        db.put(k.as_bytes(), b"v").unwrap();
    }
    assert_eq!(db.range(&b"c"[..]..&b"a"[..]).count(), 0);
    assert_eq!(db.range(&b"b"[..]..&b"b"[..]).count(), 0);
    assert_eq!(db.range_rev(&b"c"[..]..&b"a"[..]).count(), 0);
    assert_eq!(db.range(&b"b"[..]..=&b"b"[..]).count(), 1);
    let items: Vec<_> = db
        .range_with::<&[u8], _>(.., RangeOptions::default().page_entries(0))
        .collect();
    assert!(matches!(&items[..], [Err(Error::InvalidArgument(_))]));
}

#[test]
fn a_range_after_close_yields_closed() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let db = Db::open(dir.path(), common::small_options(common::SMALL_PRISM)).unwrap();
    db.put(b"a", b"1").unwrap();
    let mut it = db.range::<&[u8], _>(..);
    db.close().unwrap();
    assert!(matches!(it.next(), Some(Err(Error::Closed))));
    assert!(it.next().is_none());
}

#[test]
fn a_range_that_outlives_its_db_yields_closed_and_holds_nothing_open() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let opts = || common::small_options(common::SMALL_PRISM);
    let db = Db::open(dir.path(), opts()).unwrap();
    db.put(b"a", b"1").unwrap();
    let mut it = db.range::<&[u8], _>(..);
    drop(db);
    let again = Db::open(dir.path(), opts()).unwrap();
    assert!(matches!(it.next(), Some(Err(Error::Closed))));
    assert_eq!(again.get(b"a").unwrap(), Some(b"1".to_vec()));
}
