//! `tierkv schema create|show` and `tierkv row put|get|update|del`: the field-level API
//! (`tierkv::SchemaStore`, FOCUS §IV) from the command line, through
//! [`tierkv::Db::schema_store`] (native on `focus`, the consolidated adapter elsewhere).
//!
//! Fields are declared as `NAME:fixed:LEN` or `NAME:var:MAX`; values are text (or hex with
//! `--hex`) and a fixed field's value must have exactly its length.

use std::io::Write;

use clap::{Args, Subcommand};
use tierkv::{Db, Error, FieldDef, FieldKind, FieldSelection, Result, Schema};

use crate::args::StoreArgs;
use crate::output::{bytes_arg, escaped, hex};

/// `tierkv schema ...`
#[derive(Args, Debug)]
pub struct SchemaArgs {
    #[command(subcommand)]
    pub command: SchemaCommand,
}

#[derive(Subcommand, Debug)]
pub enum SchemaCommand {
    /// Declare a schema: `schema create NAME FIELD:fixed:LEN FIELD:var:MAX ...` (creates
    /// the store if the directory holds none).
    Create {
        #[command(flatten)]
        store: StoreArgs,
        /// The schema's name.
        name: String,
        /// Its fields, in order.
        #[arg(required = true)]
        fields: Vec<String>,
    },
    /// Print one schema (or every schema): id, name, fields.
    Show {
        #[command(flatten)]
        store: StoreArgs,
        /// The schema (default: all).
        name: Option<String>,
    },
}

/// `tierkv row ...`
#[derive(Args, Debug)]
pub struct RowArgs {
    #[command(subcommand)]
    pub command: RowCommand,
}

#[derive(Subcommand, Debug)]
pub enum RowCommand {
    /// Store a whole row: `row put SCHEMA KEY VALUE...` (one value per field, in order).
    Put {
        #[command(flatten)]
        store: StoreArgs,
        schema: String,
        key: String,
        #[arg(required = true)]
        values: Vec<String>,
        /// Key and values are given in hex.
        #[arg(long)]
        hex: bool,
    },
    /// Print fields of a row, one `field<TAB>value` per line (exit code 3 if absent).
    Get {
        #[command(flatten)]
        store: StoreArgs,
        schema: String,
        key: String,
        /// Only these fields (comma-separated names; default: all).
        #[arg(long, value_delimiter = ',')]
        fields: Vec<String>,
        /// Key given and values printed in hex.
        #[arg(long)]
        hex: bool,
    },
    /// Set some fields of an existing row: `row update SCHEMA KEY FIELD=VALUE...` (exit code
    /// 3 if the row is absent; nothing is written then).
    Update {
        #[command(flatten)]
        store: StoreArgs,
        schema: String,
        key: String,
        #[arg(required = true)]
        set: Vec<String>,
        /// Key and values are given in hex.
        #[arg(long)]
        hex: bool,
    },
    /// Delete a row (no error if it is absent).
    Del {
        #[command(flatten)]
        store: StoreArgs,
        schema: String,
        key: String,
        /// The key is given in hex.
        #[arg(long)]
        hex: bool,
    },
}

/// Parses `NAME:fixed:LEN` / `NAME:var:MAX`.
pub fn parse_field(s: &str) -> Result<FieldDef> {
    let parts: Vec<&str> = s.split(':').collect();
    let bad = || {
        Error::invalid(format!(
            "field {s:?}: expected NAME:fixed:LEN or NAME:var:MAX"
        ))
    };
    let [name, kind, len] = parts[..] else {
        return Err(bad());
    };
    let len: u16 = len.parse().map_err(|_| bad())?;
    match kind {
        "fixed" => Ok(FieldDef::fixed(name, len)),
        "var" => Ok(FieldDef::var(name, len)),
        _ => Err(bad()),
    }
}

fn describe(s: &Schema) -> String {
    let fields: Vec<String> = s
        .fields
        .iter()
        .map(|f| match f.kind {
            FieldKind::Fixed { len } => format!("{}:fixed:{len}", f.name),
            FieldKind::Var { max_len } => format!("{}:var:{max_len}", f.name),
        })
        .collect();
    format!("{}\t{}\t{}", s.id, s.name, fields.join(" "))
}

fn write_out(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| Error::io("write", "<stdout>", e))
}

fn schema_named(db: &Db, name: &str) -> Result<std::sync::Arc<Schema>> {
    db.schema_store()?
        .schema(name)?
        .ok_or_else(|| Error::invalid(format!("no schema named {name:?}")))
}

/// Runs `tierkv schema ...`.
pub fn schema(a: &SchemaArgs) -> Result<u8> {
    match &a.command {
        SchemaCommand::Create {
            store,
            name,
            fields,
        } => {
            let defs = fields
                .iter()
                .map(|f| parse_field(f))
                .collect::<Result<Vec<_>>>()?;
            let db = super::open_or_create(store)?;
            let s = db.schema_store()?.create_schema(name, &defs)?;
            write_out(&format!("{}\n", describe(&s)))?;
            db.close()?;
        }
        SchemaCommand::Show { store, name } => {
            let db = super::open_existing(store)?;
            let all = match name {
                Some(n) => vec![schema_named(&db, n)?],
                None => db.schema_store()?.schemas()?,
            };
            let text: String = all.iter().map(|s| describe(s) + "\n").collect();
            write_out(&text)?;
            db.close()?;
        }
    }
    Ok(0)
}

/// Runs `tierkv row ...`.
pub fn row(a: &RowArgs) -> Result<u8> {
    match &a.command {
        RowCommand::Put {
            store,
            schema,
            key,
            values,
            hex,
        } => {
            let db = super::open_existing(store)?;
            let s = schema_named(&db, schema)?;
            let vals = values
                .iter()
                .map(|v| bytes_arg(v, *hex, "value"))
                .collect::<Result<Vec<_>>>()?;
            let refs: Vec<&[u8]> = vals.iter().map(Vec::as_slice).collect();
            db.schema_store()?
                .put_row(s.id, &bytes_arg(key, *hex, "key")?, &refs)?;
            db.close()?;
            Ok(0)
        }
        RowCommand::Get {
            store,
            schema,
            key,
            fields,
            hex: as_hex,
        } => {
            let db = super::open_existing(store)?;
            let s = schema_named(&db, schema)?;
            let ids = fields
                .iter()
                .map(|f| {
                    s.field_id(f).ok_or_else(|| {
                        Error::invalid(format!("schema {} has no field {f:?}", s.name))
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            let got = db.schema_store()?.get_fields(
                s.id,
                &bytes_arg(key, *as_hex, "key")?,
                &FieldSelection::Only(ids.clone()),
            )?;
            db.close()?;
            let Some(row) = got else {
                eprintln!("tierkv: row not found");
                return Ok(crate::EXIT_NOT_FOUND);
            };
            let ids = if ids.is_empty() {
                s.resolve(&FieldSelection::All)?
            } else {
                ids
            };
            let text: String = ids
                .iter()
                .zip(&row)
                .map(|(id, v)| {
                    let name = s.field(*id).map(|f| f.name.as_str()).unwrap_or("?");
                    format!("{name}\t{}\n", if *as_hex { hex(v) } else { escaped(v) })
                })
                .collect();
            write_out(&text)?;
            Ok(0)
        }
        RowCommand::Update {
            store,
            schema,
            key,
            set,
            hex,
        } => {
            let db = super::open_existing(store)?;
            let s = schema_named(&db, schema)?;
            let mut pairs = Vec::new();
            for item in set {
                let (name, value) = item
                    .split_once('=')
                    .ok_or_else(|| Error::invalid(format!("{item:?}: expected FIELD=VALUE")))?;
                let id = s.field_id(name).ok_or_else(|| {
                    Error::invalid(format!("schema {} has no field {name:?}", s.name))
                })?;
                pairs.push((id, bytes_arg(value, *hex, "value")?));
            }
            let refs: Vec<(u16, &[u8])> = pairs.iter().map(|(i, v)| (*i, v.as_slice())).collect();
            let existed =
                db.schema_store()?
                    .update_fields(s.id, &bytes_arg(key, *hex, "key")?, &refs)?;
            db.close()?;
            if !existed {
                eprintln!("tierkv: row not found");
                return Ok(crate::EXIT_NOT_FOUND);
            }
            Ok(0)
        }
        RowCommand::Del {
            store,
            schema,
            key,
            hex,
        } => {
            let db = super::open_existing(store)?;
            let s = schema_named(&db, schema)?;
            db.schema_store()?
                .delete_row(s.id, &bytes_arg(key, *hex, "key")?)?;
            db.close()?;
            Ok(0)
        }
    }
}
