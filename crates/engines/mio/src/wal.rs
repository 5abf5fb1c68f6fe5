//! The write-ahead log of one MemTable on pmem (MioDB §4.7; `FORMAT.md` § WAL record):
//!
//! ```text
//! 0   4  crc          masked CRC-32C of bytes 4 .. 24 + payload, log id folded in
//! 4   4  payload_len  key_len + value_len
//! 8   8  seq_kind
//! 16  2  key_len
//! 18  2  reserved
//! 20  4  value_len
//! 24  .. key, value, zero padding to 8
//! ```
//!
//! A put is acknowledged once its record is persisted (P1). Replay stops at the first
//! record that does not verify: it was never acknowledged (every earlier record was
//! persisted before it was written). [`decode_record`] is total (fuzz target `mio_wal`).
//!
//! Thread safety: [`LogWriter`] is used under the store's writer lock; decoding is pure.

use tierkv_core::format::checksum::{crc32c_append, mask, unmask};
use tierkv_core::{Error, Result, Tier};

use tierkv_core::{BatchOp, WriteBatch};

use crate::node::{self, Kind, seq_kind};
use crate::table::Shared;

/// Bytes of a record header.
pub const HEADER_LEN: usize = 24;

/// The length of a record for this key and value, padded.
pub fn record_len(key_len: usize, value_len: usize) -> usize {
    (HEADER_LEN + key_len + value_len).next_multiple_of(8)
}

fn crc(log_id: u64, rest: &[u8]) -> u32 {
    mask(crc32c_append(crc32c_append(0, &log_id.to_le_bytes()), rest))
}

/// Encodes one record of log `log_id`.
pub fn encode_record(log_id: u64, seq: u64, kind: Kind, key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut r = Vec::with_capacity(record_len(key.len(), value.len()));
    encode_record_into(&mut r, log_id, seq, kind, key, value);
    r
}

/// [`encode_record`] into `r` (cleared first), so that a writer reuses one buffer.
pub fn encode_record_into(
    r: &mut Vec<u8>,
    log_id: u64,
    seq: u64,
    kind: Kind,
    key: &[u8],
    value: &[u8],
) {
    r.clear();
    r.extend_from_slice(&[0; 4]);
    r.extend_from_slice(&((key.len() + value.len()) as u32).to_le_bytes());
    r.extend_from_slice(&seq_kind(seq, kind).to_le_bytes());
    r.extend_from_slice(&(key.len() as u16).to_le_bytes());
    r.extend_from_slice(&[0; 2]);
    r.extend_from_slice(&(value.len() as u32).to_le_bytes());
    r.extend_from_slice(key);
    r.extend_from_slice(value);
    let c = crc(log_id, r.get(4..).unwrap_or_default());
    r[..4].copy_from_slice(&c.to_le_bytes());
    r.resize(r.len().next_multiple_of(8), 0);
}

/// Kind byte of a batch record (a node never carries it).
pub const BATCH_KIND: u8 = 3;
/// Bytes before a batch record's first operation: the header, `count` and a reserved word.
pub const BATCH_HEAD_LEN: usize = HEADER_LEN + 8;
/// Bytes of a batch operation's fixed part: kind, reserved, key_len u16, value_len u32.
pub const BATCH_OP_LEN: usize = 8;

/// The length of the batch record of `batch`, padded.
pub fn batch_record_len(batch: &WriteBatch) -> usize {
    let ops: usize = batch
        .iter()
        .map(|(k, op)| BATCH_OP_LEN + k.len() + op.value().map_or(0, <[u8]>::len))
        .sum();
    (BATCH_HEAD_LEN + ops).next_multiple_of(8)
}

/// Encodes the batch record of log `log_id` whose operations take the seqs `first_seq`,
/// `first_seq + 1`, ... in key order (`FORMAT.md` § Write batches).
pub fn encode_batch(log_id: u64, first_seq: u64, batch: &WriteBatch) -> Vec<u8> {
    let len = batch_record_len(batch);
    let mut r = Vec::with_capacity(len);
    r.extend_from_slice(&[0; 8]);
    r.extend_from_slice(&((first_seq << 8) | u64::from(BATCH_KIND)).to_le_bytes());
    r.extend_from_slice(&[0; 4]);
    r.extend_from_slice(&[0; 4]);
    r.extend_from_slice(&(batch.len() as u32).to_le_bytes());
    r.extend_from_slice(&[0; 4]);
    for (k, op) in batch.iter() {
        let (kind, v) = match op {
            BatchOp::Put(v) => (Kind::Put, v.as_slice()),
            BatchOp::Delete => (Kind::Delete, &[][..]),
        };
        r.extend_from_slice(&[kind.code(), 0]);
        r.extend_from_slice(&(k.len() as u16).to_le_bytes());
        r.extend_from_slice(&(v.len() as u32).to_le_bytes());
        r.extend_from_slice(k);
        r.extend_from_slice(v);
    }
    let payload = (r.len() - HEADER_LEN) as u32;
    r[4..8].copy_from_slice(&payload.to_le_bytes());
    r[20..24].copy_from_slice(&payload.to_le_bytes());
    let c = crc(log_id, r.get(4..).unwrap_or_default());
    r[..4].copy_from_slice(&c.to_le_bytes());
    r.resize(len, 0);
    r
}

/// One operation read back from a log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Its seq.
    pub seq: u64,
    /// Put or delete.
    pub kind: Kind,
    /// The key.
    pub key: Vec<u8>,
    /// The value (empty for a delete).
    pub value: Vec<u8>,
}

fn le<const N: usize>(b: &[u8], at: usize) -> Option<[u8; N]> {
    b.get(at..at + N).and_then(|s| s.try_into().ok())
}

/// Decodes the log record at the start of `bytes` of log `log_id`: its operations (one,
/// or every operation of a batch record) and the bytes it takes (padded); `None` when
/// there is no valid record there (end of the log, torn or stale bytes).
pub fn decode_record(log_id: u64, bytes: &[u8]) -> Option<(Vec<Record>, usize)> {
    let stored = u32::from_le_bytes(le(bytes, 0)?);
    let payload = u32::from_le_bytes(le(bytes, 4)?) as usize;
    let sk = u64::from_le_bytes(le(bytes, 8)?);
    let key_len = u16::from_le_bytes(le(bytes, 16)?) as usize;
    let value_len = u32::from_le_bytes(le(bytes, 20)?) as usize;
    if key_len.checked_add(value_len)? != payload || le::<2>(bytes, 18)? != [0, 0] {
        return None;
    }
    let end = HEADER_LEN.checked_add(payload)?;
    let body = bytes.get(4..end)?;
    if stored == 0 || unmask(stored) != unmask(crc(log_id, body)) {
        return None;
    }
    let (seq, code) = (sk >> 8, (sk & 0xff) as u8);
    let ops = if code == BATCH_KIND {
        if key_len != 0 {
            return None;
        }
        decode_batch_ops(seq, bytes.get(HEADER_LEN..end)?)?
    } else {
        vec![Record {
            seq,
            kind: Kind::from_code(code)?,
            key: bytes.get(HEADER_LEN..HEADER_LEN + key_len)?.to_vec(),
            value: bytes.get(HEADER_LEN + key_len..end)?.to_vec(),
        }]
    };
    Some((ops, end.next_multiple_of(8)))
}

/// The operations of a batch record's payload (after the header), seqs from `first_seq`:
/// at least one, keys strictly ascending, deletes without a value, filling it exactly.
fn decode_batch_ops(first_seq: u64, p: &[u8]) -> Option<Vec<Record>> {
    let count = u32::from_le_bytes(le(p, 0)?) as usize;
    if count == 0 || le::<4>(p, 4)? != [0; 4] || count > p.len() / BATCH_OP_LEN {
        return None;
    }
    if first_seq.checked_add(count as u64 - 1)? > node::MAX_SEQ {
        return None;
    }
    let mut ops: Vec<Record> = Vec::with_capacity(count);
    let mut at = BATCH_HEAD_LEN - HEADER_LEN;
    for i in 0..count as u64 {
        let [code, reserved] = le::<2>(p, at)?;
        let kind = Kind::from_code(code)?;
        let k = u16::from_le_bytes(le(p, at + 2)?) as usize;
        let v = u32::from_le_bytes(le(p, at + 4)?) as usize;
        if reserved != 0 || (kind == Kind::Delete && v != 0) {
            return None;
        }
        let key = p.get(at + BATCH_OP_LEN..at + BATCH_OP_LEN + k)?;
        if ops.last().is_some_and(|prev| prev.key.as_slice() >= key) {
            return None;
        }
        let vs = at + BATCH_OP_LEN + k;
        ops.push(Record {
            seq: first_seq + i,
            kind,
            key: key.to_vec(),
            value: p.get(vs..vs.checked_add(v)?)?.to_vec(),
        });
        at = vs + v;
    }
    (at == p.len()).then_some(ops)
}

/// Every operation of the valid records of a log, in order, and the bytes they take
/// (stops at the first invalid record or at one whose first seq does not exceed the
/// previous record's last).
pub fn replay(bytes: &[u8], log_id: u64) -> (Vec<Record>, usize) {
    let mut out: Vec<Record> = Vec::new();
    let mut at = 0usize;
    while let Some((ops, len)) = bytes.get(at..).and_then(|b| decode_record(log_id, b)) {
        if out
            .last()
            .zip(ops.first())
            .is_some_and(|(p, r)| p.seq >= r.seq)
        {
            break;
        }
        at += len;
        out.extend(ops);
    }
    (out, at)
}

/// The writing end of one log: where it is and how far it is written.
#[derive(Debug)]
pub struct LogWriter {
    /// Log id (folded into every checksum).
    pub id: u64,
    /// Pool offset of its run.
    pub off: u64,
    /// Bytes of the run.
    pub cap: u64,
    /// Bytes written.
    pub tail: u64,
    /// The record being written (reused from put to put).
    pub buf: Vec<u8>,
}

impl LogWriter {
    /// True when a record of `len` bytes fits.
    pub fn fits(&self, len: u64) -> bool {
        self.tail + len <= self.cap
    }

    /// Appends a record and persists it (P1 step 1).
    pub fn append(
        &mut self,
        sh: &Shared,
        seq: u64,
        kind: Kind,
        key: &[u8],
        value: &[u8],
    ) -> Result<()> {
        let mut rec = std::mem::take(&mut self.buf);
        encode_record_into(&mut rec, self.id, seq, kind, key, value);
        let done = self.append_encoded(sh, &rec);
        self.buf = rec;
        done
    }

    /// Appends the batch record of `batch`, its operations at seqs from `first_seq`, with
    /// one write and one persist (`FORMAT.md` § Write batches, step 1).
    pub fn append_batch(&mut self, sh: &Shared, first_seq: u64, batch: &WriteBatch) -> Result<()> {
        self.append_encoded(sh, &encode_batch(self.id, first_seq, batch))
    }

    fn append_encoded(&mut self, sh: &Shared, rec: &[u8]) -> Result<()> {
        if self.tail + rec.len() as u64 > self.cap {
            return Err(Error::no_space(Tier::Pmem, "write-ahead log is full"));
        }
        let at = self.off + self.tail;
        sh.pool.write(at, rec)?;
        sh.persist("wal-record", at, rec.len())?;
        self.tail += rec.len() as u64;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_replay_stops_at_damage() {
        let mut log = Vec::new();
        log.extend(encode_record(9, 1, Kind::Put, b"k1", b"v1"));
        log.extend(encode_record(9, 2, Kind::Delete, b"k2", b""));
        log.extend(encode_record(9, 3, Kind::Put, b"k3", b"value three"));
        let (rs, len) = replay(&log, 9);
        assert_eq!((rs.len(), len), (3, log.len()));
        assert_eq!(
            (rs[2].key.as_slice(), rs[2].value.as_slice()),
            (&b"k3"[..], &b"value three"[..])
        );
        assert!(
            replay(&log, 8).0.is_empty(),
            "another log's records never verify"
        );
        let second = record_len(2, 2);
        let mut torn = log.clone();
        torn[second + 24] ^= 1;
        assert_eq!(replay(&torn, 9).0.len(), 1);
        log.resize(log.len() + 64, 0);
        assert_eq!(replay(&log, 9).0.len(), 3, "zeros end the log");
        let mut stale = encode_record(9, 5, Kind::Put, b"a", b"b");
        stale.extend(encode_record(9, 4, Kind::Put, b"a", b"b"));
        assert_eq!(replay(&stale, 9).0.len(), 1, "seqs must grow");
    }

    #[test]
    fn truncated_records_decode_to_none() {
        let r = encode_record(1, 1, Kind::Put, b"key", b"value");
        for cut in 0..r.len() {
            assert!(decode_record(1, &r[..cut]).is_none(), "{cut}");
        }
        assert!(decode_record(1, &r).is_some());
    }

    fn sample_batch() -> WriteBatch {
        let mut b = WriteBatch::new();
        b.put("b", "two")
            .delete("a")
            .put("c", vec![7u8; 300])
            .put("b", "2");
        b
    }

    #[test]
    fn a_batch_record_replays_whole_with_consecutive_seqs_or_not_at_all() {
        let b = sample_batch();
        let mut log = encode_record(4, 10, Kind::Put, b"z", b"before");
        let rec = encode_batch(4, 11, &b);
        assert_eq!(rec.len(), batch_record_len(&b));
        log.extend(&rec);
        log.extend(encode_record(4, 14, Kind::Put, b"z", b"after"));
        let (rs, len) = replay(&log, 4);
        assert_eq!(len, log.len());
        let got: Vec<(u64, Kind, &[u8], &[u8])> = rs
            .iter()
            .map(|r| (r.seq, r.kind, r.key.as_slice(), r.value.as_slice()))
            .collect();
        assert_eq!(
            got,
            vec![
                (10, Kind::Put, &b"z"[..], &b"before"[..]),
                (11, Kind::Delete, b"a", b""),
                (12, Kind::Put, b"b", b"2"),
                (13, Kind::Put, b"c", &[7u8; 300][..]),
                (14, Kind::Put, b"z", b"after"),
            ]
        );
        // Any damage to the batch record drops all of it (and what follows).
        let at = record_len(1, 6);
        for i in [at, at + 5, at + 24, at + 33, at + rec.len() - 9] {
            let mut torn = log.clone();
            torn[i] ^= 0x10;
            assert_eq!(replay(&torn, 4).0.len(), 1, "byte {i}");
        }
        for cut in 0..rec.len() {
            assert!(decode_record(4, &rec[..cut]).is_none(), "cut at {cut}");
        }
        // The next record must start above the batch's last seq.
        let mut stale = encode_batch(4, 11, &b);
        stale.extend(encode_record(4, 13, Kind::Put, b"z", b"x"));
        assert_eq!(replay(&stale, 4).0.len(), 3);
    }

    /// A batch record whose checksum verifies but whose operations are malformed (what a
    /// bug could write) is rejected, not half read.
    #[test]
    fn malformed_batch_operations_are_rejected() {
        let b = sample_batch();
        let good = encode_batch(4, 1, &b);
        let reseal = |mut r: Vec<u8>| {
            let payload = u32::from_le_bytes(r[4..8].try_into().unwrap()) as usize;
            let c = crc(4, &r[4..HEADER_LEN + payload]);
            r[..4].copy_from_slice(&c.to_le_bytes());
            r
        };
        assert!(decode_record(4, &reseal(good.clone())).is_some());
        let first_op = BATCH_HEAD_LEN;
        let cases: [(&str, usize, u8); 5] = [
            ("count too high", HEADER_LEN, 4),
            ("count zero", HEADER_LEN, 0),
            ("bad kind", first_op, 9),
            ("reserved set", first_op + 1, 1),
            ("a delete with a value", first_op + 4, 1),
        ];
        for (what, at, byte) in cases {
            let mut r = good.clone();
            r[at] = byte;
            assert!(decode_record(4, &reseal(r)).is_none(), "{what}");
        }
        let mut r = good.clone();
        // Keys out of order: the first key "a" becomes "d" (after "b").
        r[first_op + BATCH_OP_LEN] = b'd';
        assert!(decode_record(4, &reseal(r)).is_none(), "keys out of order");
    }

    /// Random bytes, and random mutations of a batch record whose checksum is then made
    /// to verify again, never panic the decoder; whatever decodes keeps its invariants.
    #[test]
    fn random_bytes_and_resealed_mutations_decode_to_none_or_valid_ops() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let good = encode_batch(4, 1, &sample_batch());
        for _ in 0..20_000 {
            let mut b = if next() % 2 == 0 {
                (0..next() % 200).map(|_| next() as u8).collect::<Vec<u8>>()
            } else {
                good.clone()
            };
            for _ in 0..1 + next() % 3 {
                if let Some(i) = (!b.is_empty()).then(|| (next() % b.len() as u64) as usize) {
                    b[i] = next() as u8;
                }
            }
            if b.len() >= HEADER_LEN {
                let payload = u32::from_le_bytes(b[4..8].try_into().unwrap()) as usize;
                if let Some(body) = b.get(4..HEADER_LEN + payload) {
                    let c = crc(4, body);
                    b[..4].copy_from_slice(&c.to_le_bytes());
                }
            }
            if let Some((ops, len)) = decode_record(4, &b) {
                assert!(len <= b.len().next_multiple_of(8) && !ops.is_empty());
                assert!(ops.windows(2).all(|w| w[0].seq < w[1].seq));
                assert!(
                    ops.iter()
                        .all(|r| r.kind == Kind::Put || r.value.is_empty())
                );
            }
            let _ = replay(&b, 4);
        }
    }
}
