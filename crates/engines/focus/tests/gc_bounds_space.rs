//! Garbage collection (`gc.rs`, FORMAT.md § Garbage collection): overwrites many times the
//! pool's size run without `NoSpace` while the GC thread collects chunks, and every row,
//! plain key and delete stays right, also after a reopen; a crash at every persist point
//! of GC steps (restore-point rewrites, re-appended tombstones, a chunk's cleared magic)
//! recovers the same logical state.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use std::collections::BTreeMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv_core::media::pmem::DurabilityMode;
use tierkv_core::{FieldDef, FieldSelection, KvStore, SchemaStore};
use tierkv_focus::FocusStore;

type Rows = BTreeMap<Vec<u8>, Vec<Vec<u8>>>;
type Plain = BTreeMap<Vec<u8>, Vec<u8>>;

/// `ops` random writes by thread `t` on its own keys; returns its model.
fn writer(s: &FocusStore, id: u32, t: usize, ops: usize, seed: u64) -> (Rows, Plain) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed + t as u64);
    let (mut rows, mut plain) = (Rows::new(), Plain::new());
    for i in 0..ops {
        let k = format!("t{t}-{}", rng.random_range(0..60)).into_bytes();
        match rng.random_range(0..10) {
            0..3 => {
                let v = vec![i as u8; 200];
                s.put_row(id, &k, &[&(i as u64).to_le_bytes(), &v]).unwrap();
                rows.insert(k, vec![(i as u64).to_le_bytes().to_vec(), v]);
            }
            3..6 => {
                let n = (i as u64 * 3).to_le_bytes();
                if s.update_fields(id, &k, &[(0, &n)]).unwrap() {
                    rows.get_mut(&k).unwrap()[0] = n.to_vec();
                } else {
                    assert!(!rows.contains_key(&k));
                }
            }
            6 => {
                s.delete_row(id, &k).unwrap();
                rows.remove(&k);
            }
            7 | 8 => {
                let v = vec![t as u8; rng.random_range(1..4000)];
                s.put(&k, &v).unwrap();
                plain.insert(k, v);
            }
            _ => {
                s.delete(&k).unwrap();
                plain.remove(&k);
            }
        }
    }
    (rows, plain)
}

fn verify(s: &FocusStore, id: u32, rows: &Rows, plain: &Plain) {
    let got: Rows = s
        .scan_fields(id, b"", &FieldSelection::All, usize::MAX)
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(&got, rows);
    let got: Plain = s.scan(b"", usize::MAX).unwrap().into_iter().collect();
    assert_eq!(&got, plain);
    s.check().unwrap();
}

fn schema(s: &FocusStore) -> u32 {
    s.create_schema("t", &[FieldDef::fixed("n", 8), FieldDef::var("v", 300)])
        .unwrap()
        .id
}

#[test]
fn gc_keeps_pmem_bounded_under_overwrites() {
    let seed = common::seed("gc_keeps_pmem_bounded_under_overwrites");
    let dir = common::scratch_dir();
    let path = dir.path().join("pool");
    let extra = "chunk_size=16KiB,gc_threshold=0.3";
    let s = common::new_store(dir.path(), 4 << 20, DurabilityMode::Volatile, extra);
    let id = schema(&s);
    let models: Vec<(Rows, Plain)> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..3)
            .map(|t| {
                let s = &s;
                sc.spawn(move || writer(s, id, t, 6_000, seed))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let (mut rows, mut plain) = (Rows::new(), Plain::new());
    for (r, p) in models {
        rows.extend(r);
        plain.extend(p);
    }
    let st = s.stats();
    let written = st.counters["focus_log_bytes_appended"];
    println!(
        "log bytes appended {written}, gc chunks {}, rewrites {}, stalls {}",
        st.counters["focus_gc_chunks"],
        st.counters["focus_gc_rewrites"],
        st.counters["focus_write_stalls"]
    );
    assert!(
        written > 2 * (4 << 20),
        "the run wrote {written} bytes, not twice the pool"
    );
    assert!(st.counters["focus_gc_chunks"] > 100);
    verify(&s, id, &rows, &plain);
    s.close().unwrap();
    drop(s);
    let s = common::reopen(&path, extra);
    verify(&s, id, &rows, &plain);
}

#[test]
fn a_crash_at_every_persist_point_of_gc_loses_nothing() {
    let seed = common::seed("a_crash_at_every_persist_point_of_gc_loses_nothing");
    let dir = common::scratch_dir();
    // A threshold of 0 and a roomy pool: the thread never collects; the test steps GC.
    let extra = "chunk_size=16KiB,gc_threshold=0,log_shards=1";
    let s = common::new_store(dir.path(), 8 << 20, DurabilityMode::Tracked, extra);
    let id = schema(&s);
    let (rows, plain) = writer(&s, id, 0, 400, seed);
    let images = common::capture_images(&s, seed);
    let (mut steps, mut checked) = (0, 0);
    while steps < 12 && s.gc_step().unwrap() {
        steps += 1;
        for (i, image) in std::mem::take(&mut *images.lock()).into_iter().enumerate() {
            let path = dir.path().join(format!("img-{steps}-{i}"));
            std::fs::write(&path, image).unwrap();
            let r = common::reopen(&path, extra);
            verify(&r, id, &rows, &plain);
            r.close().unwrap();
            drop(r);
            std::fs::remove_file(&path).unwrap();
            checked += 1;
        }
    }
    println!("{steps} GC steps, {checked} crash images recovered");
    assert!(
        steps >= 5 && checked > steps,
        "{steps} steps, {checked} images"
    );
    assert!(s.stats().counters["focus_gc_rewrites"] > 0);
    verify(&s, id, &rows, &plain);
}
