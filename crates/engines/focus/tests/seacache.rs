//! SeaCache (FOCUS §V-C; `seacache.rs`, `cache_ops.rs`): a missed row is admitted by the
//! cache thread and then read from DRAM through the index pointer; updates, puts and
//! deletes keep the cached copy coherent; eviction starts from the schema with the lowest
//! hit ratio and stops once page use is at most 80%; `seacache=off` reads pmem only.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tierkv_core::media::pmem::DurabilityMode;
use tierkv_core::{FieldDef, FieldSelection, KvStore, SchemaStore};
use tierkv_focus::FocusStore;

fn schema(s: &FocusStore, name: &str) -> u32 {
    let f: Vec<FieldDef> = (0..10)
        .map(|i| FieldDef::fixed(&format!("f{i}"), 100))
        .collect();
    s.create_schema(name, &f).unwrap().id
}

fn put(s: &FocusStore, id: u32, key: &[u8], tag: u8) {
    let v = [tag; 100];
    s.put_row(id, key, &[&v[..]; 10]).unwrap();
}

fn wait_cached(s: &FocusStore, id: u32, key: &[u8]) {
    let t = Instant::now();
    while s.entry(id, key).unwrap().cached.load(Ordering::Acquire) == 0 {
        assert!(t.elapsed() < Duration::from_secs(10), "never admitted");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn cached_rows_are_read_through_the_index_and_stay_coherent() {
    let dir = common::scratch_dir();
    let s = common::new_store(dir.path(), 16 << 20, DurabilityMode::Volatile, "");
    let id = schema(&s, "t");
    put(&s, id, b"k", 1);
    let one = FieldSelection::Only(vec![3]);
    assert_eq!(
        s.get_fields(id, b"k", &one).unwrap(),
        Some(vec![vec![1; 100]])
    );
    wait_cached(&s, id, b"k");
    let hits = |s: &FocusStore| s.stats().counters["focus_cache_hits"];
    let h0 = hits(&s);
    assert_eq!(
        s.get_fields(id, b"k", &one).unwrap(),
        Some(vec![vec![1; 100]])
    );
    assert_eq!(hits(&s), h0 + 1, "the second read is a hit");
    // An update is written through: the next read is a hit with the new value.
    s.update_fields(id, b"k", &[(3, &[7; 100])]).unwrap();
    assert_eq!(
        s.get_fields(id, b"k", &one).unwrap(),
        Some(vec![vec![7; 100]])
    );
    assert_eq!(hits(&s), h0 + 2);
    put(&s, id, b"k", 9);
    let all = s
        .get_fields(id, b"k", &FieldSelection::All)
        .unwrap()
        .unwrap();
    assert!(all.iter().all(|v| v == &vec![9; 100]));
    assert_eq!(hits(&s), h0 + 3);
    assert_eq!(s.stats().counters["focus_cache_rows"], 1);
    s.delete_row(id, b"k").unwrap();
    assert_eq!(s.get_fields(id, b"k", &one).unwrap(), None);
    assert_eq!(
        s.stats().counters["focus_cache_rows"],
        0,
        "a delete frees the slot"
    );
}

#[test]
fn eviction_starts_at_the_lowest_hit_ratio_and_stops_at_80_percent() {
    let dir = common::scratch_dir();
    // 32 pages of 4 KiB; a row is 1000 bytes: 4 per page.
    let extra = "seacache_size=128KiB,cache_page_size=4KiB,cache_lifetime_ms=0";
    let s = common::new_store(dir.path(), 32 << 20, DurabilityMode::Volatile, extra);
    let (a, b) = (schema(&s, "cold"), schema(&s, "hot"));
    for (id, n) in [(a, 64), (b, 64)] {
        for i in 0..n {
            let k = format!("k{i:03}").into_bytes();
            put(&s, id, &k, 1);
            assert!(s.cache_admit(id, &k, 0.0).unwrap());
        }
    }
    let cache = s.seacache().unwrap().clone();
    assert_eq!(cache.usage(), 1.0);
    for _ in 0..256 {
        cache.record(a, false);
        cache.record(b, true);
    }
    s.cache_evict();
    assert!(cache.usage() <= 0.8, "page use {}", cache.usage());
    let cached = |id: u32| {
        (0..64)
            .filter(|i| {
                s.entry(id, format!("k{i:03}").as_bytes())
                    .unwrap()
                    .cached
                    .load(Ordering::Acquire)
                    != 0
            })
            .count()
    };
    assert_eq!(
        (cached(a), cached(b)),
        (0, 64),
        "the cold schema goes first, the hot one stays"
    );
    assert_eq!(cache.usage(), 0.5);
    let st = s.stats();
    assert_eq!(st.counters["focus_cache_evictions"], 64);
    assert_eq!(st.gauges["focus_cache_hit_ratio_hot"], 1.0);
}

#[test]
fn seacache_off_reads_pmem_only() {
    let dir = common::scratch_dir();
    let s = common::new_store(
        dir.path(),
        16 << 20,
        DurabilityMode::Volatile,
        "seacache=off",
    );
    let id = schema(&s, "t");
    put(&s, id, b"k", 1);
    for _ in 0..10 {
        s.get_fields(id, b"k", &FieldSelection::All).unwrap();
    }
    assert!(s.seacache().is_none());
    let st = s.stats();
    assert_eq!(st.reads_from_dram, 0);
    assert_eq!(st.reads_from_pmem, 10);
}
