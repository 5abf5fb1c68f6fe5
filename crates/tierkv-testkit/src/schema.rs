//! The schema API conformance suite (`tierkv_core::api::schema` contract): every
//! [`SchemaStore`] — the `focus` engine and the adapters over every engine — runs it.
//!
//! - [`run_schema_model`]: random `put_row` / `update_fields` / `get_fields` /
//!   `scan_fields` / `delete_row` over two schemas (one mixing fixed fields with variable
//!   ones of both sides of the 8-byte inline limit), each result compared with an in-memory
//!   model; bad field ids and lengths must be `InvalidArgument` and change nothing; scans
//!   must be ordered and stay within their schema.
//! - [`run_concurrent_field_updates`]: several threads update *different* fields of the
//!   same rows at once; at the end every field holds its thread's last value (no update
//!   lost), and readers never see a field go backwards.
//!
//! Seeds print; `TIERKV_SEED` replays.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv_core::{Error, FieldDef, FieldId, FieldKind, FieldSelection, Schema, SchemaStore};

/// Shape of a [`run_schema_model`] run.
#[derive(Clone, Debug)]
pub struct SchemaModelConfig {
    /// Operations.
    pub ops: usize,
    /// Distinct keys per schema.
    pub keys: u64,
    /// False when the store cannot scan (its scans must then be `Unsupported`).
    pub scans: bool,
    /// The seed (overridden by `TIERKV_SEED`).
    pub seed: u64,
}

impl Default for SchemaModelConfig {
    fn default() -> Self {
        SchemaModelConfig {
            ops: 3_000,
            keys: 60,
            scans: true,
            seed: 0x5c4e_3a00,
        }
    }
}

/// The two schemas of the model run.
pub fn model_schemas() -> [(&'static str, Vec<FieldDef>); 2] {
    [
        (
            "orders",
            vec![
                FieldDef::fixed("id", 8),
                FieldDef::var("note", 40),
                FieldDef::fixed("flag", 1),
                FieldDef::var("tag", 6),
                FieldDef::fixed("amount", 100),
            ],
        ),
        ("blobs", vec![FieldDef::var("body", 300)]),
    ]
}

type Model = BTreeMap<(u32, Vec<u8>), Vec<Vec<u8>>>;

fn value(rng: &mut ChaCha8Rng, kind: FieldKind) -> Vec<u8> {
    let len = match kind {
        FieldKind::Fixed { len } => usize::from(len),
        FieldKind::Var { max_len } => rng.random_range(0..=usize::from(max_len)),
    };
    let mut v = vec![0; len];
    rng.fill_bytes(&mut v);
    v
}

fn key(rng: &mut ChaCha8Rng, keys: u64) -> Vec<u8> {
    format!("k{:05}", rng.random_range(0..keys)).into_bytes()
}

fn selection(rng: &mut ChaCha8Rng, s: &Schema) -> (FieldSelection, Vec<FieldId>) {
    let all: Vec<FieldId> = (0..s.len() as FieldId).collect();
    match rng.random_range(0..3) {
        0 => (FieldSelection::All, all),
        1 => (FieldSelection::Only(vec![]), all),
        _ => {
            let n = rng.random_range(1..=s.len());
            let ids: Vec<FieldId> = (0..n)
                .map(|_| rng.random_range(0..s.len()) as FieldId)
                .collect();
            (FieldSelection::Only(ids.clone()), ids)
        }
    }
}

fn expect_invalid<T: std::fmt::Debug>(r: tierkv_core::Result<T>, what: &str) {
    assert!(
        matches!(r, Err(Error::InvalidArgument(_))),
        "{what}: expected InvalidArgument, got {r:?}"
    );
}

/// Runs the model-based suite; panics (with the seed) on the first divergence.
pub fn run_schema_model(store: &dyn SchemaStore, cfg: &SchemaModelConfig) -> u64 {
    let seed = crate::rig::env_seed().unwrap_or(cfg.seed);
    eprintln!("schema model seed {seed} (replay with TIERKV_SEED={seed})");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let schemas: Vec<Arc<Schema>> = model_schemas()
        .iter()
        .map(|(n, f)| store.create_schema(n, f).expect("create_schema"))
        .collect();
    assert_ne!(schemas[0].id, schemas[1].id);
    let again = store.create_schema("orders", &model_schemas()[0].1);
    assert_eq!(again.expect("recreate").id, schemas[0].id);
    expect_invalid(
        store.create_schema("orders", &[FieldDef::fixed("x", 1)]),
        "recreate with other fields",
    );
    assert_eq!(
        store.schema("blobs").expect("schema").map(|s| s.id),
        Some(schemas[1].id)
    );
    assert!(store.schema("nope").expect("schema").is_none());
    let mut model = Model::new();
    let mut scans = 0u64;
    for op in 0..cfg.ops {
        let s = &schemas[rng.random_range(0..schemas.len())];
        let k = key(&mut rng, cfg.keys);
        let ctx = || {
            format!(
                "op {op} schema {} key {}",
                s.name,
                String::from_utf8_lossy(&k)
            )
        };
        match rng.random_range(0..100) {
            0..25 => {
                let row: Vec<Vec<u8>> = s.fields.iter().map(|f| value(&mut rng, f.kind)).collect();
                let refs: Vec<&[u8]> = row.iter().map(Vec::as_slice).collect();
                store
                    .put_row(s.id, &k, &refs)
                    .unwrap_or_else(|e| panic!("{}: {e}", ctx()));
                model.insert((s.id, k), row);
            }
            25..50 => {
                let n = rng.random_range(1..=s.len().min(3));
                let mut ids: Vec<FieldId> = (0..s.len() as FieldId).collect();
                for i in 0..n {
                    let j = rng.random_range(i..ids.len());
                    ids.swap(i, j);
                }
                ids.truncate(n);
                let vals: Vec<Vec<u8>> = ids
                    .iter()
                    .map(|id| value(&mut rng, s.fields[usize::from(*id)].kind))
                    .collect();
                let set: Vec<(FieldId, &[u8])> = ids
                    .iter()
                    .copied()
                    .zip(vals.iter().map(Vec::as_slice))
                    .collect();
                let existed = store
                    .update_fields(s.id, &k, &set)
                    .unwrap_or_else(|e| panic!("{}: {e}", ctx()));
                let m = model.get_mut(&(s.id, k.clone()));
                assert_eq!(existed, m.is_some(), "{}: update_fields existed", ctx());
                if let Some(row) = m {
                    for (id, v) in ids.iter().zip(vals) {
                        row[usize::from(*id)] = v;
                    }
                }
            }
            50..75 => {
                let (sel, ids) = selection(&mut rng, s);
                let got = store
                    .get_fields(s.id, &k, &sel)
                    .unwrap_or_else(|e| panic!("{}: {e}", ctx()));
                let want = model
                    .get(&(s.id, k.clone()))
                    .map(|row| ids.iter().map(|i| row[usize::from(*i)].clone()).collect());
                assert_eq!(got, want, "{}: get_fields {sel:?}", ctx());
            }
            75..83 => {
                store
                    .delete_row(s.id, &k)
                    .unwrap_or_else(|e| panic!("{}: {e}", ctx()));
                model.remove(&(s.id, k));
            }
            83..93 => {
                let (sel, ids) = selection(&mut rng, s);
                let limit = rng.random_range(0..20);
                let got = store.scan_fields(s.id, &k, &sel, limit);
                if !cfg.scans {
                    assert!(matches!(got, Err(Error::Unsupported(_))), "{}", ctx());
                    continue;
                }
                scans += 1;
                let got = got.unwrap_or_else(|e| panic!("{}: {e}", ctx()));
                let want: Vec<_> = model
                    .range((s.id, k.clone())..)
                    .take_while(|((sid, _), _)| *sid == s.id)
                    .take(limit)
                    .map(|((_, key), row)| {
                        (
                            key.clone(),
                            ids.iter()
                                .map(|i| row[usize::from(*i)].clone())
                                .collect::<Vec<_>>(),
                        )
                    })
                    .collect();
                assert_eq!(got, want, "{}: scan_fields limit {limit}", ctx());
            }
            _ => bad_inputs(store, s, &k, &mut rng),
        }
    }
    // Everything at the end, through single-field reads.
    for ((sid, k), row) in &model {
        for (i, v) in row.iter().enumerate() {
            let got = store.get_fields(*sid, k, &FieldSelection::Only(vec![i as FieldId]));
            assert_eq!(got.expect("final get"), Some(vec![v.clone()]));
        }
    }
    scans
}

/// Bad field ids and lengths are `InvalidArgument` and write nothing.
fn bad_inputs(store: &dyn SchemaStore, s: &Schema, k: &[u8], rng: &mut ChaCha8Rng) {
    let before = store
        .get_fields(s.id, k, &FieldSelection::All)
        .expect("get");
    let nf = s.len() as FieldId;
    expect_invalid(
        store.update_fields(s.id, k, &[(nf, b"x")]),
        "field id out of range",
    );
    expect_invalid(
        store.get_fields(s.id, k, &FieldSelection::Only(vec![nf])),
        "bad selection",
    );
    expect_invalid(store.update_fields(s.id, k, &[]), "empty update");
    expect_invalid(store.put_row(s.id, k, &[]), "row without values");
    expect_invalid(
        store.get_fields(u32::MAX, k, &FieldSelection::All),
        "unknown schema",
    );
    let f = &s.fields[0];
    let wrong = vec![7u8; f.kind.max_len() + 1];
    expect_invalid(
        store.update_fields(s.id, k, &[(0, &wrong)]),
        "value too long",
    );
    if let FieldKind::Fixed { .. } = f.kind {
        expect_invalid(
            store.update_fields(s.id, k, &[(0, b"")]),
            "short fixed value",
        );
    }
    if s.len() > 1 {
        let v = value(rng, s.fields[1].kind);
        expect_invalid(
            store.update_fields(s.id, k, &[(1, &v), (1, &v)]),
            "field set twice",
        );
    }
    let after = store
        .get_fields(s.id, k, &FieldSelection::All)
        .expect("get");
    assert_eq!(before, after, "a refused call changed the row");
}

/// `threads` threads each own one 8-byte field of `rows` rows and set it to 1, 2, ...
/// `updates`, while a reader checks that no field ever goes backwards; at the end every
/// field holds `updates`. Returns the reads the reader made.
pub fn run_concurrent_field_updates(
    store: Arc<dyn SchemaStore>,
    threads: usize,
    rows: u64,
    updates: u64,
) -> u64 {
    let fields: Vec<FieldDef> = (0..threads)
        .map(|t| FieldDef::fixed(&format!("f{t}"), 8))
        .chain([FieldDef::var("pad", 64)])
        .collect();
    let s = store.create_schema("contended", &fields).expect("create");
    let zero = [0u8; 8];
    let mut row: Vec<&[u8]> = vec![&zero; threads];
    row.push(b"padding that keeps the row over one cache line .....");
    for r in 0..rows {
        store
            .put_row(s.id, format!("row{r}").as_bytes(), &row)
            .expect("put_row");
    }
    let stop = AtomicBool::new(false);
    // Writers start once the reader runs, and the reader makes at least one pass after the
    // last write, so reads overlap the writes even when a loaded machine schedules the
    // reader late (it once counted no read at all).
    let reader_running = AtomicBool::new(false);
    let reads = std::thread::scope(|sc| {
        let reader = sc.spawn(|| {
            let mut last = vec![vec![0u64; threads]; rows as usize];
            let mut reads = 0u64;
            reader_running.store(true, Ordering::Release);
            loop {
                let last_pass = stop.load(Ordering::Acquire);
                for r in 0..rows {
                    let got = store
                        .get_fields(s.id, format!("row{r}").as_bytes(), &FieldSelection::All)
                        .expect("get")
                        .expect("row exists");
                    for t in 0..threads {
                        let v = u64::from_le_bytes(got[t].as_slice().try_into().expect("8 bytes"));
                        assert!(
                            v >= last[r as usize][t],
                            "field {t} of row {r} went backwards"
                        );
                        last[r as usize][t] = v;
                    }
                    reads += 1;
                }
                if last_pass {
                    break;
                }
            }
            reads
        });
        let writers: Vec<_> = (0..threads)
            .map(|t| {
                let store = &store;
                let s = &s;
                let reader_running = &reader_running;
                sc.spawn(move || {
                    while !reader_running.load(Ordering::Acquire) {
                        std::thread::yield_now();
                    }
                    for n in 1..=updates {
                        for r in 0..rows {
                            let set = [(t as FieldId, &n.to_le_bytes()[..])];
                            let existed = store
                                .update_fields(s.id, format!("row{r}").as_bytes(), &set)
                                .expect("update");
                            assert!(existed);
                        }
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().expect("writer");
        }
        stop.store(true, Ordering::Release);
        reader.join().expect("reader")
    });
    for r in 0..rows {
        let got = store
            .get_fields(s.id, format!("row{r}").as_bytes(), &FieldSelection::All)
            .expect("get")
            .expect("row");
        for (t, v) in got.iter().take(threads).enumerate() {
            assert_eq!(
                v,
                &updates.to_le_bytes(),
                "row {r} field {t}: an update was lost"
            );
        }
        assert_eq!(got[threads], row[threads]);
    }
    reads
}
