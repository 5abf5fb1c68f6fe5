//! The schema API ([`SchemaStore`](crate::SchemaStore)) over any plain
//! [`KvStore`]: the two "flat data mappings" FOCUS compares itself with
//! (`papers/003`, §III-A, Fig. 2), so that every engine and the RocksDB peer run the same
//! schema workload.
//!
//! - [`Consolidated`]: a row is one value (`codec.rs`) under `0xFF 'R' schema_id key`. An
//!   update reads the row, changes the fields and writes the whole row back, under the
//!   row's stripe lock (`stripes.rs`), which every writer of the row takes; so updates of
//!   one row are serialized and none is lost, and each is one `put`: atomic also across a
//!   crash.
//! - [`Scattered`]: one pair per field under `0xFF 'F' schema_id escape(key) 0 1 field_id`.
//!   A read of `n` fields is `n` gets; an update of `n` fields is `n` puts. **Not
//!   crash-atomic** across the fields of a row (the store has no write batches yet: a crash
//!   during `put_row`, `update_fields` or `delete_row` may leave some fields written);
//!   field 0 is written last by `put_row` and removed first by `delete_row`, and a row
//!   exists exactly when its field 0 does. Concurrent callers see it atomic (stripe lock).
//!
//! Both keep the catalog as one value under `0xFF 'C'` (`keys.rs`), rewritten whole by
//! `create_schema` before the schema becomes visible. User keys stored beside them through
//! the plain API must not start with 0xFF.
//!
//! Thread safety: both adapters are `Send + Sync`; readers take no lock.

pub mod catalog;
pub mod codec;
mod consolidated;
pub mod keys;
mod scattered;
mod stripes;

pub use catalog::Catalog;
pub use consolidated::Consolidated;
pub use scattered::Scattered;
pub use stripes::Stripes;

use std::sync::Arc;

use crate::api::error::Result;
use crate::api::schema::Schema;
use crate::api::store::KvStore;

/// What both adapters hold: the store, the catalog and the row locks.
struct Base {
    store: Arc<dyn KvStore>,
    catalog: Catalog,
    stripes: Stripes,
}

impl Base {
    fn open(store: Arc<dyn KvStore>) -> Result<Base> {
        Ok(Base {
            catalog: load_catalog(&*store)?,
            store,
            stripes: Stripes::default(),
        })
    }
}

/// The catalog methods of [`crate::SchemaStore`], the same in both adapters.
macro_rules! catalog_methods {
    () => {
        fn create_schema(&self, name: &str, fields: &[FieldDef]) -> Result<Arc<Schema>> {
            let b = &self.base;
            b.catalog.create(name, fields, |_, all| {
                super::persist_catalog(&*b.store, all)
            })
        }

        fn schema(&self, name: &str) -> Result<Option<Arc<Schema>>> {
            Ok(self.base.catalog.by_name(name))
        }

        fn schemas(&self) -> Result<Vec<Arc<Schema>>> {
            Ok(self.base.catalog.all())
        }
    };
}
use catalog_methods;

/// Loads the catalog the adapters keep under [`keys::CATALOG_KEY`].
fn load_catalog(store: &dyn KvStore) -> Result<Catalog> {
    match store.get(keys::CATALOG_KEY)? {
        None => Ok(Catalog::default()),
        Some(bytes) => Catalog::from_schemas(codec::decode_catalog(&bytes)?),
    }
}

/// Persists every schema under [`keys::CATALOG_KEY`].
fn persist_catalog(store: &dyn KvStore, all: &[Arc<Schema>]) -> Result<()> {
    store.put(keys::CATALOG_KEY, &codec::encode_catalog(all))
}
