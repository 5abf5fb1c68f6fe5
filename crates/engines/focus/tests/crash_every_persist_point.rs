//! Power failure at every persist point (DESIGN §4, failure model 2; FORMAT.md § Crash case
//! analysis). A scripted sequence of create_schema, put_row, update_fields (deltas and
//! restore points), delete_row, put and delete runs on a Tracked pool with 16 KiB chunks
//! (so chunks are opened often). A persist hook takes a crash image just before every
//! persist the store makes (record, chunk header, epoch) and before every chunk
//! allocation, and one more after each operation returned; every unpersisted line (or, in
//! alternate images, word) of an image is kept or lost at random. Each image is recovered
//! and must hold exactly the state before the operation or after it (all or nothing),
//! and after it once the operation returned; `check` must pass. (The merge is off here:
//! `merge_inplace.rs` crashes merges at each of their persist points.)
//!
//! `TIERKV_SEED` replays a run; `TIERKV_CRASH_SCALE=<n>` multiplies the operations.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv_core::media::pmem::{CrashImageOptions, DurabilityMode};
use tierkv_core::{FieldDef, FieldSelection, KvStore, SchemaStore};
use tierkv_focus::FocusStore;
use tierkv_focus::plog::PersistPoint;

/// Where the scripted tail of the run starts (see `step`).
const SCRIPTED_FROM: usize = 190;
const EXTRA: &str = "chunk_size=16KiB,restore_point=3,log_shards=1,merge=off";

/// Crash images taken by the hook, with the point each was taken at.
type Images = Vec<(PersistPoint, Vec<u8>)>;

/// Everything a store holds, as the test sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct State {
    schemas: BTreeMap<String, u32>,
    rows: BTreeMap<(u32, Vec<u8>), Vec<Vec<u8>>>,
    plain: BTreeMap<Vec<u8>, Vec<u8>>,
}

fn read_state(s: &FocusStore) -> State {
    let mut st = State::default();
    for sc in s.schemas().unwrap() {
        st.schemas.insert(sc.name.clone(), sc.id);
        for (k, row) in s
            .scan_fields(sc.id, b"", &FieldSelection::All, usize::MAX)
            .unwrap()
        {
            st.rows.insert((sc.id, k), row);
        }
    }
    st.plain = s.scan(b"", usize::MAX).unwrap().into_iter().collect();
    st
}

fn schema_defs() -> [(&'static str, Vec<FieldDef>); 2] {
    [
        (
            "wide",
            vec![
                FieldDef::fixed("a", 100),
                FieldDef::fixed("b", 100),
                FieldDef::var("c", 200),
                FieldDef::fixed("d", 8),
            ],
        ),
        ("narrow", vec![FieldDef::fixed("x", 8)]),
    ]
}

fn value(rng: &mut ChaCha8Rng, f: &FieldDef) -> Vec<u8> {
    let len = match f.kind {
        tierkv_core::FieldKind::Fixed { len } => usize::from(len),
        tierkv_core::FieldKind::Var { max_len } => rng.random_range(0..=usize::from(max_len)),
    };
    (0..len).map(|_| rng.random()).collect()
}

/// Runs one random operation on the store and the model.
fn step(s: &FocusStore, model: &mut State, rng: &mut ChaCha8Rng, op: usize) {
    let defs = schema_defs();
    if op < defs.len() {
        let (name, fields) = &defs[op];
        let id = s.create_schema(name, fields).unwrap().id;
        model.schemas.insert((*name).to_owned(), id);
        return;
    }
    // The last operations put one row and update it until restore points are written.
    let scripted = (SCRIPTED_FROM..SCRIPTED_FROM + 10).contains(&op);
    let key = if scripted {
        b"k0".to_vec()
    } else {
        format!("k{}", rng.random_range(0..6)).into_bytes()
    };
    let which = if scripted {
        0
    } else {
        rng.random_range(0..defs.len())
    };
    let (name, fields) = &defs[which];
    let id = model.schemas[*name];
    let choice = match op {
        _ if !scripted => rng.random_range(0..10),
        SCRIPTED_FROM => 0,
        _ => 3,
    };
    match choice {
        0..3 => {
            let row: Vec<Vec<u8>> = fields.iter().map(|f| value(rng, f)).collect();
            let refs: Vec<&[u8]> = row.iter().map(Vec::as_slice).collect();
            s.put_row(id, &key, &refs).unwrap();
            model.rows.insert((id, key), row);
        }
        3..7 => {
            let f = rng.random_range(0..fields.len());
            let v = value(rng, &fields[f]);
            let existed = s.update_fields(id, &key, &[(f as u16, &v)]).unwrap();
            if let Some(row) = model.rows.get_mut(&(id, key)) {
                assert!(existed);
                row[f] = v;
            }
        }
        7 => {
            s.delete_row(id, &key).unwrap();
            model.rows.remove(&(id, key));
        }
        8 => {
            let v = vec![rng.random(); rng.random_range(0..300)];
            s.put(&key, &v).unwrap();
            model.plain.insert(key, v);
        }
        _ => {
            s.delete(&key).unwrap();
            model.plain.remove(&key);
        }
    }
}

fn recover(image: &[u8], dir: &Path, n: usize) -> State {
    let path = dir.join(format!("image-{n}"));
    std::fs::write(&path, image).unwrap();
    let s = common::reopen(&path, EXTRA);
    s.check().unwrap();
    let st = read_state(&s);
    s.close().unwrap();
    drop(s);
    std::fs::remove_file(&path).unwrap();
    st
}

#[test]
fn every_persist_point_recovers_all_or_nothing() {
    let seed = common::seed("every_persist_point_recovers_all_or_nothing");
    let scale: usize = std::env::var("TIERKV_CRASH_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let dir = common::scratch_dir();
    let s = common::new_store(dir.path(), 4 << 20, DurabilityMode::Tracked, EXTRA);
    let pool = s.plog().pool().clone();
    let images: Arc<Mutex<Images>> = Arc::default();
    let counter = Arc::new(std::sync::atomic::AtomicU64::new(seed));
    {
        let (images, pool, counter) = (images.clone(), pool.clone(), counter.clone());
        s.plog().set_persist_hook(Some(Arc::new(move |p| {
            let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let opts = if n.is_multiple_of(2) {
                CrashImageOptions::lines()
            } else {
                CrashImageOptions::torn_words()
            };
            images.lock().push((p, pool.crash_image(n, opts).unwrap()));
        })));
    }
    let mut model = State::default();
    let mut checked: BTreeMap<String, usize> = BTreeMap::new();
    let mut n = 0;
    for op in 0..(200 * scale).max(SCRIPTED_FROM + 10) {
        let before = model.clone();
        step(&s, &mut model, &mut rng, op);
        let mid: Vec<_> = std::mem::take(&mut *images.lock());
        for (point, image) in mid {
            n += 1;
            let got = recover(&image, dir.path(), n);
            assert!(
                got == before || got == model,
                "op {op}: crash before a {point:?} persist recovered a state that is neither before nor after (seed {seed})"
            );
            *checked.entry(format!("{point:?}")).or_default() += 1;
        }
        let k = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let after = pool
            .crash_image(k, CrashImageOptions::torn_words())
            .unwrap();
        n += 1;
        assert_eq!(
            recover(&after, dir.path(), n),
            model,
            "op {op}: crash after return (seed {seed})"
        );
        *checked.entry("after return".into()).or_default() += 1;
    }
    println!("crash images recovered, by persist point: {checked:?}");
    for p in ["Record", "ChunkHeader", "Epoch", "Alloc", "after return"] {
        assert!(
            checked.get(p).copied().unwrap_or(0) > 0,
            "no crash at {p}: {checked:?}"
        );
    }
    assert!(s.stats().counters["focus_restore_points"] > 0);
    assert!(s.stats().counters["focus_deltas_appended"] > 0);
}
