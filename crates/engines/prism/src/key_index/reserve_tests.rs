//! Unit tests of the room reserved for a batch's inserts (`reserve.rs`, issue 24): after
//! `reserve_inserts`, the allocator is emptied and the inserts run in adversarial orders;
//! none may be refused, and the slots they take (measured on the slot heap, at their peak)
//! must stay within the room computed for them. Also the figure the bound gives for the
//! batch that the first reservation refused (10,000 keys, three blob classes in use).

use rand::SeedableRng;
use rand::seq::SliceRandom;
use tierkv_core::Error;
use tierkv_core::media::pmem::PmemAllocator;

use super::format::BLOB_CLASSES;
use super::reserve::{InsertRoom, splits_bound};
use super::tests::{Fixture, fixture_of};
use super::*;

const CLASSES: usize = BLOB_CLASSES.len();
/// Kinds of slots: nodes, then each blob class.
const KINDS: usize = 1 + CLASSES;

/// Takes every free allocator chunk (so that nothing more can be formatted).
fn exhaust(alloc: &PmemAllocator) -> usize {
    let mut taken = 0;
    while alloc.alloc_chunk(u32::from_le_bytes(*b"FILL")).is_ok() {
        taken += 1;
    }
    taken
}

/// Key lengths cycling over an inline key and four blob classes (0, 1, 2 and 4).
const MIXED: [usize; 5] = [16, 50, 100, 200, 900];

/// Key number `i` of `len` bytes: the number first, so that keys of every length
/// interleave in key order (and long keys become split keys as often as short ones).
fn key_of(prefix: &str, i: usize, len: usize) -> Vec<u8> {
    let mut k = format!("{prefix}{i:07}.").into_bytes();
    let len = len.max(k.len());
    k.resize(len, b'x');
    k
}

fn mixed(prefix: &str, numbers: impl Iterator<Item = usize>) -> Vec<Vec<u8>> {
    numbers
        .map(|i| key_of(prefix, i, MIXED[i % MIXED.len()]))
        .collect()
}

fn insert_all(idx: &PersistentKeyIndex, keys: &[Vec<u8>]) {
    for (i, k) in keys.iter().enumerate() {
        idx.insert_if_absent(k, 1_000_000 + i as u64)
            .unwrap()
            .unwrap();
    }
}

/// Slots of each kind taken since `base` (node slots, then per blob class).
fn taken_since(idx: &PersistentKeyIndex, base: &(usize, [usize; CLASSES])) -> [usize; KINDS] {
    let (nodes, blobs) = idx.heap.used_slots();
    let mut taken = [0; KINDS];
    taken[0] = nodes - base.0;
    for c in 0..CLASSES {
        taken[1 + c] = blobs[c].saturating_sub(base.1[c]);
    }
    taken
}

/// Reserves room for `keys`, takes every free allocator chunk, then inserts `keys` in
/// order, removing one of `removes` (present keys) after each insert while any is left.
/// No insert may be refused, the index must check clean and hold every key, and the slots
/// taken, at their peak, must stay within the room. Returns the room and that peak.
fn reserve_then_insert(
    f: &Fixture,
    idx: &PersistentKeyIndex,
    keys: &[Vec<u8>],
    removes: &[Vec<u8>],
) -> (InsertRoom, [usize; KINDS]) {
    let room = idx
        .room_for_inserts(keys.iter().map(Vec::as_slice))
        .unwrap();
    idx.reserve_inserts(keys.iter().map(Vec::as_slice)).unwrap();
    exhaust(&f.alloc);
    let base = idx.heap.used_slots();
    let mut peak = [0; KINDS];
    let mut removes = removes.iter();
    for (i, k) in keys.iter().enumerate() {
        idx.insert_if_absent(k, i as u64)
            .unwrap_or_else(|e| panic!("insert {i} of {} after the reservation: {e}", keys.len()))
            .unwrap();
        if let Some(r) = removes.next() {
            assert!(idx.remove(r).unwrap().is_some());
        }
        for (p, t) in peak.iter_mut().zip(taken_since(idx, &base)) {
            *p = (*p).max(t);
        }
    }
    let mut allowed = [0; KINDS];
    allowed[0] = room.nodes;
    allowed[1..].copy_from_slice(&room.blobs);
    for kind in 0..KINDS {
        assert!(
            peak[kind] <= allowed[kind],
            "slot kind {kind} (0 = nodes, 1.. = blob classes): took {} > room {}; room {room:?}",
            peak[kind],
            allowed[kind]
        );
    }
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(idx.get(k).unwrap(), Some(i as u64));
    }
    assert_eq!(idx.check().unwrap(), Vec::<String>::new());
    (room, peak)
}

#[test]
fn reserved_room_covers_ascending_descending_and_shuffled_inserts_at_every_fanout() {
    for fanout in [2, 3, 5, 8, 64] {
        for order in ["ascending", "descending", "shuffled"] {
            let f = fixture_of(8 << 20);
            let idx = f.create(fanout);
            // Existing keys 3i and new keys 3i+1, 3i+2: the new keys fall into every leaf.
            insert_all(&idx, &mixed("k", (0..90).map(|i| 3 * i)));
            let mut keys = mixed("k", (0..270).filter(|i| i % 3 != 0));
            keys.extend(mixed("k", 270..420));
            match order {
                "descending" => keys.reverse(),
                "shuffled" => {
                    let seed = fanout as u64;
                    keys.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(seed));
                }
                _ => {}
            }
            let (room, peak) = reserve_then_insert(&f, &idx, &keys, &[]);
            println!("fanout {fanout}, {order}: room {room:?}, peak {peak:?}");
            assert!(peak[0] > 0, "fanout {fanout}, {order}: no split happened");
        }
    }
}

#[test]
fn reserved_room_covers_every_key_going_into_one_leaf() {
    for order in ["ascending", "descending", "shuffled"] {
        let f = fixture_of(8 << 20);
        let idx = f.create(8);
        insert_all(&idx, &mixed("a", 0..40));
        insert_all(&idx, &mixed("c", 0..40));
        // Every "b" key falls between the last "a" key and the first "c" key: one leaf.
        let mut keys = mixed("b", 0..500);
        match order {
            "descending" => keys.reverse(),
            "shuffled" => keys.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(7)),
            _ => {}
        }
        let leaves = idx.stats().leaves;
        let (room, peak) = reserve_then_insert(&f, &idx, &keys, &[]);
        println!("one leaf, {order}: room {room:?}, peak {peak:?}");
        // One target leaf: at most 1 + 500/4 splits, whatever the leaf's free entries.
        assert!(room.nodes <= 1 + 500 / 4, "{room:?}");
        assert!(idx.stats().leaves > leaves);
    }
}

#[test]
fn reserved_room_covers_short_keys_spread_over_leaves_of_long_keys_with_removes() {
    let f = fixture_of(16 << 20);
    let idx = f.create(8);
    // Existing keys are long only (class 2 and 4), so split anchors of those classes come
    // from keys already in the index, not from the inserted ones.
    let mut existing: Vec<Vec<u8>> = (0..600)
        .map(|i| key_of("s", 4 * i, [200, 900][i % 2]))
        .collect();
    existing.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(11));
    insert_all(&idx, &existing);
    let leaves = idx.stats().leaves;
    // Three short keys between each pair of existing keys, round-robin over the leaves.
    let keys: Vec<Vec<u8>> = (1..4)
        .flat_map(|j| (0..600).map(move |i| key_of("s", 4 * i + j, 12)))
        .collect();
    let (room, peak) = reserve_then_insert(&f, &idx, &keys, &[]);
    println!("spread over {leaves} leaves: room {room:?}, peak {peak:?}");
    assert!(
        peak[1 + 2] > 0 && peak[1 + 4] > 0,
        "no long split key: {peak:?}"
    );
    assert_eq!(
        room.blobs[0] + room.blobs[1] + room.blobs[3] + room.blobs[5],
        0,
        "{room:?}"
    );
    // The same with every fifth existing key removed along the way.
    let f = fixture_of(16 << 20);
    let idx = f.create(8);
    insert_all(&idx, &existing);
    let removes: Vec<Vec<u8>> = existing.iter().step_by(5).cloned().collect();
    reserve_then_insert(&f, &idx, &keys, &removes);
}

#[test]
fn reserving_10_000_keys_with_three_blob_classes_in_use_takes_about_n_over_32_nodes() {
    let f = fixture_of(32 << 20);
    let idx = f.create(MAX_FANOUT);
    // Keys of blob classes 0, 1 and 2 (and inline ones) already in the index.
    let lens = [16, 50, 100, 200];
    let existing: Vec<Vec<u8>> = (0..400).map(|i| key_of("b", 25 * i, lens[i % 4])).collect();
    insert_all(&idx, &existing);
    let leaves = idx.stats().leaves;
    // 10,000 new keys interleaved with them, a quarter of each length.
    let keys: Vec<Vec<u8>> = (0..10_000)
        .map(|i| key_of("b", i + i / 24 + 1, lens[i % 4]))
        .collect();
    assert!(keys.iter().all(|k| !existing.contains(k)));
    let long = keys.iter().filter(|k| k.len() > 40).count();
    let room = idx
        .room_for_inserts(keys.iter().map(Vec::as_slice))
        .unwrap();
    // The bound: a target leaf with k keys and r free entries splits at most
    // 1 + (k - r) / 32 times, so all together at most leaves + 10,000 / 32 splits, and
    // each split copies at most one anchor into each of the three classes in use.
    let splits = leaves + 10_000 / (MAX_FANOUT / 2);
    let first_reservation = 10_000 + long + 3 * 10_000;
    println!(
        "10,000 keys over {leaves} leaves: room {room:?} = {} slots (the first \
         reservation: {first_reservation})",
        room.slots()
    );
    assert!(room.nodes <= splits, "{room:?}");
    assert_eq!(room.blobs[3..], [0, 0, 0], "{room:?}");
    assert!(room.slots() <= long + 4 * splits, "{room:?}");
    // Beyond the key blobs (needed either way), under a twentieth of the first reservation.
    assert!(
        (room.slots() - long) * 20 < first_reservation - long,
        "{room:?}"
    );
    let (_, peak) = reserve_then_insert(&f, &idx, &keys, &[]);
    println!("peak slots taken {peak:?}");
}

#[test]
fn a_long_key_is_copied_to_an_anchor_at_most_once() {
    for descending in [false, true] {
        let f = fixture_of(4 << 20);
        let idx = f.create(4);
        // One leaf: two short keys and one long key of class 3 (a 512-byte blob slot).
        let existing = vec![key_of("k", 0, 12), key_of("k", 1, 12), key_of("k", 2, 400)];
        insert_all(&idx, &existing);
        // 198 short keys after it: the first split moves the long key up and copies it
        // into the new leaf's anchor; after that it is the smallest key of its leaf, which
        // no split moves, so it is never a split key again.
        let mut keys: Vec<Vec<u8>> = (3..201).map(|i| key_of("k", i, 12)).collect();
        if descending {
            keys.reverse();
        }
        let (room, peak) = reserve_then_insert(&f, &idx, &keys, &[]);
        assert_eq!(room.nodes, splits_bound(198, 1, 2));
        assert_eq!(room.blobs, [0, 0, 0, 1, 0, 0], "descending {descending}");
        assert_eq!(peak[1 + 3], 1, "descending {descending}: {peak:?}");
        assert!(peak[0] > 50, "descending {descending}: {peak:?}");
    }
}

#[test]
fn reserved_room_covers_random_batches_with_removes() {
    use rand::Rng;
    for seed in 0..16u64 {
        println!("seed {seed}");
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let f = fixture_of(8 << 20);
        let idx = f.create(rng.random_range(MIN_FANOUT..=12));
        let mut numbers: Vec<usize> = (0..2_000).collect();
        numbers.shuffle(&mut rng);
        let existing_n = rng.random_range(0..200);
        let new_n = rng.random_range(1..400);
        let mut random_key = |i: usize| key_of("r", i, MIXED[rng.random_range(0..MIXED.len())]);
        let existing: Vec<Vec<u8>> = numbers[..existing_n]
            .iter()
            .map(|&i| random_key(i))
            .collect();
        let keys: Vec<Vec<u8>> = numbers[existing_n..existing_n + new_n]
            .iter()
            .map(|&i| random_key(i))
            .collect();
        insert_all(&idx, &existing);
        let removes: Vec<Vec<u8>> = existing.iter().step_by(3).cloned().collect();
        reserve_then_insert(&f, &idx, &keys, &removes);
    }
}

#[test]
fn split_bound_follows_the_free_entries_of_the_target_leaf() {
    // No split while the leaf has a free entry per insert; then one, and one more per
    // `half` inserts beyond the free entries.
    assert_eq!(splits_bound(0, 0, 32), 0);
    assert_eq!(splits_bound(10, 10, 32), 0);
    assert_eq!(splits_bound(11, 10, 32), 1);
    assert_eq!(splits_bound(10 + 32, 10, 32), 2);
    assert_eq!(splits_bound(10_000, 0, 32), 1 + 10_000 / 32);
    assert_eq!(splits_bound(5, 0, 1), 6);
}

#[test]
fn reserved_inserts_succeed_on_an_exhausted_allocator() {
    let f = fixture_of(4 << 20);
    let idx = f.create(8);
    // Long keys (blobs) already in the index, so split anchors may need blob slots.
    for i in 0..20u64 {
        let k = format!("{}{i:04}", "L".repeat(50));
        idx.insert_if_absent(k.as_bytes(), i).unwrap().unwrap();
    }
    let keys: Vec<Vec<u8>> = (0..300u64)
        .map(|i| {
            if i % 3 == 0 {
                format!("{}{i:04}", "M".repeat(100)).into_bytes()
            } else {
                format!("k{i:06}").into_bytes()
            }
        })
        .collect();
    reserve_then_insert(&f, &idx, &keys, &[]);
    // With nothing reserved and nothing left, inserts are refused.
    let more: Vec<Vec<u8>> = (0..300u64)
        .map(|i| format!("z{i:06}").into_bytes())
        .collect();
    assert!(matches!(
        idx.reserve_inserts(more.iter().map(Vec::as_slice)),
        Err(Error::NoSpace { .. })
    ));
}
