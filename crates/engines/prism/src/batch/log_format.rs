//! The batch log: how a [`WriteBatch`] is laid out in its log chunks before its commit
//! (PRISM has no batches; this is tierkv's redo log beside the PWB, issue 24). The spec,
//! with the persist order, is `FORMAT.md` § Write batches; this module repeats the layout.
//!
//! ```text
//! header (HEADER_LEN = 40 bytes)
//! off  len  field
//! 0    8    magic       b"TKVBATCH"
//! 8    4    version     u32 = 1
//! 12   4    op count    u32
//! 16   8    body length u64
//! 24   8    batch id    u64 (per-store sequence; diagnostics)
//! 32   4    crc         masked CRC-32C of bytes 0..32, then the body
//! 36   4    zero
//! body: op count operations, in key order
//! 0    1    kind        1 = put, 2 = delete
//! 1    3    zero
//! 4    4    key length  u32
//! 8    4    value length u32 (0 for a delete)
//! 12   ..   key, then value
//! ```
//!
//! [`decode`] reads bytes back from pmem: it checks every field and length and returns
//! [`Error::Corruption`] (never panics) for anything else; it has a fuzz target
//! (`fuzz/fuzz_targets/prism_batch_log.rs`).
//!
//! Thread safety: pure functions.

use tierkv_core::format::checksum::{crc32c, crc32c_append, mask};
use tierkv_core::{Error, Result, Tier, WriteBatch};

/// The log's magic.
pub const MAGIC: [u8; 8] = *b"TKVBATCH";
/// The log format version.
pub const VERSION: u32 = 1;
/// Offset of the version.
pub const VERSION_OFF: usize = MAGIC.len();
/// Offset of the operation count.
pub const COUNT_OFF: usize = VERSION_OFF + 4;
/// Offset of the body length.
pub const BODY_LEN_OFF: usize = COUNT_OFF + 4;
/// Offset of the batch id.
pub const ID_OFF: usize = BODY_LEN_OFF + 8;
/// Offset of the checksum (which covers the bytes before it, then the body).
pub const CRC_OFF: usize = ID_OFF + 8;
/// Bytes of the header.
pub const HEADER_LEN: usize = CRC_OFF + 8;
/// Bytes of an operation's header.
const OP_HEADER_LEN: usize = 12;
const KIND_PUT: u8 = 1;
const KIND_DELETE: u8 = 2;

/// A decoded log header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogHeader {
    /// Operations in the body.
    pub count: u32,
    /// Bytes of the body.
    pub body_len: u64,
    /// The batch id.
    pub id: u64,
    crc: u32,
}

impl LogHeader {
    /// Bytes of the whole log (header and body); saturates (a damaged header's body
    /// length can be anything, and no log that long fits anywhere).
    pub fn total_len(&self) -> u64 {
        (HEADER_LEN as u64).saturating_add(self.body_len)
    }
}

/// Bytes `batch` takes in a log.
pub fn encoded_len(batch: &WriteBatch) -> usize {
    HEADER_LEN + batch.len() * OP_HEADER_LEN + batch.bytes()
}

/// The log of `batch` with id `id`. The caller has checked the batch's limits, which keep
/// every length within u32.
pub fn encode(batch: &WriteBatch, id: u64) -> Result<Vec<u8>> {
    let too_big = || Error::invalid("write batch too large for the batch log");
    let mut out = vec![0u8; HEADER_LEN];
    out.reserve(encoded_len(batch) - HEADER_LEN);
    for (key, op) in batch.iter() {
        let value = op.value();
        out.push(if value.is_some() {
            KIND_PUT
        } else {
            KIND_DELETE
        });
        out.extend_from_slice(&[0; 3]);
        let klen = u32::try_from(key.len()).map_err(|_| too_big())?;
        let vlen = u32::try_from(value.map_or(0, <[u8]>::len)).map_err(|_| too_big())?;
        out.extend_from_slice(&klen.to_le_bytes());
        out.extend_from_slice(&vlen.to_le_bytes());
        out.extend_from_slice(key);
        out.extend_from_slice(value.unwrap_or(&[]));
    }
    let count = u32::try_from(batch.len()).map_err(|_| too_big())?;
    let body_len = (out.len() - HEADER_LEN) as u64;
    out[..VERSION_OFF].copy_from_slice(&MAGIC);
    out[VERSION_OFF..COUNT_OFF].copy_from_slice(&VERSION.to_le_bytes());
    out[COUNT_OFF..BODY_LEN_OFF].copy_from_slice(&count.to_le_bytes());
    out[BODY_LEN_OFF..ID_OFF].copy_from_slice(&body_len.to_le_bytes());
    out[ID_OFF..CRC_OFF].copy_from_slice(&id.to_le_bytes());
    let crc = checksum(&out[..CRC_OFF], &out[HEADER_LEN..]);
    out[CRC_OFF..CRC_OFF + 4].copy_from_slice(&crc.to_le_bytes());
    Ok(out)
}

/// The checksum of a log with header bytes `head` (`0..CRC_OFF`) and `body`.
pub fn checksum(head: &[u8], body: &[u8]) -> u32 {
    mask(crc32c_append(crc32c(head), body))
}

fn corrupt(at: u64, what: impl Into<String>) -> Error {
    Error::corruption(Tier::Pmem, at, format!("batch log: {}", what.into()))
}

fn le_u32(b: &[u8], off: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(w)
}

fn le_u64(b: &[u8], off: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(w)
}

/// Decodes the header of the log at pool offset `at` (for messages).
pub fn decode_header(bytes: &[u8], at: u64) -> Result<LogHeader> {
    if bytes.len() < HEADER_LEN {
        return Err(corrupt(at, "shorter than its header"));
    }
    if bytes[..VERSION_OFF] != MAGIC {
        return Err(corrupt(at, "bad magic"));
    }
    let version = le_u32(bytes, VERSION_OFF);
    if version != VERSION {
        return Err(Error::UnsupportedFormat {
            what: "prism batch log",
            found: version,
            supported: VERSION,
        });
    }
    if bytes[CRC_OFF + 4..HEADER_LEN] != [0; 4] {
        return Err(corrupt(at, "reserved header bytes are not zero"));
    }
    Ok(LogHeader {
        count: le_u32(bytes, COUNT_OFF),
        body_len: le_u64(bytes, BODY_LEN_OFF),
        id: le_u64(bytes, ID_OFF),
        crc: le_u32(bytes, CRC_OFF),
    })
}

/// Decodes a whole log (header and body, nothing after) read from pool offset `at`.
pub fn decode(bytes: &[u8], at: u64) -> Result<(LogHeader, WriteBatch)> {
    let h = decode_header(bytes, at)?;
    if h.total_len() != bytes.len() as u64 {
        return Err(corrupt(
            at,
            format!(
                "body of {} bytes, {} given",
                h.body_len,
                bytes.len() - HEADER_LEN
            ),
        ));
    }
    let body = &bytes[HEADER_LEN..];
    if checksum(&bytes[..CRC_OFF], body) != h.crc {
        return Err(Error::ChecksumMismatch {
            tier: Tier::Pmem,
            offset: at,
            expected: h.crc,
            got: checksum(&bytes[..CRC_OFF], body),
        });
    }
    let mut batch = WriteBatch::new();
    let mut pos = 0usize;
    for i in 0..h.count {
        let op = body
            .get(pos..pos + OP_HEADER_LEN)
            .ok_or_else(|| corrupt(at, format!("operation {i} past the body")))?;
        if op[1..4] != [0; 3] {
            return Err(corrupt(
                at,
                format!("operation {i}: reserved bytes are not zero"),
            ));
        }
        let klen = le_u32(op, 4) as usize;
        let vlen = le_u32(op, 8) as usize;
        let start = pos + OP_HEADER_LEN;
        let key = body
            .get(start..start.saturating_add(klen))
            .ok_or_else(|| corrupt(at, format!("operation {i}: key past the body")))?;
        let vstart = start + klen;
        let value = body
            .get(vstart..vstart.saturating_add(vlen))
            .ok_or_else(|| corrupt(at, format!("operation {i}: value past the body")))?;
        match op[0] {
            KIND_PUT => batch.put(key, value),
            KIND_DELETE if vlen == 0 => batch.delete(key),
            k => {
                return Err(corrupt(
                    at,
                    format!("operation {i}: bad kind {k} (value length {vlen})"),
                ));
            }
        };
        if batch.len() != i as usize + 1 {
            return Err(corrupt(at, format!("operation {i}: key repeated")));
        }
        pos = vstart + vlen;
    }
    if pos != body.len() {
        return Err(corrupt(
            at,
            format!("{} bytes after the last operation", body.len() - pos),
        ));
    }
    Ok((h, batch))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]
    use super::*;

    fn sample() -> WriteBatch {
        let mut b = WriteBatch::new();
        b.put("alpha", "one")
            .delete("beta")
            .put("gamma", vec![9u8; 300])
            .put("e", "");
        b
    }

    #[test]
    fn round_trips() {
        let b = sample();
        let bytes = encode(&b, 77).unwrap();
        assert_eq!(bytes.len(), encoded_len(&b));
        let (h, back) = decode(&bytes, 4096).unwrap();
        assert_eq!((h.count, h.id), (4, 77));
        assert_eq!(back, b);
    }

    #[test]
    fn every_flipped_byte_and_every_cut_is_refused() {
        let bytes = encode(&sample(), 5).unwrap();
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x40;
            assert!(decode(&bad, 0).is_err(), "flip at {i} accepted");
        }
        for n in 0..bytes.len() {
            assert!(decode(&bytes[..n], 0).is_err(), "cut at {n} accepted");
        }
    }

    #[test]
    fn a_newer_version_is_unsupported_format() {
        let mut bytes = encode(&sample(), 5).unwrap();
        bytes[VERSION_OFF] = 2;
        assert!(matches!(
            decode(&bytes, 0),
            Err(Error::UnsupportedFormat { .. })
        ));
    }

    /// Regression (CI fuzz run of 2026-11-29, `prism_batch_log`): a header whose body
    /// length is near `u64::MAX` overflowed `total_len` (a panic with overflow checks).
    #[test]
    fn a_body_length_near_u64_max_is_refused_not_overflowed() {
        let mut b = vec![0u8; HEADER_LEN];
        b[..VERSION_OFF].copy_from_slice(&MAGIC);
        b[VERSION_OFF..COUNT_OFF].copy_from_slice(&VERSION.to_le_bytes());
        b[BODY_LEN_OFF..ID_OFF].copy_from_slice(&(u64::MAX - 3).to_le_bytes());
        b.extend_from_slice(&[0; 11]);
        let h = decode_header(&b, 0).unwrap();
        assert_eq!(h.total_len(), u64::MAX);
        assert!(decode(&b, 0).is_err());
    }
}
