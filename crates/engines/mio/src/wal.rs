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

use crate::node::{Kind, seq_kind};
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
    r
}

/// One decoded record.
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
    /// Bytes the record takes in the log (padded).
    pub len: usize,
}

fn le<const N: usize>(b: &[u8], at: usize) -> Option<[u8; N]> {
    b.get(at..at + N).and_then(|s| s.try_into().ok())
}

/// Decodes the record at the start of `bytes` of log `log_id`; `None` when there is no
/// valid record there (end of the log, torn or stale bytes).
pub fn decode_record(log_id: u64, bytes: &[u8]) -> Option<Record> {
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
    let kind = Kind::from_code((sk & 0xff) as u8)?;
    Some(Record {
        seq: sk >> 8,
        kind,
        key: bytes.get(HEADER_LEN..HEADER_LEN + key_len)?.to_vec(),
        value: bytes.get(HEADER_LEN + key_len..end)?.to_vec(),
        len: end.next_multiple_of(8),
    })
}

/// Every valid record of a log, in order (stops at the first invalid one or at a seq that
/// does not increase).
pub fn replay(bytes: &[u8], log_id: u64) -> Vec<Record> {
    let mut out: Vec<Record> = Vec::new();
    let mut at = 0usize;
    while let Some(r) = bytes.get(at..).and_then(|b| decode_record(log_id, b)) {
        if out.last().is_some_and(|p| p.seq >= r.seq) {
            break;
        }
        at += r.len;
        out.push(r);
    }
    out
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
}

impl LogWriter {
    /// True when a record for this key and value fits.
    pub fn fits(&self, key_len: usize, value_len: usize) -> bool {
        self.tail + record_len(key_len, value_len) as u64 <= self.cap
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
        let rec = encode_record(self.id, seq, kind, key, value);
        if self.tail + rec.len() as u64 > self.cap {
            return Err(Error::no_space(Tier::Pmem, "write-ahead log is full"));
        }
        let at = self.off + self.tail;
        sh.pool.write(at, &rec)?;
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
        let rs = replay(&log, 9);
        assert_eq!(rs.len(), 3);
        assert_eq!(
            (rs[2].key.as_slice(), rs[2].value.as_slice()),
            (&b"k3"[..], &b"value three"[..])
        );
        assert!(
            replay(&log, 8).is_empty(),
            "another log's records never verify"
        );
        let second = rs[0].len;
        let mut torn = log.clone();
        torn[second + 24] ^= 1;
        assert_eq!(replay(&torn, 9).len(), 1);
        log.resize(log.len() + 64, 0);
        assert_eq!(replay(&log, 9).len(), 3, "zeros end the log");
        let mut stale = encode_record(9, 5, Kind::Put, b"a", b"b");
        stale.extend(encode_record(9, 4, Kind::Put, b"a", b"b"));
        assert_eq!(replay(&stale, 9).len(), 1, "seqs must grow");
    }

    #[test]
    fn truncated_records_decode_to_none() {
        let r = encode_record(1, 1, Kind::Put, b"key", b"value");
        for cut in 0..r.len() {
            assert!(decode_record(1, &r[..cut]).is_none(), "{cut}");
        }
        assert!(decode_record(1, &r).is_some());
    }
}
