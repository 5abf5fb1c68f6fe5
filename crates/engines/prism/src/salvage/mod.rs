//! Salvage of a damaged PRISM store (issue 23, finding 10; `tierkv dump --salvage`): a
//! read-only walk of the persistent structures that yields every record it can tie to
//! its key, in key order, without running recovery and without trusting the index or the
//! allocator as a whole. The walk and what it can and cannot verify are specified in
//! FORMAT.md, "Salvage"; the PRISM structures it reads are those of §4.1 (key index
//! leaves), §4.5 (HSIT) and §4.2-4.3 (PWB records, Value Storage records).
//!
//! | step | file |
//! |---|---|
//! | read-only sources (pool file, Value Storage files, byte slices) | [`source`] |
//! | 1. the superblock, or a re-planned layout confirmed by the allocator header | [`layout`] |
//! | 2-3. keys and their HSIT slots from the key index leaves | [`keys`] |
//! | 4. from a slot to a validated value | [`values`] |
//! | 5. one value per key, in key order (a committed batch log on top), with notes for what was skipped | this file |
//!
//! Thread safety: one salvage runs on the calling thread; it shares nothing.

pub mod keys;
pub mod layout;
pub mod source;
pub mod values;

use std::collections::BTreeMap;

use tierkv_core::{Result, SalvageContext, SalvageReport, SalvageSink};

use self::layout::PlanHint;
use self::source::{FileSource, Source};
use self::values::{Found, Outcome, Stores};
use crate::batch::{ROOT_BATCH, log_format};
use crate::options::PrismOptions;
use crate::superblock::ROOT_KEY_INDEX;
use crate::value_storage::chunk_format::storage_file_name;

/// What the format cannot verify (printed in the dump header).
pub const CAVEATS: [&str; 2] = [
    "HSIT forward pointers carry no checksum: a damaged pointer that happens to name an older record of the same key (same slot, valid checksum) would yield that older version",
    "a damaged key-index bitmap word that clears a live entry hides that key without a trace",
];

/// The caveat added when the key index list was broken and unlinked leaves were read.
pub const UNLINKED_CAVEAT: &str = "the key index list was broken, so entries of unlinked leaves were read: a stale entry of a deleted key is dropped unless its HSIT slot still carries that key's tag and a valid value (only a put of the same key into the same slot cut by a crash does that)";

/// The caveat added when root word 2 names a batch log that does not decode.
pub const BATCH_CAVEAT: &str = "root word 2 names a committed write batch whose log does not decode: if a batch was committed and cut by a crash, its keys may appear partly applied";

/// The write batch committed but not yet fully applied (root word 2, § Write batches):
/// `None` when the word is 0, an error note when the log it names does not decode.
fn committed_batch(
    pool: &dyn Source,
) -> std::result::Result<Option<tierkv_core::WriteBatch>, String> {
    let at = layout::root(pool, ROOT_BATCH).unwrap_or(0);
    if at == 0 {
        return Ok(None);
    }
    let bad = |e: String| format!("committed write batch log at pool offset {at}: {e}");
    let head = pool
        .bytes(at, log_format::HEADER_LEN as u64)
        .ok_or_else(|| bad("outside the pool".into()))?;
    let h = log_format::decode_header(&head, at).map_err(|e| bad(e.to_string()))?;
    let all = pool
        .bytes(at, h.total_len())
        .ok_or_else(|| bad(format!("{} bytes outside the pool", h.total_len())))?;
    log_format::decode(&all, at)
        .map(|(_, b)| Some(b))
        .map_err(|e| bad(e.to_string()))
}

/// The salvage of the store `ctx` describes (the facade's `SalvageFn` for `prism`).
pub fn salvage(ctx: &SalvageContext, sink: &mut dyn SalvageSink) -> Result<SalvageReport> {
    let pmem = ctx.manifest.pmem.as_ref().ok_or_else(|| {
        tierkv_core::Error::invalid("the manifest names no pmem pool for this prism store")
    })?;
    let pool = FileSource::open(&pmem.path)?;
    let mut regions = Vec::new();
    let files: Vec<Option<FileSource>> = ctx
        .manifest
        .flash
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let name = storage_file_name(u8::try_from(i).unwrap_or(u8::MAX));
            FileSource::open(&f.path.join(&name))
                .map_err(|e| regions.push(format!("value storage {i}: {e}")))
                .ok()
        })
        .collect();
    let hint = PrismOptions::parse(&ctx.spec, &ctx.options)
        .ok()
        .map(|o| PlanHint {
            pwb_count: o.pwb_count_or_default(),
            pwb_size: o.pwb_size_or_default(pool.len()),
            chunk_size: u32::try_from(o.chunk_size_or_default()).unwrap_or(u32::MAX),
            flash_count: u32::try_from(files.len()).unwrap_or(u32::MAX),
        });
    let flash: Vec<Option<&dyn Source>> = files
        .iter()
        .map(|f| f.as_ref().map(|f| f as &dyn Source))
        .collect();
    let mut report = salvage_sources(&pool, &flash, hint, sink)?;
    report.regions.splice(0..0, regions);
    Ok(report)
}

/// The salvage walk over a pool image and Value Storage images (by storage id). `hint`
/// re-plans the layout when the superblock is damaged. The fuzz target calls this.
pub fn salvage_sources(
    pool: &dyn Source,
    flash: &[Option<&dyn Source>],
    hint: Option<PlanHint>,
    sink: &mut dyn SalvageSink,
) -> Result<SalvageReport> {
    let layout = layout::find(pool, hint)?;
    let mut report = SalvageReport {
        regions: vec![layout.how.clone()],
        caveats: CAVEATS.iter().map(|s| (*s).to_owned()).collect(),
        ..SalvageReport::default()
    };
    let root = layout::root(pool, ROOT_KEY_INDEX).unwrap_or(0);
    let walk = keys::walk(pool, &layout.alloc, root);
    report.regions.push(walk.summary.clone());
    if !walk.complete {
        report.caveats.push(UNLINKED_CAVEAT.to_owned());
    }
    for note in &walk.skipped {
        sink.skipped(note)?;
        report.skipped += 1;
    }
    let dir = values::read_dir(pool, &layout.sb);
    let stores = Stores {
        pool,
        sb: &layout.sb,
        alloc: &layout.alloc,
        spare: values::spare_segments(pool, &layout.alloc, &dir),
        dir,
        flash: flash.to_vec(),
        found: std::cell::RefCell::default(),
    };
    // key -> distinct (slot, linked) candidates; linked ones win.
    let mut by_key: BTreeMap<Vec<u8>, Vec<(u64, bool)>> = BTreeMap::new();
    for c in walk.candidates {
        let v = by_key.entry(c.key).or_default();
        if !v.contains(&(c.slot, c.linked)) {
            v.push((c.slot, c.linked));
        }
    }
    let batch = committed_batch(pool);
    match &batch {
        Ok(None) => {}
        Ok(Some(b)) => {
            report.regions.push(format!(
                "a committed write batch of {} operations was not fully applied at the crash: applied on top (as recovery does)",
                b.len()
            ));
            for (k, _) in b.iter() {
                by_key.entry(k.to_vec()).or_default();
            }
        }
        Err(why) => {
            sink.skipped(why)?;
            report.skipped += 1;
            report.caveats.push(BATCH_CAVEAT.to_owned());
        }
    }
    let mut counts = Counts::default();
    for (key, cands) in by_key {
        if let Ok(Some(b)) = &batch
            && let Some(op) = b.op(&key)
        {
            if let Some(v) = op.value() {
                counts.batch += 1;
                sink.record(&key, v)?;
                report.records += 1;
            } else {
                counts.deleted += 1;
            }
            continue;
        }
        let any_linked = cands.iter().any(|c| c.1);
        let mut slots: Vec<u64> = cands
            .iter()
            .filter(|c| c.1 == any_linked)
            .map(|c| c.0)
            .collect();
        slots.sort_unstable();
        slots.dedup();
        match pick(&stores, &key, &slots) {
            Pick::Value(v, found) => {
                counts.add(found);
                sink.record(&key, &v)?;
                report.records += 1;
            }
            Pick::Deleted => counts.deleted += 1,
            // NOTE: with a broken list, unlinked leaves hold stale entries of deleted
            // keys (whose slots are free or reused): their failing the HSIT checks is
            // expected, so they are counted, not listed one by one.
            Pick::Skip(_) if !any_linked => counts.unlinked_rejected += 1,
            Pick::Skip(why) => {
                sink.skipped(&format!("{}: {why}", hex(&key)))?;
                report.skipped += 1;
            }
        }
    }
    if counts.unlinked_rejected > 0 {
        report.regions.push(format!(
            "{} keys found only in unlinked leaves do not validate against HSIT (entries of deleted keys, or damaged ones): not yielded",
            counts.unlinked_rejected
        ));
    }
    report.regions.push(format!(
        "values: {} from PWBs on pmem, {} from value storage on flash, {} from a committed batch log, {} keys whose HSIT pointer is none (deleted: not yielded), {} keys skipped",
        counts.pwb,
        counts.flash,
        counts.batch,
        counts.deleted,
        report.skipped.saturating_sub(walk.skipped.len() as u64)
    ));
    Ok(report)
}

#[derive(Default)]
struct Counts {
    unlinked_rejected: u64,
    batch: u64,
    pwb: u64,
    flash: u64,
    deleted: u64,
}

impl Counts {
    fn add(&mut self, f: Found) {
        match f {
            Found::Pwb => self.pwb += 1,
            Found::Flash => self.flash += 1,
        }
    }
}

enum Pick {
    Value(Vec<u8>, Found),
    Deleted,
    Skip(String),
}

/// One answer for a key from its candidate slots: the single slot that validates; a key
/// with two validating slots (a damaged index) is skipped rather than guessed.
fn pick(stores: &Stores<'_>, key: &[u8], slots: &[u64]) -> Pick {
    let mut values = Vec::new();
    let mut deleted = false;
    let mut errors = Vec::new();
    for &s in slots {
        match stores.value(key, s) {
            Ok(Outcome::Value(v, f)) => values.push((v, f)),
            Ok(Outcome::Deleted) => deleted = true,
            Err(e) => errors.push(e),
        }
    }
    match values.len() {
        1 => {
            let (v, f) = values.swap_remove(0);
            Pick::Value(v, f)
        }
        0 if deleted => Pick::Deleted,
        0 => Pick::Skip(errors.join("; ")),
        n => Pick::Skip(format!(
            "{n} HSIT slots ({slots:?}) hold a valid value for this key; none is trusted"
        )),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
