//! Table file codec (FORMAT.md §2 "Table file"; PrismDB §4.1 "data layout on flash": SST
//! files with an index of their data blocks and a Bloom filter).
//!
//! [`build_table`] turns sorted entries into the whole file image (block aligned);
//! [`decode_footer`], [`decode_index`] and [`decode_block`] check what is read back.
//! Every decoder is total over untrusted bytes (fuzzed in `fuzz/fuzz_targets/prismdb_table.rs`).
//!
//! Thread safety: pure functions.

use tierkv_core::format::checksum::masked_crc32c;
use tierkv_core::media::flash::FLASH_BLOCK;

use super::bloom::{Bloom, hash64};
use crate::codec::{Reader, push_key, read_u32};

/// Footer magic.
pub const TABLE_MAGIC: u64 = u64::from_le_bytes(*b"PDBTABL1");
/// Table format version.
pub const TABLE_VERSION: u32 = 1;
/// Target payload of a data block.
pub const BLOCK_TARGET: usize = FLASH_BLOCK;

/// Where a data block is and how to check it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockHandle {
    /// The block's last key.
    pub last_key: Vec<u8>,
    /// File offset (block aligned).
    pub offset: u64,
    /// Payload bytes (from the block start, length word included).
    pub len: u32,
    /// Masked crc32c of the payload.
    pub crc: u32,
}

/// A decoded footer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Footer {
    /// Index region offset and length, and its checksum.
    pub index: (u64, u32, u32),
    /// Bloom region offset and length, and its checksum.
    pub bloom: (u64, u32, u32),
    /// Number of entries.
    pub entries: u64,
    /// Smallest key.
    pub min_key: Vec<u8>,
    /// Largest key.
    pub max_key: Vec<u8>,
}

fn pad_to_block(b: &mut Vec<u8>) {
    let n = b.len().div_ceil(FLASH_BLOCK) * FLASH_BLOCK;
    b.resize(n, 0);
}

/// The file image of a table over `entries` (sorted, unique, non-empty), and its footer.
pub fn build_table(entries: &[(Vec<u8>, Vec<u8>)], bloom_bits: u32) -> (Vec<u8>, Footer) {
    // Room for the entries, their blocks' padding and the index and filter, so the image is
    // not copied as it grows.
    let data: usize = entries.iter().map(|(k, v)| 6 + k.len() + v.len()).sum();
    let mut file = Vec::with_capacity(data + data / 3 + entries.len() * 2 + 2 * FLASH_BLOCK);
    let mut index = Vec::new();
    let mut block: Vec<u8> = vec![0; 4];
    let mut last: &[u8] = &[];
    let mut flush = |file: &mut Vec<u8>, block: &mut Vec<u8>, last: &[u8]| {
        let len = u32::try_from(block.len()).unwrap_or(u32::MAX);
        if let Some(h) = block.get_mut(..4) {
            h.copy_from_slice(&len.to_le_bytes());
        }
        let h = BlockHandle {
            last_key: last.to_vec(),
            offset: file.len() as u64,
            len,
            crc: masked_crc32c(block),
        };
        file.extend_from_slice(block);
        pad_to_block(file);
        block.clear();
        block.extend_from_slice(&[0; 4]);
        index.push(h);
    };
    for (k, v) in entries {
        let n = 6 + k.len() + v.len();
        if block.len() > 4 && block.len() + n > BLOCK_TARGET {
            flush(&mut file, &mut block, last);
        }
        block.extend_from_slice(&u16::try_from(k.len()).unwrap_or(u16::MAX).to_le_bytes());
        block.extend_from_slice(&u32::try_from(v.len()).unwrap_or(u32::MAX).to_le_bytes());
        block.extend_from_slice(k);
        block.extend_from_slice(v);
        last = k;
    }
    if block.len() > 4 {
        flush(&mut file, &mut block, last);
    }
    let index_off = file.len() as u64;
    let mut ib = Vec::new();
    for h in &index {
        push_key(&mut ib, &h.last_key);
        ib.extend_from_slice(&h.offset.to_le_bytes());
        ib.extend_from_slice(&h.len.to_le_bytes());
        ib.extend_from_slice(&h.crc.to_le_bytes());
    }
    file.extend_from_slice(&ib);
    let bloom_off = file.len() as u64;
    let hashes: Vec<u64> = entries.iter().map(|(k, _)| hash64(k)).collect();
    let bb = Bloom::build(&hashes, bloom_bits).encode();
    file.extend_from_slice(&bb);
    pad_to_block(&mut file);
    let footer = Footer {
        index: (index_off, len32(&ib), masked_crc32c(&ib)),
        bloom: (bloom_off, len32(&bb), masked_crc32c(&bb)),
        entries: entries.len() as u64,
        min_key: entries.first().map(|e| e.0.clone()).unwrap_or_default(),
        max_key: entries.last().map(|e| e.0.clone()).unwrap_or_default(),
    };
    file.extend_from_slice(&encode_footer(&footer));
    (file, footer)
}

fn len32(b: &[u8]) -> u32 {
    u32::try_from(b.len()).unwrap_or(u32::MAX)
}

/// Encodes a footer block.
pub fn encode_footer(f: &Footer) -> Vec<u8> {
    let mut b = Vec::with_capacity(FLASH_BLOCK);
    b.extend_from_slice(&TABLE_MAGIC.to_le_bytes());
    b.extend_from_slice(&TABLE_VERSION.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    for (off, len, crc) in [f.index, f.bloom] {
        b.extend_from_slice(&off.to_le_bytes());
        b.extend_from_slice(&len.to_le_bytes());
        b.extend_from_slice(&crc.to_le_bytes());
    }
    b.extend_from_slice(&f.entries.to_le_bytes());
    push_key(&mut b, &f.min_key);
    push_key(&mut b, &f.max_key);
    b.resize(FLASH_BLOCK - 4, 0);
    let crc = masked_crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

/// Decodes a footer block (`None`: torn, garbage or another format).
pub fn decode_footer(b: &[u8]) -> Option<Footer> {
    let body = b.get(..FLASH_BLOCK - 4)?;
    if masked_crc32c(body) != read_u32(b, FLASH_BLOCK - 4)? {
        return None;
    }
    let mut r = Reader::new(body);
    if r.u64()? != TABLE_MAGIC || r.u32()? != TABLE_VERSION {
        return None;
    }
    r.u32()?;
    let mut region = || Some((r.u64()?, r.u32()?, r.u32()?));
    let index = region()?;
    let bloom = region()?;
    let entries = r.u64()?;
    let min_key = r.key()?.to_vec();
    let max_key = r.key()?.to_vec();
    Some(Footer {
        index,
        bloom,
        entries,
        min_key,
        max_key,
    })
}

/// Decodes the index region (`None` if malformed or not ascending).
pub fn decode_index(b: &[u8]) -> Option<Vec<BlockHandle>> {
    let mut r = Reader::new(b);
    let mut out: Vec<BlockHandle> = Vec::new();
    while r.pos() < b.len() {
        let last_key = r.key()?.to_vec();
        let h = BlockHandle {
            last_key,
            offset: r.u64()?,
            len: r.u32()?,
            crc: r.u32()?,
        };
        if h.len < 4
            || out
                .last()
                .is_some_and(|p| p.last_key >= h.last_key || p.offset >= h.offset)
        {
            return None;
        }
        out.push(h);
    }
    Some(out)
}

/// Decodes a data block's payload into its entries (`None` if malformed).
pub fn decode_block(payload: &[u8]) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    let len = read_u32(payload, 0)? as usize;
    let body = payload.get(4..len)?;
    let mut r = Reader::new(body);
    let mut out = Vec::new();
    while r.pos() < body.len() {
        let kl = usize::from(r.u16()?);
        let vl = r.u32()? as usize;
        let k = r.bytes(kl)?.to_vec();
        let v = r.bytes(vl)?.to_vec();
        out.push((k, v));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn table_image_decodes_back_and_damage_is_refused() {
        let entries: Vec<(Vec<u8>, Vec<u8>)> = (0..300u32)
            .map(|i| {
                (
                    format!("k{i:05}").into_bytes(),
                    vec![i as u8; (i as usize * 7) % 300],
                )
            })
            .collect();
        let (img, footer) = build_table(&entries, 10);
        assert_eq!(img.len() % FLASH_BLOCK, 0);
        let f = decode_footer(&img[img.len() - FLASH_BLOCK..]).unwrap();
        assert_eq!(f, footer);
        let (io, il, ic) = f.index;
        let ib = &img[io as usize..io as usize + il as usize];
        assert_eq!(masked_crc32c(ib), ic);
        let index = decode_index(ib).unwrap();
        let mut all = Vec::new();
        for h in &index {
            let p = &img[h.offset as usize..h.offset as usize + h.len as usize];
            assert_eq!(masked_crc32c(p), h.crc);
            all.extend(decode_block(p).unwrap());
        }
        assert_eq!(all, entries);
        let mut bad = img[img.len() - FLASH_BLOCK..].to_vec();
        bad[20] ^= 1;
        assert_eq!(decode_footer(&bad), None);
    }
}
