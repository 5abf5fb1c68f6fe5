//! The directory (`FORMAT.md` § Directory): the persistent list of live logs and of the
//! PMTables of every level, written whole to a fresh allocation and published with one
//! atomic root update (the "one atomic root update" of the one-piece flush, §4.2, and the
//! level lists of §4.7).
//!
//! ```text
//! 0   8  magic "MIODIR01"     8  4 version     12 4 crc (bytes 16..len)
//! 16  4  len                  20 4 levels      24 8 generation
//! 32  8  next_id              40 8 last_seq    48 4 log_count   52 4 reserved
//! 56  .. logs { id, off, chunks, (version 4:) nonce }, merge_count u32, pad u32,
//!        merges { level, old id, new id, mark offset }, then per level: count u32, pad u32,
//!        tables { id, head, entries, max_seq, alloc_count u32, pad u32, allocs { off, chunks } }
//!        (version 3:) flash_levels u32, pad u32, flash_next u64, then per flash level:
//!        count u32, pad u32, table numbers u64 (`mio:flash`; 0 flash levels otherwise)
//! ```
//!
//! [`decode`] is total (fuzz target `mio_dir`).
//!
//! Thread safety: plain data.

use tierkv_core::format::checksum::{masked_crc32c, unmask};
use tierkv_core::{Error, Result, Tier};

/// Magic of a directory object.
pub const MAGIC: &[u8; 8] = b"MIODIR01";
/// Format version written (2: the logs may hold batch records; 3: the flash repository's
/// tables; 4: a nonce per log, whose records may leave holes, `FORMAT.md` § Version
/// changes).
pub const VERSION: u32 = 4;
/// The oldest version read (1 and 2 have the same layout without the flash section; 1's
/// logs hold no batch records; 1-3 list logs without a nonce, replayed by the old rule).
pub const MIN_VERSION: u32 = 1;
/// Bytes before the logs.
pub const FIXED_LEN: usize = 56;
/// Most levels a directory may hold.
pub const MAX_LEVELS: usize = 64;
/// Most flash levels a directory may hold.
pub const MAX_FLASH_LEVELS: usize = 16;

/// One run of chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    /// Pool offset.
    pub off: u64,
    /// Chunks.
    pub chunks: u64,
}

/// A live log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogMeta {
    /// Log id.
    pub id: u64,
    /// Its run.
    pub run: Run,
    /// The random secret folded into its records' checksums (`wal.rs`); 0 for a log
    /// listed by a directory older than version 4 (records back to back, no holes).
    pub nonce: u64,
}

/// A PMTable as the directory lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableMeta {
    /// Table id (larger = created later).
    pub id: u64,
    /// Pool offset of its head node.
    pub head: u64,
    /// Nodes (every version).
    pub entries: u64,
    /// Largest seq in it.
    pub max_seq: u64,
    /// The runs holding its nodes.
    pub allocs: Vec<Run>,
}

/// A zero-copy compaction in progress (§4.3, §4.7: "state variables in the NVM"): the
/// newtable `new` is being merged into the oldtable `old` of `level`; `mark` is the pool
/// offset of the insertion-mark word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MergeMeta {
    /// The level of both tables.
    pub level: u64,
    /// The oldtable's id.
    pub old: u64,
    /// The newtable's id.
    pub new: u64,
    /// Where the insertion mark is.
    pub mark: u64,
}

/// A decoded directory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Directory {
    /// +1 per publish.
    pub generation: u64,
    /// Next table or log id.
    pub next_id: u64,
    /// Largest seq held by any table.
    pub last_seq: u64,
    /// Live logs, oldest first.
    pub logs: Vec<LogMeta>,
    /// Zero-copy compactions in progress (at most one per level).
    pub merges: Vec<MergeMeta>,
    /// Tables per level, oldest first; the last level is the repository.
    pub levels: Vec<Vec<TableMeta>>,
    /// `mio:flash`: the numbers of the sorted tables of each flash level (level 0 oldest
    /// first, the others in key order); empty for a store whose repository is on pmem.
    pub flash: Vec<Vec<u64>>,
    /// `mio:flash`: the next table number.
    pub flash_next: u64,
}

impl Directory {
    /// An empty directory with `levels` levels.
    pub fn empty(levels: usize) -> Directory {
        Directory {
            generation: 0,
            next_id: 1,
            last_seq: 0,
            logs: Vec::new(),
            merges: Vec::new(),
            levels: vec![Vec::new(); levels],
            flash: Vec::new(),
            flash_next: 1,
        }
    }

    /// Every run the directory references (tables and logs).
    pub fn runs(&self) -> impl Iterator<Item = Run> + '_ {
        self.logs.iter().map(|l| l.run).chain(
            self.levels
                .iter()
                .flatten()
                .flat_map(|t| t.allocs.iter().copied()),
        )
    }
}

/// Encodes a directory.
pub fn encode(d: &Directory) -> Vec<u8> {
    let mut b = Vec::with_capacity(256);
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&VERSION.to_le_bytes());
    b.extend_from_slice(&[0; 8]); // crc, len
    b.extend_from_slice(&(d.levels.len() as u32).to_le_bytes());
    for w in [d.generation, d.next_id, d.last_seq] {
        b.extend_from_slice(&w.to_le_bytes());
    }
    b.extend_from_slice(&(d.logs.len() as u32).to_le_bytes());
    b.extend_from_slice(&[0; 4]);
    for l in &d.logs {
        for w in [l.id, l.run.off, l.run.chunks, l.nonce] {
            b.extend_from_slice(&w.to_le_bytes());
        }
    }
    b.extend_from_slice(&(d.merges.len() as u32).to_le_bytes());
    b.extend_from_slice(&[0; 4]);
    for m in &d.merges {
        for w in [m.level, m.old, m.new, m.mark] {
            b.extend_from_slice(&w.to_le_bytes());
        }
    }
    for level in &d.levels {
        b.extend_from_slice(&(level.len() as u32).to_le_bytes());
        b.extend_from_slice(&[0; 4]);
        for t in level {
            for w in [t.id, t.head, t.entries, t.max_seq] {
                b.extend_from_slice(&w.to_le_bytes());
            }
            b.extend_from_slice(&(t.allocs.len() as u32).to_le_bytes());
            b.extend_from_slice(&[0; 4]);
            for r in &t.allocs {
                b.extend_from_slice(&r.off.to_le_bytes());
                b.extend_from_slice(&r.chunks.to_le_bytes());
            }
        }
    }
    b.extend_from_slice(&(d.flash.len() as u32).to_le_bytes());
    b.extend_from_slice(&[0; 4]);
    b.extend_from_slice(&d.flash_next.to_le_bytes());
    for level in &d.flash {
        b.extend_from_slice(&(level.len() as u32).to_le_bytes());
        b.extend_from_slice(&[0; 4]);
        for n in level {
            b.extend_from_slice(&n.to_le_bytes());
        }
    }
    let len = b.len() as u32;
    b[16..20].copy_from_slice(&len.to_le_bytes());
    let crc = masked_crc32c(&b[16..]);
    b[12..16].copy_from_slice(&crc.to_le_bytes());
    b
}

/// Reads little-endian fields from a byte slice, every read bounds-checked.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
    base: u64,
}

impl Reader<'_> {
    fn bad(&self, what: &str) -> Error {
        Error::corruption(
            Tier::Pmem,
            self.base + self.at as u64,
            format!("mio directory: {what}"),
        )
    }
    fn u32(&mut self) -> Result<u32> {
        let v = self
            .b
            .get(self.at..self.at + 4)
            .and_then(|s| s.try_into().ok())
            .map(u32::from_le_bytes)
            .ok_or_else(|| self.bad("truncated"))?;
        self.at += 4;
        Ok(v)
    }
    fn u64(&mut self) -> Result<u64> {
        let v = self
            .b
            .get(self.at..self.at + 8)
            .and_then(|s| s.try_into().ok())
            .map(u64::from_le_bytes)
            .ok_or_else(|| self.bad("truncated"))?;
        self.at += 8;
        Ok(v)
    }
    fn count(&mut self, each: usize) -> Result<usize> {
        let n = self.u32()? as usize;
        if n.saturating_mul(each) > self.b.len().saturating_sub(self.at) {
            return Err(self.bad("a count runs past the object"));
        }
        Ok(n)
    }
}

/// The length a directory at the start of `bytes` says it has (to know how much to read).
pub fn stated_len(bytes: &[u8]) -> Option<usize> {
    bytes
        .get(16..20)
        .and_then(|s| s.try_into().ok())
        .map(|s| u32::from_le_bytes(s) as usize)
}

/// Decodes a directory object found at pool offset `base`.
pub fn decode(bytes: &[u8], base: u64) -> Result<Directory> {
    let corrupt =
        |what: &str| Error::corruption(Tier::Pmem, base, format!("mio directory: {what}"));
    if bytes.get(..8) != Some(&MAGIC[..]) {
        return Err(corrupt("bad magic"));
    }
    let len = stated_len(bytes).ok_or_else(|| corrupt("truncated"))?;
    if len < FIXED_LEN || len > bytes.len() {
        return Err(corrupt("bad length"));
    }
    let body = bytes.get(..len).ok_or_else(|| corrupt("truncated"))?;
    let mut r = Reader {
        b: body,
        at: 8,
        base,
    };
    let version = r.u32()?;
    if !(MIN_VERSION..=VERSION).contains(&version) {
        return Err(Error::UnsupportedFormat {
            what: "mio directory",
            found: version,
            supported: VERSION,
        });
    }
    let stored = r.u32()?;
    let got = masked_crc32c(body.get(16..).unwrap_or_default());
    if unmask(stored) != unmask(got) {
        return Err(Error::ChecksumMismatch {
            tier: Tier::Pmem,
            offset: base,
            expected: stored,
            got,
        });
    }
    r.u32()?; // len, checked above
    let levels = r.u32()? as usize;
    if levels == 0 || levels > MAX_LEVELS {
        return Err(corrupt("bad level count"));
    }
    let mut d = Directory {
        generation: r.u64()?,
        next_id: r.u64()?,
        last_seq: r.u64()?,
        flash_next: 1,
        ..Directory::default()
    };
    let logs = r.count(if version >= 4 { 32 } else { 24 })?;
    r.u32()?;
    for _ in 0..logs {
        let id = r.u64()?;
        let run = Run {
            off: r.u64()?,
            chunks: r.u64()?,
        };
        let nonce = if version >= 4 { r.u64()? } else { 0 };
        if version >= 4 && nonce == 0 {
            return Err(corrupt("a log without a nonce"));
        }
        d.logs.push(LogMeta { id, run, nonce });
    }
    let merges = r.count(32)?;
    r.u32()?;
    for _ in 0..merges {
        let (level, old, new, mark) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?);
        d.merges.push(MergeMeta {
            level,
            old,
            new,
            mark,
        });
    }
    for _ in 0..levels {
        let n = r.count(40)?;
        r.u32()?;
        let mut level = Vec::with_capacity(n);
        for _ in 0..n {
            let (id, head, entries, max_seq) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?);
            let na = r.count(16)?;
            r.u32()?;
            let mut allocs = Vec::with_capacity(na);
            for _ in 0..na {
                allocs.push(Run {
                    off: r.u64()?,
                    chunks: r.u64()?,
                });
            }
            level.push(TableMeta {
                id,
                head,
                entries,
                max_seq,
                allocs,
            });
        }
        d.levels.push(level);
    }
    if version >= 3 {
        let flash_levels = r.u32()? as usize;
        if flash_levels > MAX_FLASH_LEVELS {
            return Err(corrupt("bad flash level count"));
        }
        r.u32()?;
        d.flash_next = r.u64()?;
        for _ in 0..flash_levels {
            let n = r.count(8)?;
            r.u32()?;
            let mut level = Vec::with_capacity(n);
            for _ in 0..n {
                let number = r.u64()?;
                if number >= d.flash_next {
                    return Err(corrupt("a flash table number past flash_next"));
                }
                level.push(number);
            }
            d.flash.push(level);
        }
    }
    if r.at != len {
        return Err(corrupt("trailing bytes"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Directory {
        let mut d = Directory::empty(3);
        d.generation = 4;
        d.next_id = 12;
        d.last_seq = 99;
        d.merges.push(MergeMeta {
            level: 1,
            old: 3,
            new: 5,
            mark: 4096,
        });
        d.logs.push(LogMeta {
            id: 11,
            run: Run {
                off: 8192,
                chunks: 2,
            },
            nonce: 0x5eed_0000_0000_0001,
        });
        d.levels[0].push(TableMeta {
            id: 7,
            head: 65536,
            entries: 10,
            max_seq: 90,
            allocs: vec![
                Run {
                    off: 65536,
                    chunks: 3,
                },
                Run {
                    off: 1 << 20,
                    chunks: 1,
                },
            ],
        });
        d.flash = vec![vec![3, 1], vec![2], Vec::new()];
        d.flash_next = 4;
        d
    }

    /// Directories of versions 1-3 (stores written before batch records, before the
    /// flash section, before log nonces) still open, their logs without a nonce; a newer
    /// version than this code knows is refused, never read.
    #[test]
    fn older_versions_are_read_and_a_newer_version_refused() {
        let mut d = sample();
        d.flash.clear();
        d.flash_next = 1;
        let with_version = |v: u32| {
            let mut b = encode(&d);
            if v < 4 {
                // Versions 1-3 list each log as { id, off, chunks }: drop the nonces.
                for i in (0..d.logs.len()).rev() {
                    let nonce = FIXED_LEN + 32 * i + 24;
                    b.drain(nonce..nonce + 8);
                }
            }
            if v < 3 {
                // Versions 1 and 2 end before the flash section (16 bytes when empty).
                b.truncate(b.len() - 16);
            }
            let len = b.len() as u32;
            b[16..20].copy_from_slice(&len.to_le_bytes());
            b[8..12].copy_from_slice(&v.to_le_bytes());
            let c = masked_crc32c(&b[16..]);
            b[12..16].copy_from_slice(&c.to_le_bytes());
            b
        };
        let mut old = d.clone();
        old.logs.iter_mut().for_each(|l| l.nonce = 0);
        for v in 1..4 {
            assert_eq!(decode(&with_version(v), 0).unwrap(), old, "version {v}");
        }
        assert_eq!(decode(&with_version(4), 0).unwrap(), d);
        assert!(matches!(
            decode(&with_version(VERSION + 1), 0),
            Err(Error::UnsupportedFormat { found, .. }) if found == VERSION + 1
        ));
    }

    #[test]
    fn round_trips() {
        let d = sample();
        assert_eq!(decode(&encode(&d), 0).unwrap(), d);
    }

    #[test]
    fn every_bit_flip_and_truncation_is_an_error() {
        let b = encode(&sample());
        for bit in 0..b.len() * 8 {
            let mut bad = b.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(decode(&bad, 0).is_err(), "flip of bit {bit} accepted");
        }
        for cut in 0..b.len() {
            assert!(decode(&b[..cut], 0).is_err(), "cut at {cut} accepted");
        }
    }
}
