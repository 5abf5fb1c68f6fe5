//! DLog delta bodies (FOCUS §V-A/§V-B, Fig. 6 "partial KV"; FORMAT.md § Delta body): the
//! fields an update sets, with their ids first so that a partial read can tell whether a
//! delta holds what it looks for.
//!
//! ```text
//! body := count:u16  id:u16 * count  value * count        (values in id-array order)
//! value := bytes[len]              for a Fixed { len } field
//!        | len:u16 bytes[len]      for a Var field
//! ```
//! The paper's MetaSize is implied: fixed lengths come from the schema, variable ones
//! precede their bytes.

use tierkv_core::{Error, FieldId, FieldKind, Result, Tier};

use super::le_u16;
use super::row::Layout;

/// Encodes a delta (fields already checked against the schema).
pub fn encode(layout: &Layout, set: &[(FieldId, &[u8])]) -> Vec<u8> {
    let mut b =
        Vec::with_capacity(2 + set.len() * 4 + set.iter().map(|(_, v)| v.len()).sum::<usize>());
    b.extend_from_slice(&(set.len() as u16).to_le_bytes());
    for (id, _) in set {
        b.extend_from_slice(&id.to_le_bytes());
    }
    for (id, v) in set {
        if let Ok(FieldKind::Var { .. }) = layout.kind(*id) {
            b.extend_from_slice(&(v.len() as u16).to_le_bytes());
        }
        b.extend_from_slice(v);
    }
    b
}

/// A decoded delta: each field it sets and where its value lies in the body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delta {
    /// (field id, offset of the value in the body, length).
    pub fields: Vec<(FieldId, usize, usize)>,
}

fn bad(what: &str) -> Error {
    Error::corruption(Tier::Pmem, 0, format!("delta: {what}"))
}

impl Delta {
    /// Parses a delta body against `layout`.
    pub fn decode(layout: &Layout, body: &[u8]) -> Result<Delta> {
        if body.len() < 2 {
            return Err(bad("no field count"));
        }
        let n = usize::from(le_u16(body, 0));
        let mut at = 2 + 2 * n;
        if n == 0 || body.len() < at {
            return Err(bad("field array shorter than its count"));
        }
        let mut fields = Vec::with_capacity(n);
        for i in 0..n {
            let id = le_u16(body, 2 + 2 * i);
            let len = match layout
                .kind(id)
                .map_err(|_| bad("field id outside the schema"))?
            {
                FieldKind::Fixed { len } => usize::from(len),
                FieldKind::Var { max_len } => {
                    let len = body
                        .get(at..at + 2)
                        .map(|_| le_u16(body, at))
                        .ok_or_else(|| bad("truncated"))?;
                    if len > max_len {
                        return Err(bad("variable value over its maximum"));
                    }
                    at += 2;
                    usize::from(len)
                }
            };
            if body.len() < at + len {
                return Err(bad("value past the body's end"));
            }
            fields.push((id, at, len));
            at += len;
        }
        if at != body.len() {
            return Err(bad("trailing bytes"));
        }
        Ok(Delta { fields })
    }

    /// The value of field `id`, if this delta sets it.
    pub fn value<'a>(&self, body: &'a [u8], id: FieldId) -> Option<&'a [u8]> {
        self.fields
            .iter()
            .find(|(f, _, _)| *f == id)
            .and_then(|(_, at, len)| body.get(*at..at + len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tierkv_core::{FieldDef, Schema};

    #[test]
    fn delta_round_trips_and_rejects_truncation() {
        let s = Schema::new(1, "t", &[FieldDef::fixed("a", 3), FieldDef::var("b", 9)])
            .unwrap_or_else(|e| panic!("{e}"));
        let l = Layout::new(&s);
        let body = encode(&l, &[(1, b"xyz12"), (0, b"abc")]);
        let d = Delta::decode(&l, &body).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(d.value(&body, 1), Some(&b"xyz12"[..]));
        assert_eq!(d.value(&body, 0), Some(&b"abc"[..]));
        for cut in 0..body.len() {
            assert!(Delta::decode(&l, &body[..cut]).is_err(), "cut {cut}");
        }
        let mut bad = body.clone();
        bad[2] = 7; // field id 7
        assert!(Delta::decode(&l, &bad).is_err());
    }
}
