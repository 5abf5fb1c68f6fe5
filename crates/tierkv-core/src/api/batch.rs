//! [`WriteBatch`]: puts and deletes of many keys, applied by
//! [`KvStore::write_batch`](super::store::KvStore::write_batch) as one crash-atomic write
//! (issue 24; DESIGN §2).
//!
//! # Semantics
//! - A batch holds at most one operation per key: a later `put` or `delete` of a key
//!   replaces the earlier one ("the later op wins"), as if the operations were applied in
//!   the order they were added. Operations are kept in key order.
//! - Applying a batch is all-or-nothing with respect to crashes, and returns once the whole
//!   batch is durable. An engine without a native commit protocol returns
//!   [`Error::Unsupported`] from `write_batch`: a batch is never applied as a silent,
//!   non-atomic loop of puts.
//!
//! # Limits
//! A batch may hold up to [`MAX_BATCH_OPS`] operations and [`MAX_BATCH_BYTES`] bytes of keys
//! and values (what an engine has to log before it commits). [`WriteBatch::check`] enforces
//! them, plus the store's key and value [`Limits`], with an [`Error::InvalidArgument`] that
//! names the limit; the facade and every engine call it before touching the media.
//!
//! Thread safety: a `WriteBatch` is a plain value (`Send + Sync`); build it on one thread.

use std::collections::BTreeMap;

use super::error::{Error, Result};
use super::options::Limits;

/// Most operations (distinct keys) one batch may hold.
pub const MAX_BATCH_OPS: usize = 10_000;
/// Most bytes of keys and values one batch may hold (16 MiB).
pub const MAX_BATCH_BYTES: usize = 16 << 20;

/// One operation of a batch on its key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BatchOp {
    /// Store this value.
    Put(Vec<u8>),
    /// Remove the key (no error when it is absent).
    Delete,
}

impl BatchOp {
    /// The value a put stores, `None` for a delete.
    pub fn value(&self) -> Option<&[u8]> {
        match self {
            BatchOp::Put(v) => Some(v),
            BatchOp::Delete => None,
        }
    }
}

/// Puts and deletes of many keys, to be applied as one crash-atomic write.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteBatch {
    ops: BTreeMap<Vec<u8>, BatchOp>,
    /// Bytes of keys and values held.
    bytes: usize,
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        WriteBatch::default()
    }

    /// Adds a put of `value` under `key` (replacing an earlier operation on `key`).
    pub fn put(&mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> &mut Self {
        self.set(key.into(), BatchOp::Put(value.into()))
    }

    /// Adds a delete of `key` (replacing an earlier operation on `key`).
    pub fn delete(&mut self, key: impl Into<Vec<u8>>) -> &mut Self {
        self.set(key.into(), BatchOp::Delete)
    }

    fn set(&mut self, key: Vec<u8>, op: BatchOp) -> &mut Self {
        let op_len = op.value().map_or(0, <[u8]>::len);
        self.bytes += op_len;
        let klen = key.len();
        match self.ops.insert(key, op) {
            Some(old) => self.bytes -= old.value().map_or(0, <[u8]>::len),
            None => self.bytes += klen,
        }
        self
    }

    /// Operations held (one per distinct key).
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// True when the batch holds no operation.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Bytes of keys and values held (what [`MAX_BATCH_BYTES`] bounds).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Removes every operation.
    pub fn clear(&mut self) {
        self.ops.clear();
        self.bytes = 0;
    }

    /// The operations, in key order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&[u8], &BatchOp)> {
        self.ops.iter().map(|(k, op)| (k.as_slice(), op))
    }

    /// The operation the batch holds on `key`.
    pub fn op(&self, key: &[u8]) -> Option<&BatchOp> {
        self.ops.get(key)
    }

    /// Checks the batch against the batch limits and the store's key and value `limits`.
    pub fn check(&self, limits: &Limits) -> Result<()> {
        if self.ops.len() > MAX_BATCH_OPS {
            return Err(Error::invalid(format!(
                "write batch of {} operations is over the limit of {MAX_BATCH_OPS} operations",
                self.ops.len()
            )));
        }
        if self.bytes > MAX_BATCH_BYTES {
            return Err(Error::invalid(format!(
                "write batch of {} bytes of keys and values is over the limit of \
                 {MAX_BATCH_BYTES} bytes",
                self.bytes
            )));
        }
        for (k, op) in &self.ops {
            limits.check_key(k)?;
            if let Some(v) = op.value() {
                limits.check_value(v)?;
            }
        }
        Ok(())
    }
}

impl<K: Into<Vec<u8>>> FromIterator<(K, Option<Vec<u8>>)> for WriteBatch {
    /// A batch of `(key, Some(value))` puts and `(key, None)` deletes, later ones winning.
    fn from_iter<I: IntoIterator<Item = (K, Option<Vec<u8>>)>>(iter: I) -> Self {
        let mut b = WriteBatch::new();
        for (k, v) in iter {
            match v {
                Some(v) => b.put(k, v),
                None => b.delete(k),
            };
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_later_operation_on_a_key_wins_and_bytes_follow() {
        let mut b = WriteBatch::new();
        b.put("a", "1234").put("b", "xy").delete("a");
        assert_eq!(b.len(), 2);
        assert_eq!(b.op(b"a"), Some(&BatchOp::Delete));
        assert_eq!(b.bytes(), 1 + 1 + 2);
        b.put("a", "zz");
        assert_eq!(b.op(b"a"), Some(&BatchOp::Put(b"zz".to_vec())));
        assert_eq!(b.bytes(), 1 + 2 + 1 + 2);
        let keys: Vec<&[u8]> = b.iter().map(|(k, _)| k).collect();
        assert_eq!(keys, vec![&b"a"[..], b"b"]);
        b.clear();
        assert!(b.is_empty());
        assert_eq!(b.bytes(), 0);
    }

    #[test]
    fn limits_are_enforced_with_an_error_naming_them() {
        let limits = Limits::default();
        let mut b: WriteBatch = (0..=MAX_BATCH_OPS)
            .map(|i| (format!("k{i}"), None))
            .collect();
        let e = b.check(&limits).unwrap_err().to_string();
        assert!(
            e.contains(&format!("limit of {MAX_BATCH_OPS} operations")),
            "{e}"
        );
        b.clear();
        let big = vec![7u8; limits.max_value_len];
        for i in 0..=MAX_BATCH_BYTES / big.len() {
            b.put(format!("v{i}"), big.clone());
        }
        let e = b.check(&limits).unwrap_err().to_string();
        assert!(
            e.contains(&format!("limit of {MAX_BATCH_BYTES} bytes")),
            "{e}"
        );
        let mut b = WriteBatch::new();
        b.put("", "x");
        assert!(
            b.check(&limits)
                .unwrap_err()
                .to_string()
                .contains("empty key")
        );
        let mut b = WriteBatch::new();
        b.put("k", vec![0u8; limits.max_value_len + 1]);
        assert!(matches!(b.check(&limits), Err(Error::InvalidArgument(_))));
        let mut b = WriteBatch::new();
        b.put("k", "v").delete("j");
        b.check(&limits).unwrap();
    }
}
