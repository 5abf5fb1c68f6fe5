//! Fuzz target: PrismDB's flash decoders (`engines/prismdb/src/table/format.rs`,
//! `table/bloom.rs`, `manifest.rs`): table footers, block indexes, data blocks, Bloom
//! filters and manifests must return `None` on any bytes, never panic; a block's spans
//! (`block_spans`, what compactions merge from) agree with its decoding; a manifest whose
//! checksum is made valid must decode into sorted, non-overlapping tables; a table built
//! from entries must decode back to them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tierkv_core::format::checksum::masked_crc32c;
use tierkv_prismdb::manifest::{ManifestData, parse_name};
use tierkv_prismdb::table::bloom::{Bloom, hash64};
use tierkv_prismdb::table::format::{
    block_spans, build_table, decode_block, decode_footer, decode_index,
};

fuzz_target!(|data: &[u8]| {
    let _ = decode_footer(data);
    let _ = decode_index(data);
    // The spans of a block are exactly what decoding it gives (both None when malformed).
    let spans = block_spans(data).map(|s| {
        s.into_iter()
            .map(|(k, kl, vl)| (data[k..k + kl].to_vec(), data[k + kl..k + kl + vl].to_vec()))
            .collect::<Vec<_>>()
    });
    assert_eq!(spans, decode_block(data));
    if let Some(b) = Bloom::decode(data) {
        let _ = b.may_contain(hash64(data));
    }
    let _ = ManifestData::decode(data);
    let _ = parse_name(&String::from_utf8_lossy(data));
    // A manifest body with a valid checksum.
    let mut m = data.to_vec();
    let len = (m.len() + 4).div_ceil(4096).max(1) * 4096;
    m.resize(len - 4, 0);
    let crc = masked_crc32c(&m);
    m.extend_from_slice(&crc.to_le_bytes());
    if let Some(d) = ManifestData::decode(&m) {
        for w in d.tables.windows(2) {
            assert!(w[0].max_key < w[1].min_key);
        }
        assert_eq!(ManifestData::decode(&d.encode()), Some(d));
    }
    // A table over entries cut from the input (sorted, unique keys).
    let mut entries: Vec<(Vec<u8>, Vec<u8>)> = data
        .chunks(9)
        .filter(|c| c.len() > 1)
        .map(|c| (c[..c.len() / 2].to_vec(), c[c.len() / 2..].to_vec()))
        .filter(|(k, _)| !k.is_empty())
        .collect();
    entries.sort();
    entries.dedup_by(|a, b| a.0 == b.0);
    if !entries.is_empty() {
        let (img, footer) = build_table(&entries, 10).expect("memory for the image");
        assert_eq!(decode_footer(&img[img.len() - 4096..]), Some(footer.clone()));
        let (io, il, _) = footer.index;
        let index = decode_index(&img[io as usize..io as usize + il as usize]).expect("index");
        let mut all = Vec::new();
        for h in &index {
            all.extend(decode_block(&img[h.offset as usize..h.offset as usize + h.len as usize]).expect("block"));
        }
        assert_eq!(all, entries);
    }
});
