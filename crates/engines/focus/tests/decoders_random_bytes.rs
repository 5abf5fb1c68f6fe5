//! Every decoder of bytes read back from pmem (`format::*`, and the schema codec of
//! tierkv-core) returns an error — never panics — on random bytes and on mutated valid
//! encodings; the same checks as the fuzz targets `focus_record` and `focus_fields`, run
//! for a fixed number of seeded inputs so that they are part of `cargo test`.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv_core::schema::codec;
use tierkv_core::{FieldDef, Schema};
use tierkv_focus::format::chunk::ChunkHeader;
use tierkv_focus::format::delta::{self, Delta};
use tierkv_focus::format::record::{self, RecordHeader, RecordKind};
use tierkv_focus::format::row::Layout;
use tierkv_focus::format::superblock::Superblock;

fn all_decoders(layout: &Layout, schema: &Schema, data: &[u8]) {
    let _ = ChunkHeader::decode(data, 0);
    let _ = Superblock::decode(data, 0);
    if let Ok(Some(h)) = RecordHeader::decode(data, 0) {
        let _ = record::verify(data, &h, 0);
        let _ = record::verify_header(data, &h, 0);
    }
    for id in 0..6 {
        let _ = layout.read_field(data, data.len() as u32, id);
    }
    let _ = layout.decode_all(data);
    if let Ok(d) = Delta::decode(layout, data) {
        for (id, at, len) in &d.fields {
            assert!(at + len <= data.len());
            assert!(d.value(data, *id).is_some());
        }
    }
    let _ = codec::split_row(schema, data);
    let _ = codec::decode_catalog(data);
    let _ = codec::decode_schema_bytes(data);
}

#[test]
fn decoders_survive_random_and_mutated_bytes() {
    let seed = common::seed("decoders_survive_random_and_mutated_bytes");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    // Fixed 3, var 20, var 5, fixed 1: both sides of the 8-byte inline limit.
    let kinds = [(true, 3), (false, 20), (false, 5), (true, 1)];
    let fields: Vec<FieldDef> = kinds
        .iter()
        .enumerate()
        .map(|(i, (fixed, n))| {
            let name = format!("f{i}");
            if *fixed {
                FieldDef::fixed(&name, *n)
            } else {
                FieldDef::var(&name, *n)
            }
        })
        .collect();
    let schema = Schema::new(1, "f", &fields).unwrap();
    let layout = Layout::new(&schema);
    let row = layout.encode(&[b"abc", b"0123456789abc", b"xy", b"z"]);
    let dl = delta::encode(&layout, &[(1, b"0123456789"), (3, b"q")]);
    let rec = RecordHeader {
        kind: RecordKind::Row,
        key_len: 3,
        body_len: row.len() as u32,
        seq: 5,
        schema: 1,
        epoch: 2,
        prev: 0,
        batch: 0,
    }
    .encode(b"key", &row);
    let member = RecordHeader {
        kind: RecordKind::Tombstone,
        key_len: 3,
        body_len: 0,
        seq: 9,
        schema: 0,
        epoch: 2,
        prev: 0,
        batch: 8,
    }
    .encode(b"key", b"");
    let commit = RecordHeader {
        kind: RecordKind::Commit,
        key_len: 0,
        body_len: 4,
        seq: 8,
        schema: 0,
        epoch: 2,
        prev: 0,
        batch: 0,
    }
    .encode(b"", &1u32.to_le_bytes());
    let catalog = codec::encode_catalog(&[std::sync::Arc::new(schema.clone())]);
    let valid: [&[u8]; 6] = [&row, &dl, &rec, &catalog, &member, &commit];
    for _ in 0..20_000 {
        let mut data = if rng.random_bool(0.5) {
            let mut v = vec![0u8; rng.random_range(0..200)];
            rng.fill_bytes(&mut v);
            v
        } else {
            valid[rng.random_range(0..valid.len())].to_vec()
        };
        for _ in 0..rng.random_range(0..4) {
            if data.is_empty() {
                break;
            }
            let i = rng.random_range(0..data.len());
            data[i] = rng.random();
        }
        if rng.random_bool(0.2) {
            data.truncate(rng.random_range(0..=data.len()));
        }
        all_decoders(&layout, &schema, &data);
    }
    // The valid encodings decode.
    assert_eq!(layout.decode_all(&row).unwrap()[1], b"0123456789abc");
    assert_eq!(Delta::decode(&layout, &dl).unwrap().fields.len(), 2);
    let h = RecordHeader::decode(&rec, 0).unwrap().unwrap();
    record::verify(&rec, &h, 0).unwrap();
    assert_eq!(codec::decode_catalog(&catalog).unwrap(), vec![schema]);
}
