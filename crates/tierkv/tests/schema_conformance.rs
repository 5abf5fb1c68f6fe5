//! The schema API conformance suite (`tierkv_testkit::schema`) through the facade: `focus`
//! natively, the consolidated adapter over `dram`, `prism` and `hetermm` (and
//! `hetermm:hash`, whose scans must be `Unsupported`), the scattered adapter over `dram`;
//! schemas and rows survive a reopen.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use std::sync::Arc;

use tierkv::{Db, FieldDef, FieldSelection, SchemaStore};
use tierkv_core::Options;
use tierkv_core::schema::Scattered;
use tierkv_testkit::schema::{SchemaModelConfig, run_concurrent_field_updates, run_schema_model};

fn options(engine: &str) -> Options {
    common::small_options(engine)
}

const PRISM: &str = common::SMALL_PRISM;
const ENGINES: &[&str] = &["focus", "dram:btree", PRISM, "hetermm:btree"];

fn model(engine: &str, scans: bool) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let db = Db::open(dir.path(), options(engine)).unwrap();
    let store = db.schema_store().unwrap();
    let cfg = SchemaModelConfig {
        scans,
        ..SchemaModelConfig::default()
    };
    let n = run_schema_model(&*store, &cfg);
    assert_eq!(n > 0, scans, "{engine}: scans checked");
    db.close().unwrap();
}

#[test]
fn consolidated_matches_the_model_on_every_engine() {
    for e in ENGINES {
        model(e, true);
    }
}

#[test]
fn consolidated_over_an_unordered_index_refuses_scans() {
    model("hetermm:hash", false);
}

#[test]
fn scattered_matches_the_model() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let db = Db::open(dir.path(), options("dram:btree")).unwrap();
    let store = Scattered::open(db.store()).unwrap();
    assert!(run_schema_model(&store, &SchemaModelConfig::default()) > 0);
}

#[test]
fn concurrent_updates_of_different_fields_lose_nothing_on_every_engine() {
    for e in ENGINES {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let db = Db::open(dir.path(), options(e)).unwrap();
        let reads = run_concurrent_field_updates(db.schema_store().unwrap(), 4, 4, 150);
        assert!(reads > 0, "{e}");
    }
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let db = Db::open(dir.path(), options("dram:btree")).unwrap();
    let sct: Arc<dyn SchemaStore> = Arc::new(Scattered::open(db.store()).unwrap());
    run_concurrent_field_updates(sct, 4, 4, 100);
}

#[test]
fn schemas_and_rows_survive_a_reopen() {
    for e in ["focus", PRISM, "hetermm:btree"] {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let id;
        {
            let db = Db::open(dir.path(), options(e)).unwrap();
            let s = db.schema_store().unwrap();
            assert!(Arc::ptr_eq(&s, &db.schema_store().unwrap()));
            s.create_schema("a", &[FieldDef::fixed("x", 2)]).unwrap();
            id = s
                .create_schema("b", &[FieldDef::var("y", 20), FieldDef::fixed("z", 1)])
                .unwrap()
                .id;
            s.put_row(id, b"k", &[b"hello", b"!"]).unwrap();
            assert!(s.update_fields(id, b"k", &[(1, b"?")]).unwrap());
            db.close().unwrap();
        }
        let db = Db::open_existing(dir.path(), options(e)).unwrap();
        let s = db.schema_store().unwrap();
        assert_eq!(s.schema("b").unwrap().map(|s| s.id), Some(id));
        assert_eq!(s.schemas().unwrap().len(), 2);
        assert_eq!(
            s.get_fields(id, b"k", &FieldSelection::All).unwrap(),
            Some(vec![b"hello".to_vec(), b"?".to_vec()]),
            "{e}"
        );
    }
}

#[test]
fn focus_offers_its_native_schema_store() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let db = Db::open(dir.path(), options("focus")).unwrap();
    let s = db.schema_store().unwrap();
    let id = s.create_schema("t", &[FieldDef::fixed("a", 1)]).unwrap().id;
    s.put_row(id, b"k", &[b"x"]).unwrap();
    // Native rows are no 0xFF-prefixed values in the plain key space.
    assert!(db.scan(&b""[..].., 10).unwrap().is_empty());
    assert_eq!(db.stats().counters["focus_rows_put"], 1);
}
