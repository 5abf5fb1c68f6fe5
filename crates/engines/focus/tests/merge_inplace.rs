//! The cacheline-aware in-place merge (FOCUS §V-B, Algorithm 1; `merge.rs`): deltas are
//! folded into the complete record so that reads take one step again; each dirty cache
//! line is persisted once (fewer lines than one persist per field); updates racing with
//! the merge thread are never lost; a crash at every persist of a merge recovers the same
//! rows.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use std::sync::Arc;

use tierkv_core::media::pmem::{CrashImageOptions, DurabilityMode};
use tierkv_core::{FieldDef, FieldSelection, KvStore, SchemaStore};
use tierkv_focus::FocusStore;

/// The paper's Fig. 12b record: 8 fields of 32 bytes (256 bytes).
fn eight_by_32(s: &FocusStore) -> u32 {
    let f: Vec<FieldDef> = (0..8)
        .map(|i| FieldDef::fixed(&format!("f{i}"), 32))
        .collect();
    s.create_schema("r", &f).unwrap().id
}

fn setup(extra: &str) -> (tempfile::TempDir, Arc<FocusStore>, u32) {
    let dir = common::scratch_dir();
    let s = common::new_store(dir.path(), 16 << 20, DurabilityMode::Volatile, extra);
    s.pause_merges(true);
    let id = eight_by_32(&s);
    let zero = [0u8; 32];
    s.put_row(id, b"k", &[&zero[..]; 8]).unwrap();
    (dir, s, id)
}

fn lines_for(s: &FocusStore, fields: &[u16]) -> u64 {
    let id = s.schema("r").unwrap().unwrap().id;
    for f in fields {
        assert!(
            s.update_fields(id, b"k", &[(*f, &[*f as u8 + 1; 32])])
                .unwrap()
        );
    }
    let before = s.stats().counters["focus_merge_lines_persisted"];
    assert!(s.merge_row(id, b"k").unwrap());
    s.stats().counters["focus_merge_lines_persisted"] - before
}

#[test]
fn merge_folds_deltas_into_the_record_and_reads_take_one_step() {
    let (_d, s, id) = setup("restore_point=20");
    for f in [1u16, 5, 1, 7] {
        s.update_fields(id, b"k", &[(f, &[f as u8 * 10; 32])])
            .unwrap();
    }
    assert_eq!(
        s.get_fields_traced(id, b"k", &[0]).unwrap().unwrap().steps,
        5
    );
    assert!(s.merge_row(id, b"k").unwrap());
    let w = s
        .get_fields_traced(id, b"k", &[0, 1, 5, 7])
        .unwrap()
        .unwrap();
    assert_eq!(w.steps, 1, "the index points at the merged record");
    let firsts: Vec<u8> = w.values.iter().map(|v| v[0]).collect();
    assert_eq!(firsts, [0, 10, 50, 70]);
    assert!(!s.merge_row(id, b"k").unwrap(), "nothing left to merge");
    let c = s.stats().counters;
    assert_eq!((c["focus_merges"], c["focus_merged_deltas"]), (1, 4));
    s.check().unwrap();
}

#[test]
fn merge_persists_each_dirty_line_once() {
    // Fields 0, 1, 3 and 7 of a 256-byte body that starts after a 48-byte header and a
    // 1-byte key: the dirty lines are those the four 32-byte ranges touch.
    let (_d, s, _) = setup("restore_point=20,merge=cacheline");
    let cacheline = lines_for(&s, &[0, 1, 3, 7]);
    let (_d2, s2, _) = setup("restore_point=20,merge=naive");
    let naive = lines_for(&s2, &[0, 1, 3, 7]);
    let e = s.entry(1, b"k").unwrap();
    let row = e.tail.load(std::sync::atomic::Ordering::Relaxed);
    let body = row + 48 + 1;
    let mut dirty: Vec<u64> = [0u64, 1, 3, 7]
        .iter()
        .flat_map(|f| {
            let (a, b) = (body + f * 32, body + f * 32 + 31);
            [a / 64, b / 64]
        })
        .collect();
    dirty.sort_unstable();
    dirty.dedup();
    assert_eq!(
        cacheline,
        dirty.len() as u64,
        "each dirty line exactly once"
    );
    assert!(
        naive > cacheline,
        "one persist per field persists shared lines again: {naive} vs {cacheline}"
    );
    // A single field: both persist the same lines.
    assert_eq!(lines_for(&s, &[2]), lines_for(&s2, &[2]));
}

#[test]
fn merges_racing_with_updates_lose_nothing() {
    let dir = common::scratch_dir();
    let s = common::new_store(
        dir.path(),
        32 << 20,
        DurabilityMode::Volatile,
        "restore_point=50",
    );
    let id = eight_by_32(&s);
    let zero = [0u8; 32];
    for r in 0..4 {
        s.put_row(id, format!("r{r}").as_bytes(), &[&zero[..]; 8])
            .unwrap();
    }
    std::thread::scope(|sc| {
        for t in 0..4u16 {
            let s = &s;
            sc.spawn(move || {
                for n in 1..=400u32 {
                    let r = format!("r{}", n % 4);
                    let mut v = [0u8; 32];
                    v[..4].copy_from_slice(&n.to_le_bytes());
                    s.update_fields(id, r.as_bytes(), &[(t, &v)]).unwrap();
                }
            });
        }
    });
    for r in 0..4u32 {
        let row = s
            .get_fields(id, format!("r{r}").as_bytes(), &FieldSelection::All)
            .unwrap()
            .unwrap();
        let last = (1..=400u32).filter(|n| n % 4 == r).max().unwrap();
        for (t, v) in row.iter().take(4).enumerate() {
            let got = u32::from_le_bytes(v[..4].try_into().unwrap());
            assert_eq!(got, last, "row {r} field {t}");
        }
    }
    let started = std::time::Instant::now();
    while s.merges_pending() > 0 && started.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(
        s.stats().counters["focus_merges"] > 0,
        "the merge thread ran"
    );
    s.check().unwrap();
}

#[test]
fn a_crash_at_every_persist_point_of_a_merge_recovers_the_rows() {
    let seed = common::seed("a_crash_at_every_persist_point_of_a_merge_recovers_the_rows");
    let dir = common::scratch_dir();
    let s = common::new_store(
        dir.path(),
        8 << 20,
        DurabilityMode::Tracked,
        "restore_point=20",
    );
    s.pause_merges(true);
    let id = eight_by_32(&s);
    let zero = [0u8; 32];
    s.put_row(id, b"k", &[&zero[..]; 8]).unwrap();
    let mut want = vec![vec![0u8; 32]; 8];
    for (i, f) in [0u16, 1, 3, 7, 1].iter().enumerate() {
        let v = vec![i as u8 + 1; 32];
        s.update_fields(id, b"k", &[(*f, &v)]).unwrap();
        want[usize::from(*f)] = v;
    }
    let pool = s.plog().pool().clone();
    let images = common::capture_images(&s, seed);
    assert!(s.merge_row(id, b"k").unwrap());
    images.lock().push(
        pool.crash_image(seed, CrashImageOptions::torn_words())
            .unwrap(),
    );
    let images = std::mem::take(&mut *images.lock());
    assert!(images.len() >= 3, "{} images", images.len());
    for (i, image) in images.iter().enumerate() {
        let path = dir.path().join(format!("img{i}"));
        std::fs::write(&path, image).unwrap();
        let r = common::reopen(&path, "restore_point=20");
        r.check().unwrap();
        let got = r.get_fields(id, b"k", &FieldSelection::All).unwrap();
        assert_eq!(got.as_ref(), Some(&want), "image {i} of {}", images.len());
        r.close().unwrap();
        drop(r);
        std::fs::remove_file(&path).unwrap();
    }
}
