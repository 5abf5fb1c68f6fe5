//! On-pmem formats (FORMAT.md §1): the superblock, slab chunk headers and objects, with
//! their encoders and checking decoders (PrismDB §4.1 "data layout on NVM", §6 "crash
//! consistency": logical timestamp in each object's header).
//!
//! Every decoder takes untrusted bytes (a crash image, a bit flip) and returns an error or
//! `None`, never panics; each has a fuzz target (`fuzz/fuzz_targets/prismdb_*.rs`).
//!
//! Thread safety: pure functions.

use tierkv_core::format::checksum::{crc32c, crc32c_append, mask, masked_crc32c};
use tierkv_core::{Error, Result, Tier};

/// Superblock magic, `PRISMDB1` read as a little-endian u64.
pub const SUPER_MAGIC: u64 = u64::from_le_bytes(*b"PRISMDB1");
/// Slab chunk magic.
pub const CHUNK_MAGIC: u64 = u64::from_le_bytes(*b"PDBSLAB1");
/// Format version of the pool layout new stores get (2: write batches, FORMAT.md
/// "Version changes").
pub const FORMAT_VERSION: u32 = 2;
/// The oldest version this build opens (a version-1 store has no batch records).
pub const MIN_FORMAT_VERSION: u32 = 1;
/// Bytes of the superblock.
pub const SUPER_LEN: usize = 4096;
/// Allocator tag of slab chunks ("PDBS").
pub const SLAB_TAG: u32 = 0x5044_4253;
/// Bytes of a slab chunk header (slots start after it, 64-byte aligned).
pub const CHUNK_HEADER_LEN: u64 = 64;
/// Bytes of an object header.
pub const OBJECT_HEADER_LEN: usize = 24;
/// Longest key an object can hold.
pub const MAX_KEY_LEN: usize = 1024;
/// Most size classes.
pub const MAX_CLASSES: usize = 16;

// Object header offsets (FORMAT.md §1 "Object").
const OBJ_TS: usize = 0;
const OBJ_CRC: usize = OBJ_TS + 8;
const OBJ_KLEN: usize = OBJ_CRC + 4;
const OBJ_FLAGS: usize = OBJ_KLEN + 2;
const OBJ_VLEN: usize = OBJ_FLAGS + 2;
const FLAG_TOMBSTONE: u8 = 1;

/// Checks a list of slot sizes against a chunk size.
pub fn check_classes(classes: &[u32], chunk_size: u64) -> Result<()> {
    if classes.is_empty() || classes.len() > MAX_CLASSES {
        return Err(Error::invalid(format!(
            "prismdb: 1..={MAX_CLASSES} size classes"
        )));
    }
    for w in classes.windows(2) {
        if w.first() >= w.get(1) {
            return Err(Error::invalid("prismdb: size classes must ascend"));
        }
    }
    for &c in classes {
        if c < 64 || c % 64 != 0 {
            return Err(Error::invalid(format!(
                "prismdb: slot size {c} must be a multiple of 64"
            )));
        }
        if u64::from(c) * 2 + CHUNK_HEADER_LEN > chunk_size {
            return Err(Error::invalid(format!(
                "prismdb: slot size {c} too large for chunk size {chunk_size} (two slots per chunk)"
            )));
        }
    }
    Ok(())
}

/// The persistent layout parameters (FORMAT.md §1 "Superblock").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// Allocator chunk size.
    pub chunk_size: u64,
    /// Slot sizes.
    pub classes: Vec<u32>,
    /// Partition boundaries.
    pub bounds: Vec<Vec<u8>>,
}

impl Superblock {
    /// Encodes into exactly [`SUPER_LEN`] bytes.
    pub fn encode(&self) -> Result<Vec<u8>> {
        let mut b = Vec::with_capacity(SUPER_LEN);
        b.extend_from_slice(&SUPER_MAGIC.to_le_bytes());
        b.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        b.extend_from_slice(
            &u32::try_from(self.bounds.len() + 1)
                .unwrap_or(u32::MAX)
                .to_le_bytes(),
        );
        b.extend_from_slice(&self.chunk_size.to_le_bytes());
        b.extend_from_slice(
            &u32::try_from(self.classes.len())
                .unwrap_or(u32::MAX)
                .to_le_bytes(),
        );
        for c in &self.classes {
            b.extend_from_slice(&c.to_le_bytes());
        }
        for k in &self.bounds {
            let len =
                u16::try_from(k.len()).map_err(|_| Error::invalid("partition bound too long"))?;
            b.extend_from_slice(&len.to_le_bytes());
            b.extend_from_slice(k);
        }
        if b.len() > SUPER_LEN - 4 {
            return Err(Error::invalid(
                "prismdb: partition bounds do not fit the superblock",
            ));
        }
        b.resize(SUPER_LEN - 4, 0);
        let crc = masked_crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        Ok(b)
    }

    /// Decodes and checks a superblock read at pool offset `off`.
    pub fn decode(bytes: &[u8], off: u64) -> Result<Superblock> {
        let bad =
            |what: &str| Error::corruption(Tier::Pmem, off, format!("prismdb superblock: {what}"));
        if bytes.len() < SUPER_LEN {
            return Err(bad("short"));
        }
        let mut r = Reader::new(bytes.get(..SUPER_LEN - 4).ok_or_else(|| bad("short"))?);
        let crc = read_u32(bytes, SUPER_LEN - 4).ok_or_else(|| bad("short"))?;
        if r.u64() != Some(SUPER_MAGIC) {
            return Err(bad("bad magic"));
        }
        if masked_crc32c(bytes.get(..SUPER_LEN - 4).unwrap_or_default()) != crc {
            return Err(bad("checksum mismatch"));
        }
        let version = r.u32().ok_or_else(|| bad("short"))?;
        if !(MIN_FORMAT_VERSION..=FORMAT_VERSION).contains(&version) {
            return Err(Error::invalid(format!(
                "prismdb superblock: unsupported format version {version}"
            )));
        }
        let partitions = r.u32().ok_or_else(|| bad("short"))? as usize;
        let chunk_size = r.u64().ok_or_else(|| bad("short"))?;
        let nclasses = r.u32().ok_or_else(|| bad("short"))? as usize;
        if !(1..=64).contains(&partitions) || !(1..=MAX_CLASSES).contains(&nclasses) {
            return Err(bad("partition or class count out of range"));
        }
        let classes = (0..nclasses)
            .map(|_| r.u32().ok_or_else(|| bad("short")))
            .collect::<Result<Vec<_>>>()?;
        let bounds = (1..partitions)
            .map(|_| {
                let len = r.u16().ok_or_else(|| bad("short"))? as usize;
                r.bytes(len).map(<[u8]>::to_vec).ok_or_else(|| bad("short"))
            })
            .collect::<Result<Vec<_>>>()?;
        check_classes(&classes, chunk_size).map_err(|_| bad("bad size classes"))?;
        Ok(Superblock {
            chunk_size,
            classes,
            bounds,
        })
    }
}

/// Encodes the header of a slab chunk of `partition`, class `class`, `slot_size` bytes.
pub fn encode_chunk_header(partition: u32, class: u32, slot_size: u32) -> [u8; 64] {
    let mut b = [0u8; 64];
    put(&mut b, 0, &CHUNK_MAGIC.to_le_bytes());
    put(&mut b, 8, &partition.to_le_bytes());
    put(&mut b, 12, &class.to_le_bytes());
    put(&mut b, 16, &slot_size.to_le_bytes());
    let crc = masked_crc32c(b.get(..60).unwrap_or_default());
    put(&mut b, 60, &crc.to_le_bytes());
    b
}

/// A decoded chunk header: (partition, class, slot size), or `None` if it does not check.
pub fn decode_chunk_header(b: &[u8]) -> Option<(u32, u32, u32)> {
    let head = b.get(..60)?;
    if read_u64(b, 0)? != CHUNK_MAGIC || masked_crc32c(head) != read_u32(b, 60)? {
        return None;
    }
    Some((read_u32(b, 8)?, read_u32(b, 12)?, read_u32(b, 16)?))
}

/// Bytes an object with these lengths takes in a slot.
pub fn object_len(key_len: usize, value_len: usize) -> usize {
    OBJECT_HEADER_LEN + key_len + value_len
}

/// Encodes an object (`value = None`: a tombstone). `ts` must be non-zero.
pub fn encode_object(ts: u64, key: &[u8], value: Option<&[u8]>) -> Vec<u8> {
    let mut b = Vec::new();
    encode_object_into(&mut b, ts, key, value);
    b
}

/// [`encode_object`] into `b` (its contents replaced; its allocation reused).
pub fn encode_object_into(b: &mut Vec<u8>, ts: u64, key: &[u8], value: Option<&[u8]>) {
    let v = value.unwrap_or_default();
    b.clear();
    b.resize(object_len(key.len(), v.len()), 0);
    let b = b.as_mut_slice();
    put(b, OBJ_TS, &ts.to_le_bytes());
    put(
        b,
        OBJ_KLEN,
        &u16::try_from(key.len()).unwrap_or(u16::MAX).to_le_bytes(),
    );
    if value.is_none() {
        put(b, OBJ_FLAGS, &[FLAG_TOMBSTONE]);
    }
    put(
        b,
        OBJ_VLEN,
        &u32::try_from(v.len()).unwrap_or(u32::MAX).to_le_bytes(),
    );
    put(b, OBJECT_HEADER_LEN, key);
    put(b, OBJECT_HEADER_LEN + key.len(), v);
    let crc = object_crc(b);
    put(b, OBJ_CRC, &crc.to_le_bytes());
}

/// The masked checksum of an encoded object (over everything but the checksum field).
pub fn object_crc(b: &[u8]) -> u32 {
    let c = crc32c(b.get(..OBJ_CRC).unwrap_or_default());
    mask(crc32c_append(c, b.get(OBJ_KLEN..).unwrap_or_default()))
}

/// A live object read from a slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Object<'a> {
    /// Logical timestamp.
    pub ts: u64,
    /// Key.
    pub key: &'a [u8],
    /// Value (`None`: tombstone).
    pub value: Option<&'a [u8]>,
}

/// Decodes the object in `slot` (the slot's bytes): `None` if the slot is free, torn or
/// garbage (timestamp 0, lengths out of range, checksum mismatch).
pub fn decode_object(slot: &[u8]) -> Option<Object<'_>> {
    let ts = read_u64(slot, OBJ_TS)?;
    if ts == 0 {
        return None;
    }
    let klen = usize::from(read_u16(slot, OBJ_KLEN)?);
    let flags = *slot.get(OBJ_FLAGS)?;
    let vlen = read_u32(slot, OBJ_VLEN)? as usize;
    if klen == 0 || klen > MAX_KEY_LEN || flags & !FLAG_TOMBSTONE != 0 {
        return None;
    }
    let total = object_len(klen, vlen);
    let body = slot.get(..total)?;
    if object_crc(body) != read_u32(slot, OBJ_CRC)? {
        return None;
    }
    let key = body.get(OBJECT_HEADER_LEN..OBJECT_HEADER_LEN + klen)?;
    let value = if flags & FLAG_TOMBSTONE != 0 {
        if vlen != 0 {
            return None;
        }
        None
    } else {
        Some(body.get(OBJECT_HEADER_LEN + klen..)?)
    };
    Some(Object { ts, key, value })
}

/// The total length of the object whose header starts `slot` (no checks beyond lengths).
pub fn stored_len(slot: &[u8]) -> Option<usize> {
    let klen = usize::from(read_u16(slot, OBJ_KLEN)?);
    let vlen = read_u32(slot, OBJ_VLEN)? as usize;
    Some(object_len(klen, vlen))
}

fn put(b: &mut [u8], off: usize, data: &[u8]) {
    if let Some(dst) = b.get_mut(off..off + data.len()) {
        dst.copy_from_slice(data);
    }
}

pub use tierkv_sstable::codec::{Reader, push_key, read_u16, read_u32, read_u64};

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn object_roundtrips_and_every_single_bit_flip_is_caught() {
        let enc = encode_object(7, b"key", Some(b"value"));
        let o = decode_object(&enc).unwrap();
        assert_eq!(
            (o.ts, o.key, o.value),
            (7, &b"key"[..], Some(&b"value"[..]))
        );
        for bit in 0..enc.len() * 8 {
            let mut b = enc.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            if let Some(o) = decode_object(&b) {
                panic!("flip of bit {bit} decoded as {o:?}");
            }
        }
        let t = encode_object(9, b"k", None);
        assert_eq!(decode_object(&t).unwrap().value, None);
        assert_eq!(decode_object(&[0u8; 64]), None);
    }

    #[test]
    fn superblock_roundtrips_and_rejects_damage() {
        let s = Superblock {
            chunk_size: 1 << 16,
            classes: vec![128, 256],
            bounds: vec![b"m".to_vec()],
        };
        let enc = s.encode().unwrap();
        assert_eq!(Superblock::decode(&enc, 0).unwrap(), s);
        let mut bad = enc.clone();
        bad[30] ^= 1;
        assert!(Superblock::decode(&bad, 0).unwrap_err().is_corruption());
        assert!(Superblock::decode(&enc[..100], 0).is_err());
    }

    #[test]
    fn chunk_header_roundtrips() {
        let h = encode_chunk_header(3, 1, 256);
        assert_eq!(decode_chunk_header(&h), Some((3, 1, 256)));
        let mut bad = h;
        bad[9] ^= 4;
        assert_eq!(decode_chunk_header(&bad), None);
    }
}
