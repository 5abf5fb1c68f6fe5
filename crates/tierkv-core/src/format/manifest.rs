//! The manifest: the small file that says what a data directory holds.
//!
//! Layout (see `FORMAT.md` § Manifest; all integers little-endian):
//!
//! ```text
//! 0   8  magic            b"TIERKVMF"
//! 8   4  format_version   u32 (FORMAT_VERSION)
//! 12  4  body_len         u32 (<= MAX_BODY_LEN)
//! 16  4  body_crc         masked CRC-32C of the body
//! 20  4  header_crc       masked CRC-32C of bytes 0..20
//! 24  .. body             UTF-8 JSON of [`Manifest`]
//! ```
//!
//! Written the one crash-safe way (STYLE §4): write `MANIFEST.tmp`, fdatasync it, rename it
//! over `MANIFEST`, fsync the directory. A reader therefore sees either the old or the new
//! manifest whole; anything else (short file, bad magic, bad CRC, trailing bytes) is
//! reported as corruption, never "repaired" by re-formatting.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::checksum::{mask, masked_crc32c, unmask};
use crate::api::error::{Error, Result, Tier};
use crate::api::options::DurabilityMode;

/// The manifest's file name in the data directory.
pub const MANIFEST_FILE: &str = "MANIFEST";
/// The temporary name a new manifest is written under before the rename.
pub const MANIFEST_TMP_FILE: &str = "MANIFEST.tmp";
/// Magic bytes at offset 0.
pub const MAGIC: [u8; 8] = *b"TIERKVMF";
/// The format version this build writes and the newest it reads.
pub const FORMAT_VERSION: u32 = 1;
/// Largest body accepted (a manifest is a few hundred bytes).
pub const MAX_BODY_LEN: u32 = 64 << 10;

const MAGIC_OFF: usize = 0;
const VERSION_OFF: usize = MAGIC_OFF + MAGIC.len();
const BODY_LEN_OFF: usize = VERSION_OFF + 4;
const BODY_CRC_OFF: usize = BODY_LEN_OFF + 4;
const HEADER_CRC_OFF: usize = BODY_CRC_OFF + 4;
/// Size of the fixed header before the body.
pub const HEADER_LEN: usize = HEADER_CRC_OFF + 4;

/// Where the pmem pool is and how it was created.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PmemLayout {
    /// The pool file.
    pub path: PathBuf,
    /// Its size in bytes.
    pub size: u64,
    /// The mode it was created in (informational: each open chooses its own mode).
    pub created_mode: DurabilityMode,
    /// The pool's identifier, also stored in the pool header, so that a swapped or
    /// re-created pool file is detected.
    pub pool_id: u64,
}

/// One flash directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlashLayout {
    /// The directory.
    pub path: PathBuf,
    /// The capacity the engine may use there.
    pub size: u64,
}

/// What a data directory holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// `name` or `name:variant` (parameters are per open, not pinned).
    pub engine: String,
    /// The tierkv version that created the store.
    pub created_by: String,
    /// The pmem pool, if the engine uses one.
    pub pmem: Option<PmemLayout>,
    /// The flash directories, if the engine uses flash.
    pub flash: Vec<FlashLayout>,
}

impl Manifest {
    /// Encodes the manifest (header + JSON body).
    pub fn encode(&self) -> Result<Vec<u8>> {
        let body = serde_json::to_vec_pretty(self)
            .map_err(|e| Error::invalid(format!("manifest: {e}")))?;
        let body_len = u32::try_from(body.len())
            .ok()
            .filter(|l| *l <= MAX_BODY_LEN)
            .ok_or_else(|| Error::invalid("manifest body too large"))?;
        let mut out = Vec::with_capacity(HEADER_LEN + body.len());
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&body_len.to_le_bytes());
        out.extend_from_slice(&masked_crc32c(&body).to_le_bytes());
        let header_crc = masked_crc32c(&out);
        out.extend_from_slice(&header_crc.to_le_bytes());
        out.extend_from_slice(&body);
        Ok(out)
    }

    /// Decodes a manifest, checking magic, version, lengths and both checksums.
    pub fn decode(bytes: &[u8]) -> Result<Manifest> {
        let corrupt =
            |offset: usize, what: String| Error::corruption(Tier::Dir, offset as u64, what);
        let header = bytes.get(..HEADER_LEN).ok_or_else(|| {
            corrupt(
                0,
                format!(
                    "manifest is truncated: {} bytes, header needs {HEADER_LEN}",
                    bytes.len()
                ),
            )
        })?;
        if header.get(MAGIC_OFF..VERSION_OFF) != Some(&MAGIC[..]) {
            return Err(corrupt(0, "not a tierkv manifest (bad magic)".into()));
        }
        let u32_at = |off: usize| -> u32 {
            let mut b = [0u8; 4];
            b.copy_from_slice(header.get(off..off + 4).unwrap_or(&[0; 4]));
            u32::from_le_bytes(b)
        };
        let stored_header_crc = unmask(u32_at(HEADER_CRC_OFF));
        let header_crc = unmask(masked_crc32c(
            header.get(..HEADER_CRC_OFF).unwrap_or_default(),
        ));
        if stored_header_crc != header_crc {
            return Err(Error::ChecksumMismatch {
                tier: Tier::Dir,
                offset: HEADER_CRC_OFF as u64,
                expected: stored_header_crc,
                got: header_crc,
            });
        }
        let version = u32_at(VERSION_OFF);
        if version == 0 || version > FORMAT_VERSION {
            return Err(Error::UnsupportedFormat {
                what: "manifest",
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        let body_len = u32_at(BODY_LEN_OFF);
        if body_len > MAX_BODY_LEN {
            return Err(corrupt(
                BODY_LEN_OFF,
                format!("manifest body length {body_len} is too large"),
            ));
        }
        let body = &bytes[HEADER_LEN..];
        if body.len() != body_len as usize {
            return Err(corrupt(
                HEADER_LEN,
                format!(
                    "manifest body is {} bytes, header says {body_len}",
                    body.len()
                ),
            ));
        }
        let expected = unmask(u32_at(BODY_CRC_OFF));
        let got = unmask(mask(super::checksum::crc32c(body)));
        if expected != got {
            return Err(Error::ChecksumMismatch {
                tier: Tier::Dir,
                offset: HEADER_LEN as u64,
                expected,
                got,
            });
        }
        serde_json::from_slice(body).map_err(|e| corrupt(HEADER_LEN, format!("manifest body: {e}")))
    }

    /// Reads `<dir>/MANIFEST`; `Ok(None)` when there is none. The paths of the result are
    /// resolved against `dir` (see [`Manifest::write_to`]), so they name the files of this
    /// directory whatever the working directory is.
    pub fn read_from(dir: &Path) -> Result<Option<Manifest>> {
        let path = dir.join(MANIFEST_FILE);
        match fs::read(&path) {
            Ok(bytes) => {
                let mut m = Manifest::decode(&bytes)?;
                m.map_paths(|p| resolve_stored_path(p, dir));
                Ok(Some(m))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io("read", path, e)),
        }
    }

    /// Writes `<dir>/MANIFEST` crash-safely (temp file, sync, rename, directory sync).
    ///
    /// A path inside `dir` is stored relative to it (`pmem.pool`, `flash`), any other one
    /// absolute, so that the store opens from any working directory and a copied or moved
    /// store directory uses its own files, not the original's.
    pub fn write_to(&self, dir: &Path) -> Result<()> {
        let mut stored = self.clone();
        stored.map_paths(|p| storable_path(p, dir));
        let bytes = stored.encode()?;
        let tmp = dir.join(MANIFEST_TMP_FILE);
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(|e| Error::io("create", &tmp, e))?;
        f.write_all(&bytes)
            .map_err(|e| Error::io("write", &tmp, e))?;
        // IMPORTANT: the data must be durable before the rename makes it the manifest.
        f.sync_all().map_err(|e| Error::io("fsync", &tmp, e))?;
        drop(f);
        let path = dir.join(MANIFEST_FILE);
        fs::rename(&tmp, &path).map_err(|e| Error::io("rename", &path, e))?;
        sync_dir(dir)
    }
}

impl Manifest {
    fn map_paths(&mut self, f: impl Fn(&Path) -> PathBuf) {
        if let Some(p) = self.pmem.as_mut() {
            p.path = f(&p.path);
        }
        for fl in &mut self.flash {
            fl.path = f(&fl.path);
        }
    }
}

/// `p` as a manifest in `dir` stores it: relative to `dir` when inside it, else absolute.
fn storable_path(p: &Path, dir: &Path) -> PathBuf {
    let abs = |q: &Path| std::path::absolute(q).unwrap_or_else(|_| q.to_path_buf());
    if let Ok(rest) = p.strip_prefix(dir) {
        return rest.to_path_buf();
    }
    let (p_abs, dir_abs) = (abs(p), abs(dir));
    match p_abs.strip_prefix(&dir_abs) {
        Ok(rest) => rest.to_path_buf(),
        Err(_) => p_abs,
    }
}

/// A stored path resolved against the directory `dir` of its manifest. Manifests written
/// before paths were stored relative to their directory hold paths relative to the working
/// directory of the process that created the store (`s/pmem.pool` for `--dir s`): such a
/// path is used as it stands if it exists, else the shortest of its tails that exists in
/// `dir` (`pmem.pool`), so that old stores open from anywhere too.
fn resolve_stored_path(p: &Path, dir: &Path) -> PathBuf {
    if p.is_absolute() {
        return p.to_path_buf();
    }
    let joined = dir.join(p);
    if joined.exists() {
        return joined;
    }
    if p.exists() {
        return p.to_path_buf();
    }
    let parts: Vec<_> = p.components().collect();
    (1..parts.len())
        .rev()
        .map(|skip| dir.join(parts[skip..].iter().collect::<PathBuf>()))
        .find(|c| c.exists())
        .unwrap_or(joined)
}

/// fsyncs a directory, so that entries created, renamed or removed in it are durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    let d = File::open(dir).map_err(|e| Error::io("open", dir, e))?;
    d.sync_all().map_err(|e| Error::io("fsync", dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Manifest {
        Manifest {
            engine: "prism".into(),
            created_by: "tierkv 0.1.0".into(),
            pmem: Some(PmemLayout {
                path: "/dev/shm/x/pmem.pool".into(),
                size: 1 << 30,
                created_mode: DurabilityMode::Volatile,
                pool_id: 42,
            }),
            flash: vec![FlashLayout {
                path: "/data/flash".into(),
                size: 4 << 30,
            }],
        }
    }

    #[test]
    fn round_trips() {
        let m = sample();
        assert_eq!(Manifest::decode(&m.encode().unwrap()).unwrap(), m);
    }

    #[test]
    fn every_truncation_is_corruption() {
        let bytes = sample().encode().unwrap();
        for n in 0..bytes.len() {
            let e = Manifest::decode(&bytes[..n]).unwrap_err();
            assert!(e.is_corruption(), "truncated to {n}: {e}");
        }
    }

    #[test]
    fn every_single_bit_flip_is_detected() {
        let bytes = sample().encode().unwrap();
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut b = bytes.clone();
                b[i] ^= 1 << bit;
                assert!(
                    Manifest::decode(&b).is_err(),
                    "flip of bit {bit} at byte {i} undetected"
                );
            }
        }
    }

    #[test]
    fn newer_version_is_unsupported_not_corrupt() {
        let mut bytes = sample().encode().unwrap();
        bytes[VERSION_OFF..VERSION_OFF + 4].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
        let crc = masked_crc32c(&bytes[..HEADER_CRC_OFF]);
        bytes[HEADER_CRC_OFF..HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            Manifest::decode(&bytes),
            Err(Error::UnsupportedFormat { found, .. }) if found == FORMAT_VERSION + 1
        ));
    }

    #[test]
    fn write_then_read_from_dir() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(Manifest::read_from(d.path()).unwrap(), None);
        sample().write_to(d.path()).unwrap();
        assert_eq!(Manifest::read_from(d.path()).unwrap(), Some(sample()));
        assert!(!d.path().join(MANIFEST_TMP_FILE).exists());
    }

    #[test]
    fn paths_inside_the_directory_are_stored_relative_and_follow_a_moved_store() {
        let root = tempfile::tempdir().unwrap();
        let a = root.path().join("a");
        fs::create_dir_all(a.join("flash")).unwrap();
        fs::write(a.join("pmem.pool"), b"pool").unwrap();
        let mut m = sample();
        m.pmem.as_mut().unwrap().path = a.join("pmem.pool");
        m.flash[0].path = a.join("flash");
        m.write_to(&a).unwrap();
        let body = fs::read(a.join(MANIFEST_FILE)).unwrap();
        let text = String::from_utf8_lossy(&body[HEADER_LEN..]);
        assert!(text.contains("\"path\": \"pmem.pool\""), "{text}");
        assert!(text.contains("\"path\": \"flash\""), "{text}");
        assert_eq!(Manifest::read_from(&a).unwrap(), Some(m));
        // The directory moved: its manifest names its own files.
        let b = root.path().join("b");
        fs::rename(&a, &b).unwrap();
        let moved = Manifest::read_from(&b).unwrap().unwrap();
        assert_eq!(moved.pmem.unwrap().path, b.join("pmem.pool"));
        assert_eq!(moved.flash[0].path, b.join("flash"));
    }

    #[test]
    fn a_path_outside_the_directory_is_stored_absolute() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("store");
        fs::create_dir_all(&dir).unwrap();
        let mut m = sample();
        m.pmem.as_mut().unwrap().path = root.path().join("shm").join("pmem.pool");
        m.write_to(&dir).unwrap();
        let back = Manifest::read_from(&dir).unwrap().unwrap();
        assert_eq!(
            back.pmem.unwrap().path,
            root.path().join("shm").join("pmem.pool")
        );
        assert_eq!(
            storable_path(Path::new("rel/p"), &dir),
            std::path::absolute("rel/p").unwrap()
        );
    }

    #[test]
    fn an_old_manifest_relative_to_the_creating_process_opens_from_anywhere() {
        // Written by an earlier build for `--dir s` run in some working directory.
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("s");
        fs::create_dir_all(dir.join("flash")).unwrap();
        fs::write(dir.join("pmem.pool"), b"pool").unwrap();
        let resolved = resolve_stored_path(Path::new("s/pmem.pool"), &dir);
        assert_eq!(resolved, dir.join("pmem.pool"));
        assert_eq!(
            resolve_stored_path(Path::new("s/flash"), &dir),
            dir.join("flash")
        );
        // Nothing of it exists: the path joined to the directory, for the error message.
        assert_eq!(
            resolve_stored_path(Path::new("s/gone"), &dir),
            dir.join("s/gone")
        );
    }
}
