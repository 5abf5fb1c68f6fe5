//! The write-ahead log of one MemTable on pmem (MioDB §4.7; `FORMAT.md` § WAL record):
//!
//! ```text
//! 0   4  crc          masked CRC-32C of bytes 4 .. 24 + payload, log id and nonce folded in
//! 4   4  payload_len  key_len + value_len
//! 8   8  seq_kind
//! 16  2  key_len
//! 18  2  reserved
//! 20  4  value_len
//! 24  .. key, value, zero padding to 8
//! ```
//!
//! A put is acknowledged once its record is persisted (P1). A writer takes its record's
//! bytes and seq under the store's writer lock ([`LogWriter::reserve`]) and writes and
//! persists the record after releasing it ([`write_record`]), so records are persisted in
//! any order: a crash can leave a hole (a record reserved and never written whole, never
//! acknowledged) before records that were. Replay therefore looks for records at every
//! 8-byte offset past a record that does not verify, up to the end of the run, keeping
//! those whose seqs grow. Only this log's records verify: the checksum folds in the log
//! id and a random nonce chosen when the log was created (`LogMeta::nonce`), which no user
//! knows, so bytes inside a value (or left by an older log in a reused chunk) are never
//! taken for a record, however they were made. A log listed without a nonce (a directory
//! older than version 4) was written back to back under the lock: its replay stops at the
//! first record that does not verify, as it always did. [`decode_record`] is total (fuzz
//! target `mio_wal`).
//!
//! Thread safety: [`LogWriter`] is used under the store's writer lock; [`write_record`]
//! writes a reserved range, which no other thread touches; decoding is pure.

use tierkv_core::format::checksum::{crc32c_append, mask, unmask};
use tierkv_core::{Error, Result, Tier};

use tierkv_core::{BatchOp, WriteBatch};

use crate::dir::LogMeta;
use crate::node::{self, Kind, seq_kind};
use crate::table::Shared;

/// What a log's checksums are keyed with: its id and its nonce (0: a log of a directory
/// older than version 4, replayed by the old rule).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogKey {
    /// The log id.
    pub id: u64,
    /// The log's random nonce, or 0.
    pub nonce: u64,
}

impl LogKey {
    /// The key of a log a directory lists.
    pub fn of(log: &LogMeta) -> LogKey {
        LogKey {
            id: log.id,
            nonce: log.nonce,
        }
    }

    /// True for a log whose records may leave holes (it has a nonce).
    pub fn has_holes(self) -> bool {
        self.nonce != 0
    }
}

/// A fresh nonce for a new log: 64 bits no user of the store can know or choose, never 0.
/// SipHash under the process's random `RandomState` keys (seeded from the OS), of the log
/// id and the time; it need not be unique, only unguessable.
pub fn new_nonce(id: u64) -> u64 {
    use std::hash::BuildHasher;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    std::hash::RandomState::new().hash_one((id, now)).max(1)
}

/// Bytes of a record header.
pub const HEADER_LEN: usize = 24;

/// The length of a record for this key and value, padded.
pub fn record_len(key_len: usize, value_len: usize) -> usize {
    (HEADER_LEN + key_len + value_len).next_multiple_of(8)
}

/// The checksum state after the log's key, before the record's bytes.
fn crc_seed(key: LogKey) -> u32 {
    let c = crc32c_append(0, &key.id.to_le_bytes());
    if key.has_holes() {
        crc32c_append(c, &key.nonce.to_le_bytes())
    } else {
        c
    }
}

fn crc(key: LogKey, rest: &[u8]) -> u32 {
    mask(crc32c_append(crc_seed(key), rest))
}

/// The header of a put's or a delete's record, its checksum over the header, key and value.
fn record_header(log: LogKey, seq: u64, kind: Kind, key: &[u8], value: &[u8]) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[4..8].copy_from_slice(&((key.len() + value.len()) as u32).to_le_bytes());
    h[8..16].copy_from_slice(&seq_kind(seq, kind).to_le_bytes());
    h[16..18].copy_from_slice(&(key.len() as u16).to_le_bytes());
    h[20..24].copy_from_slice(&(value.len() as u32).to_le_bytes());
    let c = [&h[4..], key, value]
        .iter()
        .fold(crc_seed(log), |c, part| crc32c_append(c, part));
    h[..4].copy_from_slice(&mask(c).to_le_bytes());
    h
}

/// Encodes one record of log `log`.
pub fn encode_record(log: LogKey, seq: u64, kind: Kind, key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut r = Vec::with_capacity(record_len(key.len(), value.len()));
    r.extend_from_slice(&record_header(log, seq, kind, key, value));
    r.extend_from_slice(key);
    r.extend_from_slice(value);
    r.resize(r.len().next_multiple_of(8), 0);
    r
}

/// Writes the record of one put or delete at pool offset `at` (its range, taken with
/// [`LogWriter::reserve`]) and persists it (P1 step 2): header, key and value straight
/// into the pool, no copy in between; the padding is not written (no checksum covers it,
/// replay skips it).
pub fn write_record(
    sh: &Shared,
    log: LogKey,
    at: u64,
    (seq, kind): (u64, Kind),
    key: &[u8],
    value: &[u8],
) -> Result<()> {
    let header = record_header(log, seq, kind, key, value);
    let body = at + HEADER_LEN as u64;
    sh.pool.write(at, &header)?;
    sh.pool.write(body, key)?;
    sh.pool.write(body + key.len() as u64, value)?;
    sh.persist("wal-record", at, record_len(key.len(), value.len()))
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

/// Encodes the batch record of log `log` whose operations take the seqs `first_seq`,
/// `first_seq + 1`, ... in key order (`FORMAT.md` § Write batches).
pub fn encode_batch(log: LogKey, first_seq: u64, batch: &WriteBatch) -> Vec<u8> {
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
    let c = crc(log, r.get(4..).unwrap_or_default());
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

/// Decodes the log record at the start of `bytes` of log `log`: its operations (one,
/// or every operation of a batch record) and the bytes it takes (padded); `None` when
/// there is no valid record there (end of the log, a hole, torn or stale bytes).
pub fn decode_record(log: LogKey, bytes: &[u8]) -> Option<(Vec<Record>, usize)> {
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
    if stored == 0 || unmask(stored) != unmask(crc(log, body)) {
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

/// Every operation of the valid records of a log, in order, and where the last of them
/// ends. A record counts only if its (first) seq exceeds the previous record's (last).
/// A log with a nonce is searched to the end of `bytes`, at every 8-byte offset past a
/// position that holds no such record (holes, `FORMAT.md` § WAL record); a log without one
/// ends at the first.
pub fn replay(bytes: &[u8], log: LogKey) -> (Vec<Record>, usize) {
    let mut out: Vec<Record> = Vec::new();
    let (mut at, mut end) = (0usize, 0usize);
    while at < bytes.len() {
        let found = bytes
            .get(at..)
            .and_then(|b| decode_record(log, b))
            .filter(|(ops, _)| {
                out.last()
                    .zip(ops.first())
                    .is_none_or(|(p, r)| p.seq < r.seq)
            });
        match found {
            Some((ops, len)) => {
                at += len;
                end = at;
                out.extend(ops);
            }
            None if !log.has_holes() => break,
            // Zero words (never written) are passed over a word at a time.
            None => at = next_nonzero_word(bytes, at + 8),
        }
    }
    (out, end)
}

/// The first 8-aligned offset at or after `from` whose word is not zero (or the end).
fn next_nonzero_word(bytes: &[u8], from: usize) -> usize {
    let rest = bytes.get(from..).unwrap_or_default();
    rest.chunks_exact(8)
        .position(|w| w != [0u8; 8])
        .map_or(bytes.len(), |i| from + i * 8)
}

/// The reserving end of one log: where it is and how far it is taken.
#[derive(Debug)]
pub struct LogWriter {
    /// Its checksum key (id and nonce).
    pub key: LogKey,
    /// Pool offset of its run.
    pub off: u64,
    /// Bytes of the run.
    pub cap: u64,
    /// Bytes reserved (written, or being written by the writers that took them).
    pub tail: u64,
}

impl LogWriter {
    /// True when a record of `len` bytes fits.
    pub fn fits(&self, len: u64) -> bool {
        self.tail + len <= self.cap
    }

    /// Takes the next `len` bytes of the log for one record (P1 step 1, under the writer
    /// lock); returns their pool offset.
    pub fn reserve(&mut self, len: u64) -> Result<u64> {
        if !self.fits(len) {
            return Err(Error::no_space(Tier::Pmem, "write-ahead log is full"));
        }
        let at = self.off + self.tail;
        self.tail += len;
        Ok(at)
    }

    /// Appends the batch record of `batch`, its operations at seqs from `first_seq`, with
    /// one write and one persist, under the writer lock (`FORMAT.md` § Write batches,
    /// step 2).
    pub fn append_batch(&mut self, sh: &Shared, first_seq: u64, batch: &WriteBatch) -> Result<()> {
        let rec = encode_batch(self.key, first_seq, batch);
        let at = self.reserve(rec.len() as u64)?;
        sh.pool.write(at, &rec)?;
        sh.persist("wal-record", at, rec.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key of a log without a nonce (the rule of directories before version 4).
    fn k(id: u64) -> LogKey {
        LogKey { id, nonce: 0 }
    }

    #[test]
    fn records_round_trip_and_replay_stops_at_damage() {
        let mut log = Vec::new();
        log.extend(encode_record(k(9), 1, Kind::Put, b"k1", b"v1"));
        log.extend(encode_record(k(9), 2, Kind::Delete, b"k2", b""));
        log.extend(encode_record(k(9), 3, Kind::Put, b"k3", b"value three"));
        let (rs, len) = replay(&log, k(9));
        assert_eq!((rs.len(), len), (3, log.len()));
        assert_eq!(
            (rs[2].key.as_slice(), rs[2].value.as_slice()),
            (&b"k3"[..], &b"value three"[..])
        );
        assert!(
            replay(&log, k(8)).0.is_empty(),
            "another log's records never verify"
        );
        let second = record_len(2, 2);
        let mut torn = log.clone();
        torn[second + 24] ^= 1;
        assert_eq!(replay(&torn, k(9)).0.len(), 1);
        log.resize(log.len() + 64, 0);
        assert_eq!(replay(&log, k(9)).0.len(), 3, "zeros end the log");
        let mut stale = encode_record(k(9), 5, Kind::Put, b"a", b"b");
        stale.extend(encode_record(k(9), 4, Kind::Put, b"a", b"b"));
        assert_eq!(replay(&stale, k(9)).0.len(), 1, "seqs must grow");
    }

    /// A log with a nonce (version 4): a record reserved and never written whole, zeros or
    /// torn, is a hole that replay passes over; what follows is replayed; a record with a
    /// seq that does not grow is passed over too; where the last record ends is returned.
    #[test]
    fn a_log_with_a_nonce_replays_the_records_after_its_holes() {
        let key = LogKey {
            id: 9,
            nonce: 0xdead_beef_1234_5678,
        };
        let rec = |seq: u64, k: &[u8], v: &[u8]| encode_record(key, seq, Kind::Put, k, v);
        let mut log = rec(1, b"a", b"one");
        log.resize(log.len() + record_len(1, 300), 0); // seq 2: never written
        log.extend(rec(3, b"c", &[3u8; 100]));
        let mut torn = rec(4, b"d", &[4u8; 200]); // seq 4: half written
        torn[40..].fill(0x77);
        log.extend(&torn);
        log.extend(rec(2, b"z", b"stale")); // a seq below 4: never replayed
        log.extend(rec(5, b"e", b"five"));
        let end = log.len();
        log.extend(std::iter::repeat_n(0xa5u8, 4096)); // an older user's bytes
        log.resize(log.len() + 4096, 0);
        let (rs, at) = replay(&log, key);
        let seqs: Vec<u64> = rs.iter().map(|r| r.seq).collect();
        assert_eq!((seqs, at), (vec![1, 3, 5], end));
        assert_eq!(rs[1].value, vec![3u8; 100]);
        // The old rule stops at the first hole.
        let legacy = LogKey { id: 9, nonce: 0 };
        let mut old = encode_record(legacy, 1, Kind::Put, b"a", b"one");
        old.resize(old.len() + 64, 0);
        old.extend(encode_record(legacy, 3, Kind::Put, b"c", b"x"));
        assert_eq!(replay(&old, legacy).0.len(), 1);
    }

    /// A user who stores a value holding a well-formed record of this log id (guessing
    /// the nonce) never gets it replayed: not from a torn record holding that value, not
    /// from an older log's bytes left in the run. The same bytes made with the log's real
    /// nonce would be (the search does look at every 8-byte offset): the nonce is what
    /// keeps them out.
    #[test]
    fn records_forged_inside_values_never_replay() {
        let key = LogKey {
            id: 12,
            nonce: new_nonce(12),
        };
        let first = encode_record(key, 1, Kind::Put, b"k", b"v");
        let log_with = |nonce: u64| {
            let forged = encode_record(
                LogKey { id: 12, nonce },
                u64::from(u32::MAX),
                Kind::Put,
                b"admin",
                b"yes",
            );
            // An 8-byte key puts the value, hence the forged record, on an 8-byte offset.
            let mut torn = encode_record(key, 2, Kind::Put, b"12345678", &forged);
            torn[..4].fill(0);
            let mut log = first.clone();
            log.extend(&torn);
            log.extend(&forged);
            log
        };
        for guess in [0, 1, key.nonce ^ 1, key.nonce.rotate_left(1)] {
            let (rs, _) = replay(&log_with(guess), key);
            assert_eq!(rs.len(), 1, "guess {guess:#x}");
            assert_eq!(rs[0].key, b"k");
        }
        let (rs, _) = replay(&log_with(key.nonce), key);
        assert_eq!(
            rs.len(),
            2,
            "the real nonce's record is found inside the value"
        );
        assert_eq!(rs[1].key, b"admin");
        assert_ne!(new_nonce(12), 0);
        assert_ne!(
            new_nonce(12),
            new_nonce(12),
            "two logs of one id get two nonces"
        );
    }

    #[test]
    fn truncated_records_decode_to_none() {
        let r = encode_record(k(1), 1, Kind::Put, b"key", b"value");
        for cut in 0..r.len() {
            assert!(decode_record(k(1), &r[..cut]).is_none(), "{cut}");
        }
        assert!(decode_record(k(1), &r).is_some());
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
        let mut log = encode_record(k(4), 10, Kind::Put, b"z", b"before");
        let rec = encode_batch(k(4), 11, &b);
        assert_eq!(rec.len(), batch_record_len(&b));
        log.extend(&rec);
        log.extend(encode_record(k(4), 14, Kind::Put, b"z", b"after"));
        let (rs, len) = replay(&log, k(4));
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
            assert_eq!(replay(&torn, k(4)).0.len(), 1, "byte {i}");
        }
        for cut in 0..rec.len() {
            assert!(decode_record(k(4), &rec[..cut]).is_none(), "cut at {cut}");
        }
        // The next record must start above the batch's last seq.
        let mut stale = encode_batch(k(4), 11, &b);
        stale.extend(encode_record(k(4), 13, Kind::Put, b"z", b"x"));
        assert_eq!(replay(&stale, k(4)).0.len(), 3);
    }

    /// A batch record whose checksum verifies but whose operations are malformed (what a
    /// bug could write) is rejected, not half read.
    #[test]
    fn malformed_batch_operations_are_rejected() {
        let b = sample_batch();
        let good = encode_batch(k(4), 1, &b);
        let reseal = |mut r: Vec<u8>| {
            let payload = u32::from_le_bytes(r[4..8].try_into().unwrap()) as usize;
            let c = crc(k(4), &r[4..HEADER_LEN + payload]);
            r[..4].copy_from_slice(&c.to_le_bytes());
            r
        };
        assert!(decode_record(k(4), &reseal(good.clone())).is_some());
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
            assert!(decode_record(k(4), &reseal(r)).is_none(), "{what}");
        }
        let mut r = good.clone();
        // Keys out of order: the first key "a" becomes "d" (after "b").
        r[first_op + BATCH_OP_LEN] = b'd';
        assert!(
            decode_record(k(4), &reseal(r)).is_none(),
            "keys out of order"
        );
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
        let good = encode_batch(k(4), 1, &sample_batch());
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
                    let c = crc(k(4), body);
                    b[..4].copy_from_slice(&c.to_le_bytes());
                }
            }
            if let Some((ops, len)) = decode_record(k(4), &b) {
                assert!(len <= b.len().next_multiple_of(8) && !ops.is_empty());
                assert!(ops.windows(2).all(|w| w[0].seq < w[1].seq));
                assert!(
                    ops.iter()
                        .all(|r| r.kind == Kind::Put || r.value.is_empty())
                );
            }
            let _ = replay(&b, k(4));
        }
    }
}
