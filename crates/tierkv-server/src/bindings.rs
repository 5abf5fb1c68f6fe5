//! Key prefixes bound to schemas (issue 20, the schema API of FOCUS `papers/003` §IV,
//! Table I): under `--schema-prefix user:=users`, every Redis key starting with `user:` is a
//! row of the schema `users`, and the hash commands become field reads and updates
//! (`crate::commands::rows`; "Hashes bound to a schema" in this crate's `README.md`).
//!
//! A binding is server configuration (a flag, or `schema_prefixes` in the `[server]`
//! table), not stored with the data: the schema and its rows persist with the store, and
//! a restart with the same binding finds them again. It is not persisted because it says
//! how this server presents the rows, as `bind` says where: a stored binding would need
//! rules for a flag that disagrees with it, and a store without any binding keeps its rows
//! (they are only not reachable through the protocol until a server binds them again).
//!
//! Checks at start, each an error that stops the server: the schema must exist (create it
//! with `tierkv schema create`), a prefix must not be empty (it is UTF-8 text, so it never
//! starts with the reserved byte 0xFF), and no prefix may be a prefix of another (a key
//! would belong to two schemas).
//!
//! Thread-safety: built once at start, then read-only.

use std::sync::Arc;

use anyhow::{Context, bail};
use tierkv::{Schema, SchemaStore};

/// One prefix bound to one schema.
pub struct Binding {
    /// The key prefix (bytes of the Redis key).
    pub prefix: Vec<u8>,
    /// The schema its keys are rows of.
    pub schema: Arc<Schema>,
}

/// Every binding of a server, and the store's schema API when there is one.
#[derive(Default)]
pub struct Bindings {
    list: Vec<Binding>,
    store: Option<Arc<dyn SchemaStore>>,
}

impl std::fmt::Debug for Bindings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.list.iter().map(|b| {
                (
                    String::from_utf8_lossy(&b.prefix).into_owned(),
                    b.schema.name.clone(),
                )
            }))
            .finish()
    }
}

/// Splits `PREFIX=SCHEMA` at its last `=` (a prefix may hold `=`, a schema name not).
pub fn parse(spec: &str) -> anyhow::Result<(Vec<u8>, String)> {
    let (prefix, schema) = spec
        .rsplit_once('=')
        .with_context(|| format!("schema prefix {spec:?}: expected PREFIX=SCHEMA"))?;
    if prefix.is_empty() || schema.is_empty() {
        bail!("schema prefix {spec:?}: neither the prefix nor the schema may be empty");
    }
    Ok((prefix.as_bytes().to_vec(), schema.to_string()))
}

impl Bindings {
    /// Resolves the `PREFIX=SCHEMA` specs against the schemas of `db`.
    pub fn resolve(db: &tierkv::Db, specs: &[String]) -> anyhow::Result<Bindings> {
        if specs.is_empty() {
            return Ok(Bindings::default());
        }
        let store = db
            .schema_store()
            .context("opening the store's schema API for --schema-prefix")?;
        let mut list: Vec<Binding> = Vec::new();
        for spec in specs {
            let (prefix, name) = parse(spec)?;
            let schema = store.schema(&name)?.with_context(|| {
                format!(
                    "schema prefix {spec:?}: the store has no schema {name:?} (create it \
                     with `tierkv schema create`)"
                )
            })?;
            if let Some(other) = list
                .iter()
                .find(|b| b.prefix.starts_with(&prefix) || prefix.starts_with(&b.prefix))
            {
                bail!(
                    "schema prefixes {:?} and {:?} overlap: a key would be a row of two \
                     schemas",
                    String::from_utf8_lossy(&other.prefix),
                    String::from_utf8_lossy(&prefix)
                );
            }
            list.push(Binding { prefix, schema });
        }
        Ok(Bindings {
            list,
            store: Some(store),
        })
    }

    /// True when nothing is bound (the common case: one branch per command).
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The binding `key` falls under.
    pub fn of(&self, key: &[u8]) -> Option<&Binding> {
        self.list.iter().find(|b| key.starts_with(&b.prefix))
    }

    /// Every binding.
    pub fn all(&self) -> &[Binding] {
        &self.list
    }

    /// The store's schema API (`None` when nothing is bound).
    pub fn store(&self) -> Option<&Arc<dyn SchemaStore>> {
        self.store.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tierkv::FieldDef;

    #[test]
    fn specs_parse_at_the_last_equals_sign() {
        assert_eq!(
            parse("user:=users").unwrap(),
            (b"user:".to_vec(), "users".into())
        );
        assert_eq!(parse("a=b=c").unwrap(), (b"a=b".to_vec(), "c".into()));
        assert!(parse("nothing").is_err());
        assert!(parse("=users").is_err());
        assert!(parse("user:=").is_err());
    }

    #[test]
    fn bindings_need_a_schema_and_disjoint_prefixes() {
        let dir = tempfile::tempdir().unwrap();
        let db =
            tierkv::Db::open(dir.path(), tierkv::Options::default().engine("dram:btree")).unwrap();
        let s = db.schema_store().unwrap();
        s.create_schema("users", &[FieldDef::fixed("age", 4)])
            .unwrap();
        let b = Bindings::resolve(&db, &["user:=users".into(), "u2:=users".into()]).unwrap();
        assert_eq!(b.of(b"user:1").unwrap().schema.name, "users");
        assert!(b.of(b"use").is_none());
        let missing = Bindings::resolve(&db, &["x:=nope".into()]).err().unwrap();
        assert!(missing.to_string().contains("no schema"), "{missing}");
        let overlap = Bindings::resolve(&db, &["user:=users".into(), "us=users".into()])
            .err()
            .unwrap();
        assert!(overlap.to_string().contains("overlap"), "{overlap}");
        assert!(Bindings::resolve(&db, &[]).unwrap().is_empty());
    }
}
