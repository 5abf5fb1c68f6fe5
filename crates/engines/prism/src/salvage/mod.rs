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
//! | 5. one value per key, in key order, with notes for what was skipped | this file |
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
    let mut counts = Counts::default();
    for (key, cands) in by_key {
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
            Pick::Skip(why) => {
                sink.skipped(&format!("{}: {why}", hex(&key)))?;
                report.skipped += 1;
            }
        }
    }
    report.regions.push(format!(
        "values: {} from PWBs on pmem, {} from value storage on flash, {} keys with a delete in flight (not yielded), {} keys skipped",
        counts.pwb,
        counts.flash,
        counts.deleted,
        report.skipped.saturating_sub(walk.skipped.len() as u64)
    ));
    Ok(report)
}

#[derive(Default)]
struct Counts {
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
