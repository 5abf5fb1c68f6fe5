//! Salvage: a read-only walk of a damaged store's persistent structures that yields every
//! record it can validate (issue 23, finding 10; the `ldb dump` / `redis-check-aof` of
//! tierkv).
//!
//! A normal open runs the engine's recovery, which refuses a store whose index or
//! metadata is damaged. A salvage does not recover anything: it reads the media files
//! read-only (never through a writable mapping, never taking the store's pool lock for
//! writing), validates each record by whatever the engine's format offers (checksums,
//! backward pointers, key tags) and hands the records it trusts to a [`SalvageSink`] **in
//! key order, one (the newest durable) version per key**, together with a note for every
//! region or record it had to skip. An engine opts in by offering a [`SalvageFn`]; the
//! facade (`tierkv::salvage`) keeps the table of engines that have one and answers
//! [`crate::Error::Unsupported`] naming them for the others.
//!
//! Contract of a [`SalvageFn`]: it never writes to the store's files, never panics on any
//! bytes, terminates in time bounded by the size of the files (every link is
//! bounds-checked, every walk has a visited set or a step bound), and never yields a value
//! the format cannot tie to its key. Where the format cannot tell (for example a pointer
//! word without a checksum), the engine says so in [`SalvageReport::caveats`], which tools
//! print in their output header.
//!
//! Thread safety: plain data and a `&mut` sink; one salvage runs on one thread.

use std::path::PathBuf;

use super::error::Result;
use super::options::Options;
use super::spec::EngineSpec;
use crate::format::manifest::Manifest;

/// What a salvage is told: where the store is and how it was described.
#[derive(Clone, Debug)]
pub struct SalvageContext {
    /// The data directory.
    pub dir: PathBuf,
    /// The engine spec (from the manifest, with the caller's parameters).
    pub spec: EngineSpec,
    /// The options (layout defaults an engine may need when its own metadata is damaged).
    pub options: Options,
    /// The manifest (paths of the pmem pool and flash directories).
    pub manifest: Manifest,
}

/// Where a salvage delivers what it found.
pub trait SalvageSink {
    /// A validated record; called in strictly increasing key order.
    fn record(&mut self, key: &[u8], value: &[u8]) -> Result<()>;
    /// Something that was skipped (a record, a key or a region) and why.
    fn skipped(&mut self, note: &str) -> Result<()>;
}

/// What a salvage found, for the summary line and the dump header.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SalvageReport {
    /// Records handed to the sink.
    pub records: u64,
    /// Notes handed to the sink (records, keys or regions skipped).
    pub skipped: u64,
    /// One line per structure walked: what was read, what was damaged (regions, counts).
    pub regions: Vec<String>,
    /// What the format cannot verify, so that a yielded record could still be wrong.
    pub caveats: Vec<String>,
}

/// An engine's salvage walk.
pub type SalvageFn = fn(&SalvageContext, &mut dyn SalvageSink) -> Result<SalvageReport>;

/// A sink that keeps everything in memory (tests, small stores).
#[derive(Clone, Debug, Default)]
pub struct CollectSink {
    /// The records, in the order given.
    pub records: Vec<(Vec<u8>, Vec<u8>)>,
    /// The skip notes.
    pub skipped: Vec<String>,
}

impl SalvageSink for CollectSink {
    fn record(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.records.push((key.to_vec(), value.to_vec()));
        Ok(())
    }
    fn skipped(&mut self, note: &str) -> Result<()> {
        self.skipped.push(note.to_owned());
        Ok(())
    }
}
