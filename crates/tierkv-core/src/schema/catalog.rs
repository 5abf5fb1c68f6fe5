//! The schema management layer's catalog (FOCUS §IV, Fig. 5): schemas by name and by id,
//! in DRAM, with the persistence left to the owner (a reserved key for the adapters, a
//! pmem area for `focus`).
//!
//! `create` holds one mutex from the id's choice until the caller's `persist` returned, so
//! two creates never take one id and a schema is visible only once it is durable.
//!
//! Thread safety: `Send + Sync`; lookups take a read lock, `create` the write mutex.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::api::error::{Error, Result};
use crate::api::schema::{FieldDef, Schema, SchemaId};

/// Schemas by name and id.
#[derive(Default)]
pub struct Catalog {
    by_id: RwLock<BTreeMap<SchemaId, Arc<Schema>>>,
    by_name: RwLock<HashMap<String, Arc<Schema>>>,
    create: Mutex<()>,
}

impl Catalog {
    /// A catalog holding `schemas` (as recovered).
    pub fn from_schemas(schemas: Vec<Schema>) -> Result<Catalog> {
        let c = Catalog::default();
        for s in schemas {
            c.install(Arc::new(s))?;
        }
        Ok(c)
    }

    fn install(&self, s: Arc<Schema>) -> Result<()> {
        let mut by_name = self.by_name.write();
        if by_name.contains_key(&s.name) || self.by_id.read().contains_key(&s.id) {
            return Err(Error::corruption(
                crate::Tier::Dram,
                0,
                format!("schema {} (id {}) stored twice", s.name, s.id),
            ));
        }
        by_name.insert(s.name.clone(), s.clone());
        self.by_id.write().insert(s.id, s);
        Ok(())
    }

    /// Creates a schema: returns the existing one if `name` exists with the same fields
    /// (an error if with others); else builds it with the next id, calls `persist` with
    /// the new schema and every schema (new one last) and installs it once that returned.
    pub fn create(
        &self,
        name: &str,
        fields: &[FieldDef],
        persist: impl FnOnce(&Arc<Schema>, &[Arc<Schema>]) -> Result<()>,
    ) -> Result<Arc<Schema>> {
        let _g = self.create.lock();
        if let Some(s) = self.by_name.read().get(name) {
            if s.fields == fields {
                return Ok(s.clone());
            }
            return Err(Error::invalid(format!(
                "schema {name} exists with other fields"
            )));
        }
        let id = self.by_id.read().keys().next_back().map_or(1, |m| m + 1);
        let s = Arc::new(Schema::new(id, name, fields)?);
        let mut all = self.all();
        all.push(s.clone());
        persist(&s, &all)?;
        self.install(s.clone())?;
        Ok(s)
    }

    /// The schema called `name`.
    pub fn by_name(&self, name: &str) -> Option<Arc<Schema>> {
        self.by_name.read().get(name).cloned()
    }

    /// The schema with `id`, or `InvalidArgument`.
    pub fn get(&self, id: SchemaId) -> Result<Arc<Schema>> {
        self.by_id
            .read()
            .get(&id)
            .cloned()
            .ok_or_else(|| Error::invalid(format!("no schema with id {id}")))
    }

    /// Every schema, by id.
    pub fn all(&self) -> Vec<Arc<Schema>> {
        self.by_id.read().values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_assigns_ids_and_is_idempotent_for_equal_fields() {
        let c = Catalog::default();
        let f = [FieldDef::fixed("a", 2)];
        let a = c
            .create("a", &f, |_, _| Ok(()))
            .unwrap_or_else(|e| panic!("{e}"));
        let b = c.create("b", &f, |_, all| {
            assert_eq!(all.len(), 2);
            Ok(())
        });
        assert_eq!((a.id, b.map(|s| s.id).ok()), (1, Some(2)));
        assert_eq!(c.create("a", &f, |_, _| Ok(())).map(|s| s.id).ok(), Some(1));
        assert!(
            c.create("a", &[FieldDef::var("a", 2)], |_, _| Ok(()))
                .is_err()
        );
        assert!(c.create("c", &f, |_, _| Err(Error::Closed)).is_err());
        assert!(
            c.by_name("c").is_none(),
            "a failed persist installs nothing"
        );
        assert!(c.get(3).is_err());
    }
}
