//! Table file codec (FORMAT.md §2 "Table file"; PrismDB §4.1 "data layout on flash": SST
//! files with an index of their data blocks and a Bloom filter).
//!
//! [`build_table`] turns sorted entries into the whole file image (block aligned);
//! [`decode_footer`], [`decode_index`] and [`decode_block`] check what is read back.
//! Every decoder is total over untrusted bytes (fuzzed in `fuzz/fuzz_targets/prismdb_table.rs`).
//!
//! Thread safety: pure functions.

use std::ops::{Deref, DerefMut};

use parking_lot::Mutex;
use tierkv_core::Result;
use tierkv_core::format::checksum::masked_crc32c;
use tierkv_core::media::flash::{AlignedBuf, FLASH_BLOCK};

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

/// Table images kept for reuse: at most [`POOLED_IMAGES`] buffers of at most
/// [`POOLED_IMAGE_MAX`] bytes. A fresh image is zeroed memory the kernel has to fault in
/// page by page: in a 2M-record PrismDB load that was 14% of all CPU (memset and page
/// faults of one new 16-22 MiB image per table written).
static IMAGE_POOL: Mutex<Vec<AlignedBuf>> = Mutex::new(Vec::new());
/// Images the pool keeps (a compaction thread holds its images from build to sync; on two
/// cores four were in use at once).
pub const POOLED_IMAGES: usize = 4;
/// Fresh images are allocated in steps of this many bytes, so that a pooled one fits the
/// next table of about the same size.
const IMAGE_STEP: usize = 8 << 20;
/// The largest image the pool keeps.
pub const POOLED_IMAGE_MAX: usize = 64 << 20;

/// Bytes held by the images kept for reuse (DRAM outside any cache).
pub fn pooled_image_bytes() -> usize {
    IMAGE_POOL.lock().iter().map(AlignedBuf::capacity).sum()
}

/// A table image built by [`build_table`]: 4 KiB aligned memory the flash device writes
/// from directly ([`crate::Table::write_image`]); its buffer goes back to a small pool
/// when dropped.
#[derive(Debug)]
pub struct TableImage {
    buf: AlignedBuf,
}

impl Deref for TableImage {
    type Target = AlignedBuf;

    fn deref(&self) -> &AlignedBuf {
        &self.buf
    }
}

impl DerefMut for TableImage {
    fn deref_mut(&mut self) -> &mut AlignedBuf {
        &mut self.buf
    }
}

impl Drop for TableImage {
    fn drop(&mut self) {
        if self.buf.capacity() > POOLED_IMAGE_MAX {
            return;
        }
        let mut pool = IMAGE_POOL.lock();
        if pool.len() < POOLED_IMAGES
            && let Ok(empty) = AlignedBuf::new(0)
        {
            pool.push(std::mem::replace(&mut self.buf, empty));
        }
    }
}

/// A table image under construction: entries are encoded into it once, with no staging
/// block and no copy into an I/O buffer afterwards. Its buffer comes from the pool when
/// one there is large enough (its old bytes are overwritten; padding is written as zeros).
struct Image {
    buf: AlignedBuf,
}

impl Image {
    fn with_capacity(bytes: usize) -> Result<Image> {
        let pooled = {
            let mut pool = IMAGE_POOL.lock();
            let fit = pool.iter().position(|b| b.capacity() >= bytes);
            fit.map(|i| pool.swap_remove(i))
        };
        let mut buf = match pooled {
            Some(b) => b,
            None => AlignedBuf::new(bytes.max(FLASH_BLOCK).next_multiple_of(IMAGE_STEP))?,
        };
        buf.set_len(0)?;
        Ok(Image { buf })
    }

    fn len(&self) -> usize {
        self.buf.len()
    }

    /// Room for `extra` more bytes: a larger allocation holding a copy when needed (the
    /// first estimate is made to be enough; entries that leave blocks mostly padding can
    /// exceed it).
    fn reserve(&mut self, extra: usize) -> Result<()> {
        let need = self.len() + extra;
        if need > self.buf.capacity() {
            let mut grown = AlignedBuf::new(need.max(2 * self.buf.capacity()))?;
            grown.set_len(self.len())?;
            grown.copy_from_slice(&self.buf);
            self.buf = grown;
        }
        Ok(())
    }

    fn extend(&mut self, bytes: &[u8]) -> Result<()> {
        self.reserve(bytes.len())?;
        let at = self.len();
        self.buf.set_len(at + bytes.len())?;
        if let Some(dst) = self.buf.get_mut(at..) {
            dst.copy_from_slice(bytes);
        }
        Ok(())
    }

    /// Zero bytes up to the next block boundary.
    fn pad_to_block(&mut self) -> Result<()> {
        let at = self.len();
        let n = at.div_ceil(FLASH_BLOCK) * FLASH_BLOCK;
        self.reserve(n - at)?;
        self.buf.set_len(n)?;
        if let Some(pad) = self.buf.get_mut(at..) {
            pad.fill(0);
        }
        Ok(())
    }
}

/// The length of the file image [`build_table`] makes of `entries` with `bloom_bits`,
/// computed without building it (the same block packing, index, filter and footer): what
/// a writer claims and creates files for before it builds the images one at a time.
pub fn table_len<K: AsRef<[u8]>, V: AsRef<[u8]>>(entries: &[(K, V)], bloom_bits: u32) -> u64 {
    let block_end = |at: usize| at.div_ceil(FLASH_BLOCK) * FLASH_BLOCK;
    // Index entry of a block: its last key (length-prefixed), offset, length, checksum.
    let index_entry = |last: &[u8]| 2 + last.len() + 8 + 4 + 4;
    let (mut len, mut block, mut index) = (4usize, 0usize, 0usize);
    let mut last: &[u8] = &[];
    for (k, v) in entries {
        let (k, v) = (k.as_ref(), v.as_ref());
        let n = 6 + k.len() + v.len();
        let open = len - block;
        if open > 4 && open + n > BLOCK_TARGET {
            index += index_entry(last);
            block = block_end(len);
            len = block + 4;
        }
        len += n;
        last = k;
    }
    if len - block > 4 {
        index += index_entry(last);
        block = block_end(len);
    }
    let filter = 4
        + (entries.len() * bloom_bits as usize)
            .max(64)
            .div_ceil(8)
            .next_multiple_of(crate::bloom::BLOCK_BYTES);
    (block_end(block + index + filter) + FLASH_BLOCK) as u64
}

/// The file image of a table over `entries` (sorted, unique, non-empty), and its footer.
/// The image is block aligned in memory and in length, ready for [`crate::Table::write_image`].
/// Fails only when memory for it cannot be had.
pub fn build_table<K: AsRef<[u8]>, V: AsRef<[u8]>>(
    entries: &[(K, V)],
    bloom_bits: u32,
) -> Result<(TableImage, Footer)> {
    let data: usize = entries
        .iter()
        .map(|(k, v)| 6 + k.as_ref().len() + v.as_ref().len())
        .sum();
    // Room for the entries, their blocks' padding and the index and filter, so that the
    // image is rarely copied as it grows.
    let mut img = Image::with_capacity(data + data / 3 + entries.len() * 2 + 2 * FLASH_BLOCK)?;
    let mut index = Vec::new();
    let mut hashes: Vec<u64> = Vec::with_capacity(entries.len());
    // The open block: its start in the image (a 4-byte length word, then entries).
    let mut block = img.len();
    img.extend(&[0; 4])?;
    let mut last: &[u8] = &[];
    let mut flush = |img: &mut Image, block: &mut usize, last: &[u8]| -> Result<()> {
        let len = img.len() - *block;
        let len32 = u32::try_from(len).unwrap_or(u32::MAX);
        let payload = img.buf.get_mut(*block..).unwrap_or_default();
        if let Some(h) = payload.get_mut(..4) {
            h.copy_from_slice(&len32.to_le_bytes());
        }
        index.push(BlockHandle {
            last_key: last.to_vec(),
            offset: *block as u64,
            len: len32,
            crc: masked_crc32c(payload),
        });
        img.pad_to_block()?;
        *block = img.len();
        img.extend(&[0; 4])
    };
    for (k, v) in entries {
        let (k, v) = (k.as_ref(), v.as_ref());
        let n = 6 + k.len() + v.len();
        let open = img.len() - block;
        if open > 4 && open + n > BLOCK_TARGET {
            flush(&mut img, &mut block, last)?;
        }
        img.extend(&u16::try_from(k.len()).unwrap_or(u16::MAX).to_le_bytes())?;
        img.extend(&u32::try_from(v.len()).unwrap_or(u32::MAX).to_le_bytes())?;
        img.extend(k)?;
        img.extend(v)?;
        hashes.push(hash64(k));
        last = k;
    }
    if img.len() - block > 4 {
        flush(&mut img, &mut block, last)?;
    }
    // The length word of a block that got no entry (zeros) is dropped.
    img.buf.set_len(block)?;
    let index_off = img.len() as u64;
    let mut ib = Vec::new();
    for h in &index {
        push_key(&mut ib, &h.last_key);
        ib.extend_from_slice(&h.offset.to_le_bytes());
        ib.extend_from_slice(&h.len.to_le_bytes());
        ib.extend_from_slice(&h.crc.to_le_bytes());
    }
    img.extend(&ib)?;
    let bloom_off = img.len() as u64;
    let bb = Bloom::build(&hashes, bloom_bits).encode();
    img.extend(&bb)?;
    img.pad_to_block()?;
    let key = |e: Option<&(K, V)>| e.map(|e| e.0.as_ref().to_vec()).unwrap_or_default();
    let footer = Footer {
        index: (index_off, len32(&ib), masked_crc32c(&ib)),
        bloom: (bloom_off, len32(&bb), masked_crc32c(&bb)),
        entries: entries.len() as u64,
        min_key: key(entries.first()),
        max_key: key(entries.last()),
    };
    img.extend(&encode_footer(&footer))?;
    Ok((TableImage { buf: img.buf }, footer))
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

/// The entries of a data block's payload as spans of it, in order: (key offset, key
/// length, value length), the value following its key; `None` if malformed. What
/// [`decode_block`] decodes, without copying any entry.
pub fn block_spans(payload: &[u8]) -> Option<Vec<(usize, usize, usize)>> {
    let len = read_u32(payload, 0)? as usize;
    let body = payload.get(4..len)?;
    let mut r = Reader::new(body);
    let mut out = Vec::new();
    while r.pos() < body.len() {
        let kl = usize::from(r.u16()?);
        let vl = r.u32()? as usize;
        let at = 4 + r.pos();
        r.bytes(kl)?;
        r.bytes(vl)?;
        out.push((at, kl, vl));
    }
    Some(out)
}

/// A buffer of `len` bytes from the image pool (its contents are whatever it held), for a
/// whole-table read ([`crate::Table::read_data`]).
pub(crate) fn pooled_buffer(len: usize) -> Result<TableImage> {
    let mut img = Image::with_capacity(len)?;
    img.buf.set_len(len)?;
    Ok(TableImage { buf: img.buf })
}

/// Decodes a data block's payload into its entries (`None` if malformed).
pub fn decode_block(payload: &[u8]) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    block_spans(payload)?
        .into_iter()
        .map(|(k, kl, vl)| {
            Some((
                payload.get(k..k + kl)?.to_vec(),
                payload.get(k + kl..k + kl + vl)?.to_vec(),
            ))
        })
        .collect()
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
        let (img, footer) = build_table(&entries, 10).unwrap();
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

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]
        /// `table_len` is the length of the image `build_table` makes, for entries of any
        /// size (empty values, values of many blocks, blocks that end exactly full).
        #[test]
        fn table_len_is_the_built_image_length(
            sizes in proptest::collection::vec((1usize..40, 0usize..9000), 0..300),
            bits in 1u32..20,
        ) {
            let entries: Vec<(Vec<u8>, Vec<u8>)> = sizes
                .iter()
                .enumerate()
                .map(|(i, &(k, v))| {
                    let mut key = format!("{i:06}").into_bytes();
                    key.resize(k.max(6), b'k');
                    (key, vec![7u8; v])
                })
                .collect();
            let (img, _) = build_table(&entries, bits).unwrap();
            proptest::prop_assert_eq!(table_len(&entries, bits), img.len() as u64);
        }
    }

    #[test]
    fn table_len_at_block_edges() {
        // Entries that fill a block to exactly BLOCK_TARGET, one byte over, one under.
        for extra in [-1i64, 0, 1] {
            let v = (BLOCK_TARGET as i64 - 4 - 6 - 6 + extra) as usize;
            let entries = vec![
                (b"a00000".to_vec(), vec![1u8; v]),
                (b"a00001".to_vec(), vec![2u8; 10]),
            ];
            let (img, _) = build_table(&entries, 10).unwrap();
            assert_eq!(table_len(&entries, 10), img.len() as u64, "extra {extra}");
        }
    }
}
