//! Layout-aware storage of a complete row (FOCUS §IV "schema-friendly layout", §V-A,
//! Fig. 6; FORMAT.md § Row body): field offsets are computed once per schema
//! ([`Layout`]), so reading one field touches only that field's bytes.
//!
//! ```text
//! body := fixed area | var area
//! fixed area: every field in id order, at Layout::offsets[id]:
//!   Fixed { len }  -> the value, len bytes
//!   Var            -> a 12-byte head: type:u16 (= 1)  size:u16  slot:u64
//!                     size <= 8: the content itself, inline in `slot` (zero padded)
//!                     size  > 8: `slot` = offset of the content from the body's start
//! var area: contents of the var fields over 8 bytes, in id order
//! ```
//! The paper's head holds a pointer to the content; a body-relative offset keeps a record
//! valid wherever it is copied. The plain key-value namespace (schema 0) stores the value
//! as the body with no layout.

use tierkv_core::{Error, FieldId, FieldKind, Result, Schema, Tier};

use super::{le_u16, le_u64};

/// Bytes of a variable field's head.
pub const VAR_HEAD_LEN: u32 = 12;
/// Largest content stored inline in the head.
pub const INLINE_MAX: usize = 8;
/// The head's type word for a variable field.
pub const VAR_TYPE: u16 = 1;

/// Where bytes of a body come from: a slice (tests, fuzzing) or the pool.
pub trait Source {
    /// `len` bytes at `off` from the body's start.
    fn bytes(&self, off: u64, len: usize) -> Result<&[u8]>;
}

impl Source for [u8] {
    fn bytes(&self, off: u64, len: usize) -> Result<&[u8]> {
        usize::try_from(off)
            .ok()
            .and_then(|o| self.get(o..o.checked_add(len)?))
            .ok_or_else(|| Error::corruption(Tier::Pmem, off, "field outside its record"))
    }
}

/// A schema's precomputed field offsets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    kinds: Vec<FieldKind>,
    offsets: Vec<u32>,
    fixed_len: u32,
}

impl Layout {
    /// The layout of `schema`.
    pub fn new(schema: &Schema) -> Layout {
        let mut offsets = Vec::with_capacity(schema.len());
        let mut at = 0u32;
        for f in &schema.fields {
            offsets.push(at);
            at += match f.kind {
                FieldKind::Fixed { len } => u32::from(len),
                FieldKind::Var { .. } => VAR_HEAD_LEN,
            };
        }
        Layout {
            kinds: schema.fields.iter().map(|f| f.kind).collect(),
            offsets,
            fixed_len: at,
        }
    }

    /// Bytes of the fixed area.
    pub fn fixed_len(&self) -> u32 {
        self.fixed_len
    }

    /// Number of fields.
    pub fn len(&self) -> usize {
        self.kinds.len()
    }

    /// True for a layout without fields (never built from a valid schema).
    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }

    /// The kind of field `id`.
    pub fn kind(&self, id: FieldId) -> Result<FieldKind> {
        self.kinds
            .get(usize::from(id))
            .copied()
            .ok_or_else(|| Error::corruption(Tier::Pmem, 0, format!("no field {id} in layout")))
    }

    /// Offset of field `id` (its value or its head) in the fixed area.
    pub fn offset(&self, id: FieldId) -> Option<u32> {
        self.offsets.get(usize::from(id)).copied()
    }

    /// The body of a complete row (values already checked against the schema).
    pub fn encode(&self, values: &[&[u8]]) -> Vec<u8> {
        let var_len: usize = values
            .iter()
            .filter(|v| v.len() > INLINE_MAX)
            .map(|v| v.len())
            .sum();
        let mut b = vec![0u8; self.fixed_len as usize];
        b.reserve(var_len);
        for ((kind, off), v) in self.kinds.iter().zip(&self.offsets).zip(values) {
            let off = *off as usize;
            match kind {
                FieldKind::Fixed { .. } => b[off..off + v.len()].copy_from_slice(v),
                FieldKind::Var { .. } => {
                    b[off..off + 2].copy_from_slice(&VAR_TYPE.to_le_bytes());
                    b[off + 2..off + 4].copy_from_slice(&(v.len() as u16).to_le_bytes());
                    if v.len() <= INLINE_MAX {
                        b[off + 4..off + 4 + v.len()].copy_from_slice(v);
                    } else {
                        let at = b.len() as u64;
                        b[off + 4..off + 12].copy_from_slice(&at.to_le_bytes());
                        b.extend_from_slice(v);
                    }
                }
            }
        }
        b
    }

    /// Reads field `id` of a body of `body_len` bytes from `src`, touching only its bytes
    /// (and, for a variable field, its head).
    pub fn read_field<S: Source + ?Sized>(
        &self,
        src: &S,
        body_len: u32,
        id: FieldId,
    ) -> Result<Vec<u8>> {
        let kind = self.kind(id)?;
        let off = u64::from(self.offset(id).unwrap_or_default());
        if self.fixed_len > body_len {
            return Err(Error::corruption(
                Tier::Pmem,
                off,
                "row body shorter than its fixed area",
            ));
        }
        match kind {
            FieldKind::Fixed { len } => Ok(src.bytes(off, usize::from(len))?.to_vec()),
            FieldKind::Var { max_len } => {
                let head = src.bytes(off, VAR_HEAD_LEN as usize)?;
                let size = le_u16(head, 2);
                if le_u16(head, 0) != VAR_TYPE || size > max_len {
                    return Err(Error::corruption(
                        Tier::Pmem,
                        off,
                        "bad variable-field head",
                    ));
                }
                let size = usize::from(size);
                if size <= INLINE_MAX {
                    return Ok(head.get(4..4 + size).unwrap_or_default().to_vec());
                }
                let at = le_u64(head, 4);
                let end = at.checked_add(size as u64);
                if at < u64::from(self.fixed_len) || end.is_none_or(|e| e > u64::from(body_len)) {
                    return Err(Error::corruption(
                        Tier::Pmem,
                        off,
                        "variable field outside its row",
                    ));
                }
                Ok(src.bytes(at, size)?.to_vec())
            }
        }
    }

    /// Every field of a body held in memory, in id order.
    pub fn decode_all(&self, body: &[u8]) -> Result<Vec<Vec<u8>>> {
        (0..self.len())
            .map(|i| self.read_field(body, body.len() as u32, i as FieldId))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tierkv_core::FieldDef;

    fn layout() -> Layout {
        let s = Schema::new(
            1,
            "t",
            &[
                FieldDef::fixed("a", 4),
                FieldDef::var("short", 20),
                FieldDef::var("long", 20),
                FieldDef::fixed("b", 2),
            ],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        Layout::new(&s)
    }

    #[test]
    fn layout_fixed_offsets_are_precomputed() {
        let l = layout();
        let offs: Vec<_> = (0..4).map(|i| l.offset(i)).collect();
        assert_eq!(offs, [Some(0), Some(4), Some(16), Some(28)]);
        assert_eq!(l.fixed_len(), 30);
    }

    #[test]
    fn var_fields_inline_up_to_8_bytes_and_point_beyond() {
        let l = layout();
        let body = l.encode(&[b"abcd", b"12345678", b"123456789", b"zz"]);
        assert_eq!(
            body.len(),
            30 + 9,
            "only the 9-byte value goes to the var area"
        );
        assert_eq!(&body[8..16], b"12345678", "inline in the head's slot");
        assert_eq!(le_u64(&body, 20), 30, "pointer to the var area");
        let all = l.decode_all(&body).unwrap_or_default();
        assert_eq!(all[1], b"12345678");
        assert_eq!(all[2], b"123456789");
        assert_eq!(all[3], b"zz");
    }

    #[test]
    fn bad_heads_are_corruption() {
        let l = layout();
        let mut body = l.encode(&[b"abcd", b"", b"123456789", b"zz"]);
        body[22] = 0xFF; // pointer far outside
        assert!(l.read_field(&body[..], body.len() as u32, 2).is_err());
        assert!(l.read_field(&body[..10], 10, 0).is_err());
    }
}
