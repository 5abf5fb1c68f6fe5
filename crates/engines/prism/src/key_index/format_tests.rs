//! Unit tests of the key index's codecs (`format.rs`): round trips, and every kind of
//! torn or garbage input the decoders must reject without panicking.

use proptest::prelude::*;
use tierkv_core::Error;

use super::format::*;

fn inline_entry(key: &[u8], value: u64) -> Entry {
    Entry {
        value,
        key: KeyRef::inline(key).unwrap(),
    }
}

fn node_bytes(fanout: usize, entries: &[(usize, Entry)]) -> Vec<u8> {
    let mut header = NodeHeader::new(fanout, 4096);
    let mut b = vec![0u8; node_size(fanout)];
    for (slot, e) in entries {
        header.bitmap |= 1 << slot;
        b[entry_offset(*slot)..entry_offset(*slot) + ENTRY_LEN].copy_from_slice(&e.encode());
    }
    b[..NODE_HEADER_LEN].copy_from_slice(&header.encode());
    b[NODE_ANCHOR..NODE_ANCHOR + ENTRY_LEN].copy_from_slice(&inline_entry(b"", 0).encode());
    b
}

fn is_corrupt<T: std::fmt::Debug>(r: tierkv_core::Result<T>) -> bool {
    matches!(r, Err(e) if e.is_corruption())
}

#[test]
fn node_size_is_line_aligned_and_fits_the_default_fanout_in_a_page() {
    for f in MIN_FANOUT..=MAX_FANOUT {
        assert_eq!(node_size(f) % LINE, 0);
        assert!(entry_offset(f) <= node_size(f));
    }
    assert!(node_size(MAX_FANOUT) <= 4096);
    assert_eq!(full_bitmap(64), u64::MAX);
    assert_eq!(full_bitmap(4), 0b1111);
}

#[test]
fn blob_classes_cover_every_long_key() {
    assert_eq!(blob_class(INLINE_KEY_CAP + 1), Some(0));
    assert_eq!(blob_class(BLOB_CLASSES[0] - BLOB_KEY), Some(0));
    assert_eq!(blob_class(BLOB_CLASSES[0] - BLOB_KEY + 1), Some(1));
    assert!(blob_class(MAX_KEY_LEN).is_some());
    assert_eq!(blob_class(BLOB_CLASSES[5]), None);
}

#[test]
fn decode_node_returns_live_entries_only() {
    let e1 = inline_entry(b"a", 1);
    let e2 = Entry {
        value: 2,
        key: KeyRef::Blob {
            len: 100,
            off: 8192,
        },
    };
    let b = node_bytes(8, &[(0, e1), (5, e2)]);
    let node = decode_node(&b, 64).unwrap();
    assert_eq!(node.entries, vec![(0, e1), (5, e2)]);
    assert_eq!(node.header.next, 4096);
    assert!(node.anchor.key.is_empty());
}

#[test]
fn decode_node_rejects_a_torn_entry_by_its_checksum() {
    let mut b = node_bytes(8, &[(2, inline_entry(b"abc", 7))]);
    b[entry_offset(2)] ^= 1; // the value's low byte
    assert!(matches!(
        decode_node(&b, 0),
        Err(Error::ChecksumMismatch { .. })
    ));
}

#[test]
fn decode_node_rejects_each_bad_header_field() {
    let good = node_bytes(8, &[]);
    let cases: [(&str, usize, u8); 5] = [
        ("magic", 16, b'X'),
        ("version", 20, 9),
        ("fanout 1", 22, 1),
        ("fanout 65", 22, 65),
        ("reserved", 30, 1),
    ];
    for (what, at, byte) in cases {
        let mut b = good.clone();
        b[at] = byte;
        let r = decode_node(&b, 0);
        assert!(r.is_err(), "{what}");
        if what == "version" {
            assert!(matches!(r, Err(Error::UnsupportedFormat { .. })));
        } else {
            assert!(is_corrupt(r), "{what}");
        }
    }
    let mut b = good.clone();
    b[NODE_BITMAP + 1] = 1; // bit 8, beyond fanout 8
    assert!(is_corrupt(decode_node(&b, 0)));
    let mut b = good.clone();
    b[NODE_NEXT] = 1; // misaligned next
    assert!(is_corrupt(decode_node(&b, 0)));
    assert!(is_corrupt(decode_node(&good[..node_size(8) - 1], 0)));
    assert!(is_corrupt(decode_node(&[], 0)));
}

#[test]
fn decode_node_rejects_an_anchor_with_a_value() {
    let mut b = node_bytes(4, &[]);
    b[NODE_ANCHOR..NODE_ANCHOR + ENTRY_LEN].copy_from_slice(&inline_entry(b"k", 3).encode());
    assert!(is_corrupt(decode_node(&b, 0)));
}

#[test]
fn entry_decoder_rejects_fields_a_writer_never_produces() {
    let good = inline_entry(b"key", 1).encode();
    let mut cases = Vec::new();
    let mut b = good;
    b[15] = 1; // reserved
    cases.push(("reserved", b));
    let mut b = good;
    b[14] = 2; // kind
    cases.push(("kind", b));
    let mut b = good;
    b[16 + 10] = b'z'; // byte past an inline key of 3
    cases.push(("padding", b));
    let mut b = good;
    b[12..14].copy_from_slice(&41u16.to_le_bytes()); // inline length past the area
    cases.push(("inline length", b));
    let mut b = good;
    b[12..14].copy_from_slice(&2000u16.to_le_bytes());
    cases.push(("length", b));
    let blob = Entry {
        value: 1,
        key: KeyRef::Blob { len: 50, off: 4096 },
    }
    .encode();
    let mut b = blob;
    b[12..14].copy_from_slice(&10u16.to_le_bytes()); // a short key in a blob
    cases.push(("short blob", b));
    let mut b = blob;
    b[16..24].copy_from_slice(&4097u64.to_le_bytes()); // misaligned blob
    cases.push(("misaligned blob", b));
    let mut b = blob;
    b[16..24].copy_from_slice(&0u64.to_le_bytes());
    cases.push(("null blob", b));
    for (what, bytes) in cases {
        assert!(is_corrupt(Entry::decode_unchecked(&bytes, 0)), "{what}");
    }
    assert!(is_corrupt(Entry::decode_unchecked(
        &good[..ENTRY_LEN - 1],
        0
    )));
}

#[test]
fn chunk_header_round_trips_and_locates_slots() {
    let h = ChunkHeader {
        kind: ChunkKind::Blobs(2),
        slot_size: 256,
        slot_count: 10,
        owner: 3,
    };
    let b = h.encode();
    assert_eq!(ChunkHeader::decode(&b, 0).unwrap(), h);
    let chunk = 1 << 20;
    assert_eq!(h.slot_index(chunk, h.slot_offset(chunk, 9)), Some(9));
    assert_eq!(h.slot_index(chunk, h.slot_offset(chunk, 9) + 8), None);
    assert_eq!(h.slot_index(chunk, h.slot_offset(chunk, 10)), None);
    assert_eq!(h.slot_index(chunk, chunk), None);
    let mut torn = b;
    torn[9] ^= 0xff;
    assert!(matches!(
        ChunkHeader::decode(&torn, 0),
        Err(Error::ChecksumMismatch { .. })
    ));
    assert!(is_corrupt(ChunkHeader::decode(&[0u8; CHUNK_HEADER_LEN], 0)));
    let odd = ChunkHeader {
        slot_size: 100,
        ..h
    };
    assert!(is_corrupt(ChunkHeader::decode(&odd.encode(), 0)));
}

#[test]
fn blob_decoder_checks_length_and_checksum() {
    let key = vec![b'q'; 300];
    let b = encode_blob(&key);
    assert_eq!(decode_blob(&b, 300, 0).unwrap(), &key[..]);
    assert!(is_corrupt(decode_blob(&b, 299, 0)));
    assert!(is_corrupt(decode_blob(&b[..100], 300, 0)));
    let mut flipped = b.clone();
    flipped[BLOB_KEY + 7] ^= 1;
    assert!(matches!(
        decode_blob(&flipped, 300, 0),
        Err(Error::ChecksumMismatch { .. })
    ));
}

fn key_ref() -> impl Strategy<Value = KeyRef> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..=INLINE_KEY_CAP)
            .prop_map(|k| KeyRef::inline(&k).unwrap()),
        (
            (INLINE_KEY_CAP as u16 + 1)..=(MAX_KEY_LEN as u16),
            1u64..(1 << 40)
        )
            .prop_map(|(len, off)| KeyRef::Blob { len, off: off * 8 }),
    ]
}

proptest! {
    #[test]
    fn entry_round_trips(value in any::<u64>(), key in key_ref()) {
        let e = Entry { value, key };
        prop_assert_eq!(Entry::decode(&e.encode(), 0).unwrap(), e);
    }

    #[test]
    fn node_header_round_trips(bits in any::<u64>(), next in 0u64..(1 << 40), fanout in MIN_FANOUT..=MAX_FANOUT, fps in any::<[u8; 32]>()) {
        let mut h = NodeHeader::new(fanout, next * 64);
        h.bitmap = bits & full_bitmap(fanout);
        h.fps[..32].copy_from_slice(&fps);
        prop_assert_eq!(NodeHeader::decode(&h.encode(), 0).unwrap(), h);
    }

    #[test]
    fn decoders_never_panic_on_garbage(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let _ = decode_node(&bytes, 0);
        let _ = Entry::decode(&bytes, 0);
        let _ = ChunkHeader::decode(&bytes, 0);
        let _ = decode_blob(&bytes, bytes.len().saturating_sub(BLOB_KEY), 0);
    }

    #[test]
    fn decode_node_survives_any_flipped_byte(at in 0usize..node_size(4), byte in any::<u8>()) {
        let e = Entry { value: 9, key: KeyRef::inline(b"some key").unwrap() };
        let mut b = node_bytes(4, &[(1, e), (3, e)]);
        b[at] = byte;
        // Either still valid (an unused byte, or a byte of a dead slot) or an error.
        if let Ok(node) = decode_node(&b, 0) {
            prop_assert!(node.entries.len() <= 4);
        }
    }
}
