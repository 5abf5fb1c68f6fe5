//! Write batches through the facade (issue 24): `Db::write` and `Db::multi_get` on every
//! engine; engines with native batches pass the batch model test and survive a reopen,
//! the others refuse batches cleanly (`Unsupported`, nothing applied), and the registry's
//! list of engines with atomic batches agrees with the engines themselves; prism matches the
//! `dram` oracle batch for batch.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use tierkv::{ATOMIC_BATCH_ENGINES, Db, ENGINES};
use tierkv_core::{Error, Options, WriteBatch};
use tierkv_testkit::{BatchModelConfig, assert_batches_unsupported, run_batch_model};

fn options(engine: &str) -> Options {
    common::small_options(engine)
}

const PRISM: &str = common::SMALL_PRISM;

fn spec_for(name: &str) -> &str {
    if name == "prism" { PRISM } else { name }
}

#[test]
fn every_engine_either_batches_atomically_or_refuses_cleanly() {
    for d in ENGINES {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let db = Db::open(dir.path(), options(spec_for(d.name))).unwrap();
        let listed = ATOMIC_BATCH_ENGINES.contains(&d.name);
        assert_eq!(
            db.atomic_batches(),
            listed,
            "{}: registry list disagrees",
            d.name
        );
        let mut b = WriteBatch::new();
        b.put("a", "1").put("b", "2");
        if listed {
            db.write(&b).unwrap();
            assert_eq!(
                db.multi_get(&["a", "b", "c"]).unwrap(),
                vec![Some(b"1".to_vec()), Some(b"2".to_vec()), None],
                "{}",
                d.name
            );
        } else {
            match db.write(&b) {
                Err(Error::Unsupported(why)) => {
                    assert!(why.contains(d.name) && why.contains("prism"), "{why}")
                }
                other => panic!("{}: {other:?}", d.name),
            }
            assert_batches_unsupported(&*db.store());
            assert_eq!(db.multi_get(&["a"]).unwrap(), vec![None]);
        }
        db.close().unwrap();
    }
}

#[test]
fn batch_model_on_prism_through_the_facade_then_reopen() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let db = Db::open(dir.path(), options(PRISM)).unwrap();
    let cfg = BatchModelConfig {
        ops_per_thread: 200,
        group_batches: 60,
        ..BatchModelConfig::default()
    };
    let r = run_batch_model(db.store(), &cfg);
    assert!(r.batches > 100 && r.group_batches == 120, "{r:?}");
    let mut b = WriteBatch::new();
    b.put("kept", "yes").delete("bg0/00");
    db.write(&b).unwrap();
    db.close().unwrap();
    drop(db);
    let db = Db::open_existing(dir.path(), options(PRISM)).unwrap();
    assert_eq!(
        db.multi_get(&["kept", "bg0/00"]).unwrap(),
        vec![Some(b"yes".to_vec()), None]
    );
}

#[test]
fn batch_limits_are_reported_by_the_facade() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let db = Db::open(dir.path(), options("dram")).unwrap();
    let b: WriteBatch = (0..=tierkv_core::MAX_BATCH_OPS)
        .map(|i| (format!("k{i}"), Some(b"v".to_vec())))
        .collect();
    let e = db.write(&b).unwrap_err();
    assert!(e.to_string().contains("operations"), "{e}");
    assert_eq!(db.get(b"k0").unwrap(), None);
}

/// The same random batches (puts, deletes, repeated keys) and lone writes applied to prism
/// and to the `dram` oracle: after every step a `multi_get` of the touched keys agrees, and
/// at the end (and after a reopen of prism) a full scan does.
#[test]
fn prism_matches_the_dram_oracle_batch_for_batch() {
    use rand::{Rng, SeedableRng};
    let seed = tierkv_testkit::rig::seed("prism_matches_the_dram_oracle_batch_for_batch");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let odir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let db = Db::open(dir.path(), options(PRISM)).unwrap();
    let oracle = Db::open(odir.path(), options("dram")).unwrap();
    let key = |n: u32| format!("o{n:04}").into_bytes();
    for step in 0..300 {
        let mut touched = Vec::new();
        if rng.random_range(0..4) == 0 {
            let k = key(rng.random_range(0..500));
            let v = format!("lone{step}").into_bytes();
            db.put(&k, &v).unwrap();
            oracle.put(&k, &v).unwrap();
            touched.push(k);
        } else {
            let mut b = WriteBatch::new();
            for i in 0..rng.random_range(1..=100) {
                let k = key(rng.random_range(0..500));
                if rng.random_range(0..6) == 0 {
                    b.delete(k.clone());
                } else {
                    b.put(
                        k.clone(),
                        format!("s{step}.{i}").repeat(rng.random_range(1..20)),
                    );
                }
                touched.push(k);
            }
            db.write(&b).unwrap();
            oracle.write(&b).unwrap();
        }
        assert_eq!(
            db.multi_get(&touched).unwrap(),
            oracle.multi_get(&touched).unwrap(),
            "seed {seed}, step {step}"
        );
    }
    let all = |d: &Db| d.scan::<&[u8], _>(.., usize::MAX).unwrap();
    let want = all(&oracle);
    assert!(want.len() > 100, "{}", want.len());
    assert_eq!(all(&db), want, "seed {seed}: final scan");
    db.close().unwrap();
    drop(db);
    let db = Db::open_existing(dir.path(), options(PRISM)).unwrap();
    assert_eq!(all(&db), want, "seed {seed}: scan after reopen");
}
