//! Schema workloads (FOCUS §VI, issue 20): YCSB records of `--fields N` fields of
//! `--field-size S` bytes stored through the field-level API ([`SchemaStore`]) instead of as
//! one opaque value, so that a store that updates and reads single fields (FOCUS) is
//! measured against the ways other stores hold records.
//!
//! `--schema LAYOUT` chooses how each target holds the records:
//! - `native`: the target's own schema store if it has one (`focus`), else the
//!   consolidated adapter over it ([`tierkv::Db::schema_store`]);
//! - `consolidated`: a whole row as one value
//!   ([`Consolidated`](tierkv::core::schema::Consolidated), the paper's "(Con)" baselines),
//!   even over `focus`;
//! - `scattered`: one key per field ([`Scattered`](tierkv::core::schema::Scattered), the
//!   paper's "(Sca)" baselines).
//!
//! The RocksDB peer offers the two adapters over itself (`native` is `consolidated`).
//!
//! Operations in schema mode (the worker, `runner/worker.rs`): an insert is `put_row` of
//! every field; a read is `get_fields` of the whole record (YCSB `readallfields=true`); an
//! update sets one field drawn uniformly (YCSB `writeallfields=false`); a scan reads whole
//! records; a read-modify-write reads the record and sets one field. The micro-benchmarks
//! of the paper are workloads whose reads and scans select one field
//! ([`crate::workload::FieldScope::OneField`]): `field-read`, `field-update`,
//! `field-scan` (100 rows).
//!
//! Every field is `Fixed` of `S` bytes (YCSB's fields have one length), named `field0`,
//! `field1`, ... as YCSB names them; the schema is called [`SCHEMA_NAME`].
//!
//! Thread safety: [`RowSchema`] is shared by every client thread of a target's run; the
//! schema stores are `Send + Sync`.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use tierkv::{FieldDef, FieldId, Schema, SchemaStore};

use crate::peer::BenchTarget;
use crate::values::field_name;

/// The schema every target's records are stored under.
pub const SCHEMA_NAME: &str = "ycsb";

/// How a target holds the records of a schema workload (`--schema`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchemaLayout {
    /// The target's own schema store, or the consolidated adapter where it has none.
    Native,
    /// A row as one value.
    Consolidated,
    /// One key per field.
    Scattered,
}

impl fmt::Display for SchemaLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SchemaLayout::Native => "native",
            SchemaLayout::Consolidated => "consolidated",
            SchemaLayout::Scattered => "scattered",
        })
    }
}

impl FromStr for SchemaLayout {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "native" => Ok(SchemaLayout::Native),
            "consolidated" => Ok(SchemaLayout::Consolidated),
            "scattered" => Ok(SchemaLayout::Scattered),
            _ => Err(format!(
                "schema layout {s:?}: expected native, consolidated or scattered"
            )),
        }
    }
}

/// The schema of one target's run: its store, the schema and the record shape.
pub struct RowSchema {
    /// Where rows go.
    pub store: Arc<dyn SchemaStore>,
    /// The schema, as the store created it.
    pub schema: Arc<Schema>,
    /// Bytes per field.
    pub field_size: usize,
}

impl fmt::Debug for RowSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RowSchema")
            .field("schema", &self.schema)
            .field("field_size", &self.field_size)
            .finish_non_exhaustive()
    }
}

impl RowSchema {
    /// Opens `target`'s schema store in `layout` and creates the schema of `count` fixed
    /// fields of `size` bytes (or finds it, created identically by an earlier run).
    pub fn open(
        target: &dyn BenchTarget,
        layout: SchemaLayout,
        count: usize,
        size: usize,
    ) -> tierkv::Result<RowSchema> {
        let len = u16::try_from(size).map_err(|_| {
            tierkv::Error::invalid(format!(
                "--field-size {size}: schema fields hold at most {} bytes",
                u16::MAX
            ))
        })?;
        let fields: Vec<FieldDef> = (0..count)
            .map(|i| FieldDef::fixed(&field_name(i), len))
            .collect();
        let store = target.schema_store(layout)?;
        let schema = store.create_schema(SCHEMA_NAME, &fields)?;
        Ok(RowSchema {
            store,
            schema,
            field_size: size,
        })
    }

    /// Fields per record.
    pub fn fields(&self) -> usize {
        self.schema.fields.len()
    }

    /// The id of field `i` (`i` below [`RowSchema::fields`]).
    pub fn field_id(&self, i: usize) -> FieldId {
        FieldId::try_from(i).unwrap_or(FieldId::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_parse_and_print_their_names() {
        for l in [
            SchemaLayout::Native,
            SchemaLayout::Consolidated,
            SchemaLayout::Scattered,
        ] {
            assert_eq!(l.to_string().parse::<SchemaLayout>().unwrap(), l);
        }
        assert!("Scattered".parse::<SchemaLayout>().is_ok());
        let e = "columnar".parse::<SchemaLayout>().unwrap_err();
        assert!(
            e.contains("expected native, consolidated or scattered"),
            "{e}"
        );
    }
}
