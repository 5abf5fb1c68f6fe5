//! The consolidated adapter (FOCUS §III-A, the "(Con)" baselines): a whole row as one
//! value. See the module doc of [`crate::schema`] for the layout and the atomicity
//! argument.

use std::sync::Arc;

use crate::api::error::Result;
use crate::api::schema::{
    FieldDef, FieldId, FieldSelection, Row, RowPair, Schema, SchemaId, SchemaStore,
};
use crate::api::store::KvStore;

use super::codec::{decode_fields, encode_row, split_row};
use super::{Base, catalog_methods, keys};

/// The schema API over any [`KvStore`], one value per row.
pub struct Consolidated {
    base: Base,
}

impl Consolidated {
    /// Opens the adapter over `store`, loading the schemas stored there.
    pub fn open(store: Arc<dyn KvStore>) -> Result<Consolidated> {
        Ok(Consolidated {
            base: Base::open(store)?,
        })
    }

    /// The store underneath.
    pub fn store(&self) -> &Arc<dyn KvStore> {
        &self.base.store
    }
}

impl SchemaStore for Consolidated {
    catalog_methods!();

    fn put_row(&self, schema: SchemaId, key: &[u8], values: &[&[u8]]) -> Result<()> {
        let s = self.base.catalog.get(schema)?;
        s.check_row(values)?;
        let k = keys::row_key(schema, key);
        let _g = self.base.stripes.lock(&k);
        self.base.store.put(&k, &encode_row(&s, values))
    }

    fn update_fields(
        &self,
        schema: SchemaId,
        key: &[u8],
        set: &[(FieldId, &[u8])],
    ) -> Result<bool> {
        let s = self.base.catalog.get(schema)?;
        s.check_update(set)?;
        let k = keys::row_key(schema, key);
        let _g = self.base.stripes.lock(&k);
        let Some(old) = self.base.store.get(&k)? else {
            return Ok(false);
        };
        let mut values = split_row(&s, &old)?;
        for (id, v) in set {
            if let Some(slot) = values.get_mut(usize::from(*id)) {
                *slot = v;
            }
        }
        self.base.store.put(&k, &encode_row(&s, &values))?;
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
        match self.base.store.get(&keys::row_key(schema, key))? {
            None => Ok(None),
            Some(bytes) => decode_fields(&s, &bytes, &ids).map(Some),
        }
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
        let prefix = keys::prefix(b'R', schema);
        let mut out = Vec::new();
        for (k, v) in self.base.store.scan(&keys::row_key(schema, start), limit)? {
            let Some(user) = k.strip_prefix(&prefix[..]) else {
                break;
            };
            out.push((user.to_vec(), decode_fields(&s, &v, &ids)?));
        }
        Ok(out)
    }

    fn delete_row(&self, schema: SchemaId, key: &[u8]) -> Result<()> {
        self.base.catalog.get(schema)?;
        let k = keys::row_key(schema, key);
        let _g = self.base.stripes.lock(&k);
        self.base.store.delete(&k)
    }
}
