//! The schema API conformance suite (`tierkv_testkit::schema`) on the native FOCUS store,
//! with small chunks (so appends roll over chunks) and a small restore point (so reads
//! walk chains and updates write restore points), and once more after a reopen.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use std::sync::Arc;

use tierkv_core::media::pmem::DurabilityMode;
use tierkv_core::{KvStore, SchemaStore};
use tierkv_testkit::schema::{SchemaModelConfig, run_concurrent_field_updates, run_schema_model};

#[test]
fn focus_matches_the_schema_model() {
    for extra in ["chunk_size=64KiB,restore_point=3", "swim=off", ""] {
        let dir = common::scratch_dir();
        let s = common::new_store(dir.path(), 32 << 20, DurabilityMode::Volatile, extra);
        assert!(
            run_schema_model(&*s, &SchemaModelConfig::default()) > 0,
            "{extra}"
        );
        let lines = s.check().unwrap();
        assert!(lines[0].contains("rows"), "{lines:?}");
    }
}

#[test]
fn concurrent_updates_of_different_fields_of_one_row_lose_nothing() {
    let dir = common::scratch_dir();
    let s = common::new_store(
        dir.path(),
        64 << 20,
        DurabilityMode::Volatile,
        "chunk_size=64KiB",
    );
    let reads = run_concurrent_field_updates(s.clone() as Arc<dyn SchemaStore>, 4, 4, 300);
    assert!(reads > 0);
    let st = s.stats();
    assert!(st.counters["focus_deltas_appended"] > 0);
    assert!(st.counters["focus_restore_points"] + st.counters["focus_merges"] > 0);
    s.check().unwrap();
}
