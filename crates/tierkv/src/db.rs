//! [`Db`]: open a data directory, check its manifest against the options, open the media the
//! engine needs and hand them to the engine; then check every call's arguments against the
//! limits before the engine sees them.
//!
//! Creation is committed by the manifest: media are created and the engine formats them
//! first, the manifest is written last (crash-safely). A directory without a manifest holds
//! no store; media files left by an interrupted creation are reported, never reused or
//! overwritten silently.

use std::fs::{self, File, OpenOptions};
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tierkv_core::format::manifest::{FlashLayout, Manifest, PmemLayout};
use tierkv_core::media::Media;
use tierkv_core::media::flash::FlashDevice;
use tierkv_core::media::pmem::{PmemConfig, PmemPool};
use tierkv_core::{
    EngineContext, EngineDescriptor, EngineSpec, Error, KvPair, KvStore, Limits, MAX_BATCH_BYTES,
    MAX_BATCH_OPS, Options, Result, SchemaStore, Stats, Tier, WriteBatch,
};

use crate::range::{Range, RangeOptions};
use crate::registry::descriptor;

/// The lock file that keeps two `Db`s off one directory.
pub const LOCK_FILE: &str = "LOCK";
/// The default pool file name (in the data directory or `pmem.dir`).
pub const POOL_FILE: &str = "pmem.pool";
/// The default flash directory inside the data directory.
pub const FLASH_DIR: &str = "flash";

/// An open store.
pub struct Db {
    store: Arc<dyn KvStore>,
    dir: PathBuf,
    spec: EngineSpec,
    descriptor: &'static EngineDescriptor,
    manifest: Manifest,
    media: Media,
    limits: Limits,
    created: bool,
    /// The schema API, made on first use (one per `Db`, so that every caller shares the
    /// adapter's row locks).
    schema: std::sync::Mutex<Option<Arc<dyn SchemaStore>>>,
    _lock: File,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db")
            .field("dir", &self.dir)
            .field("engine", &self.spec.to_string())
            .finish()
    }
}

fn lock_dir(dir: &Path) -> Result<File> {
    let path = dir.join(LOCK_FILE);
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| Error::io("open", &path, e))?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::Locked(dir.to_owned())),
        Err(std::fs::TryLockError::Error(e)) => Err(Error::io("lock", &path, e)),
    }
}

fn canonical_base(d: &EngineDescriptor, spec: &EngineSpec) -> Result<String> {
    let v = d.variant(spec)?;
    Ok(if v.is_empty() {
        d.name.to_owned()
    } else {
        format!("{}:{v}", d.name)
    })
}

impl Db {
    /// Opens the store in `dir`, creating it when it holds none and
    /// `options.create_if_missing` is set.
    pub fn open(dir: impl AsRef<Path>, options: Options) -> Result<Db> {
        let spec = options.engine_spec()?;
        Db::open_with_engine(dir, options, descriptor(&spec.name)?)
    }

    /// Opens the store in `dir` with an engine that is not in [`crate::ENGINES`] (test
    /// engines of harnesses, such as the stress tool's reference engine). The spec in
    /// `options` must name `desc`.
    pub fn open_with_engine(
        dir: impl AsRef<Path>,
        options: Options,
        desc: &'static EngineDescriptor,
    ) -> Result<Db> {
        let dir = dir.as_ref().to_path_buf();
        options.validate()?;
        let spec = options.engine_spec()?;
        if spec.name != desc.name {
            return Err(Error::invalid(format!(
                "engine spec {:?} does not name the engine {}",
                options.engine, desc.name
            )));
        }
        let base = canonical_base(desc, &spec)?;
        match fs::metadata(&dir) {
            Ok(m) if !m.is_dir() => {
                return Err(Error::invalid(format!(
                    "{} is not a directory",
                    dir.display()
                )));
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if !options.create_if_missing {
                    return Err(Error::NoStore(dir));
                }
                fs::create_dir_all(&dir).map_err(|e| Error::io("create directory", &dir, e))?;
            }
            Err(e) => return Err(Error::io("stat", &dir, e)),
        }
        let lock = lock_dir(&dir)?;
        let existing = Manifest::read_from(&dir)?;
        let (manifest, created) = match existing {
            Some(m) => {
                if m.engine != base {
                    return Err(Error::invalid(format!(
                        "{} holds a {} store; it cannot be opened as {base}",
                        dir.display(),
                        m.engine
                    )));
                }
                check_layout_matches(&m, &options, &dir)?;
                (m, false)
            }
            None if !options.create_if_missing => return Err(Error::NoStore(dir)),
            None => {
                refuse_foreign_files(&dir, &options)?;
                (new_manifest(desc, &spec, &base, &options, &dir), true)
            }
        };
        let limits = limits_of(desc, &options);
        let mut manifest = manifest;
        let media = open_media(desc, &mut manifest, &options, created)?;
        let ctx = EngineContext {
            dir: dir.clone(),
            spec: spec.clone(),
            options: Options { limits, ..options },
            manifest: manifest.clone(),
            media: media.clone(),
            created,
        };
        let store = match (desc.open)(ctx) {
            Ok(s) => s,
            Err(e) => {
                if created {
                    remove_created_media(&manifest);
                }
                return Err(e);
            }
        };
        if created {
            // IMPORTANT: the manifest commits the creation; it is written only after the
            // engine has formatted its media.
            if let Err(e) = manifest.write_to(&dir) {
                let _ = store.close();
                remove_created_media(&manifest);
                return Err(e);
            }
        }
        Ok(Db {
            store,
            dir,
            spec,
            descriptor: desc,
            manifest,
            media,
            limits,
            created,
            schema: std::sync::Mutex::new(None),
            _lock: lock,
        })
    }

    /// Opens an existing store; an error ([`Error::NoStore`]) when `dir` holds none.
    pub fn open_existing(dir: impl AsRef<Path>, options: Options) -> Result<Db> {
        Db::open(dir, options.create_if_missing(false))
    }

    /// The limits a store opened with `options` checks every call against: the
    /// configured ones, capped by the engine's own ([`EngineDescriptor::max_value_len`]).
    pub fn limits_for(options: &Options) -> Result<Limits> {
        let spec = options.engine_spec()?;
        Ok(limits_of(descriptor(&spec.name)?, options))
    }

    /// The value under `key`.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.limits.check_key(key)?;
        self.store.get(key)
    }

    /// Calls `f` with the value under `key`, if any, lent by the engine where it can
    /// (no copy; [`KvStore::get_with`]); returns whether the key was there.
    pub fn get_with(&self, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        self.limits.check_key(key)?;
        self.store.get_with(key, f)
    }

    /// Calls `f(i, value)` for each `keys[i]` that is present, in order, values lent
    /// where the engine can lend them; returns how many were present. Each key is read as
    /// by [`Db::get_with`], with no isolation across the keys (see
    /// [`KvStore::get_many_with`]; [`Db::multi_get`] sees none or all of each batch).
    pub fn get_many_with(&self, keys: &[&[u8]], f: &mut dyn FnMut(usize, &[u8])) -> Result<usize> {
        for k in keys {
            self.limits.check_key(k)?;
        }
        self.store.get_many_with(keys, f)
    }

    /// Stores `value` under `key`; returns once durable.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.limits.check_key(key)?;
        self.limits.check_value(value)?;
        self.store.put(key, value)
    }

    /// Removes `key`; returns once durable.
    pub fn delete(&self, key: &[u8]) -> Result<()> {
        self.limits.check_key(key)?;
        self.store.delete(key)
    }

    /// Applies `batch` as one crash-atomic write (all of it or none of it after a crash);
    /// returns once durable. Checked against the batch limits
    /// ([`tierkv_core::MAX_BATCH_OPS`], [`tierkv_core::MAX_BATCH_BYTES`]) and the key and
    /// value limits first. An engine without native batches refuses with
    /// [`Error::Unsupported`] naming the engine (see [`Db::atomic_batches`]); nothing of
    /// the batch is applied then.
    pub fn write(&self, batch: &WriteBatch) -> Result<()> {
        batch.check(&self.limits)?;
        if !self.store.atomic_batches() {
            // The spec's options may be what turned batches off: say which.
            crate::registry::check_spec_atomic_batches(&self.spec)?;
            return Err(crate::registry::batches_unsupported(&self.spec.name));
        }
        self.store.write_batch(batch)
    }

    /// True when this store's engine applies write batches natively and crash-atomically.
    pub fn atomic_batches(&self) -> bool {
        self.store.atomic_batches()
    }

    /// The values under `keys`, in order. With an engine that has batches, it sees none
    /// or all of each batch.
    pub fn multi_get<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<Option<Vec<u8>>>> {
        let keys: Vec<&[u8]> = keys.iter().map(AsRef::as_ref).collect();
        for k in &keys {
            self.limits.check_key(k)?;
        }
        self.store.multi_get(&keys)
    }

    /// Up to `limit` pairs whose keys fall in `range`, in key order.
    pub fn scan<K, R>(&self, range: R, limit: usize) -> Result<Vec<KvPair>>
    where
        K: AsRef<[u8]>,
        R: RangeBounds<K>,
    {
        let start = crate::range::scan_start(range.start_bound());
        let mut rows = self.store.scan(&start, limit)?;
        let upper = range.end_bound().map(|e| e.as_ref().to_vec());
        let keep = |k: &[u8]| crate::range::below(&upper, k);
        if let Some(cut) = rows.iter().position(|(k, _)| !keep(k)) {
            rows.truncate(cut);
        }
        Ok(rows)
    }

    /// The pairs whose keys fall in `range`, ascending, fetched lazily one page at a time
    /// (default [`RangeOptions`]: 256 entries or about 1 MiB). Errors are items. See
    /// [`crate::range`] for what an iterator sees of concurrent writes; on an unordered
    /// engine ([`Db::ordered`]) the only item is an [`Error::Unsupported`].
    pub fn range<K, R>(&self, range: R) -> Range
    where
        K: AsRef<[u8]>,
        R: RangeBounds<K>,
    {
        self.range_with(range, RangeOptions::default())
    }

    /// [`Db::range`] from the upper bound down (paged backwards over forward scans: the
    /// first item costs one forward pass over the range; see [`crate::range`]).
    pub fn range_rev<K, R>(&self, range: R) -> Range
    where
        K: AsRef<[u8]>,
        R: RangeBounds<K>,
    {
        self.range_with(range, RangeOptions::default().reverse(true))
    }

    /// [`Db::range`] with the given page sizes and direction; options that hold no entry
    /// make the first item an [`Error::InvalidArgument`].
    pub fn range_with<K, R>(&self, range: R, opts: RangeOptions) -> Range
    where
        K: AsRef<[u8]>,
        R: RangeBounds<K>,
    {
        let refused = (!self.ordered()).then(|| {
            Error::Unsupported(format!(
                "engine {} has an unordered index and cannot iterate a key range \
                 (ordered variants: dram:btree, hetermm:btree)",
                self.spec
            ))
        });
        Range::new(&self.store, self.limits, &range, opts, refused)
    }

    /// True when the engine scans in key order ([`crate::is_ordered`]); `scan`, `range`
    /// and `delete_range` return [`Error::Unsupported`] on the others.
    pub fn ordered(&self) -> bool {
        let variant = self.descriptor.variant(&self.spec).unwrap_or("");
        crate::registry::is_ordered(self.descriptor.name, variant)
    }

    /// One step of a cursor iteration over every key of an engine whose index is
    /// unordered ([`Db::ordered`] false): the pairs of whole index shards from `cursor` on
    /// (0 starts) until at least `count` of them, in no particular order, and the next
    /// cursor (0: over). A key present throughout an iteration is returned exactly once,
    /// a key absent throughout never; a full iteration costs O(keys) whatever `count`
    /// ([`KvStore::scan_cursor`]). Ordered engines return [`Error::Unsupported`]: they
    /// iterate with [`Db::scan`] / [`Db::range`].
    pub fn scan_cursor(&self, cursor: u64, count: usize) -> Result<tierkv_core::KvCursorPage> {
        self.store.scan_cursor(cursor, count)
    }

    /// Deletes every key in `range`; returns how many it deleted. Walks the range with
    /// [`Db::range`] and deletes what it finds: on an engine with atomic batches
    /// ([`Db::atomic_batches`]) in write batches of up to [`MAX_BATCH_OPS`] keys, each one
    /// crash-atomic (so a range of at most that many keys goes all at once, a larger one
    /// in chunks, lowest keys first); on the others one delete per key. No engine has a
    /// native range delete. Keys put into the range while it runs may survive it.
    pub fn delete_range<K, R>(&self, range: R) -> Result<u64>
    where
        K: AsRef<[u8]>,
        R: RangeBounds<K>,
    {
        let batches = self.atomic_batches();
        let mut batch = WriteBatch::new();
        let mut deleted = 0u64;
        for kv in self.range(range) {
            let (k, _) = kv?;
            if !batches {
                self.delete(&k)?;
            } else {
                if batch.len() == MAX_BATCH_OPS || batch.bytes() + k.len() > MAX_BATCH_BYTES {
                    self.write(&batch)?;
                    batch.clear();
                }
                batch.delete(k);
            }
            deleted += 1;
        }
        if !batch.is_empty() {
            self.write(&batch)?;
        }
        Ok(deleted)
    }

    /// Makes buffered background work durable now.
    pub fn flush(&self) -> Result<()> {
        self.store.flush()
    }

    /// The store's counters: the engine's, plus the byte counters of its media (engines
    /// leave the per-tier byte counters to the media layer, which sees every byte).
    pub fn stats(&self) -> Stats {
        let mut s = self.store.stats();
        s.add_media(&self.media.counters());
        s
    }

    /// Verifies the store offline-style: manifest, media headers, then the engine's own
    /// invariants. One line per thing checked.
    pub fn check(&self) -> Result<Vec<String>> {
        let mut lines = vec![format!(
            "manifest: format ok, engine {}, created by {}",
            self.manifest.engine, self.manifest.created_by
        )];
        if let Some(p) = &self.manifest.pmem {
            lines.push(format!(
                "pmem pool {}: {} bytes, id {:#018x}, header ok",
                p.path.display(),
                p.size,
                p.pool_id
            ));
        }
        for f in &self.manifest.flash {
            lines.push(format!(
                "flash directory {}: capacity {} bytes",
                f.path.display(),
                f.size
            ));
        }
        lines.extend(self.store.check()?);
        Ok(lines)
    }

    /// Closes the store (joins the engine's threads, makes everything durable).
    pub fn close(&self) -> Result<()> {
        self.store.close()
    }

    /// The engine spec the store was opened with.
    pub fn spec(&self) -> &EngineSpec {
        &self.spec
    }
    /// The engine's descriptor.
    pub fn descriptor(&self) -> &'static EngineDescriptor {
        self.descriptor
    }
    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
    /// The manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }
    /// The media the engine was given.
    pub fn media(&self) -> &Media {
        &self.media
    }
    /// True when this open created the store.
    pub fn created(&self) -> bool {
        self.created
    }
    /// The limits every call is checked against.
    pub fn limits(&self) -> Limits {
        self.limits
    }
    /// The engine behind the facade, for harnesses that drive it directly.
    pub fn store(&self) -> Arc<dyn KvStore> {
        self.store.clone()
    }

    /// The field-level (schema) API of this store: the engine's own when it has one
    /// (`focus`), else the consolidated adapter over the engine
    /// ([`tierkv_core::schema::Consolidated`]: a row is one value under a key starting with
    /// 0xFF, so user keys of the plain API must not start with 0xFF, and row keys are 6
    /// bytes shorter than the key limit). Every call returns the same object.
    pub fn schema_store(&self) -> Result<Arc<dyn SchemaStore>> {
        let mut slot = self.schema.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = slot.as_ref() {
            return Ok(s.clone());
        }
        let s: Arc<dyn SchemaStore> = match self.store.clone().native_schema_store() {
            Some(native) => native,
            None => Arc::new(tierkv_core::schema::Consolidated::open(self.store.clone())?),
        };
        *slot = Some(s.clone());
        Ok(s)
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        // Errors on close at drop have nowhere to go; callers who care call close().
        let _ = self.store.close();
    }
}

fn limits_of(desc: &EngineDescriptor, options: &Options) -> Limits {
    let mut limits = options.limits;
    if let Some(max) = desc.max_value_len {
        limits.max_value_len = limits.max_value_len.min(max);
    }
    limits
}

fn new_manifest(
    desc: &EngineDescriptor,
    spec: &EngineSpec,
    base: &str,
    options: &Options,
    dir: &Path,
) -> Manifest {
    let pmem = desc.spec_uses(spec, Tier::Pmem).then(|| PmemLayout {
        path: options.pmem.dir.as_deref().unwrap_or(dir).join(POOL_FILE),
        size: options.pmem.size.bytes(),
        created_mode: options.pmem.mode,
        pool_id: 0,
    });
    let flash = if desc.spec_uses(spec, Tier::Flash) {
        let dirs = if options.flash.dirs.is_empty() {
            vec![dir.join(FLASH_DIR)]
        } else {
            options.flash.dirs.clone()
        };
        dirs.into_iter()
            .map(|path| FlashLayout {
                path,
                size: options.flash.size.bytes(),
            })
            .collect()
    } else {
        Vec::new()
    };
    Manifest {
        engine: base.to_owned(),
        created_by: format!("tierkv {}", env!("CARGO_PKG_VERSION")),
        pmem,
        flash,
    }
}

/// On reopen the layout comes from the manifest; explicitly given locations must agree.
fn check_layout_matches(m: &Manifest, o: &Options, dir: &Path) -> Result<()> {
    if let (Some(p), Some(want)) = (&m.pmem, &o.pmem.dir)
        && !same_path(&p.path, &want.join(POOL_FILE))
    {
        {
            return Err(Error::invalid(format!(
                "the store in {} keeps its pmem pool at {}, not in {}",
                dir.display(),
                p.path.display(),
                want.display()
            )));
        }
    }
    if !o.flash.dirs.is_empty() && !m.flash.is_empty() {
        let have: Vec<&PathBuf> = m.flash.iter().map(|f| &f.path).collect();
        let want: Vec<&PathBuf> = o.flash.dirs.iter().collect();
        if have.len() != want.len() || have.iter().zip(&want).any(|(h, w)| !same_path(h, w)) {
            return Err(Error::invalid(format!(
                "the store in {} uses flash directories {:?}, not {:?}",
                dir.display(),
                have,
                want
            )));
        }
    }
    Ok(())
}

/// Whether two paths name the same place, relative ones taken from the working directory
/// (the manifest stores paths relative to the store's directory or absolute; a user may
/// give either).
fn same_path(a: &Path, b: &Path) -> bool {
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    abs(a) == abs(b)
}

fn open_media(
    desc: &EngineDescriptor,
    m: &mut Manifest,
    o: &Options,
    created: bool,
) -> Result<Media> {
    if let Some(injected) = &o.media {
        // The manifest lists the tiers of the variant opened (`new_manifest`).
        if m.pmem.is_some() && injected.pmem.is_none() {
            return Err(Error::invalid(
                "injected media lack the pmem pool this engine needs",
            ));
        }
        if !m.flash.is_empty() && injected.flash.is_empty() {
            return Err(Error::invalid(
                "injected media lack the flash devices this engine needs",
            ));
        }
        if let (Some(layout), Some(pool)) = (m.pmem.as_mut(), &injected.pmem) {
            layout.path = pool.path().to_owned();
            layout.size = pool.len();
            if created {
                layout.pool_id = pool.pool_id();
            }
        }
        return Ok(injected.clone());
    }
    let mut media = Media::default();
    if let Some(layout) = m.pmem.as_mut() {
        if created && layout.size < desc.min_pmem_size {
            return Err(Error::invalid(format!(
                "a pmem pool of {} bytes is smaller than the {} bytes the {} engine needs",
                layout.size, desc.min_pmem_size, desc.name
            )));
        }
        let cfg = PmemConfig {
            path: layout.path.clone(),
            size: layout.size,
            mode: o.pmem.mode,
            latency: o.pmem.latency,
        };
        let pool = if created {
            if cfg.path.exists() {
                return Err(Error::invalid(format!(
                    "pmem pool file {} exists but no manifest refers to it (left by an \
                     interrupted creation, or another store's pool): remove it to create a new store",
                    cfg.path.display()
                )));
            }
            let p = PmemPool::create(&cfg)?;
            layout.pool_id = p.pool_id();
            p
        } else {
            let p = PmemPool::open(&cfg)?;
            if p.pool_id() != layout.pool_id {
                return Err(Error::corruption(
                    Tier::Pmem,
                    0,
                    format!(
                        "pool {} has id {:#x} but the manifest expects {:#x} (a different pool file)",
                        cfg.path.display(),
                        p.pool_id(),
                        layout.pool_id
                    ),
                ));
            }
            p
        };
        media.pmem = Some(pool);
    }
    for f in &m.flash {
        if created && dir_has_entries(&f.path)? {
            return Err(Error::invalid(format!(
                "flash directory {} is not empty but no manifest refers to it: use an empty directory",
                f.path.display()
            )));
        }
        let mut fo = o.flash.clone();
        fo.size = tierkv_core::ByteSize(f.size);
        media.flash.push(FlashDevice::open(&f.path, &fo)?);
    }
    Ok(media)
}

/// Refuses to create a store where a store's files lie without a MANIFEST (issue 23
/// finding 6): the MANIFEST was lost or a creation was interrupted, and a new store —
/// of any engine, the volatile one too — would bury them. Looks at the default pool and
/// flash locations in `dir` and at the ones `options` name (unless the caller injected
/// the media).
fn refuse_foreign_files(dir: &Path, options: &Options) -> Result<()> {
    if options.media.is_some() {
        // NOTE: injected media (tests, the stress harness) were made by the caller for
        // this store, in its directory; they are not another store's files.
        return Ok(());
    }
    let mut pools = vec![dir.join(POOL_FILE)];
    pools.extend(options.pmem.dir.as_ref().map(|d| d.join(POOL_FILE)));
    let mut flash = vec![dir.join(FLASH_DIR)];
    flash.extend(options.flash.dirs.iter().cloned());
    let mut found: Vec<String> = pools
        .iter()
        .filter(|p| p.exists())
        .map(|p| p.display().to_string())
        .collect();
    for f in &flash {
        if dir_has_entries(f)? {
            found.push(format!("{}/ (not empty)", f.display()));
        }
    }
    let tmp = dir.join(tierkv_core::format::manifest::MANIFEST_TMP_FILE);
    if tmp.exists() {
        found.push(tmp.display().to_string());
    }
    found.dedup();
    if found.is_empty() {
        return Ok(());
    }
    Err(Error::invalid(format!(
        "{} has no MANIFEST but holds a store's files ({}): the MANIFEST was lost or a \
         creation was interrupted; refusing to create a new store over them (restore the \
         MANIFEST, or move those files away)",
        dir.display(),
        found.join(", ")
    )))
}

fn dir_has_entries(p: &Path) -> Result<bool> {
    match fs::read_dir(p) {
        Ok(mut it) => Ok(it.next().is_some()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Error::io("read directory", p, e)),
    }
}

/// Best-effort removal of what a failed creation made, so that the next attempt starts clean.
fn remove_created_media(m: &Manifest) {
    if let Some(p) = &m.pmem {
        let _ = fs::remove_file(&p.path);
    }
    for f in &m.flash {
        let _ = fs::remove_dir_all(&f.path);
    }
}

#[cfg(test)]
mod tests;
