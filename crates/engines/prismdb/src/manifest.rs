//! The per-partition table manifest (FORMAT.md §2 "Manifest file"; PrismDB §6: "an
//! on-disk manifest file that stores the active list of partition SST files").
//!
//! One file per commit, `pPP-SSSSSSSSSSSSSSSS.man`; the commit point is the directory sync
//! after the new file is written and synced (the flash tier has no rename). Loading takes
//! the highest sequence that checks and removes every other manifest and every table file
//! it does not list (orphans of an interrupted compaction).
//!
//! Thread safety: functions; callers serialize commits of one partition.

use tierkv_core::format::checksum::masked_crc32c;
use tierkv_core::media::flash::{AlignedBuf, FLASH_BLOCK, FlashDevice, FlashFile};
use tierkv_core::{Error, Result, Tier};

use crate::format::{Reader, push_key, read_u32};

/// Manifest magic.
pub const MANIFEST_MAGIC: u64 = u64::from_le_bytes(*b"PDBMANI1");
/// Manifest format version.
pub const MANIFEST_VERSION: u32 = 1;

/// One listed table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableEntry {
    /// Table number.
    pub number: u64,
    /// File length.
    pub file_len: u64,
    /// Entries.
    pub entries: u64,
    /// Smallest key.
    pub min_key: Vec<u8>,
    /// Largest key.
    pub max_key: Vec<u8>,
}

/// A decoded manifest.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ManifestData {
    /// Partition.
    pub partition: u32,
    /// Commit sequence.
    pub seq: u64,
    /// Next table number to use.
    pub next_table: u64,
    /// Live tables, by key.
    pub tables: Vec<TableEntry>,
}

/// File name of manifest `seq` of `partition`.
pub fn manifest_name(partition: usize, seq: u64) -> String {
    format!("p{partition:02}-{seq:016x}.man")
}

/// Parses `pPP-<hex>.<ext>` into (partition, number, ext).
pub fn parse_name(name: &str) -> Option<(usize, u64, &str)> {
    let rest = name.strip_prefix('p')?;
    let (p, rest) = rest.split_once('-')?;
    let (n, ext) = rest.split_once('.')?;
    if n.len() != 16 {
        return None;
    }
    Some((p.parse().ok()?, u64::from_str_radix(n, 16).ok()?, ext))
}

impl ManifestData {
    /// Encodes a whole file (a multiple of 4 KiB, checksum in the last 4 bytes).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&MANIFEST_MAGIC.to_le_bytes());
        b.extend_from_slice(&MANIFEST_VERSION.to_le_bytes());
        b.extend_from_slice(&self.partition.to_le_bytes());
        b.extend_from_slice(&self.seq.to_le_bytes());
        b.extend_from_slice(&self.next_table.to_le_bytes());
        b.extend_from_slice(
            &u32::try_from(self.tables.len())
                .unwrap_or(u32::MAX)
                .to_le_bytes(),
        );
        for t in &self.tables {
            b.extend_from_slice(&t.number.to_le_bytes());
            b.extend_from_slice(&t.file_len.to_le_bytes());
            b.extend_from_slice(&t.entries.to_le_bytes());
            push_key(&mut b, &t.min_key);
            push_key(&mut b, &t.max_key);
        }
        let n = (b.len() + 4).div_ceil(FLASH_BLOCK) * FLASH_BLOCK;
        b.resize(n - 4, 0);
        let crc = masked_crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes a manifest file's bytes (`None`: torn, garbage, other format).
    pub fn decode(b: &[u8]) -> Option<ManifestData> {
        if b.len() < FLASH_BLOCK || !b.len().is_multiple_of(FLASH_BLOCK) {
            return None;
        }
        let body = b.get(..b.len() - 4)?;
        if masked_crc32c(body) != read_u32(b, b.len() - 4)? {
            return None;
        }
        let mut r = Reader::new(body);
        if r.u64()? != MANIFEST_MAGIC || r.u32()? != MANIFEST_VERSION {
            return None;
        }
        let partition = r.u32()?;
        let seq = r.u64()?;
        let next_table = r.u64()?;
        let n = r.u32()? as usize;
        let mut tables: Vec<TableEntry> = Vec::with_capacity(n.min(1 << 16));
        for _ in 0..n {
            let t = TableEntry {
                number: r.u64()?,
                file_len: r.u64()?,
                entries: r.u64()?,
                min_key: r.key()?.to_vec(),
                max_key: r.key()?.to_vec(),
            };
            if t.min_key > t.max_key
                || tables.last().is_some_and(|p| p.max_key >= t.min_key)
                || t.number >= next_table
            {
                return None;
            }
            tables.push(t);
        }
        Some(ManifestData {
            partition,
            seq,
            next_table,
            tables,
        })
    }
}

/// Writes manifest `m` and makes it the committed one (file synced, directory synced).
pub fn commit(dev: &FlashDevice, m: &ManifestData) -> Result<()> {
    let img = m.encode();
    let name = manifest_name(m.partition as usize, m.seq);
    let f = dev.create_file(&name, img.len() as u64)?;
    commit_file(dev, &f, &img)
}

/// Writes manifest image `img` into `f` (created with its length), syncs it and the
/// directory: the commit point.
pub fn commit_file(dev: &FlashDevice, f: &FlashFile, img: &[u8]) -> Result<()> {
    f.write_at(0, &AlignedBuf::from_slice(img)?)?;
    f.sync()?;
    // IMPORTANT: the commit point.
    dev.sync_dir()
}

/// Loads partition `p`'s committed manifest and removes every other manifest and every
/// table file it does not list. A partition without a valid manifest has no tables.
pub fn load(dev: &FlashDevice, p: usize) -> Result<ManifestData> {
    let mut mans: Vec<(u64, String)> = Vec::new();
    let mut tables: Vec<(u64, String)> = Vec::new();
    for name in dev.list_files() {
        match parse_name(&name) {
            Some((pp, n, "man")) if pp == p => mans.push((n, name)),
            Some((pp, n, "sst")) if pp == p => tables.push((n, name)),
            _ => {}
        }
    }
    mans.sort();
    let mut chosen: Option<ManifestData> = None;
    for (seq, name) in mans.iter().rev() {
        let f = dev.open_file(name)?;
        let mut buf = AlignedBuf::new(usize::try_from(f.len()).unwrap_or(0))?;
        if !f.is_empty() && f.len().is_multiple_of(FLASH_BLOCK as u64) {
            f.read_at(0, &mut buf)?;
        }
        if let Some(m) =
            ManifestData::decode(&buf).filter(|m| m.seq == *seq && m.partition as usize == p)
        {
            chosen = Some(m);
            break;
        }
    }
    if chosen.is_none() && !tables.is_empty() {
        return Err(Error::corruption(
            Tier::Flash,
            0,
            format!("partition {p}: table files but no manifest that checks"),
        ));
    }
    let m = chosen.unwrap_or(ManifestData {
        partition: u32::try_from(p).unwrap_or(0),
        seq: 0,
        next_table: 1,
        tables: Vec::new(),
    });
    let mut removed = false;
    for (seq, name) in &mans {
        // Keep the committed one and its predecessor (the fallback).
        if *seq != m.seq && *seq + 1 != m.seq {
            dev.remove_file(name)?;
            removed = true;
        }
    }
    for (n, name) in &tables {
        if !m.tables.iter().any(|t| t.number == *n) {
            dev.remove_file(name)?;
            removed = true;
        }
    }
    for t in &m.tables {
        if !tables.iter().any(|(n, _)| *n == t.number) {
            return Err(Error::corruption(
                Tier::Flash,
                0,
                format!(
                    "manifest {} of partition {p} lists table {} which is missing",
                    m.seq, t.number
                ),
            ));
        }
    }
    if removed {
        dev.sync_dir()?;
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn manifest_roundtrips_and_rejects_damage() {
        let m = ManifestData {
            partition: 3,
            seq: 9,
            next_table: 12,
            tables: vec![
                TableEntry {
                    number: 4,
                    file_len: 8192,
                    entries: 5,
                    min_key: b"a".to_vec(),
                    max_key: b"c".to_vec(),
                },
                TableEntry {
                    number: 11,
                    file_len: 8192,
                    entries: 2,
                    min_key: b"d".to_vec(),
                    max_key: b"f".to_vec(),
                },
            ],
        };
        let enc = m.encode();
        assert_eq!(ManifestData::decode(&enc), Some(m));
        for i in [0, 13, 40, enc.len() - 1] {
            let mut b = enc.clone();
            b[i] ^= 0x10;
            assert_eq!(ManifestData::decode(&b), None, "flip at {i}");
        }
        assert_eq!(parse_name("p03-0000000000000009.man"), Some((3, 9, "man")));
        assert_eq!(parse_name("junk"), None);
    }
}
