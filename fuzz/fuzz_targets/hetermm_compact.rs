//! Fuzz target: HeterMM's compact-block decoders (`format::compact`: header, hash slots,
//! chain lookup) return an error or `None`, never a panic, an out-of-bounds read or an
//! endless chain, on any bytes; and a compact block built from records derived from the
//! input finds every one of them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tierkv_hetermm::format::compact::{self, CompactHeader, Slot};
use tierkv_hetermm::format::record;

fn lookups(bytes: &[u8], h: &CompactHeader, rel: u32) -> tierkv_core::Result<Option<(u32, Slot)>> {
    compact::find(h, rel, |i| {
        let off = h.slot_off(i) as usize;
        let b = bytes.get(off..off + 16).unwrap_or_default();
        Slot::decode(b, h, off as u64)
    })
}

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = CompactHeader::decode(data, 0, 3, 15, data.len() as u64) {
        for rel in [0u32, 192, 4096, u32::from(data[0])] {
            let _ = lookups(data, &h, rel);
        }
    }
    // Distinct record offsets in a 32 KiB block, 32 bytes apart at least.
    let mut uniq: Vec<u32> = data
        .chunks(2)
        .map(|c| 192 + (u32::from(c[0]) << 8 | u32::from(*c.get(1).unwrap_or(&0))) % 1000 * 32)
        .collect();
    uniq.sort_unstable();
    uniq.dedup();
    if uniq.is_empty() {
        return;
    }
    let recs: Vec<(u32, Vec<u8>)> = uniq.iter().map(|o| (*o, record::encode(1, b"k", &o.to_le_bytes(), 4))).collect();
    let refs: Vec<(u32, &[u8])> = recs.iter().map(|(o, r)| (*o, &r[..])).collect();
    let bytes = compact::build(3, 15, &refs);
    let h = CompactHeader::decode(&bytes, 0, 3, 15, bytes.len() as u64).expect("built header");
    for (o, r) in &recs {
        let (_, s) = lookups(&bytes, &h, *o).expect("valid chain").expect("present");
        assert_eq!(&bytes[s.pos as usize..(s.pos + s.len) as usize], &r[..]);
    }
    // The input spliced over the built table and data: lookups must still terminate.
    let mut spliced = bytes.clone();
    let n = data.len().min(spliced.len() - 64);
    spliced[64..64 + n].copy_from_slice(&data[..n]);
    for (o, _) in &recs {
        let _ = lookups(&spliced, &h, *o);
    }
});
