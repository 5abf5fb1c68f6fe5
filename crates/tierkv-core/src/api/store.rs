//! The [`KvStore`] trait every engine implements, and how an engine is registered.
//!
//! # Contract (DESIGN §2)
//! - All methods take `&self`; a store is `Send + Sync` and safe to call from many threads.
//! - `put` and `delete` return only once the write is durable under the configured
//!   durability mode: that is what *acknowledged* means everywhere in tierkv.
//! - `scan` returns up to `limit` pairs with keys `>= start`, in key order. An engine whose
//!   index cannot scan returns [`Error::Unsupported`](crate::Error::Unsupported), never a
//!   wrong answer.
//! - `scan_cursor` is the iteration of an engine whose index is unordered: a `u64` cursor
//!   (0 starts, a returned 0 ends), whole index shards per call until at least the count
//!   hint; a key present throughout an iteration is returned exactly once, a key absent
//!   throughout never, a key written meanwhile at most once; a full iteration costs
//!   O(keys) whatever the hint ([`crate::common::index`], "Cursor iteration"). Values
//!   are read as `get` reads them. An engine with an ordered index keeps the default,
//!   [`Error::Unsupported`](crate::Error::Unsupported) (it scans from a key instead): so
//!   exactly one of the two works on every engine that can enumerate its keys.
//! - Keys and values arrive already checked against the limits by the facade (`tierkv::Db`);
//!   an engine used directly checks them with [`Limits`].
//! - After `close` every call returns [`Error::Closed`](crate::Error::Closed). Dropping a
//!   store closes it.
//! - `write_batch` applies a [`WriteBatch`] crash-atomically and returns once it is
//!   durable. An engine without a native commit protocol keeps the default, which returns
//!   [`crate::Error::Unsupported`] (never a non-atomic loop of puts), and reports
//!   `atomic_batches() == false`. What concurrent readers see of a batch in progress is
//!   engine-specific and documented by each engine; `multi_get` of an engine that
//!   overrides it sees either none or all of a batch.
//!
//! [`Limits`]: crate::Limits

use std::path::PathBuf;
use std::sync::Arc;

use super::batch::WriteBatch;
use super::error::Result;
use super::error::Tier;
use super::options::Options;
use super::spec::EngineSpec;
use super::stats::Stats;
use crate::format::manifest::Manifest;
use crate::media::Media;

/// A key-value pair returned by a scan.
pub type KvPair = (Vec<u8>, Vec<u8>);

/// One step of [`KvStore::scan_cursor`]: pairs in no particular order and the next cursor
/// (0: the iteration is over).
pub type KvCursorPage = crate::common::index::CursorPage<Vec<u8>>;

/// The interface every engine implements.
pub trait KvStore: Send + Sync {
    /// The value stored under `key`, if any.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Calls `f` with the value under `key`, if any, lent where the engine can lend it
    /// (no copy, no allocation); returns whether the key was there. The default reads
    /// with [`KvStore::get`]. A server that copies values straight into a reply (the
    /// `dram` engine under `tierkv serve`'s LRANGE) saves an allocation and a copy per read.
    fn get_with(&self, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        Ok(match self.get(key)? {
            Some(v) => {
                f(&v);
                true
            }
            None => false,
        })
    }
    /// Calls `f(i, value)` for each `keys[i]` that is present, in order, each value lent
    /// as by [`KvStore::get_with`]; returns how many were present. Each key is read as by
    /// `get_with` (no isolation across the keys: unlike [`KvStore::multi_get`], a batch
    /// in progress may be seen for some keys and not for others). The default calls
    /// `get_with` per key; an engine overrides it to pay its per-call costs (the open
    /// check, the counters) once per call (`tierkv serve`'s LRANGE on `dram:hash` reads
    /// 100 element keys per call: the per-read counters alone cost a tenth of its CPU).
    fn get_many_with(&self, keys: &[&[u8]], f: &mut dyn FnMut(usize, &[u8])) -> Result<usize> {
        let mut found = 0;
        for (i, k) in keys.iter().enumerate() {
            if self.get_with(k, &mut |v| f(i, v))? {
                found += 1;
            }
        }
        Ok(found)
    }
    /// Stores `value` under `key`; returns once durable.
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()>;
    /// Removes `key` (no error when it is absent); returns once durable.
    fn delete(&self, key: &[u8]) -> Result<()>;
    /// Up to `limit` pairs with keys `>= start`, ordered by key.
    fn scan(&self, start: &[u8], limit: usize) -> Result<Vec<KvPair>>;
    /// One step of a cursor iteration over an unordered index (module doc: the contract):
    /// the pairs of whole index shards from `cursor` on (0 starts) until at least `count`
    /// pairs, and the next cursor (0: over; a cursor past the end returns nothing and 0).
    /// The default, for engines that scan in key order instead, returns
    /// [`Error::Unsupported`](crate::Error::Unsupported).
    fn scan_cursor(&self, cursor: u64, count: usize) -> Result<KvCursorPage> {
        let _ = (cursor, count);
        Err(crate::Error::Unsupported(
            "this engine scans in key order (scan), not by cursor".into(),
        ))
    }
    /// Makes buffered background work durable now (what "flush" means is engine-specific;
    /// acknowledged writes are durable without it).
    fn flush(&self) -> Result<()>;
    /// Applies `batch` as one write: after a crash either all of it or none of it is
    /// visible; returns once it is durable. The default (engines without a native commit
    /// protocol) returns [`crate::Error::Unsupported`].
    fn write_batch(&self, batch: &WriteBatch) -> Result<()> {
        let _ = batch;
        Err(crate::Error::Unsupported(
            "this engine has no crash-atomic write batches yet".into(),
        ))
    }
    /// True when [`KvStore::write_batch`] is implemented natively (crash-atomic).
    fn atomic_batches(&self) -> bool {
        false
    }
    /// The values under `keys`, in order. The default reads them one by one (no isolation
    /// from a batch in progress); engines with batches override it so that it sees none or
    /// all of each batch.
    fn multi_get(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        keys.iter().map(|k| self.get(k)).collect()
    }
    /// The store's counters.
    fn stats(&self) -> Stats;
    /// Stops background threads, makes everything durable and releases the media. Later
    /// calls return [`crate::Error::Closed`]. Calling it twice is harmless.
    fn close(&self) -> Result<()>;
    /// Verifies the engine's own invariants (what `tierkv check` runs after the manifest and
    /// the media headers); returns one line per thing checked.
    fn check(&self) -> Result<Vec<String>> {
        Ok(Vec::new())
    }
    /// The engine's native schema API (FOCUS, `api::schema`), if it has one; the facade
    /// falls back to the consolidated adapter ([`crate::schema::Consolidated`]) otherwise.
    fn native_schema_store(self: Arc<Self>) -> Option<Arc<dyn super::schema::SchemaStore>> {
        None
    }
}

/// What an engine is told when it is opened.
pub struct EngineContext {
    /// The data directory.
    pub dir: PathBuf,
    /// The spec the store was opened with (parameters merged from the options).
    pub spec: EngineSpec,
    /// The options.
    pub options: Options,
    /// The manifest (as just written, for a new store).
    pub manifest: Manifest,
    /// The media of the tiers the engine declared.
    pub media: Media,
    /// True when the store was created by this open (format the media); false when it is
    /// reopened (recover).
    pub created: bool,
}

/// Static facts about an engine, and how to open it.
#[derive(Clone, Copy)]
pub struct EngineDescriptor {
    /// The name in spec strings.
    pub name: &'static str,
    /// The variants accepted after `:`; the first is the default.
    pub variants: &'static [&'static str],
    /// One line for `--help` and reports.
    pub summary: &'static str,
    /// The tiers the engine stores data on (besides DRAM).
    pub tiers: &'static [Tier],
    /// Variants whose tiers differ from `tiers` (`mio:flash` adds the flash tier).
    pub variant_tiers: &'static [(&'static str, &'static [Tier])],
    /// True when nothing survives a restart (the `dram` engine).
    pub volatile: bool,
    /// The smallest pmem pool it can work in, if it uses pmem.
    pub min_pmem_size: u64,
    /// A lower value limit than the options', if the engine has one.
    pub max_value_len: Option<usize>,
    /// Opens (or creates) the store.
    pub open: fn(EngineContext) -> Result<Arc<dyn KvStore>>,
}

impl EngineDescriptor {
    /// The variant a spec selects (its own or the default), or an error naming the valid
    /// ones.
    pub fn variant<'a>(&self, spec: &'a EngineSpec) -> Result<&'a str>
    where
        'static: 'a,
    {
        match &spec.variant {
            None => Ok(self.variants.first().copied().unwrap_or("")),
            Some(v) if self.variants.contains(&v.as_str()) => Ok(v.as_str()),
            Some(v) => Err(crate::Error::invalid(format!(
                "engine {} has no variant {v:?} (variants: {})",
                self.name,
                self.variants.join(", ")
            ))),
        }
    }

    /// True when the engine's default variant stores data on `tier` (other variants:
    /// [`EngineDescriptor::spec_uses`]).
    pub fn uses(&self, tier: Tier) -> bool {
        self.tiers.contains(&tier)
    }

    /// The tiers `variant` stores data on.
    pub fn tiers_of(&self, variant: &str) -> &'static [Tier] {
        self.variant_tiers
            .iter()
            .find(|(v, _)| *v == variant)
            .map_or(self.tiers, |(_, t)| t)
    }

    /// True when the variant `spec` selects stores data on `tier` (false for a variant the
    /// engine does not have).
    pub fn spec_uses(&self, spec: &EngineSpec, tier: Tier) -> bool {
        self.variant(spec)
            .is_ok_and(|v| self.tiers_of(v).contains(&tier))
    }
}

impl std::fmt::Debug for EngineDescriptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineDescriptor")
            .field("name", &self.name)
            .field("variants", &self.variants)
            .field("tiers", &self.tiers)
            .finish_non_exhaustive()
    }
}
