//! The operation log (spec: `FORMAT.md` § Operation log; HeterMM §5.3): log blocks of
//! 2^m bytes cut into pages of 2^k bytes; each writer thread appends to its own page
//! (Algorithm 2), so a page holds one thread's entries in the order they were made durable.
//!
//! Log block header (page 0, bytes 0..64; the layout of `format::NumberedHead`):
//! ```text
//! 0   8  magic      "HMMOPLOG"
//! 8   4  version    u32 (VERSION)
//! 12  1  page_bits  k: entries never cross a 2^k boundary
//! 13  1  block_bits m
//! 14  2  reserved   0
//! 16  8  seq        the block's sequence number (also in its directory word)
//! 24  36 reserved   0
//! 60  4  crc        masked CRC-32C of bytes 0..60
//! ```
//! Entry (8-byte aligned; page 0 starts at 64, other pages at 0):
//! ```text
//! 0   8  ts         timestamp; 0 = not committed
//! 8   8  address    the logical address the entry covers (log reclamation, §5.3.1)
//! 16  8  record     put: its record's logical address; delete: the removed record's
//! 24  2  key_len    >= 1 (a batch: 0)
//! 26  1  kind       1 = put, 2 = delete, 3 = batch (`format::batch`: its operations
//!                   are the value; `record` is 0), 4 = batch part and 5 = batch commit
//!                   (a batch that spans log pages: `format::batch`; `record` is 0)
//! 27  1  reserved   0
//! 28  4  value_len  0 for a delete
//! 32  4  crc        masked CRC-32C of: seq (u64 LE), ts (u64 LE; version 5 on), bytes
//!                   8..32, key, value
//! 36  4  reserved   0
//! 40  ..            key, value, zero padding to 8 bytes
//! ```
//! The covered address is at least the record's and at least that of the version the
//! write replaced (`FORMAT.md` § Covered address says why).
//!
//! **Commit.** A reader of a page stops at the first entry whose ts is 0 (or above the
//! largest timestamp) or whose checksum fails: that entry and everything after it were
//! never acknowledged (a thread finishes one entry's persists before it starts the next).
//! Since version 5 the checksum covers the ts, so an entry is committed by **one persist**
//! of the whole entry (ours, issue 22): a torn entry — any of its lines missing, the ts line
//! included — fails its checksum. The paper's **two-step write** (§5.3.2: the entry with
//! ts = 0, persisted; then the 8-byte ts, persisted) stays as option `two_step_write`; it
//! writes the same bytes. Versions 2 to 4 left the ts out of the checksum and were always
//! written in two steps: there a torn first step could leave a stale ts word, which is why
//! log blocks are zeroed and persisted before they are published (still done). Other
//! stale bytes carry another block's seq in their checksum.
//!
//! Thread safety: pure functions.

use super::record::MAX_TS;
use super::{HEADER_LEN, NumberedHead, align8, put_at, u16_at, u32_at, u64_at};
use tierkv_core::Result;
use tierkv_core::format::checksum::{crc32c_append, mask};

/// Magic bytes of a log block.
pub const MAGIC: [u8; 8] = *b"HMMOPLOG";
/// The version this build writes and the newest it reads (4: batch parts and commits,
/// kinds 4 and 5; 5: the checksum covers the ts, so one persist commits an entry).
pub const VERSION: u32 = 5;
/// The first version whose entry checksum covers the ts word.
pub const TS_IN_CRC_VERSION: u32 = 5;
/// The oldest version this build reads: version 2 has the same entry layout without batch
/// entries (kind 3). Version 3 exists so that a build without batches refuses a log that
/// holds them (it would take a batch entry for the end of its page and lose the rest), and
/// version 4 likewise for the parts and commits of batches that span pages (kinds 4, 5);
/// version 5 because an older build would find every entry's checksum wrong.
pub const MIN_READ_VERSION: u32 = 2;
/// Bytes of an entry header.
pub const ENTRY_HEADER_LEN: u64 = 40;

const E_ADDRESS_OFF: usize = 8;
const E_RECORD_OFF: usize = E_ADDRESS_OFF + 8;
const E_KEY_LEN_OFF: usize = E_RECORD_OFF + 8;
const E_KIND_OFF: usize = E_KEY_LEN_OFF + 2;
const E_VALUE_LEN_OFF: usize = E_KIND_OFF + 2;
const E_CRC_OFF: usize = E_VALUE_LEN_OFF + 4;

/// What an entry records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// A put of `key` = `value`.
    Put,
    /// A delete of `key`.
    Delete,
    /// A write batch (ours): no key, its operations in the value (`format::batch`).
    Batch,
    /// A part of a write batch that spans log pages (ours): no key, some of its operations
    /// in the value (`format::batch`); the batch's commit timestamp as ts. Stands for
    /// nothing without its [`EntryKind::BatchCommit`].
    BatchPart,
    /// The commit of a write batch that spans log pages (ours): no key, the number of its
    /// parts and operations as the value (`format::batch::encode_commit`).
    BatchCommit,
}

impl EntryKind {
    pub(super) fn code(self) -> u8 {
        match self {
            EntryKind::Put => 1,
            EntryKind::Delete => 2,
            EntryKind::Batch => 3,
            EntryKind::BatchPart => 4,
            EntryKind::BatchCommit => 5,
        }
    }

    /// True for the kinds of write batches (no key, a payload, no record).
    pub const fn is_batch(self) -> bool {
        matches!(
            self,
            EntryKind::Batch | EntryKind::BatchPart | EntryKind::BatchCommit
        )
    }
}

/// Bytes of an entry with this key and value.
pub const fn entry_len(key_len: u64, value_len: u64) -> u64 {
    align8(ENTRY_HEADER_LEN + key_len + value_len)
}

/// The header of a log block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogHeader {
    /// k.
    pub page_bits: u8,
    /// m.
    pub block_bits: u8,
    /// Sequence number.
    pub seq: u64,
    /// The format version the block was written with (entries of versions before
    /// [`TS_IN_CRC_VERSION`] leave the ts out of their checksum).
    pub version: u32,
}

impl LogHeader {
    /// Encodes the header (with its `version`; a new block has [`VERSION`]).
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        NumberedHead {
            page_bits: self.page_bits,
            block_bits: self.block_bits,
            number: self.seq,
        }
        .encode(&MAGIC, self.version)
    }

    /// Decodes the header of the log block at `at`, which the directory says has `seq`.
    pub fn decode(bytes: &[u8], at: u64, seq: u64, block_bits: u32) -> Result<LogHeader> {
        let h = NumberedHead::decode(
            bytes,
            at,
            "hetermm log block",
            &MAGIC,
            VERSION,
            seq,
            block_bits,
        )?;
        // Version 1 entries have another layout (FORMAT.md § Version changes): reading
        // them as version 2 would find no entry and silently lose the log.
        let found = super::u32_at(bytes, 8).unwrap_or_default();
        if !(MIN_READ_VERSION..=VERSION).contains(&found) {
            return Err(tierkv_core::Error::UnsupportedFormat {
                what: "hetermm log block (version 1 logs have another entry layout; versions 2 to 5 are read)",
                found,
                supported: VERSION,
            });
        }
        Ok(LogHeader {
            page_bits: h.page_bits,
            block_bits: h.block_bits,
            seq,
            version: found,
        })
    }
}

/// A committed entry read back from a log page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    /// Timestamp (>= 1).
    pub ts: u64,
    /// The logical address it covers.
    pub address: u64,
    /// The logical address of its record (a put) or of the record it removed (a delete).
    pub record: u64,
    /// Put or delete.
    pub kind: EntryKind,
    /// The key.
    pub key: &'a [u8],
    /// The value (empty for a delete).
    pub value: &'a [u8],
    /// Bytes the entry occupies.
    pub len: u64,
}

/// The entry's checksum; `ts` is `Some` from [`TS_IN_CRC_VERSION`] on.
fn entry_crc(seq: u64, ts: Option<u64>, head: &[u8], key: &[u8], value: &[u8]) -> u32 {
    let mut c = crc32c_append(0, &seq.to_le_bytes());
    if let Some(ts) = ts {
        c = crc32c_append(c, &ts.to_le_bytes());
    }
    let c = crc32c_append(c, head.get(E_ADDRESS_OFF..E_CRC_OFF).unwrap_or_default());
    mask(crc32c_append(crc32c_append(c, key), value))
}

/// Where an entry's write happened: the address it covers and its record's address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    /// The covered address (maxAddress; never below `record`).
    pub address: u64,
    /// The record's logical address (a delete: the removed record's).
    pub record: u64,
}

/// Encodes into `out` (cleared first; a writer reuses its buffer) an entry with timestamp
/// `ts` of a block with sequence `seq` (the current [`VERSION`]: the checksum covers `ts`).
/// A two-step write stores these bytes with the ts word zeroed first, then the ts.
pub fn encode_entry(
    out: &mut Vec<u8>,
    seq: u64,
    ts: u64,
    at: Place,
    kind: EntryKind,
    key: &[u8],
    value: &[u8],
) {
    let len = entry_len(key.len() as u64, value.len() as u64) as usize;
    out.clear();
    out.resize(len, 0);
    let out = out.as_mut_slice();
    put_at(out, 0, &ts.to_le_bytes());
    put_at(out, E_ADDRESS_OFF, &at.address.to_le_bytes());
    put_at(out, E_RECORD_OFF, &at.record.to_le_bytes());
    put_at(out, E_KEY_LEN_OFF, &(key.len() as u16).to_le_bytes());
    out[E_KIND_OFF] = kind.code();
    put_at(out, E_VALUE_LEN_OFF, &(value.len() as u32).to_le_bytes());
    let crc = entry_crc(seq, Some(ts), out, key, value);
    put_at(out, E_CRC_OFF, &crc.to_le_bytes());
    let k = ENTRY_HEADER_LEN as usize;
    put_at(out, k, key);
    put_at(out, k + key.len(), value);
}

/// Decodes the entry at the start of `bytes` (the rest of its page) in a block with
/// sequence `seq` written with format `version`. `None` means the page ends here: unused
/// space, an uncommitted (ts = 0) or torn entry, or bytes left from another block.
pub fn decode_entry(bytes: &[u8], seq: u64, version: u32) -> Option<Entry<'_>> {
    let ts = u64_at(bytes, 0)?;
    let key_len = u16_at(bytes, E_KEY_LEN_OFF)?;
    let kind = match bytes.get(E_KIND_OFF)? {
        1 => EntryKind::Put,
        2 => EntryKind::Delete,
        3 => EntryKind::Batch,
        4 => EntryKind::BatchPart,
        5 => EntryKind::BatchCommit,
        _ => return None,
    };
    let batch = kind.is_batch();
    let value_len = u32_at(bytes, E_VALUE_LEN_OFF)?;
    let len = entry_len(u64::from(key_len), u64::from(value_len));
    if ts == 0
        || ts > MAX_TS
        || (key_len == 0) != batch
        || (batch && value_len == 0)
        || len > bytes.len() as u64
        || bytes.get(E_KIND_OFF + 1) != Some(&0)
    {
        return None;
    }
    let k = ENTRY_HEADER_LEN as usize;
    let key = bytes.get(k..k + usize::from(key_len))?;
    let value = bytes.get(k + key.len()..k + key.len() + value_len as usize)?;
    let (address, record) = (u64_at(bytes, E_ADDRESS_OFF)?, u64_at(bytes, E_RECORD_OFF)?);
    let crc_ts = (version >= TS_IN_CRC_VERSION).then_some(ts);
    if u32_at(bytes, E_CRC_OFF)? != entry_crc(seq, crc_ts, bytes, key, value)
        || (kind == EntryKind::Delete && !value.is_empty())
        || record > address
        || (batch && record != 0)
    {
        return None;
    }
    Some(Entry {
        ts,
        address,
        record,
        kind,
        key,
        value,
        len,
    })
}

/// Every committed entry of a log block (`block` = its whole bytes), page by page.
pub fn walk<'a>(block: &'a [u8], header: &LogHeader, mut f: impl FnMut(Entry<'a>)) {
    let page = 1usize << header.page_bits;
    let mut page_start = 0;
    while page_start + page <= block.len() {
        let mut off = if page_start == 0 {
            HEADER_LEN
        } else {
            page_start
        };
        while let Some(e) = block
            .get(off..page_start + page)
            .and_then(|b| decode_entry(b, header.seq, header.version))
        {
            off += e.len as usize;
            f(e);
        }
        page_start += page;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLACE: Place = Place {
        address: 8192,
        record: 4096,
    };

    fn enc(seq: u64, ts: u64, at: Place, kind: EntryKind, key: &[u8], v: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_entry(&mut out, seq, ts, at, kind, key, v);
        out
    }

    fn committed(seq: u64, ts: u64, key: &[u8], value: &[u8]) -> Vec<u8> {
        enc(seq, ts, PLACE, EntryKind::Put, key, value)
    }

    #[test]
    fn committed_entry_round_trips_and_uncommitted_one_ends_the_page() {
        let e = committed(3, 10, b"key", b"value");
        let d = decode_entry(&e, 3, VERSION).unwrap();
        assert_eq!(
            (d.ts, d.address, d.record, d.key, d.value),
            (10, 8192, 4096, &b"key"[..], &b"value"[..])
        );
        assert_eq!(d.kind, EntryKind::Put);
        let step1 = enc(3, 0, PLACE, EntryKind::Put, b"key", b"value");
        assert!(
            decode_entry(&step1, 3, VERSION).is_none(),
            "ts 0 is not committed"
        );
    }

    #[test]
    fn entry_of_another_incarnation_or_torn_is_not_read() {
        let e = committed(3, 10, b"key", b"value");
        assert!(
            decode_entry(&e, 4, VERSION).is_none(),
            "another block's seq"
        );
        let mut torn = e.clone();
        torn[43] ^= 1;
        assert!(decode_entry(&torn, 3, VERSION).is_none());
        let mut moved = e.clone();
        moved[17] ^= 1;
        assert!(
            decode_entry(&moved, 3, VERSION).is_none(),
            "the record address is checksummed"
        );
        assert!(decode_entry(&e[..28], 3, VERSION).is_none());
        let mut long = e;
        long[28] = 0xff;
        assert!(
            decode_entry(&long, 3, VERSION).is_none(),
            "value past the page"
        );
    }

    #[test]
    fn an_entry_with_an_impossible_timestamp_is_not_read() {
        // Regression (crash-image test): a torn first step left stale bytes in the ts word.
        let e = committed(3, u64::MAX, b"key", b"value");
        assert!(decode_entry(&e, 3, VERSION).is_none());
        let e = committed(3, MAX_TS, b"key", b"value");
        assert!(decode_entry(&e, 3, VERSION).is_some());
    }

    #[test]
    fn walk_reads_each_page_until_its_first_uncommitted_entry() {
        let h = LogHeader {
            page_bits: 12,
            block_bits: 14,
            seq: 7,
            version: VERSION,
        };
        let mut b = vec![0u8; 1 << 14];
        b[..64].copy_from_slice(&h.encode());
        let e1 = committed(7, 1, b"a", b"1");
        let e2 = enc(7, 0, PLACE, EntryKind::Delete, b"b", b"");
        let e3 = committed(7, 3, b"c", b"3");
        b[64..64 + e1.len()].copy_from_slice(&e1);
        let at = 64 + e1.len();
        b[at..at + e2.len()].copy_from_slice(&e2);
        b[at + e2.len()..at + e2.len() + e3.len()].copy_from_slice(&e3);
        b[8192..8192 + e3.len()].copy_from_slice(&e3);
        let mut seen = Vec::new();
        walk(&b, &h, |e| seen.push(e.ts));
        assert_eq!(seen, vec![1, 3], "page 0 stops at the uncommitted delete");
        assert!(LogHeader::decode(&b, 0, 7, 14).is_ok());
        let v2 = NumberedHead {
            page_bits: 12,
            block_bits: 14,
            number: 7,
        }
        .encode(&MAGIC, 2);
        assert!(
            LogHeader::decode(&v2, 0, 7, 14).is_ok(),
            "version 2 logs (no batch entries) are still read"
        );
        assert!(LogHeader::decode(&b, 0, 8, 14).is_err());
        let v1 = NumberedHead {
            page_bits: 12,
            block_bits: 14,
            number: 7,
        }
        .encode(&MAGIC, 1);
        assert!(matches!(
            LogHeader::decode(&v1, 0, 7, 14),
            Err(tierkv_core::Error::UnsupportedFormat { found: 1, .. })
        ));
    }

    #[test]
    fn a_batch_entry_has_no_key_and_a_payload_and_nothing_else_does() {
        let at = Place {
            address: 8192,
            record: 0,
        };
        let mut e = enc(3, 9, at, EntryKind::Batch, b"", b"payload!");
        e[..8].copy_from_slice(&9u64.to_le_bytes());
        let d = decode_entry(&e, 3, VERSION).unwrap();
        assert_eq!(
            (d.kind, d.key, d.value),
            (EntryKind::Batch, &b""[..], &b"payload!"[..])
        );
        let mut keyed = enc(3, 9, at, EntryKind::Batch, b"k", b"payload!");
        keyed[..8].copy_from_slice(&9u64.to_le_bytes());
        assert!(
            decode_entry(&keyed, 3, VERSION).is_none(),
            "a batch entry with a key"
        );
        let mut empty = enc(3, 9, at, EntryKind::Batch, b"", b"");
        empty[..8].copy_from_slice(&9u64.to_le_bytes());
        assert!(
            decode_entry(&empty, 3, VERSION).is_none(),
            "a batch entry without payload"
        );
        let mut put = enc(3, 9, at, EntryKind::Put, b"", b"v");
        put[..8].copy_from_slice(&9u64.to_le_bytes());
        assert!(
            decode_entry(&put, 3, VERSION).is_none(),
            "a put without a key"
        );
        let named = Place {
            address: 8192,
            record: 4096,
        };
        for kind in [EntryKind::BatchPart, EntryKind::BatchCommit] {
            let mut e = enc(3, 9, at, kind, b"", b"payload!");
            e[..8].copy_from_slice(&9u64.to_le_bytes());
            assert_eq!(decode_entry(&e, 3, VERSION).map(|d| d.kind), Some(kind));
            let mut keyed = enc(3, 9, at, kind, b"k", b"payload!");
            keyed[..8].copy_from_slice(&9u64.to_le_bytes());
            assert!(
                decode_entry(&keyed, 3, VERSION).is_none(),
                "{kind:?} with a key"
            );
            let mut named = enc(
                3,
                9,
                Place {
                    address: 8192,
                    record: 64,
                },
                kind,
                b"",
                b"p",
            );
            named[..8].copy_from_slice(&9u64.to_le_bytes());
            assert!(
                decode_entry(&named, 3, VERSION).is_none(),
                "{kind:?} naming a record"
            );
        }
        let mut six = enc(3, 9, at, EntryKind::BatchCommit, b"", b"payload!");
        six[..8].copy_from_slice(&9u64.to_le_bytes());
        six[26] = 6;
        assert!(decode_entry(&six, 3, VERSION).is_none(), "kind 6");
        let mut rec = enc(3, 9, named, EntryKind::Batch, b"", b"payload!");
        rec[..8].copy_from_slice(&9u64.to_le_bytes());
        assert!(
            decode_entry(&rec, 3, VERSION).is_none(),
            "a batch entry naming a record"
        );
    }

    /// Version 5 commits an entry with one persist: its checksum covers the ts, so an
    /// image that kept the ts line of an entry but lost any other line — or kept a stale
    /// ts — reads as the end of the page.
    #[test]
    fn a_version_5_entry_torn_anywhere_the_ts_included_is_not_read() {
        let e = committed(3, 10, b"key", &[7u8; 200]);
        assert!(decode_entry(&e, 3, VERSION).is_some());
        for line in 0..e.len().div_ceil(64) {
            let mut lost = e.clone();
            let end = ((line + 1) * 64).min(e.len());
            lost[line * 64..end].fill(0);
            assert!(
                decode_entry(&lost, 3, VERSION).is_none(),
                "line {line} of the entry missing"
            );
        }
        let mut other_ts = e.clone();
        other_ts[..8].copy_from_slice(&11u64.to_le_bytes());
        assert!(
            decode_entry(&other_ts, 3, VERSION).is_none(),
            "a ts the entry was not written with"
        );
    }

    /// Blocks of versions 2 to 4 (two-step writes, the ts outside the checksum) are still
    /// read, by their own rule.
    #[test]
    fn an_entry_of_a_version_4_block_is_read_with_the_ts_outside_its_checksum() {
        let mut e = enc(3, 0, PLACE, EntryKind::Put, b"key", b"value");
        let crc = entry_crc(3, None, &e, b"key", b"value");
        put_at(&mut e, E_CRC_OFF, &crc.to_le_bytes());
        e[..8].copy_from_slice(&10u64.to_le_bytes());
        let d = decode_entry(&e, 3, 4).expect("a version 4 entry");
        assert_eq!((d.ts, d.key, d.value), (10, &b"key"[..], &b"value"[..]));
        assert!(
            decode_entry(&e, 3, VERSION).is_none(),
            "the version 5 rule checks the ts"
        );
        let v5 = committed(3, 10, b"key", b"value");
        assert!(decode_entry(&v5, 3, 4).is_none());
    }
}
