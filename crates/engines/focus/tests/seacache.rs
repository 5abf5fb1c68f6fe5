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

/// Reads the row until the cache thread has admitted it (the doorkeeper turns away the
/// first request for a key); the reads before that are misses.
fn wait_cached(s: &FocusStore, id: u32, key: &[u8]) {
    let t = Instant::now();
    while s.entry(id, key).unwrap().cached.load(Ordering::Acquire) == 0 {
        assert!(t.elapsed() < Duration::from_secs(10), "never admitted");
        s.get_fields(id, key, &FieldSelection::Only(vec![0]))
            .unwrap();
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
    let extra =
        "seacache_size=128KiB,cache_page_size=4KiB,cache_lifetime_ms=0,cache_doorkeeper=off";
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
    assert!((cache.usage() - 1.0).abs() < 1e-6, "use {}", cache.usage());
    let (sa, sb) = (cache.schema_stats(a), cache.schema_stats(b));
    for _ in 0..256 {
        cache.record(&sa, false);
        cache.record(&sb, true);
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
    assert!((cache.usage() - 0.5).abs() < 1e-6, "use {}", cache.usage());
    assert_eq!(
        cache.page_use(),
        0.5,
        "the cold schema's pages went back to the pool"
    );
    let st = s.stats();
    assert_eq!(st.counters["focus_cache_evictions"], 64);
    assert_eq!(st.gauges["focus_cache_hit_ratio_hot"], 1.0);
}

/// The doorkeeper keeps a row read once out of the queue; read again, it is queued with
/// the row the reader read, and admitted without the cache thread reading pmem.
#[test]
fn an_inserted_row_read_once_is_admitted_with_the_body_its_reader_read() {
    let dir = common::scratch_dir();
    let s = common::new_store(dir.path(), 16 << 20, DurabilityMode::Volatile, "");
    let id = schema(&s, "t");
    // The insert is the key's first sighting, so its first read passes the doorkeeper (a
    // key first seen by a read needs a second one: `seacache::tests::doorkeeper`).
    put(&s, id, b"k", 1);
    let pmem_reads = |s: &FocusStore| s.stats().reads_from_pmem;
    s.get_fields(id, b"k", &FieldSelection::All).unwrap();
    assert_eq!(
        s.stats().counters["focus_cache_first_sightings"],
        0,
        "the insert was the key's first sighting"
    );
    let before = pmem_reads(&s);
    let t = Instant::now();
    while s.entry(id, b"k").unwrap().cached.load(Ordering::Acquire) == 0 {
        assert!(t.elapsed() < Duration::from_secs(10), "never admitted");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(pmem_reads(&s), before, "admitted from the reader's copy");
    let all = s
        .get_fields(id, b"k", &FieldSelection::All)
        .unwrap()
        .unwrap();
    assert!(all.iter().all(|v| v == &vec![1; 100]));
    assert_eq!(s.stats().counters["focus_cache_hits"], 1);
    // A stale copy is not cached as it is: the row moved on since it was read (another
    // tail), or the record at its tail is another one (an address GC reused: another
    // sequence number). Both are read from pmem instead.
    let stale: Vec<u8> = vec![2; 1000];
    put(&s, id, b"j", 2);
    let tail = s.entry(id, b"j").unwrap().tail.load(Ordering::Acquire);
    put(&s, id, b"j", 3);
    put(&s, id, b"i", 3);
    let now = s.entry(id, b"i").unwrap().tail.load(Ordering::Acquire);
    for (key, version) in [(b"j", (tail, 0)), (b"i", (now, u64::MAX))] {
        let fresh = Some((version, stale.clone()));
        assert!(s.cache_admit_row(id, key, fresh, 0.0).unwrap());
        let got = s
            .get_fields(id, key, &FieldSelection::All)
            .unwrap()
            .unwrap();
        assert!(got.iter().all(|v| v == &vec![3; 100]), "read from pmem");
    }
    assert_eq!(s.stats().counters["focus_cache_hits"], 3);
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
