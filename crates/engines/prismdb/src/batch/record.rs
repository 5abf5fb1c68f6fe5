//! The batch intent record (FORMAT.md §3 "Write batches"; issue 24, not in the paper): the
//! list of the slab slots a write batch is about to fill, persisted before any of them is
//! written. While the record is *pending* (its magic word set and its checksum good),
//! recovery zeroes those slots, so an uncommitted batch leaves nothing behind; the batch
//! commits by zeroing the magic word (one atomic 8-byte store), and the count and checksum
//! word with it (a record is voided whole: FORMAT.md §3 "Write batches").
//!
//! ```text
//! off       size  field
//! 0         8     magic `PDBBATC1` (0 once committed or abandoned)
//! 8         4     slot count n (1..=MAX_BATCH_OPS); 0 with bytes 12..16 once voided
//! 12        4     masked crc32c of bytes 0..12 and 16..16+8n
//! 16        8·n   pool offsets of the slots, u64 each
//! ```
//! All integers little-endian. The record lives at the start of a run of allocator chunks
//! tagged [`RECORD_TAG`].
//!
//! Thread safety: pure functions.

use tierkv_core::MAX_BATCH_OPS;
use tierkv_core::format::checksum::{crc32c, crc32c_append, mask};

use crate::format::{read_u32, read_u64};

/// Allocator tag of batch record runs ("PDBR").
pub const RECORD_TAG: u32 = 0x5044_4252;
/// Magic of a pending record, `PDBBATC1` read as a little-endian u64.
pub const RECORD_MAGIC: u64 = u64::from_le_bytes(*b"PDBBATC1");

const REC_MAGIC: usize = 0;
const REC_COUNT: usize = REC_MAGIC + 8;
const REC_CRC: usize = REC_COUNT + 4;
/// Bytes before the slot offsets.
pub const RECORD_HEADER_LEN: usize = REC_CRC + 4;

/// Bytes of the record of `slots` slots.
pub fn record_len(slots: usize) -> usize {
    RECORD_HEADER_LEN + 8 * slots
}

fn record_crc(b: &[u8]) -> u32 {
    let c = crc32c(b.get(..REC_CRC).unwrap_or_default());
    mask(crc32c_append(
        c,
        b.get(RECORD_HEADER_LEN..).unwrap_or_default(),
    ))
}

/// Encodes the pending record of `slots` (1..=`MAX_BATCH_OPS` of them).
pub fn encode_record(slots: &[u64]) -> Vec<u8> {
    let mut b = Vec::with_capacity(record_len(slots.len()));
    b.extend_from_slice(&RECORD_MAGIC.to_le_bytes());
    b.extend_from_slice(&u32::try_from(slots.len()).unwrap_or(u32::MAX).to_le_bytes());
    b.extend_from_slice(&[0; 4]);
    for s in slots {
        b.extend_from_slice(&s.to_le_bytes());
    }
    let crc = record_crc(&b);
    if let Some(dst) = b.get_mut(REC_CRC..RECORD_HEADER_LEN) {
        dst.copy_from_slice(&crc.to_le_bytes());
    }
    b
}

/// The slots of the pending record at the start of `b` (a record run's bytes); `None`
/// when there is none: magic zero (committed) or garbage, count out of range, the record
/// longer than `b`, or a checksum mismatch (a record whose persist never completed).
pub fn decode_record(b: &[u8]) -> Option<Vec<u64>> {
    if read_u64(b, REC_MAGIC)? != RECORD_MAGIC {
        return None;
    }
    let n = read_u32(b, REC_COUNT)? as usize;
    if n == 0 || n > MAX_BATCH_OPS {
        return None;
    }
    let body = b.get(..record_len(n))?;
    if record_crc(body) != read_u32(body, REC_CRC)? {
        return None;
    }
    (0..n)
        .map(|i| read_u64(body, RECORD_HEADER_LEN + 8 * i))
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn record_roundtrips_and_every_single_bit_flip_is_caught() {
        let slots = [4096u64, 8192 + 128, 1 << 40];
        let enc = encode_record(&slots);
        assert_eq!(enc.len(), record_len(3));
        assert_eq!(decode_record(&enc).unwrap(), slots);
        // Trailing bytes (the rest of the run) are ignored.
        let mut long = enc.clone();
        long.resize(4096, 0xAB);
        assert_eq!(decode_record(&long).unwrap(), slots);
        for bit in 0..enc.len() * 8 {
            let mut b = enc.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(decode_record(&b), None, "flip of bit {bit} decoded");
        }
        // Committed: the magic word zeroed.
        let mut done = enc.clone();
        done[..8].fill(0);
        assert_eq!(decode_record(&done), None);
        assert_eq!(decode_record(&enc[..enc.len() - 1]), None);
        assert_eq!(decode_record(&[0u8; 64]), None);
    }

    #[test]
    fn random_bytes_and_bad_counts_never_decode_or_panic() {
        let mut rng = ChaCha8Rng::seed_from_u64(tierkv_testkit::rig::seed(
            "random_bytes_and_bad_counts_never_decode_or_panic",
        ));
        for _ in 0..5_000 {
            let len = rng.random_range(0..256);
            let mut b: Vec<u8> = (0..len).map(|_| rng.random()).collect();
            if rng.random_bool(0.5) && b.len() >= 16 {
                b[..8].copy_from_slice(&RECORD_MAGIC.to_le_bytes());
            }
            // Random bytes behind a good magic: a checksum match is 2^-32.
            assert_eq!(decode_record(&b), None);
        }
        for n in [0u32, MAX_BATCH_OPS as u32 + 1, u32::MAX] {
            let mut b = encode_record(&[64]);
            b[8..12].copy_from_slice(&n.to_le_bytes());
            b.resize(1 << 20, 0);
            assert_eq!(decode_record(&b), None, "count {n}");
        }
    }
}
