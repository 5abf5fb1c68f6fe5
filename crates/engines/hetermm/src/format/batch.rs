//! The payload of a batch entry in the operation log (spec: `FORMAT.md` § Write batches;
//! ours, issue 24): every operation of one crash-atomic write batch, in one log entry of
//! kind 3, so that the entry's commit — its one persist (or the ts word, the second step of
//! the two-step write) — commits all of them at once.
//!
//! The entry itself is an ordinary log entry (`format::log`) with `key_len` 0, `record` 0
//! and this payload as its value; its `address` covers every operation (the maximum over
//! the operations' records, the versions they replaced and the delete frontiers they read).
//! ```text
//! 0   4  count      n >= 1
//! 4   4  part       0 in a batch entry (kind 3); a part's number in a batch part (kind 4)
//! 8   ..            n operations, each 8-byte aligned:
//!     0   8  ts         the operation's own timestamp (1 ..= MAX_TS)
//!     8   8  record     put: its record's logical address; delete: the removed record's
//!     16  2  key_len    >= 1
//!     18  1  kind       1 = put, 2 = delete
//!     19  1  reserved   0
//!     20  4  value_len  0 for a delete
//!     24  ..            key, value, zero padding to 8 bytes
//! ```
//! An operation takes exactly the bytes of its record (`format::record::record_len`).
//!
//! **A batch that spans log pages** (version 4 logs) is written as parts and a commit:
//! *batch parts* (kind 4), each an entry whose value is this payload with its part number
//! `i` (0, 1, …, p − 1) at byte 4 and some of the batch's operations (each whole), written
//! and persisted first, all with the batch's commit timestamp as ts; then one *batch
//! commit* (kind 5), written and persisted like any entry, whose value is
//! ```text
//! 0   4  parts      p >= 1
//! 4   4  ops        the batch's operations in all parts together (>= p)
//! ```
//! A commit stands for the operations of the parts with its timestamp, numbered 0 to
//! p − 1, only when every one of them is present (FORMAT.md § Batches that span pages).
//! The payload is covered by the entry's checksum; [`decode`] still checks every length
//! and field (it is total: `None` for anything malformed), and that no record lies above
//! the entry's covered address.
//!
//! Thread safety: pure functions.

use super::log::EntryKind;
use super::record::MAX_TS;
use super::{align8, put_at, u16_at, u32_at, u64_at};

/// Bytes before the first operation.
pub const PAYLOAD_HEADER_LEN: u64 = 8;
/// Bytes of an operation's header.
pub const OP_HEADER_LEN: u64 = 24;
/// Bytes of a batch commit's value.
pub const COMMIT_LEN: u64 = 8;

/// One operation of a batch entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchOp<'a> {
    /// Its timestamp (taken under the key's synchronization, as a single write's).
    pub ts: u64,
    /// Put: its record's address; delete: the removed record's.
    pub record: u64,
    /// Put or delete.
    pub kind: EntryKind,
    /// The key.
    pub key: &'a [u8],
    /// The value (empty for a delete).
    pub value: &'a [u8],
}

/// Bytes an operation with this key and value takes in the payload.
pub const fn op_len(key_len: u64, value_len: u64) -> u64 {
    align8(OP_HEADER_LEN + key_len + value_len)
}

/// Bytes of the payload holding operations of these (key, value) lengths.
pub fn payload_len(ops: impl IntoIterator<Item = u64>) -> u64 {
    PAYLOAD_HEADER_LEN + ops.into_iter().sum::<u64>()
}

/// Encodes the payload of a batch entry (`ops` non-empty).
pub fn encode(ops: &[BatchOp<'_>]) -> Vec<u8> {
    encode_part(ops, 0)
}

/// Encodes the payload of part number `part` of a batch that spans pages (`ops`
/// non-empty).
pub fn encode_part(ops: &[BatchOp<'_>], part: u32) -> Vec<u8> {
    let len = PAYLOAD_HEADER_LEN
        + ops
            .iter()
            .map(|o| op_len(o.key.len() as u64, o.value.len() as u64))
            .sum::<u64>();
    let mut out = vec![0u8; len as usize];
    put_at(&mut out, 0, &(ops.len() as u32).to_le_bytes());
    put_at(&mut out, 4, &part.to_le_bytes());
    let mut at = PAYLOAD_HEADER_LEN as usize;
    for o in ops {
        put_at(&mut out, at, &o.ts.to_le_bytes());
        put_at(&mut out, at + 8, &o.record.to_le_bytes());
        put_at(&mut out, at + 16, &(o.key.len() as u16).to_le_bytes());
        put_at(&mut out, at + 18, &[o.kind.code()]);
        put_at(&mut out, at + 20, &(o.value.len() as u32).to_le_bytes());
        let k = at + OP_HEADER_LEN as usize;
        put_at(&mut out, k, o.key);
        put_at(&mut out, k + o.key.len(), o.value);
        at += op_len(o.key.len() as u64, o.value.len() as u64) as usize;
    }
    out
}

/// Decodes the payload of a batch entry whose covered address is `covered`: every
/// operation, or `None` if anything is malformed (a count of 0 or past the end, a key of
/// 0 bytes, an unknown kind, a delete with a value, a timestamp of 0 or past `MAX_TS`, a
/// record above `covered`, a part number other than 0, non-zero reserved bytes or
/// trailing bytes).
pub fn decode(payload: &[u8], covered: u64) -> Option<Vec<BatchOp<'_>>> {
    match decode_part(payload, covered)? {
        (0, ops) => Some(ops),
        _ => None,
    }
}

/// Decodes the payload of a batch part: its part number and its operations, or `None` if
/// anything is malformed (as [`decode`], whatever the part number).
pub fn decode_part(payload: &[u8], covered: u64) -> Option<(u32, Vec<BatchOp<'_>>)> {
    let n = u32_at(payload, 0)?;
    let part = u32_at(payload, 4)?;
    if n == 0 {
        return None;
    }
    let mut ops = Vec::new();
    let mut at = PAYLOAD_HEADER_LEN as usize;
    for _ in 0..n {
        let ts = u64_at(payload, at)?;
        let record = u64_at(payload, at + 8)?;
        let key_len = usize::from(u16_at(payload, at + 16)?);
        let kind = match payload.get(at + 18)? {
            1 => EntryKind::Put,
            2 => EntryKind::Delete,
            _ => return None,
        };
        let value_len = u32_at(payload, at + 20)? as usize;
        if ts == 0
            || ts > MAX_TS
            || record > covered
            || key_len == 0
            || payload.get(at + 19) != Some(&0)
            || (kind == EntryKind::Delete && value_len != 0)
        {
            return None;
        }
        let k = at + OP_HEADER_LEN as usize;
        let key = payload.get(k..k.checked_add(key_len)?)?;
        let value = payload.get(k + key_len..(k + key_len).checked_add(value_len)?)?;
        ops.push(BatchOp {
            ts,
            record,
            kind,
            key,
            value,
        });
        at += op_len(key_len as u64, value_len as u64) as usize;
    }
    (at == payload.len()).then_some((part, ops))
}

/// Encodes the value of a batch commit: `parts` parts holding `ops` operations.
pub fn encode_commit(parts: u32, ops: u32) -> [u8; COMMIT_LEN as usize] {
    let mut out = [0u8; COMMIT_LEN as usize];
    put_at(&mut out, 0, &parts.to_le_bytes());
    put_at(&mut out, 4, &ops.to_le_bytes());
    out
}

/// Decodes the value of a batch commit: (parts, operations), or `None` unless it is
/// exactly [`COMMIT_LEN`] bytes with at least one part and an operation per part (one
/// part: a batch planned over several pages whose deletes of absent keys fell out).
pub fn decode_commit(value: &[u8]) -> Option<(u32, u32)> {
    if value.len() as u64 != COMMIT_LEN {
        return None;
    }
    let (parts, ops) = (u32_at(value, 0)?, u32_at(value, 4)?);
    (parts >= 1 && ops >= parts).then_some((parts, ops))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<BatchOp<'static>> {
        vec![
            BatchOp {
                ts: 7,
                record: 4096,
                kind: EntryKind::Put,
                key: b"a",
                value: b"value-a",
            },
            BatchOp {
                ts: 8,
                record: 2048,
                kind: EntryKind::Delete,
                key: b"bb",
                value: b"",
            },
        ]
    }

    #[test]
    fn payload_round_trips_and_each_op_takes_its_record_length() {
        let ops = sample();
        let p = encode(&ops);
        assert_eq!(
            p.len() as u64,
            PAYLOAD_HEADER_LEN
                + super::super::record::record_len(1, 7)
                + super::super::record::record_len(2, 0)
        );
        assert_eq!(decode(&p, 4096), Some(ops));
    }

    #[test]
    fn malformed_payloads_are_refused() {
        let p = encode(&sample());
        assert!(
            decode(&p, 4095).is_none(),
            "a record above the covered address"
        );
        assert!(decode(&p[..p.len() - 8], 4096).is_none(), "cut short");
        let mut extra = p.clone();
        extra.extend_from_slice(&[0; 8]);
        assert!(decode(&extra, 4096).is_none(), "trailing bytes");
        let mut zero = p.clone();
        zero[..4].copy_from_slice(&0u32.to_le_bytes());
        assert!(decode(&zero, 4096).is_none(), "no operation");
        let mut many = p.clone();
        many[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&many, 4096).is_none(), "a count past the end");
        let mut kind = p.clone();
        kind[8 + 18] = 3;
        assert!(decode(&kind, 4096).is_none(), "an unknown kind");
        let mut ts = p.clone();
        ts[8..16].copy_from_slice(&0u64.to_le_bytes());
        assert!(decode(&ts, 4096).is_none(), "timestamp 0");
        let mut del = p;
        let second = 8 + op_len(1, 7) as usize;
        del[second + 20] = 1;
        assert!(decode(&del, 4096).is_none(), "a delete with a value");
    }

    #[test]
    fn parts_carry_their_number_and_a_batch_entry_has_part_zero() {
        let ops = sample();
        let p = encode_part(&ops, 3);
        assert_eq!(decode_part(&p, 4096), Some((3, ops.clone())));
        assert!(decode(&p, 4096).is_none(), "a part is not a batch entry");
        assert_eq!(decode_part(&encode(&ops), 4096), Some((0, ops)));
        assert_eq!(decode_commit(&encode_commit(4, 9)), Some((4, 9)));
        assert_eq!(decode_commit(&encode_commit(1, 9)), Some((1, 9)));
        assert!(decode_commit(&encode_commit(0, 9)).is_none(), "no part");
        assert!(
            decode_commit(&encode_commit(4, 3)).is_none(),
            "an empty part"
        );
        assert!(decode_commit(&encode_commit(4, 9)[..7]).is_none(), "short");
        assert!(decode_commit(&[0; 16]).is_none(), "long");
    }

    #[test]
    fn random_and_damaged_payloads_never_panic_and_never_read_out_of_range() {
        use rand::{Rng, RngCore, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(24);
        for _ in 0..2000 {
            let mut b = vec![0u8; rng.random_range(0..300)];
            rng.fill_bytes(&mut b);
            if let Some(ops) = decode(&b, u64::MAX) {
                assert!(ops.iter().all(|o| o.ts != 0 && !o.key.is_empty()));
            }
        }
        let p = encode(&sample());
        for i in 0..p.len() {
            for bit in 0..8 {
                let mut d = p.clone();
                d[i] ^= 1 << bit;
                if let Some(ops) = decode(&d, 4096) {
                    let len: usize = ops
                        .iter()
                        .map(|o| op_len(o.key.len() as u64, o.value.len() as u64) as usize)
                        .sum();
                    assert_eq!(len + PAYLOAD_HEADER_LEN as usize, d.len());
                }
            }
        }
    }
}
