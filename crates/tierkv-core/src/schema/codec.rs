//! Byte encodings of the schema API shared by the adapters and the `focus` engine: a whole
//! row as one value (the paper's *consolidated* mapping, §III-A) and the schema catalog.
//! Everything little-endian. Decoders check every length and return
//! [`Error::Corruption`] on bad bytes; they never panic (fuzz target `schema_codec`).
//!
//! ```text
//! row     := ROW_FORMAT:u8  value(field 0) value(field 1) ...        (fields in id order)
//! value   := bytes[len]                         for a Fixed { len } field
//!          | len:u16  bytes[len]                for a Var { max_len } field (len <= max_len)
//!
//! catalog := CATALOG_FORMAT:u8  count:u32  schema*count
//! schema  := id:u32  name_len:u8  name  nfields:u16  field*nfields
//! field   := kind:u8 (0 fixed, 1 var)  len:u16 (len or max_len)  name_len:u8  name
//! ```
//! Version changes: format 1 is the first.
//!
//! Thread safety: pure functions.

use std::sync::Arc;

use crate::api::error::{Error, Result, Tier};
use crate::api::schema::{FieldDef, FieldId, FieldKind, Row, Schema};

/// The first byte of an encoded row.
pub const ROW_FORMAT: u8 = 1;
/// The first byte of an encoded catalog.
pub const CATALOG_FORMAT: u8 = 1;

const KIND_FIXED: u8 = 0;
const KIND_VAR: u8 = 1;

fn bad(what: impl Into<String>) -> Error {
    Error::corruption(Tier::Dram, 0, what)
}

/// Encodes a full row (already checked with [`Schema::check_row`]).
pub fn encode_row(schema: &Schema, values: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + values.iter().map(|v| v.len() + 2).sum::<usize>());
    out.push(ROW_FORMAT);
    for (f, v) in schema.fields.iter().zip(values) {
        if let FieldKind::Var { .. } = f.kind {
            out.extend_from_slice(&(v.len() as u16).to_le_bytes());
        }
        out.extend_from_slice(v);
    }
    out
}

/// A little cursor over bytes read back from a tier.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, pos: 0 }
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|e| *e <= self.bytes.len());
        let end = end.ok_or_else(|| {
            bad(format!(
                "{n} bytes wanted at {} of a {}-byte record",
                self.pos,
                self.bytes.len()
            ))
        })?;
        let s = self.bytes.get(self.pos..end).unwrap_or_default();
        self.pos = end;
        Ok(s)
    }

    pub(crate) fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?.first().copied().unwrap_or_default())
    }

    pub(crate) fn u16(&mut self) -> Result<u16> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    pub(crate) fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn done(&self) -> bool {
        self.pos == self.bytes.len()
    }
}

/// Splits an encoded row into its values (slices of `bytes`), in field id order.
pub fn split_row<'a>(schema: &Schema, bytes: &'a [u8]) -> Result<Vec<&'a [u8]>> {
    let mut r = Reader::new(bytes);
    let v = r.u8()?;
    if v != ROW_FORMAT {
        return Err(bad(format!(
            "row format {v} (this build reads {ROW_FORMAT})"
        )));
    }
    let mut out = Vec::with_capacity(schema.fields.len());
    for f in &schema.fields {
        let len = match f.kind {
            FieldKind::Fixed { len } => usize::from(len),
            FieldKind::Var { max_len } => {
                let len = r.u16()?;
                if len > max_len {
                    return Err(bad(format!(
                        "field {} of {len} bytes over its maximum {max_len}",
                        f.name
                    )));
                }
                usize::from(len)
            }
        };
        out.push(r.take(len)?);
    }
    if !r.done() {
        return Err(bad("trailing bytes after the last field of a row"));
    }
    Ok(out)
}

/// The values of fields `ids` (in that order) of an encoded row.
pub fn decode_fields(schema: &Schema, bytes: &[u8], ids: &[FieldId]) -> Result<Row> {
    let all = split_row(schema, bytes)?;
    ids.iter()
        .map(|id| {
            all.get(usize::from(*id))
                .map(|v| v.to_vec())
                .ok_or_else(|| Error::invalid(format!("no field id {id}")))
        })
        .collect()
}

/// Encodes a catalog of schemas (in the order given).
pub fn encode_catalog(schemas: &[Arc<Schema>]) -> Vec<u8> {
    let mut out = vec![CATALOG_FORMAT];
    out.extend_from_slice(&(schemas.len() as u32).to_le_bytes());
    for s in schemas {
        encode_schema_into(s, &mut out);
    }
    out
}

/// Appends one schema's encoding to `out`.
pub fn encode_schema_into(s: &Schema, out: &mut Vec<u8>) {
    out.extend_from_slice(&s.id.to_le_bytes());
    out.push(s.name.len() as u8);
    out.extend_from_slice(s.name.as_bytes());
    out.extend_from_slice(&(s.fields.len() as u16).to_le_bytes());
    for f in &s.fields {
        let (kind, len) = match f.kind {
            FieldKind::Fixed { len } => (KIND_FIXED, len),
            FieldKind::Var { max_len } => (KIND_VAR, max_len),
        };
        out.push(kind);
        out.extend_from_slice(&len.to_le_bytes());
        out.push(f.name.len() as u8);
        out.extend_from_slice(f.name.as_bytes());
    }
}

fn name(r: &mut Reader<'_>) -> Result<String> {
    let n = r.u8()?;
    String::from_utf8(r.take(usize::from(n))?.to_vec()).map_err(|_| bad("name is not UTF-8"))
}

fn decode_schema(r: &mut Reader<'_>) -> Result<Schema> {
    let id = r.u32()?;
    let sname = name(r)?;
    let n = r.u16()?;
    let mut fields = Vec::with_capacity(usize::from(n).min(1024));
    for _ in 0..n {
        let kind = r.u8()?;
        let len = r.u16()?;
        let kind = match kind {
            KIND_FIXED => FieldKind::Fixed { len },
            KIND_VAR => FieldKind::Var { max_len: len },
            k => return Err(bad(format!("field kind {k}"))),
        };
        fields.push(FieldDef {
            name: name(r)?,
            kind,
        });
    }
    Schema::new(id, &sname, &fields).map_err(|e| bad(format!("stored schema: {e}")))
}

/// Decodes one schema encoded by [`encode_schema_into`] (all of `bytes`).
pub fn decode_schema_bytes(bytes: &[u8]) -> Result<Schema> {
    let mut r = Reader::new(bytes);
    let s = decode_schema(&mut r)?;
    if !r.done() {
        return Err(bad("trailing bytes after a schema"));
    }
    Ok(s)
}

/// Decodes a catalog encoded by [`encode_catalog`].
pub fn decode_catalog(bytes: &[u8]) -> Result<Vec<Schema>> {
    let mut r = Reader::new(bytes);
    let v = r.u8()?;
    if v != CATALOG_FORMAT {
        return Err(bad(format!(
            "catalog format {v} (this build reads {CATALOG_FORMAT})"
        )));
    }
    let n = r.u32()?;
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(decode_schema(&mut r)?);
    }
    if !r.done() {
        return Err(bad("trailing bytes after the catalog"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Schema {
        Schema::new(
            7,
            "t",
            &[
                FieldDef::fixed("a", 3),
                FieldDef::var("b", 10),
                FieldDef::fixed("c", 1),
            ],
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn row_round_trips_and_selects_fields() {
        let s = schema();
        let bytes = encode_row(&s, &[b"abc", b"hello", b"z"]);
        assert_eq!(bytes.len(), 1 + 3 + 2 + 5 + 1);
        let row = decode_fields(&s, &bytes, &[2, 0, 1]).unwrap_or_default();
        assert_eq!(row, vec![b"z".to_vec(), b"abc".to_vec(), b"hello".to_vec()]);
    }

    #[test]
    fn truncated_or_overlong_rows_are_corruption() {
        let s = schema();
        let bytes = encode_row(&s, &[b"abc", b"hello", b"z"]);
        for cut in 0..bytes.len() {
            let r = split_row(&s, &bytes[..cut]);
            assert!(r.is_err_and(|e| e.is_corruption()), "cut {cut}");
        }
        let mut long = bytes.clone();
        long.push(0);
        assert!(split_row(&s, &long).is_err());
        let mut over = bytes;
        over[4] = 11; // var length 11 > max 10
        assert!(split_row(&s, &over).is_err());
    }

    #[test]
    fn catalog_round_trips() {
        let a = Arc::new(schema());
        let b = Arc::new(
            Schema::new(9, "u", &[FieldDef::var("x", 1)]).unwrap_or_else(|e| panic!("{e}")),
        );
        let bytes = encode_catalog(&[a.clone(), b.clone()]);
        let back = decode_catalog(&bytes).unwrap_or_default();
        assert_eq!(back, vec![(*a).clone(), (*b).clone()]);
        for cut in 0..bytes.len() {
            assert!(decode_catalog(&bytes[..cut]).is_err(), "cut {cut}");
        }
    }
}
