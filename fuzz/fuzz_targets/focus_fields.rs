//! Fuzz target: FOCUS's field decoders — a row body through its layout
//! (`format::row::Layout::read_field`, `decode_all`) and a delta body
//! (`format::delta::Delta::decode`) — and the schema codec of tierkv-core
//! (`schema::codec`: rows, catalog) return an error, never a panic or an out-of-bounds
//! read, on any bytes; a row encoded through the layout decodes back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tierkv_core::schema::codec;
use tierkv_core::{FieldDef, Schema};
use tierkv_focus::format::delta::Delta;
use tierkv_focus::format::row::Layout;

fuzz_target!(|data: &[u8]| {
    let schema = Schema::new(
        1,
        "f",
        &[
            FieldDef::fixed("a", 3),
            FieldDef::var("b", 20),
            FieldDef::var("c", 5),
            FieldDef::fixed("d", 1),
        ],
    )
    .expect("schema");
    let layout = Layout::new(&schema);
    for id in 0..5u16 {
        let _ = layout.read_field(data, data.len() as u32, id);
    }
    let _ = layout.decode_all(data);
    if let Ok(d) = Delta::decode(&layout, data) {
        for (id, at, len) in &d.fields {
            assert!(at + len <= data.len());
            assert!(d.value(data, *id).is_some());
        }
    }
    let _ = codec::split_row(&schema, data);
    let _ = codec::decode_catalog(data);
    let _ = codec::decode_schema_bytes(data);
    if data.len() >= 4 {
        let b = &data[..data.len().min(20)];
        let c = &data[..data.len().min(5)];
        let values: [&[u8]; 4] = [&[1, 2, 3], b, c, &[9]];
        let body = layout.encode(&values);
        let back = layout.decode_all(&body).expect("an encoded row decodes");
        assert_eq!(back, values.iter().map(|v| v.to_vec()).collect::<Vec<_>>());
    }
});
