//! swim and layout-aware storage, mechanism by mechanism (FOCUS §V-A, §V-B): updates append
//! deltas to the DLog only; a partial read stops at the first chain entry that holds every
//! requested field; a restore point is written after `restore_point` deltas; a read of
//! one field of a complete record touches only that field's bytes.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use tierkv_core::media::pmem::DurabilityMode;
use tierkv_core::{FieldDef, FieldSelection, KvStore, SchemaStore};
use tierkv_focus::FocusStore;

fn store(extra: &str) -> (tempfile::TempDir, std::sync::Arc<FocusStore>) {
    let dir = common::scratch_dir();
    let s = common::new_store(dir.path(), 16 << 20, DurabilityMode::Volatile, extra);
    // The merge would shorten chains behind the test's back (`merge_inplace.rs` tests it).
    s.pause_merges(true);
    (dir, s)
}

fn ten_fields(s: &FocusStore) -> u32 {
    let fields: Vec<FieldDef> = (0..10)
        .map(|i| FieldDef::fixed(&format!("f{i}"), 100))
        .collect();
    s.create_schema("usertable", &fields).unwrap().id
}

fn row(tag: u8) -> Vec<Vec<u8>> {
    (0..10u8).map(|i| vec![tag.wrapping_add(i); 100]).collect()
}

fn put(s: &FocusStore, id: u32, key: &[u8], tag: u8) {
    let r = row(tag);
    let refs: Vec<&[u8]> = r.iter().map(Vec::as_slice).collect();
    s.put_row(id, key, &refs).unwrap();
}

#[test]
fn update_appends_a_delta_to_the_dlog_only() {
    let (_d, s) = store("");
    let id = ten_fields(&s);
    put(&s, id, b"k", 0);
    let before = s.stats().counters;
    assert!(s.update_fields(id, b"k", &[(3, &[9; 100])]).unwrap());
    let after = s.stats().counters;
    assert_eq!(
        after["focus_deltas_appended"],
        before["focus_deltas_appended"] + 1
    );
    assert_eq!(
        after["focus_rows_put"], before["focus_rows_put"],
        "no complete record"
    );
    assert_eq!(after["focus_dlog_chunks_opened"], 1);
    let appended = after["focus_log_bytes_appended"] - before["focus_log_bytes_appended"];
    assert!(
        appended < 200,
        "a one-field delta is {appended} bytes, not a 1 KB record"
    );
    assert_eq!(
        s.entry(id, b"k")
            .unwrap()
            .deltas
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    assert!(!s.update_fields(id, b"absent", &[(3, &[9; 100])]).unwrap());
    assert_eq!(
        s.stats().counters["focus_deltas_appended"],
        after["focus_deltas_appended"]
    );
}

#[test]
fn partial_read_stops_at_the_first_entry_holding_every_field() {
    let (_d, s) = store("restore_point=10");
    let id = ten_fields(&s);
    put(&s, id, b"k", 0);
    // Chain: row <- d(f1) <- d(f2) <- d(f3) (tail).
    for f in 1..=3u16 {
        s.update_fields(id, b"k", &[(f, &[f as u8 + 100; 100])])
            .unwrap();
    }
    let w = s.get_fields_traced(id, b"k", &[3]).unwrap().unwrap();
    assert_eq!(
        (w.steps, w.values[0][0]),
        (1, 103),
        "f3 is in the tail: one entry read"
    );
    let w = s.get_fields_traced(id, b"k", &[2, 3]).unwrap().unwrap();
    assert_eq!(w.steps, 2, "f2 and f3: two entries");
    let w = s.get_fields_traced(id, b"k", &[1]).unwrap().unwrap();
    assert_eq!((w.steps, w.values[0][0]), (3, 101));
    let w = s.get_fields_traced(id, b"k", &[0, 3]).unwrap().unwrap();
    assert_eq!(
        w.steps, 4,
        "f0 only in the complete record: the whole chain"
    );
    assert_eq!((w.values[0][0], w.values[1][0]), (0, 103));
}

#[test]
fn restore_point_is_written_after_n_deltas() {
    for n in [1u32, 5, 7] {
        let (_d, s) = store(&format!("restore_point={n}"));
        let id = ten_fields(&s);
        put(&s, id, b"k", 0);
        let entry = s.entry(id, b"k").unwrap();
        let deltas = |s: &FocusStore| s.stats().counters["focus_deltas_appended"];
        for i in 1..=n {
            s.update_fields(id, b"k", &[(0, &[i as u8; 100])]).unwrap();
            assert_eq!(entry.deltas.load(std::sync::atomic::Ordering::Relaxed), i);
        }
        assert_eq!(
            (deltas(&s), s.stats().counters["focus_restore_points"]),
            (u64::from(n), 0)
        );
        s.update_fields(id, b"k", &[(1, &[0xEE; 100])]).unwrap();
        assert_eq!(s.stats().counters["focus_restore_points"], 1, "n = {n}");
        assert_eq!(entry.deltas.load(std::sync::atomic::Ordering::Relaxed), 0);
        let w = s.get_fields_traced(id, b"k", &[0, 1, 9]).unwrap().unwrap();
        assert_eq!(w.steps, 1, "the restore point is a complete record");
        assert_eq!(
            (w.values[0][0], w.values[1][0], w.values[2][0]),
            (n as u8, 0xEE, 9)
        );
    }
}

#[test]
fn swim_off_rewrites_the_whole_record_on_every_update() {
    let (_d, s) = store("swim=off");
    let id = ten_fields(&s);
    put(&s, id, b"k", 0);
    for i in 0..3u8 {
        s.update_fields(id, b"k", &[(2, &[i; 100])]).unwrap();
    }
    let c = s.stats().counters;
    assert_eq!(
        (c["focus_deltas_appended"], c["focus_full_updates"]),
        (0, 3)
    );
    let got = s
        .get_fields(id, b"k", &FieldSelection::Only(vec![2]))
        .unwrap();
    assert_eq!(got, Some(vec![vec![2; 100]]));
}

#[test]
fn reading_one_field_of_a_record_touches_only_its_bytes() {
    let (_d, s) = store("");
    let id = ten_fields(&s);
    put(&s, id, b"k", 0);
    let before = s.plog().pool().counters().pmem_bytes_read;
    s.get_fields(id, b"k", &FieldSelection::Only(vec![7]))
        .unwrap();
    let one = s.plog().pool().counters().pmem_bytes_read - before;
    let before = s.plog().pool().counters().pmem_bytes_read;
    s.get_fields(id, b"k", &FieldSelection::All).unwrap();
    let all = s.plog().pool().counters().pmem_bytes_read - before;
    assert!(
        one <= 48 + 100,
        "one field read {one} bytes (header + field)"
    );
    assert!(all >= 1000, "all fields read {all} bytes");
}

#[test]
fn plain_keys_and_rows_live_in_separate_namespaces() {
    let (_d, s) = store("");
    let id = ten_fields(&s);
    s.put(b"k", b"plain").unwrap();
    put(&s, id, b"k", 1);
    assert_eq!(s.get(b"k").unwrap().as_deref(), Some(&b"plain"[..]));
    let scan = s.scan(b"", 10).unwrap();
    assert_eq!(scan, vec![(b"k".to_vec(), b"plain".to_vec())]);
    s.delete(b"k").unwrap();
    assert!(
        s.get_fields(id, b"k", &FieldSelection::All)
            .unwrap()
            .is_some()
    );
}
