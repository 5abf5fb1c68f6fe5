//! The schema store of the broken variant `reflog:lose-field-updates`: the consolidated
//! adapter (`tierkv_core::schema::Consolidated`, one value per row) except that
//! `update_fields` reads the row, changes its fields and writes it back *without* the
//! row's lock — the classic lost update: two threads updating different fields of one row
//! at once each write back the row they read, and one of the two updates is lost although
//! both were acknowledged. It proves that the field workload ([`crate::fields`]) makes
//! such races and that its oracle catches them (issue 20: "concurrent updates of different
//! fields of one key are never lost").
//!
//! Thread safety: `Send + Sync`; the bug is the missing lock.

use std::sync::Arc;
use std::time::Duration;

use tierkv_core::schema::codec::{encode_row, split_row};
use tierkv_core::schema::{Consolidated, keys};
use tierkv_core::{
    Error, FieldDef, FieldId, FieldSelection, KvStore, Result, Row, RowPair, Schema, SchemaId,
    SchemaStore,
};

/// The consolidated adapter with an unlocked read-modify-write update.
pub struct RacyRows {
    inner: Consolidated,
}

impl RacyRows {
    /// The adapter over `store`.
    pub fn open(store: Arc<dyn KvStore>) -> Result<RacyRows> {
        Ok(RacyRows {
            inner: Consolidated::open(store)?,
        })
    }

    fn schema_by_id(&self, id: SchemaId) -> Result<Arc<Schema>> {
        self.inner
            .schemas()?
            .into_iter()
            .find(|s| s.id == id)
            .ok_or_else(|| Error::invalid(format!("no schema with id {id}")))
    }
}

impl SchemaStore for RacyRows {
    fn create_schema(&self, name: &str, fields: &[FieldDef]) -> Result<Arc<Schema>> {
        self.inner.create_schema(name, fields)
    }

    fn schema(&self, name: &str) -> Result<Option<Arc<Schema>>> {
        self.inner.schema(name)
    }

    fn schemas(&self) -> Result<Vec<Arc<Schema>>> {
        self.inner.schemas()
    }

    fn put_row(&self, schema: SchemaId, key: &[u8], values: &[&[u8]]) -> Result<()> {
        self.inner.put_row(schema, key, values)
    }

    fn update_fields(
        &self,
        schema: SchemaId,
        key: &[u8],
        set: &[(FieldId, &[u8])],
    ) -> Result<bool> {
        let s = self.schema_by_id(schema)?;
        s.check_update(set)?;
        let k = keys::row_key(schema, key);
        let store = self.inner.store();
        // BUG (deliberate): no row lock between the read and the write back.
        let Some(old) = store.get(&k)? else {
            return Ok(false);
        };
        let mut values = split_row(&s, &old)?;
        for (id, v) in set {
            if let Some(slot) = values.get_mut(usize::from(*id)) {
                *slot = v;
            }
        }
        // Widen the window so that the race shows within a CI-sized run.
        std::thread::sleep(Duration::from_micros(200));
        store.put(&k, &encode_row(&s, &values))?;
        Ok(true)
    }

    fn get_fields(
        &self,
        schema: SchemaId,
        key: &[u8],
        selection: &FieldSelection,
    ) -> Result<Option<Row>> {
        self.inner.get_fields(schema, key, selection)
    }

    fn scan_fields(
        &self,
        schema: SchemaId,
        start: &[u8],
        selection: &FieldSelection,
        limit: usize,
    ) -> Result<Vec<RowPair>> {
        self.inner.scan_fields(schema, start, selection, limit)
    }

    fn delete_row(&self, schema: SchemaId, key: &[u8]) -> Result<()> {
        self.inner.delete_row(schema, key)
    }
}
