//! The one error type of tierkv.
//!
//! Every fallible call in every crate returns [`Result<T>`]. The variants follow DESIGN §2:
//! I/O (with the path and the operation), corruption (with the tier and the offset),
//! invalid arguments, lack of space, unsupported operations and use after close. Library
//! code never panics on user input or on bytes read back from a tier; it returns one of
//! these instead.
//!
//! After a failed sync or a failed background job an engine *poisons* itself
//! ([`Error::Poisoned`]): every later write is refused until the store is reopened. A
//! failed `fsync` is never retried (see "Can applications recover from fsync failures?",
//! USENIX ATC '20), because the kernel may already have dropped the dirty pages.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// A `Result` whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The storage tier an error or a counter refers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// Process memory: indexes, caches, buffers.
    Dram,
    /// The byte-addressable persistent tier (a mapped pool file).
    Pmem,
    /// The block flash tier (files opened with `O_DIRECT`).
    Flash,
    /// The data directory itself (manifest, lock file).
    Dir,
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Tier::Dram => "dram",
            Tier::Pmem => "pmem",
            Tier::Flash => "flash",
            Tier::Dir => "data directory",
        })
    }
}

/// Every error tierkv reports.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system call failed.
    #[error("{op} {path}: {source}", path = .path.display())]
    Io {
        /// What was being done ("open", "read", "fdatasync", ...).
        op: &'static str,
        /// The file it was done to.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// Bytes read back from a tier are not what tierkv wrote there.
    #[error("corruption in {tier} at offset {offset}: {what}")]
    Corruption {
        /// The tier the bytes came from.
        tier: Tier,
        /// Byte offset in the pool or file.
        offset: u64,
        /// What was wrong.
        what: String,
    },
    /// A checksum did not match.
    #[error(
        "checksum mismatch in {tier} at offset {offset}: expected {expected:#010x}, got {got:#010x}"
    )]
    ChecksumMismatch {
        /// The tier the bytes came from.
        tier: Tier,
        /// Byte offset of the checksummed record.
        offset: u64,
        /// The checksum stored with the record.
        expected: u32,
        /// The checksum of the bytes as read.
        got: u32,
    },
    /// The data was written by a newer (or unknown) format version.
    #[error("unsupported format version {found} in {what} (this build reads up to {supported})")]
    UnsupportedFormat {
        /// What carries the version (manifest, pool header, ...).
        what: &'static str,
        /// The version found.
        found: u32,
        /// The newest version this build reads.
        supported: u32,
    },
    /// The caller asked for something that cannot be done: a key or value over the limits,
    /// an empty key, a bad option, options that contradict each other or the manifest.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A tier is full.
    #[error("no space left on {tier}: {what}")]
    NoSpace {
        /// The full tier.
        tier: Tier,
        /// What could not be allocated.
        what: String,
    },
    /// The engine cannot do this (for example a scan over a hash index).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The data directory holds no store (and the call does not create one).
    #[error("no tierkv store in {}", .0.display())]
    NoStore(PathBuf),
    /// The data directory is in use by another `Db` (another process or this one).
    #[error("data directory {} is locked by another open store", .0.display())]
    Locked(PathBuf),
    /// The store was closed.
    #[error("the store is closed")]
    Closed,
    /// An earlier failure (a failed sync, a background job that failed) left the store in a
    /// state where accepting writes could lose data; reopen it.
    #[error("the store refuses writes after an earlier failure (reopen it): {0}")]
    Poisoned(String),
}

impl Error {
    /// Builds an [`Error::Io`].
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// Builds an [`Error::Corruption`].
    pub fn corruption(tier: Tier, offset: u64, what: impl Into<String>) -> Self {
        Error::Corruption {
            tier,
            offset,
            what: what.into(),
        }
    }

    /// Builds an [`Error::InvalidArgument`].
    pub fn invalid(what: impl Into<String>) -> Self {
        Error::InvalidArgument(what.into())
    }

    /// Builds an [`Error::NoSpace`].
    pub fn no_space(tier: Tier, what: impl Into<String>) -> Self {
        Error::NoSpace {
            tier,
            what: what.into(),
        }
    }

    /// True for errors that say the bytes on a tier are damaged.
    pub fn is_corruption(&self) -> bool {
        matches!(
            self,
            Error::Corruption { .. } | Error::ChecksumMismatch { .. }
        )
    }

    /// The OS error code behind an [`Error::Io`], if any.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}

/// One line for an error and its causes, outermost first, joined by `": "`. A cause whose
/// text the message before it already ends with is skipped: [`Error::Io`] prints its
/// `io::Error` and also exposes it as its source, and printing both (as `{:#}` on an
/// `anyhow::Error` does) would say everything twice.
pub fn report<'a>(
    chain: impl IntoIterator<Item = &'a (dyn std::error::Error + 'static)>,
) -> String {
    let mut out = String::new();
    for cause in chain {
        let text = cause.to_string();
        if out.ends_with(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_says_each_cause_once() {
        let e = Error::io("open", "/x/y", io::Error::from_raw_os_error(libc::ENOENT));
        let mut chain: Vec<&(dyn std::error::Error + 'static)> = vec![&e];
        chain.extend(std::error::Error::source(&e));
        let line = report(chain);
        assert_eq!(line.matches("os error 2").count(), 1, "{line}");
        assert!(line.starts_with("open /x/y: "), "{line}");
    }

    #[test]
    fn io_error_names_operation_and_path() {
        let e = Error::io("open", "/x/y", io::Error::from_raw_os_error(libc::ENOENT));
        let s = e.to_string();
        assert!(s.starts_with("open /x/y: "), "{s}");
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
    }

    #[test]
    fn checksum_error_shows_both_values() {
        let e = Error::ChecksumMismatch {
            tier: Tier::Pmem,
            offset: 64,
            expected: 1,
            got: 2,
        };
        assert_eq!(
            e.to_string(),
            "checksum mismatch in pmem at offset 64: expected 0x00000001, got 0x00000002"
        );
        assert!(e.is_corruption());
    }
}
