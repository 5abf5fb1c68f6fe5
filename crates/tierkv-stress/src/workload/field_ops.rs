//! The field operations of the workload (issue 20; the oracle is [`crate::fields`]):
//! `put_row` and `delete_row` hold the locks of every field of the row, `update_fields`
//! the locks of its fields only, so threads update different fields of one row at once;
//! `get_fields` and `scan_fields` take no lock and are checked between the state before
//! and after them.
//!
//! Thread safety: called by the workload's worker threads.

use std::time::Instant;

use rand::Rng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use tierkv::Error;
use tierkv_core::{FieldId, FieldSelection};

use super::Workload;
use crate::expected_state::KeySpace;
use crate::fields::{
    FIELD_LEN, FIELD_MIX, FieldState, WriteKind, field_value, mask_fields, random_mask,
};
use crate::verify::violation;

impl Workload<'_> {
    /// One random field operation.
    pub(super) fn field_op(&self, rng: &mut ChaCha8Rng) {
        let Some(fs) = self.state.fields() else {
            return;
        };
        let cfg = fs.config();
        let row = rng.random_range(0..cfg.rows);
        let total: u32 = FIELD_MIX.iter().sum();
        let mut x = rng.random_range(0..total);
        let mut op = 0;
        for (i, w) in FIELD_MIX.iter().enumerate() {
            if x < *w {
                op = i;
                break;
            }
            x -= w;
        }
        match op {
            0 => self.row_write(fs, row, WriteKind::Put, u64::MAX),
            1 => {
                let mask = random_mask(rng, cfg.fields);
                self.row_write(fs, row, WriteKind::Update, mask);
            }
            2 => {
                let sel = random_selection(rng, cfg.fields);
                self.row_get(fs, row, sel);
            }
            3 => self.row_write(fs, row, WriteKind::Delete, u64::MAX),
            _ => {
                let sel = random_selection(rng, cfg.fields);
                let limit = rng.random_range(1..=cfg.rows as usize);
                self.row_scan(fs, row, sel, limit);
            }
        }
    }

    fn row_write(&self, fs: &FieldState, row: u32, kind: WriteKind, mask: u64) {
        let Some((h, locks)) = &self.fields else {
            return;
        };
        let key = fs.config().rows().key(row);
        let _guards = locks.lock(row, mask);
        let exists = fs.row(row).exists();
        if kind == WriteKind::Update {
            match exists {
                // NOTE: a put or delete of the row in flight (refused, or cut): whether the
                // row exists is unknown, so the update's outcome would be too.
                None => return,
                Some(false) => return self.absent_update(fs, row, &key, mask),
                Some(true) => {}
            }
        }
        let version = fs.begin(row, kind, mask);
        self.observer.announce_field(row, version, kind, mask);
        let n = usize::from(fs.config().fields);
        let started = Instant::now();
        let result = match kind {
            WriteKind::Put => {
                let vals: Vec<_> = (0..n as FieldId)
                    .map(|f| field_value(row, f, version))
                    .collect();
                let refs: Vec<&[u8]> = vals.iter().map(|v| v.as_slice()).collect();
                h.store.put_row(h.id, &key, &refs).map(|()| true)
            }
            WriteKind::Delete => h.store.delete_row(h.id, &key).map(|()| true),
            WriteKind::Update => {
                let vals = update_values(row, mask, version);
                h.store.update_fields(h.id, &key, &as_set(&vals))
            }
        };
        let took = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.counts
            .max_write_micros
            .fetch_max(took, std::sync::atomic::Ordering::Relaxed);
        let what = match kind {
            WriteKind::Put => "put_row",
            WriteKind::Delete => "delete_row",
            WriteKind::Update => "update_fields",
        };
        match result {
            Ok(true) => {
                fs.commit(row, version);
                self.observer.acked_field(row, version);
                match kind {
                    WriteKind::Put => self.counts.row_puts.incr(),
                    WriteKind::Delete => self.counts.row_deletes.incr(),
                    WriteKind::Update => {
                        self.counts.field_updates.incr();
                        self.counts.fields_updated.add(u64::from(mask.count_ones()));
                    }
                }
            }
            Ok(false) => self.report(violation(
                &format!("{}, update_fields", self.context),
                &key,
                "true (the row exists: its put was acknowledged)".to_owned(),
                format!("false for v#{version} (the row is gone)"),
            )),
            Err(Error::NoSpace { .. }) if self.refusals_allowed => {
                fs.refuse(row, version);
                self.observer.refused_field(row, version);
                self.counts.refused.incr();
            }
            Err(e) => self.fail_write(format!(
                "{what} of row {} v#{version}: {e}",
                KeySpace::show(&key)
            )),
        }
    }

    /// An update of a row known to be absent: must return false and write nothing.
    fn absent_update(&self, fs: &FieldState, row: u32, key: &[u8], mask: u64) {
        let Some((h, _)) = &self.fields else {
            return;
        };
        // NOTE: the value names a version never issued (real versions stay below 2^31), so
        // if it were written anyway the verifier finds a phantom.
        let phantom = fs.row(row).max_issued | (1 << 31);
        let vals = update_values(row, mask, phantom);
        match h.store.update_fields(h.id, key, &as_set(&vals)) {
            Ok(false) => self.counts.absent_updates.incr(),
            Ok(true) => self.report(violation(
                &format!("{}, update_fields", self.context),
                key,
                "false (no row: it was never put, or its delete was acknowledged)".to_owned(),
                "true (an update of a row that does not exist)".to_owned(),
            )),
            Err(Error::NoSpace { .. }) if self.refusals_allowed => self.counts.refused.incr(),
            Err(e) => self.fail_write(format!(
                "update_fields of absent row {}: {e}",
                KeySpace::show(key)
            )),
        }
    }

    fn row_get(&self, fs: &FieldState, row: u32, sel: Vec<FieldId>) {
        let Some((h, _)) = &self.fields else {
            return;
        };
        let key = fs.config().rows().key(row);
        let before = fs.open_read(row);
        let result = h
            .store
            .get_fields(h.id, &key, &FieldSelection::Only(sel.clone()));
        let ctx = format!("{}, get_fields {sel:?}", self.context);
        match result {
            Ok(found) => {
                if let Err((exp, got)) = fs.check(row, &before, &sel, found.as_deref()) {
                    self.report(violation(&ctx, &key, exp, got));
                }
                self.counts.row_gets.incr();
            }
            Err(e) => self.report(violation(
                &ctx,
                &key,
                "the row's fields".to_owned(),
                format!("an error: {e}"),
            )),
        }
    }

    fn row_scan(&self, fs: &FieldState, start: u32, sel: Vec<FieldId>, limit: usize) {
        let Some((h, _)) = &self.fields else {
            return;
        };
        let space = fs.config().rows();
        let start_key = space.key(start);
        let befores: Vec<_> = (start..space.count()).map(|r| fs.open_read(r)).collect();
        let result =
            h.store
                .scan_fields(h.id, &start_key, &FieldSelection::Only(sel.clone()), limit);
        let ctx = format!(
            "{}, scan_fields {sel:?} from {} limit {limit}",
            self.context,
            KeySpace::show(&start_key)
        );
        let rows = match result {
            Ok(r) => r,
            Err(e) => {
                return self.report(violation(
                    &ctx,
                    &start_key,
                    "a scan".to_owned(),
                    format!("an error: {e}"),
                ));
            }
        };
        if rows.len() > limit {
            self.report(violation(
                &ctx,
                &start_key,
                format!("at most {limit} rows"),
                format!("{} rows", rows.len()),
            ));
        }
        let mut listed = vec![false; befores.len()];
        let mut prev: Option<u32> = None;
        for (k, vals) in &rows {
            let Some(id) = space.id_of(k).filter(|id| *id >= start) else {
                self.report(violation(
                    &ctx,
                    k,
                    "no such row in the scanned range".to_owned(),
                    "a phantom row".to_owned(),
                ));
                continue;
            };
            if prev.is_some_and(|p| p >= id) {
                self.report(violation(
                    &ctx,
                    k,
                    "rows in strictly ascending key order".to_owned(),
                    "this row out of order".to_owned(),
                ));
            }
            prev = Some(id);
            let i = (id - start) as usize;
            if let Some(l) = listed.get_mut(i) {
                *l = true;
            }
            if let Some(b) = befores.get(i)
                && let Err((exp, got)) = fs.check(id, b, &sel, Some(vals))
            {
                self.report(violation(&ctx, k, exp, got));
            }
        }
        let covered = if rows.len() >= limit {
            prev.map_or(0, |p| (p - start) as usize + 1)
        } else {
            befores.len()
        };
        for (i, b) in befores.iter().enumerate().take(covered) {
            let id = start + i as u32;
            if !listed.get(i).copied().unwrap_or(true) && fs.must_be_listed(id, b) {
                self.report(violation(
                    &ctx,
                    &space.key(id),
                    "the row (present and acknowledged throughout the scan)".to_owned(),
                    "missing from the scan".to_owned(),
                ));
            }
        }
        self.counts.row_scans.incr();
    }
}

/// The values an update of the fields of `mask` of `row` writes at `version`.
fn update_values(row: u32, mask: u64, version: u32) -> Vec<(FieldId, [u8; FIELD_LEN])> {
    mask_fields(mask)
        .into_iter()
        .map(|f| (f, field_value(row, f, version)))
        .collect()
}

fn as_set(vals: &[(FieldId, [u8; FIELD_LEN])]) -> Vec<(FieldId, &[u8])> {
    vals.iter().map(|(f, v)| (*f, v.as_slice())).collect()
}

/// A random selection: 1..=fields distinct fields in random order.
fn random_selection(rng: &mut ChaCha8Rng, fields: u16) -> Vec<FieldId> {
    let mut all: Vec<FieldId> = (0..fields).collect();
    all.shuffle(rng);
    let n = rng.random_range(1..=usize::from(fields));
    all.truncate(n);
    all
}
