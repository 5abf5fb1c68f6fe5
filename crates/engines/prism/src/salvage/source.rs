//! [`Source`]: read-only, bounds-checked access to the bytes of a pool or Value Storage
//! file for the salvage walk (FORMAT.md, "Salvage"). A file is opened read-only and read
//! with `pread`; nothing is mapped, so nothing can be written through it. A byte vector is
//! a source too (the fuzz target and tests).
//!
//! Every read names its range; a range outside the source, or longer than
//! [`MAX_READ`], is refused (`None`), so a garbage length read from a damaged store never
//! makes the walk allocate or read without bound.
//!
//! Thread safety: `Source` is used from one thread.

use std::fs::File;
use std::os::unix::fs::FileExt;

/// The longest single read (a committed batch log of the largest batch; chunks are far
/// smaller).
pub const MAX_READ: u64 = 32 << 20;

/// Bytes the salvage walk can read.
pub trait Source {
    /// Length in bytes.
    fn len(&self) -> u64;
    /// True when there are no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Fills `buf` from offset `off`; false when the range is outside the source or the
    /// read fails.
    fn read_at(&self, off: u64, buf: &mut [u8]) -> bool;

    /// `len` bytes from `off`, or `None` (out of range, too long, or a failed read).
    fn bytes(&self, off: u64, len: u64) -> Option<Vec<u8>> {
        let end = off.checked_add(len)?;
        if len > MAX_READ || end > self.len() {
            return None;
        }
        let mut buf = vec![0u8; usize::try_from(len).ok()?];
        self.read_at(off, &mut buf).then_some(buf)
    }

    /// The little-endian word at `off`.
    fn u64_at(&self, off: u64) -> Option<u64> {
        let mut b = [0u8; 8];
        (off.checked_add(8)? <= self.len() && self.read_at(off, &mut b))
            .then(|| u64::from_le_bytes(b))
    }
}

impl Source for Vec<u8> {
    fn len(&self) -> u64 {
        self.as_slice().len() as u64
    }
    fn read_at(&self, off: u64, buf: &mut [u8]) -> bool {
        let Ok(start) = usize::try_from(off) else {
            return false;
        };
        match start
            .checked_add(buf.len())
            .and_then(|end| self.get(start..end))
        {
            Some(src) => {
                buf.copy_from_slice(src);
                true
            }
            None => false,
        }
    }
}

/// A file opened read-only, with its length taken at open.
#[derive(Debug)]
pub struct FileSource {
    file: File,
    len: u64,
}

impl FileSource {
    /// Opens `path` read-only.
    pub fn open(path: &std::path::Path) -> tierkv_core::Result<FileSource> {
        let io = |op, e| tierkv_core::Error::io(op, path, e);
        let file = File::open(path).map_err(|e| io("open", e))?;
        let len = file.metadata().map_err(|e| io("stat", e))?.len();
        Ok(FileSource { file, len })
    }
}

impl Source for FileSource {
    fn len(&self) -> u64 {
        self.len
    }
    fn read_at(&self, off: u64, buf: &mut [u8]) -> bool {
        off.checked_add(buf.len() as u64)
            .is_some_and(|end| end <= self.len)
            && self.file.read_exact_at(buf, off).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_outside_the_source_or_over_the_limit_are_refused() {
        let v: Vec<u8> = (0..=255).collect();
        assert_eq!(
            v.bytes(250, 6).as_deref(),
            Some(&[250u8, 251, 252, 253, 254, 255][..])
        );
        assert_eq!(v.bytes(250, 7), None);
        assert_eq!(v.bytes(u64::MAX, 2), None);
        assert_eq!(v.u64_at(249), None);
        assert_eq!(
            v.u64_at(248),
            Some(u64::from_le_bytes([248, 249, 250, 251, 252, 253, 254, 255]))
        );
        let big = vec![0u8; (MAX_READ + 1) as usize];
        assert!(big.bytes(0, MAX_READ).is_some());
        assert_eq!(big.bytes(0, MAX_READ + 1), None);
    }

    #[test]
    fn a_file_source_reads_what_the_file_holds_and_nothing_past_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"0123456789").unwrap();
        let f = FileSource::open(&p).unwrap();
        assert_eq!(f.len(), 10);
        assert_eq!(f.bytes(2, 3).as_deref(), Some(&b"234"[..]));
        assert_eq!(f.bytes(8, 3), None);
        assert!(FileSource::open(&dir.path().join("missing")).is_err());
    }
}
