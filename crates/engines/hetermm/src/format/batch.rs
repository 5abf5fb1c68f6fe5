//! The payload of a batch entry in the operation log (spec: `FORMAT.md` § Write batches;
//! ours, issue 24): every operation of one crash-atomic write batch, in one log entry of
//! kind 3, so that the entry's timestamp word — the second step of its two-step write —
//! commits all of them at once.
//!
//! The entry itself is an ordinary log entry (`format::log`) with `key_len` 0, `record` 0
//! and this payload as its value; its `address` covers every operation (the maximum over
//! the operations' records, the versions they replaced and the delete frontiers they read).
//! ```text
//! 0   4  count      n >= 1
//! 4   4  reserved   0
//! 8   ..            n operations, each 8-byte aligned:
//!     0   8  ts         the operation's own timestamp (1 ..= MAX_TS)
//!     8   8  record     put: its record's logical address; delete: the removed record's
//!     16  2  key_len    >= 1
//!     18  1  kind       1 = put, 2 = delete
//!     19  1  reserved   0
//!     20  4  value_len  0 for a delete
//!     24  ..            key, value, zero padding to 8 bytes
//! ```
//! An operation takes exactly the bytes of its record (`format::record::record_len`), so
//! the records of a batch fit one DRAM page whenever its entry fits one log page.
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

/// Encodes the payload of a batch entry (`ops` non-empty).
pub fn encode(ops: &[BatchOp<'_>]) -> Vec<u8> {
    let len = PAYLOAD_HEADER_LEN
        + ops
            .iter()
            .map(|o| op_len(o.key.len() as u64, o.value.len() as u64))
            .sum::<u64>();
    let mut out = vec![0u8; len as usize];
    put_at(&mut out, 0, &(ops.len() as u32).to_le_bytes());
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
/// record above `covered`, non-zero reserved bytes or trailing bytes).
pub fn decode(payload: &[u8], covered: u64) -> Option<Vec<BatchOp<'_>>> {
    let n = u32_at(payload, 0)?;
    if n == 0 || u32_at(payload, 4)? != 0 {
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
    (at == payload.len()).then_some(ops)
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
