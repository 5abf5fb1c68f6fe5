//! Fuzz target: PRISM's salvage walk (`tierkv_prism::salvage::salvage_sources`) must
//! finish without panicking on any pool and Value Storage bytes, yield keys in strictly
//! increasing order, and, on an undamaged image, yield exactly the records written.
//!
//! Random bytes never pass the superblock's checksum, so each input builds a small valid
//! image first (superblock, allocator header, one HSIT segment, one key-index leaf whose
//! keys come from the input, their PWB records) and then applies the rest of the input as
//! patches `(offset u32, length u8, bytes)` to the pool or the Value Storage image: the
//! walk meets damaged links, entries, tags, pointers and records everywhere.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tierkv_core::media::pmem::ROOTS_OFF;
use tierkv_core::media::pmem::alloc::{ChunkState, RegionLayout};
use tierkv_core::CollectSink;
use tierkv_prism::hsit::HSIT_CHUNK_TAG;
use tierkv_prism::hsit::entry::{ForwardPointer, Location, key_tag};
use tierkv_prism::key_index::format::{
    ChunkHeader, ChunkKind, Entry, KeyRef, NODE_ANCHOR, NodeHeader, entry_offset, node_size,
};
use tierkv_prism::pwb::record::{encode_header, footprint};
use tierkv_prism::salvage::salvage_sources;
use tierkv_prism::salvage::source::Source;
use tierkv_prism::superblock::{PlanInput, plan};

const POOL: usize = 2 << 20;
const CHUNK: u64 = 64 << 10;
const FANOUT: usize = 64;

fn put(img: &mut [u8], at: u64, b: &[u8]) {
    img[at as usize..at as usize + b.len()].copy_from_slice(b);
}

/// A valid image holding up to 64 keys taken from `data`; returns it and the records.
fn image(data: &[u8]) -> (Vec<u8>, Vec<(Vec<u8>, Vec<u8>)>, usize) {
    let mut img = vec![0u8; POOL];
    let (sb_off, sb) = plan(&PlanInput {
        data_start: 4096,
        pool_len: POOL as u64,
        pwb_count: 1,
        pwb_size: CHUNK,
        alloc_chunk: CHUNK,
        min_alloc_len: 16 * CHUNK,
        chunk_size: CHUNK as u32,
        flash_count: 1,
    })
    .expect("the planned layout fits");
    put(&mut img, sb_off, &sb.encode());
    put(&mut img, ROOTS_OFF, &sb_off.to_le_bytes());
    let alloc = RegionLayout::plan(sb.alloc_off, sb.alloc_len, CHUNK).expect("region fits");
    put(&mut img, sb.alloc_off, &alloc.encode());
    // Chunk 0: the HSIT segment; chunk 1: the key-index node chunk.
    let seg = alloc.chunk_off(0);
    put(&mut img, alloc.state_off(0), &ChunkState::Run { tag: HSIT_CHUNK_TAG, len: 1 }.encode().to_le_bytes());
    put(&mut img, sb.hsit_dir_off, &seg.to_le_bytes());
    let nodes = alloc.chunk_off(1);
    let size = node_size(FANOUT);
    let ch = ChunkHeader { kind: ChunkKind::Nodes, slot_size: size as u32, slot_count: ((CHUNK - 64) / size as u64) as u32, owner: 1 };
    put(&mut img, nodes, &ch.encode());
    let leaf = ch.slot_offset(nodes, 0);
    put(&mut img, ROOTS_OFF + 8, &leaf.to_le_bytes());
    // Keys: runs of the input split at 0 bytes (1..=40 bytes, distinct), value = key reversed.
    let mut keys: Vec<Vec<u8>> = Vec::new();
    let mut used = 0;
    for part in data.split(|&b| b == 0) {
        used += part.len() + 1;
        if keys.len() == FANOUT {
            break;
        }
        if (1..=40).contains(&part.len()) && !keys.iter().any(|k| k == part) {
            keys.push(part.to_vec());
        }
    }
    let mut header = NodeHeader::new(FANOUT, 0);
    let mut pos = sb.pwb_ring_off;
    let mut records = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        let value: Vec<u8> = k.iter().rev().copied().collect();
        let slot = i as u64;
        put(&mut img, pos, &encode_header(slot, &value));
        put(&mut img, pos + 16, &value);
        let ptr = ForwardPointer::to(Location::Pwb(pos)).expect("fits").raw();
        put(&mut img, seg + 16 * slot, &ptr.to_le_bytes());
        put(&mut img, seg + 16 * slot + 8, &key_tag(k).to_le_bytes());
        pos += footprint(value.len());
        let e = Entry { value: slot, key: KeyRef::inline(k).expect("short key") };
        put(&mut img, leaf + entry_offset(i) as u64, &e.encode());
        header.bitmap |= 1 << i;
        records.push((k.clone(), value));
    }
    let anchor = Entry { value: 0, key: KeyRef::inline(&[]).expect("empty key") };
    put(&mut img, leaf + NODE_ANCHOR as u64, &anchor.encode());
    put(&mut img, leaf, &header.encode());
    records.sort();
    (img, records, used.min(data.len()))
}

fuzz_target!(|data: &[u8]| {
    let (mut pool, records, used) = image(data);
    let mut flash = vec![0u8; 8192 + 2 * CHUNK as usize];
    let mut rest = &data[used..];
    let mut patched = false;
    while let Some((h, tail)) = rest.split_first_chunk::<5>() {
        let target = if h[0] & 1 == 0 { &mut pool } else { &mut flash };
        let at = u32::from_le_bytes([h[1], h[2], h[3], h[4] & 0x7f]) as usize % target.len();
        let n = (usize::from(h[0] >> 1)).min(tail.len()).min(target.len() - at);
        target[at..at + n].copy_from_slice(&tail[..n]);
        patched |= n > 0;
        rest = &tail[n..];
    }
    let flash_src: &dyn Source = &flash;
    let mut sink = CollectSink::default();
    let result = salvage_sources(&pool, &[Some(flash_src)], None, &mut sink);
    assert!(sink.records.windows(2).all(|w| w[0].0 < w[1].0), "keys out of order");
    if !patched {
        result.expect("an undamaged image salvages");
        assert_eq!(sink.records, records);
        assert!(sink.skipped.is_empty(), "{:?}", sink.skipped);
    }
});
