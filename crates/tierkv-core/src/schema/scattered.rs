//! The scattered adapter (FOCUS §III-A, the "(Sct)" baselines): one key per field. See the
//! module doc of [`crate::schema`] for the layout and why it is not crash-atomic.

use std::sync::Arc;

use crate::api::error::{Error, Result, Tier};
use crate::api::schema::{
    FieldDef, FieldId, FieldSelection, Row, RowPair, Schema, SchemaId, SchemaStore,
};
use crate::api::store::KvStore;

use super::{Base, catalog_methods, keys};

/// A row being assembled by a scan: its key and the values found so far, by field id.
type Partial = (Vec<u8>, Vec<Option<Vec<u8>>>);

/// The schema API over any [`KvStore`], one pair per field.
pub struct Scattered {
    base: Base,
}

impl Scattered {
    /// Opens the adapter over `store`, loading the schemas stored there.
    pub fn open(store: Arc<dyn KvStore>) -> Result<Scattered> {
        Ok(Scattered {
            base: Base::open(store)?,
        })
    }

    /// Reads field 0 (whether the row exists) and then the fields `ids`.
    fn read(&self, s: &Schema, row: &[u8], ids: &[FieldId]) -> Result<Option<Row>> {
        let Some(first) = self.base.store.get(&keys::field_key(row, 0))? else {
            return Ok(None);
        };
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            if *id == 0 {
                out.push(first.clone());
                continue;
            }
            match self.base.store.get(&keys::field_key(row, *id))? {
                Some(v) => out.push(v),
                None => {
                    return Err(Error::corruption(
                        Tier::Dram,
                        0,
                        format!("schema {}: a row lacks field {id}", s.name),
                    ));
                }
            }
        }
        Ok(Some(out))
    }
}

impl SchemaStore for Scattered {
    catalog_methods!();

    fn put_row(&self, schema: SchemaId, key: &[u8], values: &[&[u8]]) -> Result<()> {
        let s = self.base.catalog.get(schema)?;
        s.check_row(values)?;
        let row = keys::scattered_row(schema, key);
        let _g = self.base.stripes.lock(&row);
        // IMPORTANT: field 0 last: it marks the row as present.
        for (i, v) in values.iter().enumerate().rev() {
            self.base
                .store
                .put(&keys::field_key(&row, i as FieldId), v)?;
        }
        Ok(())
    }

    fn update_fields(
        &self,
        schema: SchemaId,
        key: &[u8],
        set: &[(FieldId, &[u8])],
    ) -> Result<bool> {
        let s = self.base.catalog.get(schema)?;
        s.check_update(set)?;
        let row = keys::scattered_row(schema, key);
        let _g = self.base.stripes.lock(&row);
        if self.base.store.get(&keys::field_key(&row, 0))?.is_none() {
            return Ok(false);
        }
        for (id, v) in set {
            self.base.store.put(&keys::field_key(&row, *id), v)?;
        }
        Ok(true)
    }

    fn get_fields(
        &self,
        schema: SchemaId,
        key: &[u8],
        selection: &FieldSelection,
    ) -> Result<Option<Row>> {
        let s = self.base.catalog.get(schema)?;
        let ids = s.resolve(selection)?;
        let row = keys::scattered_row(schema, key);
        self.read(&s, &row, &ids)
    }

    fn scan_fields(
        &self,
        schema: SchemaId,
        start: &[u8],
        selection: &FieldSelection,
        limit: usize,
    ) -> Result<Vec<RowPair>> {
        let s = self.base.catalog.get(schema)?;
        let ids = s.resolve(selection)?;
        let prefix = keys::prefix(b'F', schema);
        let batch = (limit.saturating_add(1))
            .saturating_mul(s.len())
            .min(1 << 16);
        let mut from = keys::scattered_row(schema, start);
        from.truncate(from.len() - 2); // the row's start, before its terminator
        let mut out: Vec<RowPair> = Vec::new();
        // The fields of the row being assembled: (key, values by field id).
        let mut cur: Option<Partial> = None;
        let finish = |cur: Option<Partial>, out: &mut Vec<RowPair>| {
            if let Some((k, vals)) = cur
                && vals.first().is_some_and(Option::is_some)
            {
                let row = ids
                    .iter()
                    .map(|id| {
                        vals.get(usize::from(*id))
                            .cloned()
                            .flatten()
                            .unwrap_or_default()
                    })
                    .collect();
                out.push((k, row));
            }
        };
        loop {
            let pairs = self.base.store.scan(&from, batch)?;
            let n = pairs.len();
            for (k, v) in pairs {
                let Some(rest) = k.strip_prefix(&prefix[..]) else {
                    finish(cur.take(), &mut out);
                    return Ok(out);
                };
                let (user, id) = keys::split_field_key(rest).ok_or_else(|| {
                    Error::corruption(Tier::Dram, 0, "a scattered key the adapter did not write")
                })?;
                if cur.as_ref().is_none_or(|(ck, _)| *ck != user) {
                    finish(cur.take(), &mut out);
                    if out.len() >= limit {
                        return Ok(out);
                    }
                    cur = Some((user, vec![None; s.len()]));
                }
                if let Some((_, vals)) = cur.as_mut()
                    && let Some(slot) = vals.get_mut(usize::from(id))
                {
                    *slot = Some(v);
                }
                from = k;
                from.push(0);
            }
            if n < batch {
                break;
            }
        }
        finish(cur.take(), &mut out);
        out.truncate(limit);
        Ok(out)
    }

    fn delete_row(&self, schema: SchemaId, key: &[u8]) -> Result<()> {
        let s = self.base.catalog.get(schema)?;
        let row = keys::scattered_row(schema, key);
        let _g = self.base.stripes.lock(&row);
        // IMPORTANT: field 0 first: once it is gone the row is absent.
        for i in 0..s.len() {
            self.base
                .store
                .delete(&keys::field_key(&row, i as FieldId))?;
        }
        Ok(())
    }
}
