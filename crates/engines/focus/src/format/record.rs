//! Record headers (FORMAT.md § Records): what every CLog, DLog and catalog record starts
//! with. The paper's headers (§V-A, Fig. 6: KV size and an invalid flag; FieldsCount,
//! FieldArray, MetaSize and ChainPointer) carry no key, schema id, sequence number or
//! checksum; recovery needs all four, so they are here.
//!
//! ```text
//!  0  1  kind       u8 (1 row, 2 delta, 3 tombstone, 4 schema, 5 batch commit)
//!  1  1  flags      u8 (0, or 1 = FLAG_BATCH: a member of the write batch in `batch`)
//!  2  2  key_len    u16
//!  4  4  body_len   u32 (the paper's KV size)
//!  8  8  seq        u64 (global, increasing; per key in write order)
//! 16  4  schema_id  u32 (0: the plain key-value namespace)
//! 20  4  epoch      u32 (the chunk's epoch: records of an earlier life of the chunk fail)
//! 24  8  prev       u64 (delta: pool offset of the previous chain entry, the
//!                        paper's ChainPointer/PrevRow; else 0)
//! 32  4  hcrc       masked CRC-32C of bytes 0..32 (then bytes 40..48 if FLAG_BATCH) and
//!                   the key
//! 36  4  bcrc       masked CRC-32C of the body
//! 40  8  batch      FLAG_BATCH: the batch id (its commit record's seq); else 0
//! 48     key        key_len bytes
//!        body       body_len bytes, then zero padding to 8 bytes
//! ```

use tierkv_core::format::checksum::masked_crc32c;
use tierkv_core::{Error, Result, Tier};

use super::{align8, le_u16, le_u32, le_u64};

/// Bytes of a record header.
pub const HEADER_LEN: usize = 48;
const FLAGS_OFF: usize = 1;
const KEY_LEN_OFF: usize = FLAGS_OFF + 1;
const BODY_LEN_OFF: usize = KEY_LEN_OFF + 2;
const SEQ_OFF: usize = BODY_LEN_OFF + 4;
const SCHEMA_OFF: usize = SEQ_OFF + 8;
const EPOCH_OFF: usize = SCHEMA_OFF + 4;
const PREV_OFF: usize = EPOCH_OFF + 4;
const HCRC_OFF: usize = PREV_OFF + 8;
const BCRC_OFF: usize = HCRC_OFF + 4;
const BATCH_OFF: usize = BCRC_OFF + 4;

/// Flag of a record that belongs to a write batch (FORMAT.md § Write batches): valid for
/// recovery only once the batch's commit record is.
pub const FLAG_BATCH: u8 = 1;

/// What a record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RecordKind {
    /// A complete row (CLog).
    Row = 1,
    /// Some fields of a row (DLog).
    Delta = 2,
    /// The row was deleted (CLog).
    Tombstone = 3,
    /// A schema declaration (catalog chunk).
    Schema = 4,
    /// A write batch's commit record (CLog): its seq is the batch id (FORMAT.md § Write
    /// batches).
    Commit = 5,
}

impl RecordKind {
    fn from_u8(v: u8) -> Option<RecordKind> {
        [
            RecordKind::Row,
            RecordKind::Delta,
            RecordKind::Tombstone,
            RecordKind::Schema,
            RecordKind::Commit,
        ]
        .into_iter()
        .find(|k| *k as u8 == v)
    }
}

/// A record header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    /// What the record is.
    pub kind: RecordKind,
    /// Bytes of the key.
    pub key_len: u16,
    /// Bytes of the body.
    pub body_len: u32,
    /// Sequence number.
    pub seq: u64,
    /// The schema.
    pub schema: u32,
    /// The chunk's epoch.
    pub epoch: u32,
    /// The previous chain entry (deltas).
    pub prev: u64,
    /// The write batch this record belongs to (0: none; else [`FLAG_BATCH`] is set).
    pub batch: u64,
}

impl RecordHeader {
    /// Bytes of the whole record, padding included.
    pub fn total_len(&self) -> u64 {
        align8(HEADER_LEN as u64 + u64::from(self.key_len) + u64::from(self.body_len))
    }

    /// Offset of the body from the record's start.
    pub fn body_off(&self) -> u64 {
        HEADER_LEN as u64 + u64::from(self.key_len)
    }

    /// The whole record: header, key, body, padding.
    pub fn encode(&self, key: &[u8], body: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; self.total_len() as usize];
        b[0] = self.kind as u8;
        if self.batch != 0 {
            b[FLAGS_OFF] = FLAG_BATCH;
            b[BATCH_OFF..HEADER_LEN].copy_from_slice(&self.batch.to_le_bytes());
        }
        b[KEY_LEN_OFF..BODY_LEN_OFF].copy_from_slice(&self.key_len.to_le_bytes());
        b[BODY_LEN_OFF..SEQ_OFF].copy_from_slice(&self.body_len.to_le_bytes());
        b[SEQ_OFF..SCHEMA_OFF].copy_from_slice(&self.seq.to_le_bytes());
        b[SCHEMA_OFF..EPOCH_OFF].copy_from_slice(&self.schema.to_le_bytes());
        b[EPOCH_OFF..PREV_OFF].copy_from_slice(&self.epoch.to_le_bytes());
        b[PREV_OFF..HCRC_OFF].copy_from_slice(&self.prev.to_le_bytes());
        let body_at = HEADER_LEN + key.len();
        b[HEADER_LEN..body_at].copy_from_slice(key);
        b[body_at..body_at + body.len()].copy_from_slice(body);
        let h = header_crc(&b[..HEADER_LEN], key);
        b[HCRC_OFF..BCRC_OFF].copy_from_slice(&h.to_le_bytes());
        b[BCRC_OFF..BCRC_OFF + 4].copy_from_slice(&masked_crc32c(body).to_le_bytes());
        b
    }

    /// Decodes a header from `b` (at least [`HEADER_LEN`] bytes, read at pool offset
    /// `at`) without checking checksums: `None` when the kind byte is no record's (the
    /// end of a chunk's records).
    pub fn decode(b: &[u8], at: u64) -> Result<Option<RecordHeader>> {
        if b.len() < HEADER_LEN {
            return Err(Error::corruption(Tier::Pmem, at, "short record header"));
        }
        let Some(kind) = b.first().copied().and_then(RecordKind::from_u8) else {
            return Ok(None);
        };
        let batch = match b.get(FLAGS_OFF).copied() {
            Some(0) => 0,
            Some(FLAG_BATCH) if le_u64(b, BATCH_OFF) != 0 => le_u64(b, BATCH_OFF),
            // Unknown flags, or a batch member without its batch: no record.
            _ => return Ok(None),
        };
        Ok(Some(RecordHeader {
            kind,
            key_len: le_u16(b, KEY_LEN_OFF),
            body_len: le_u32(b, BODY_LEN_OFF),
            seq: le_u64(b, SEQ_OFF),
            schema: le_u32(b, SCHEMA_OFF),
            epoch: le_u32(b, EPOCH_OFF),
            prev: le_u64(b, PREV_OFF),
            batch,
        }))
    }
}

/// The header checksum of a header `head` (its [`HEADER_LEN`] bytes) and `key`: bytes
/// 0..32, then the batch word if the flags say so, then the key.
fn header_crc(head: &[u8], key: &[u8]) -> u32 {
    use tierkv_core::format::checksum::{crc32c, crc32c_append, mask};
    let mut c = crc32c(head.get(..HCRC_OFF).unwrap_or_default());
    if head.get(FLAGS_OFF) == Some(&FLAG_BATCH) {
        c = crc32c_append(c, head.get(BATCH_OFF..HEADER_LEN).unwrap_or_default());
    }
    mask(crc32c_append(c, key))
}

/// Checks the header checksum of a record `rec` (read at `at`): its header and key are what
/// was written, so its lengths can be trusted.
pub fn verify_header(rec: &[u8], h: &RecordHeader, at: u64) -> Result<()> {
    let key_end = HEADER_LEN + usize::from(h.key_len);
    let (Some(head), Some(key)) = (rec.get(..HEADER_LEN), rec.get(HEADER_LEN..key_end)) else {
        return Err(Error::corruption(
            Tier::Pmem,
            at,
            "record shorter than its key",
        ));
    };
    let (got, want) = (header_crc(head, key), le_u32(rec, HCRC_OFF));
    super::check_crc(got, want, at)
}

/// Checks a whole record `rec` (header, key, body as read at `at`): both checksums.
pub fn verify(rec: &[u8], h: &RecordHeader, at: u64) -> Result<()> {
    verify_header(rec, h, at)?;
    let key_end = HEADER_LEN + usize::from(h.key_len);
    let body = rec
        .get(key_end..key_end + h.body_len as usize)
        .ok_or_else(|| Error::corruption(Tier::Pmem, at, "record shorter than its body"))?;
    let (got, want) = (masked_crc32c(body), le_u32(rec, BCRC_OFF));
    super::check_crc(got, want, at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> RecordHeader {
        RecordHeader {
            kind: RecordKind::Delta,
            key_len: 3,
            body_len: 5,
            seq: 9,
            schema: 2,
            epoch: 4,
            prev: 4096,
            batch: 0,
        }
    }

    #[test]
    fn record_round_trips_and_every_flip_is_caught() {
        let h = header();
        let b = h.encode(b"key", b"body!");
        assert_eq!(b.len() as u64, h.total_len());
        assert_eq!(b.len() % 8, 0);
        let back = RecordHeader::decode(&b, 0).ok().flatten();
        assert_eq!(back, Some(h));
        assert!(verify(&b, &h, 0).is_ok());
        for i in 1..(HEADER_LEN + 8) {
            if (40..48).contains(&i) {
                continue; // the reserved word is not covered
            }
            let mut bad = b.clone();
            bad[i] ^= 0x10;
            let ok = RecordHeader::decode(&bad, 0)
                .ok()
                .flatten()
                .is_some_and(|h2| verify(&bad, &h2, 0).is_ok());
            assert!(!ok, "flip at {i} went unnoticed");
        }
    }

    #[test]
    fn a_zero_kind_ends_the_records() {
        assert_eq!(RecordHeader::decode(&[0u8; HEADER_LEN], 0).ok(), Some(None));
        assert!(RecordHeader::decode(&[1u8; 4], 0).is_err());
    }

    /// A batch member's batch word is covered by the header checksum (a flip in it is
    /// caught), and an unflagged record's reserved word stays outside it as before.
    #[test]
    fn a_batch_members_batch_word_is_checked() {
        let h = RecordHeader {
            kind: RecordKind::Row,
            batch: 77,
            prev: 0,
            ..header()
        };
        let b = h.encode(b"key", b"body!");
        assert_eq!(b[FLAGS_OFF], FLAG_BATCH);
        let back = RecordHeader::decode(&b, 0).ok().flatten();
        assert_eq!(back, Some(h));
        assert!(verify(&b, &h, 0).is_ok());
        for i in [FLAGS_OFF, BATCH_OFF, BATCH_OFF + 7] {
            let mut bad = b.clone();
            bad[i] ^= 0x02;
            let ok = RecordHeader::decode(&bad, 0)
                .ok()
                .flatten()
                .is_some_and(|h2| verify(&bad, &h2, 0).is_ok());
            assert!(!ok, "flip at {i} went unnoticed");
        }
        let mut no_batch = b.clone();
        no_batch[BATCH_OFF..HEADER_LEN].fill(0);
        assert_eq!(RecordHeader::decode(&no_batch, 0).ok(), Some(None));
        let mut other_flag = b;
        other_flag[FLAGS_OFF] = 4;
        assert_eq!(RecordHeader::decode(&other_flag, 0).ok(), Some(None));
    }
}
