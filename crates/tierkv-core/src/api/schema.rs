//! The field-level (schema) API of FOCUS (`papers/003`, §IV, Table I): records of a declared
//! schema with named fixed- or variable-length fields, read and updated field by field.
//!
//! | FOCUS (Table I)          | here                                   |
//! |--------------------------|----------------------------------------|
//! | `create_schema(name, F)` | [`SchemaStore::create_schema`]         |
//! | `put(key, value)`        | [`SchemaStore::put_row`]               |
//! | `update(key, value_F)`   | [`SchemaStore::update_fields`]         |
//! | `get(key, F)`            | [`SchemaStore::get_fields`]            |
//! | `scan(key, F, range)`    | [`SchemaStore::scan_fields`]           |
//! | `del(key)`               | [`SchemaStore::delete_row`]            |
//!
//! # Contract (every implementation; the conformance suite in `tierkv-testkit` checks it)
//! - Keys live in one namespace *per schema*: the same key under two schemas names two
//!   rows. A scan returns rows of one schema only, ordered by key.
//! - Acknowledged means durable, as for [`KvStore::put`](crate::KvStore::put).
//! - `update_fields` is atomic (all of its fields or none, also after a crash), writes
//!   nothing and returns `false` when the row does not exist, and never loses a concurrent
//!   update of other fields of the same row.
//! - A field id outside the schema, a field given twice, a value of the wrong length for a
//!   fixed field or longer than a variable field's maximum, a row with the wrong number of
//!   values and an unknown schema id are [`Error::InvalidArgument`].
//! - [`FieldSelection::Only`] with an empty list means every field (the paper's "empty F
//!   is full access"); values come back in the order of the selection.
//!
//! Engines without native support get the API from the generic adapters in
//! [`crate::schema`] (consolidated: one value per row; scattered: one pair per field).
//!
//! Thread safety: the types are plain data; a [`SchemaStore`] is `Send + Sync`.

use std::collections::HashSet;
use std::sync::Arc;

use super::error::{Error, Result};

/// A schema's identifier, unique within a store, assigned by `create_schema` (from 1).
pub type SchemaId = u32;
/// A field's identifier: its position in the schema (from 0).
pub type FieldId = u16;

/// Most fields a schema may declare.
pub const MAX_FIELDS: usize = 1024;
/// Longest schema or field name, in bytes.
pub const MAX_NAME_LEN: usize = 255;
/// Largest length of a fixed field or maximum of a variable field (the paper's 2-byte
/// sizes, §V-A).
pub const MAX_FIELD_LEN: usize = u16::MAX as usize;

/// Whether a field has one length or any length up to a maximum (§V-A: the only two types).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FieldKind {
    /// Every value is exactly `len` bytes (1 ..= [`MAX_FIELD_LEN`]).
    Fixed {
        /// The length.
        len: u16,
    },
    /// A value is 0 ..= `max_len` bytes (`max_len` ≥ 1).
    Var {
        /// The maximum length.
        max_len: u16,
    },
}

impl FieldKind {
    /// The most bytes a value of this field may hold.
    pub fn max_len(self) -> usize {
        match self {
            FieldKind::Fixed { len } => usize::from(len),
            FieldKind::Var { max_len } => usize::from(max_len),
        }
    }

    /// Checks a value's length against the kind.
    pub fn check(self, field: &str, value: &[u8]) -> Result<()> {
        match self {
            FieldKind::Fixed { len } if value.len() != usize::from(len) => Err(Error::invalid(
                format!("field {field} is fixed at {len} bytes; got {}", value.len()),
            )),
            FieldKind::Var { max_len } if value.len() > usize::from(max_len) => {
                Err(Error::invalid(format!(
                    "field {field} holds at most {max_len} bytes; got {}",
                    value.len()
                )))
            }
            _ => Ok(()),
        }
    }
}

/// A field as `create_schema` receives it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FieldDef {
    /// The field's name (1 ..= [`MAX_NAME_LEN`] bytes, unique in the schema).
    pub name: String,
    /// Its length rule.
    pub kind: FieldKind,
}

impl FieldDef {
    /// A fixed field of `len` bytes.
    pub fn fixed(name: &str, len: u16) -> FieldDef {
        FieldDef {
            name: name.to_string(),
            kind: FieldKind::Fixed { len },
        }
    }

    /// A variable field of at most `max_len` bytes.
    pub fn var(name: &str, max_len: u16) -> FieldDef {
        FieldDef {
            name: name.to_string(),
            kind: FieldKind::Var { max_len },
        }
    }
}

/// A declared schema: its id, name and fields (field `i` has id `i`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Schema {
    /// The id the store assigned.
    pub id: SchemaId,
    /// The name it was created with.
    pub name: String,
    /// The fields, in id order.
    pub fields: Vec<FieldDef>,
}

/// Which fields a read returns.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum FieldSelection {
    /// Every field, in id order.
    All,
    /// These fields, in this order (an empty list means [`FieldSelection::All`]).
    Only(Vec<FieldId>),
}

/// The values of one row, in the order of the selection that read them (or, for
/// `put_row`, of the schema's fields).
pub type Row = Vec<Vec<u8>>;

/// One row of a scan: its key and the selected values.
pub type RowPair = (Vec<u8>, Row);

impl Schema {
    /// Checks a name and field list for `create_schema` and builds the schema with `id`.
    pub fn new(id: SchemaId, name: &str, fields: &[FieldDef]) -> Result<Schema> {
        check_name("schema", name)?;
        if fields.is_empty() || fields.len() > MAX_FIELDS {
            return Err(Error::invalid(format!(
                "schema {name}: {} fields (1 ..= {MAX_FIELDS} allowed)",
                fields.len()
            )));
        }
        let mut seen = HashSet::new();
        for f in fields {
            check_name("field", &f.name)?;
            if !seen.insert(f.name.as_str()) {
                return Err(Error::invalid(format!(
                    "schema {name}: field {} declared twice",
                    f.name
                )));
            }
            if f.kind.max_len() == 0 {
                return Err(Error::invalid(format!(
                    "schema {name}: field {} has length 0",
                    f.name
                )));
            }
        }
        Ok(Schema {
            id,
            name: name.to_string(),
            fields: fields.to_vec(),
        })
    }

    /// The field with `id`, or `InvalidArgument`.
    pub fn field(&self, id: FieldId) -> Result<&FieldDef> {
        self.fields.get(usize::from(id)).ok_or_else(|| {
            Error::invalid(format!(
                "schema {} has no field id {id} ({} fields)",
                self.name,
                self.fields.len()
            ))
        })
    }

    /// The id of the field called `name`.
    pub fn field_id(&self, name: &str) -> Option<FieldId> {
        self.fields
            .iter()
            .position(|f| f.name == name)
            .and_then(|i| FieldId::try_from(i).ok())
    }

    /// Number of fields.
    pub fn len(&self) -> usize {
        self.fields.len()
    }

    /// Always false: a schema has at least one field.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// The most bytes a row's values may add up to.
    pub fn max_row_len(&self) -> usize {
        self.fields.iter().map(|f| f.kind.max_len()).sum()
    }

    /// Checks a full row for `put_row`: one value per field, each of a valid length.
    pub fn check_row(&self, values: &[&[u8]]) -> Result<()> {
        if values.len() != self.fields.len() {
            return Err(Error::invalid(format!(
                "schema {} has {} fields; the row has {} values",
                self.name,
                self.fields.len(),
                values.len()
            )));
        }
        for (f, v) in self.fields.iter().zip(values) {
            f.kind.check(&f.name, v)?;
        }
        Ok(())
    }

    /// Checks an update: at least one field, ids in range, each at most once, valid
    /// lengths.
    pub fn check_update(&self, set: &[(FieldId, &[u8])]) -> Result<()> {
        if set.is_empty() {
            return Err(Error::invalid("update_fields with no field"));
        }
        let mut seen = HashSet::new();
        for (id, v) in set {
            let f = self.field(*id)?;
            if !seen.insert(*id) {
                return Err(Error::invalid(format!(
                    "update_fields sets field {} twice",
                    f.name
                )));
            }
            f.kind.check(&f.name, v)?;
        }
        Ok(())
    }

    /// The field ids a selection reads, in order, each checked.
    pub fn resolve(&self, sel: &FieldSelection) -> Result<Vec<FieldId>> {
        match sel {
            FieldSelection::Only(ids) if !ids.is_empty() => {
                for id in ids {
                    self.field(*id)?;
                }
                Ok(ids.clone())
            }
            _ => Ok((0..self.fields.len())
                .filter_map(|i| FieldId::try_from(i).ok())
                .collect()),
        }
    }
}

fn check_name(what: &str, name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(Error::invalid(format!(
            "{what} name of {} bytes (1 ..= {MAX_NAME_LEN} allowed)",
            name.len()
        )));
    }
    Ok(())
}

/// The field-level API (see the module doc for the contract).
pub trait SchemaStore: Send + Sync {
    /// Declares a schema and persists it before returning. Creating a name that exists
    /// with the same fields returns the existing schema; with other fields it is
    /// `InvalidArgument`.
    fn create_schema(&self, name: &str, fields: &[FieldDef]) -> Result<Arc<Schema>>;
    /// The schema called `name`, if one was created.
    fn schema(&self, name: &str) -> Result<Option<Arc<Schema>>>;
    /// Every schema, by id.
    fn schemas(&self) -> Result<Vec<Arc<Schema>>>;
    /// Stores a whole row (one value per field, in id order), replacing any row under
    /// `key`; returns once durable.
    fn put_row(&self, schema: SchemaId, key: &[u8], values: &[&[u8]]) -> Result<()>;
    /// Sets some fields of an existing row atomically; returns `false` (writing nothing)
    /// when there is no row under `key`.
    fn update_fields(&self, schema: SchemaId, key: &[u8], set: &[(FieldId, &[u8])])
    -> Result<bool>;
    /// The selected fields of the row under `key`.
    fn get_fields(
        &self,
        schema: SchemaId,
        key: &[u8],
        selection: &FieldSelection,
    ) -> Result<Option<Row>>;
    /// Up to `limit` rows of `schema` with keys `>= start`, in key order, with the
    /// selected fields.
    fn scan_fields(
        &self,
        schema: SchemaId,
        start: &[u8],
        selection: &FieldSelection,
        limit: usize,
    ) -> Result<Vec<RowPair>>;
    /// Removes the row under `key` (no error when absent); returns once durable.
    fn delete_row(&self, schema: SchemaId, key: &[u8]) -> Result<()>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn people() -> Schema {
        Schema::new(
            1,
            "people",
            &[FieldDef::fixed("age", 4), FieldDef::var("name", 40)],
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn schema_rejects_bad_definitions() {
        let bad: &[(&str, Vec<FieldDef>)] = &[
            ("", vec![FieldDef::fixed("a", 1)]),
            ("s", vec![]),
            ("s", vec![FieldDef::fixed("a", 1), FieldDef::var("a", 3)]),
            ("s", vec![FieldDef::fixed("a", 0)]),
            ("s", vec![FieldDef::var("", 3)]),
        ];
        for (name, fields) in bad {
            let e = Schema::new(1, name, fields).err();
            assert!(
                matches!(e, Some(Error::InvalidArgument(_))),
                "{name} {fields:?}"
            );
        }
    }

    #[test]
    fn rows_and_updates_are_checked_against_the_schema() {
        let s = people();
        assert!(s.check_row(&[b"abcd", b"bob"]).is_ok());
        assert!(s.check_row(&[b"abc", b"bob"]).is_err());
        assert!(s.check_row(&[b"abcd"]).is_err());
        assert!(s.check_row(&[b"abcd", &[0; 41]]).is_err());
        assert!(s.check_update(&[(1, b"")]).is_ok());
        assert!(s.check_update(&[(2, b"x")]).is_err());
        assert!(s.check_update(&[(1, b"x"), (1, b"y")]).is_err());
        assert!(s.check_update(&[]).is_err());
    }

    #[test]
    fn empty_selection_is_all() {
        let s = people();
        assert_eq!(
            s.resolve(&FieldSelection::Only(vec![])).ok(),
            Some(vec![0, 1])
        );
        assert_eq!(s.resolve(&FieldSelection::All).ok(), Some(vec![0, 1]));
        assert_eq!(
            s.resolve(&FieldSelection::Only(vec![1, 0])).ok(),
            Some(vec![1, 0])
        );
        assert!(s.resolve(&FieldSelection::Only(vec![5])).is_err());
        assert_eq!(s.field_id("name"), Some(1));
    }
}
