//! Recovery (FORMAT.md § Recovery): after a clean close or a drop, a reopened store holds
//! the same schemas, rows (with their delta chains and restore-point counters) and plain
//! keys, and keeps appending to its chunks; the plain-API model test of `tierkv-testkit`
//! passes before and after.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use std::sync::atomic::Ordering;

use tierkv_core::media::pmem::DurabilityMode;
use tierkv_core::{FieldDef, FieldSelection, KvStore, SchemaStore};
use tierkv_testkit::{ModelConfig, run_model};

#[test]
fn rows_chains_and_schemas_survive_a_reopen() {
    let dir = common::scratch_dir();
    let path = dir.path().join("pool");
    let extra = "chunk_size=64KiB,restore_point=4";
    let (id, mut want) = {
        let s = common::new_store(dir.path(), 16 << 20, DurabilityMode::Volatile, extra);
        s.create_schema("a", &[FieldDef::fixed("x", 1)]).unwrap();
        let id = s
            .create_schema("b", &[FieldDef::fixed("n", 8), FieldDef::var("s", 300)])
            .unwrap()
            .id;
        let mut want = std::collections::BTreeMap::new();
        for i in 0..400u64 {
            let k = format!("key{i:04}").into_bytes();
            let text = vec![b'a' + (i % 26) as u8; (i % 40) as usize * 7];
            s.put_row(id, &k, &[&i.to_le_bytes(), &text]).unwrap();
            want.insert(k, vec![i.to_le_bytes().to_vec(), text]);
        }
        for i in 0..400u64 {
            let k = format!("key{:04}", (i * 7) % 400).into_bytes();
            let n = (i * 1000).to_le_bytes();
            s.update_fields(id, &k, &[(0, &n)]).unwrap();
            want.get_mut(&k).unwrap()[0] = n.to_vec();
        }
        for i in (0..400u64).step_by(13) {
            let k = format!("key{i:04}").into_bytes();
            s.delete_row(id, &k).unwrap();
            want.remove(&k);
        }
        s.put(b"plain", b"value").unwrap();
        assert!(
            s.stats().counters["focus_clog_chunks_opened"] > 1,
            "chunks rolled over"
        );
        s.close().unwrap();
        (id, want)
    };
    let s = common::reopen(&path, extra);
    assert!(s.stats().counters["focus_recovered_records"] > 800);
    assert_eq!(s.schema("b").unwrap().map(|x| x.id), Some(id));
    assert_eq!(s.schemas().unwrap().len(), 2);
    assert_eq!(s.get(b"plain").unwrap().as_deref(), Some(&b"value"[..]));
    let got = s.scan_fields(id, b"", &FieldSelection::All, 1000).unwrap();
    let got: std::collections::BTreeMap<_, _> = got.into_iter().collect();
    assert_eq!(got, want);
    // Restore-point counters come back with the chains.
    let k = format!("key{:04}", 7).into_bytes();
    let deltas = s.entry(id, &k).unwrap().deltas.load(Ordering::Relaxed);
    assert!(
        deltas >= 1,
        "key0007 was updated once since its put: {deltas}"
    );
    s.check().unwrap();
    // And the store goes on.
    let extra_key = b"after".to_vec();
    s.put_row(id, &extra_key, &[&[1; 8], b"x"]).unwrap();
    want.insert(extra_key, vec![vec![1; 8], b"x".to_vec()]);
    s.update_fields(id, b"key0001", &[(1, b"changed")]).unwrap();
    want.get_mut(&b"key0001"[..]).unwrap()[1] = b"changed".to_vec();
    s.close().unwrap();
    drop(s);
    let s = common::reopen(&path, extra);
    let got: std::collections::BTreeMap<_, _> = s
        .scan_fields(id, b"", &FieldSelection::All, 1000)
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(got, want);
    s.check().unwrap();
}

#[test]
fn plain_api_passes_the_model_test_across_a_reopen() {
    let dir = common::scratch_dir();
    let path = dir.path().join("pool");
    let cfg = ModelConfig {
        threads: 3,
        ops_per_thread: 2_000,
        shared_ops_per_thread: 500,
        ..ModelConfig::default()
    };
    let keys = {
        let s = common::new_store(
            dir.path(),
            64 << 20,
            DurabilityMode::Volatile,
            "chunk_size=256KiB",
        );
        let r = run_model(s.clone(), &cfg);
        s.check().unwrap();
        s.close().unwrap();
        r.final_keys
    };
    let s = common::reopen(&path, "");
    assert_eq!(s.scan(b"", usize::MAX).unwrap().len(), keys);
    s.check().unwrap();
}
