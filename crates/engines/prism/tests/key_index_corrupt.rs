//! Bad input: a key index whose pmem bytes were damaged is refused by `open` with a
//! corruption error naming the place — never a panic, never a wrong answer. One case per
//! kind of damage: node header fields, entry and blob checksums, list structure (a next
//! pointer outside the index's chunks, a cycle), anchor order, keys outside their leaf,
//! duplicate keys, a root word pointing at garbage.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod key_index_support;

use key_index_support::{Media, ROOT, key};
use tierkv_core::{DurabilityMode, Error};
use tierkv_prism::key_index::PersistentKeyIndex;
use tierkv_prism::key_index::format::{
    BLOB_KEY, ENTRY_LEN, Entry, KeyRef, NODE_ANCHOR, NODE_BITMAP, NODE_NEXT, decode_node,
    entry_offset, node_size,
};

const FANOUT: usize = 4;

/// A fanout-4 index of 40 keys (some long), dropped; returns the media.
fn damaged_later() -> Media {
    let media = Media::new(4 << 20, DurabilityMode::Volatile);
    let index = media.create_index(FANOUT);
    for id in 0..40 {
        index
            .insert_if_absent(&key(id), u64::from(id))
            .unwrap()
            .unwrap();
    }
    drop(index);
    media
}

/// The offsets of the leaves, in list order.
fn leaves(media: &Media) -> Vec<u64> {
    let mut out = Vec::new();
    let mut off = media.pool.root(ROOT).unwrap();
    while off != 0 {
        out.push(off);
        off = media.pool.load_u64(off + NODE_NEXT as u64).unwrap();
    }
    out
}

fn decoded(media: &Media, leaf: u64) -> tierkv_prism::key_index::format::DecodedNode {
    decode_node(media.pool.read(leaf, node_size(FANOUT)).unwrap(), leaf).unwrap()
}

fn open_err(media: &Media) -> Error {
    match PersistentKeyIndex::open(media.pool.clone(), media.alloc.clone(), ROOT) {
        Ok(_) => panic!("open accepted a damaged index"),
        Err(e) => e,
    }
}

fn assert_corruption(media: &Media, what: &str) {
    let e = open_err(media);
    assert!(e.is_corruption(), "{what}: {e}");
    assert!(e.to_string().contains("pmem"), "{what}: {e}");
}

#[test]
fn undamaged_index_opens() {
    let media = damaged_later();
    let index = PersistentKeyIndex::open(media.pool.clone(), media.alloc.clone(), ROOT).unwrap();
    assert_eq!(index.len(), 40);
    media.assert_checks_pass(&index, "undamaged");
}

#[test]
fn bad_node_magic_is_corruption() {
    let media = damaged_later();
    let leaf = leaves(&media)[1];
    // Overwrite the node's magic with bytes that are no node's magic.
    media
        .pool
        .write(leaf + 16, &[0xde, 0xad, 0xbe, 0xef])
        .unwrap();
    assert_corruption(&media, "magic");
}

#[test]
fn newer_node_version_is_unsupported_format() {
    let media = damaged_later();
    let leaf = leaves(&media)[0];
    media.pool.write(leaf + 20, &[2, 0]).unwrap();
    assert!(matches!(open_err(&media), Error::UnsupportedFormat { .. }));
}

#[test]
fn bitmap_beyond_the_fanout_is_corruption() {
    let media = damaged_later();
    let leaf = leaves(&media)[2];
    let bitmap = media.pool.load_u64(leaf + NODE_BITMAP as u64).unwrap();
    media
        .pool
        .store_u64(leaf + NODE_BITMAP as u64, bitmap | 1 << FANOUT)
        .unwrap();
    assert_corruption(&media, "bitmap");
}

#[test]
fn torn_live_entry_fails_its_checksum() {
    let media = damaged_later();
    let leaf = leaves(&media)[1];
    let (slot, _) = decoded(&media, leaf).entries[0];
    let at = leaf + entry_offset(slot) as u64;
    media.pool.write(at, &[0xee]).unwrap();
    assert!(matches!(open_err(&media), Error::ChecksumMismatch { .. }));
}

#[test]
fn damaged_key_blob_fails_its_checksum() {
    let media = damaged_later();
    let blob = leaves(&media)
        .into_iter()
        .flat_map(|leaf| decoded(&media, leaf).entries)
        .find_map(|(_, e)| e.key.blob())
        .expect("some key is long");
    media.pool.write(blob + BLOB_KEY as u64 + 3, b"!").unwrap();
    assert!(matches!(open_err(&media), Error::ChecksumMismatch { .. }));
}

#[test]
fn next_pointer_outside_the_index_chunks_is_corruption() {
    let media = damaged_later();
    let list = leaves(&media);
    let (leaf, last) = (list[0], *list.last().unwrap());
    media
        .pool
        .store_u64(leaf + NODE_NEXT as u64, media.pool.data_start())
        .unwrap();
    assert_corruption(&media, "next outside");
    media
        .pool
        .store_u64(leaf + NODE_NEXT as u64, last + 64)
        .unwrap();
    assert_corruption(&media, "next inside a slot");
}

#[test]
fn cycle_in_the_leaf_list_is_corruption() {
    let media = damaged_later();
    let list = leaves(&media);
    let last = *list.last().unwrap();
    media
        .pool
        .store_u64(last + NODE_NEXT as u64, list[1])
        .unwrap();
    assert_corruption(&media, "cycle");
}

#[test]
fn root_word_pointing_at_garbage_is_corruption() {
    let media = damaged_later();
    media.pool.set_root(ROOT, media.pool.data_start()).unwrap();
    assert_corruption(&media, "root");
}

/// Rewrites entry `slot` of `leaf` (or its anchor, for `None`) with a valid checksum.
fn rewrite(media: &Media, leaf: u64, slot: Option<usize>, value: u64, key: &[u8]) {
    let at = leaf + slot.map_or(NODE_ANCHOR, entry_offset) as u64;
    let entry = Entry {
        value,
        key: KeyRef::inline(key).unwrap(),
    };
    let bytes = entry.encode();
    assert_eq!(bytes.len(), ENTRY_LEN);
    media.pool.write(at, &bytes).unwrap();
}

#[test]
fn anchors_out_of_order_are_corruption() {
    let media = damaged_later();
    let list = leaves(&media);
    rewrite(&media, list[2], None, 0, b"\x00");
    assert_corruption(&media, "anchor order");
}

#[test]
fn key_below_its_leaf_anchor_is_corruption() {
    let media = damaged_later();
    let leaf = leaves(&media)[2];
    let (slot, _) = decoded(&media, leaf).entries[0];
    rewrite(&media, leaf, Some(slot), 1, b"\x01");
    assert_corruption(&media, "key below anchor");
}

#[test]
fn duplicate_key_in_a_leaf_is_corruption() {
    let media = damaged_later();
    let leaf = leaves(&media)[1];
    let node = decoded(&media, leaf);
    let (s0, e0) = node.entries[0];
    let (s1, _) = node.entries[1];
    let bytes = media
        .pool
        .read(leaf + entry_offset(s0) as u64, ENTRY_LEN)
        .unwrap()
        .to_vec();
    media
        .pool
        .write(leaf + entry_offset(s1) as u64, &bytes)
        .unwrap();
    assert!(!e0.key.is_empty());
    assert_corruption(&media, "duplicate");
}
