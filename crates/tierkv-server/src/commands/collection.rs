//! The per-element layer under hashes, lists, sets and sorted sets (issue 25 item 4; the
//! layout is Apache Kvrocks's): a collection is a metadata record under its key
//! ([`crate::encoding::Meta`]: kind, generation, element count, list positions; the TTL is
//! the usual expiry envelope around it) plus one store key per element
//! ([`crate::keyspace::element_prefix`] + a type-specific suffix), so a change touches
//! one element and the metadata.
//!
//! A command's writes (elements and metadata) are meant to run inside
//! [`Ctx::batched`], so on an engine with atomic batches the elements and the metadata
//! that counts them change together, crash-atomically. Without batches the elements are
//! written first and the metadata last.
//!
//! Deleting or overwriting a collection replaces its metadata only: O(1). The elements of
//! the old generation are then garbage, invisible (no metadata names their generation)
//! and reclaimed by the sweep ([`crate::reclaim`]).
//!
//! Thread-safety: handlers run under the key locks of their command.

use super::{CmdError, CmdResult, Ctx, msg};
use crate::encoding::{self, Kind, Meta, Stored};
use crate::keyspace;

/// Elements as (suffix, value) pairs.
pub(crate) type Elements = Vec<(Vec<u8>, Vec<u8>)>;

/// Elements read from the store per page of a walk.
pub(crate) const PAGE: usize = 256;

/// A collection loaded for a command: its metadata, deadline and element prefix.
#[derive(Debug, Clone)]
pub(crate) struct Coll {
    /// The metadata (count 0 while a new collection is being filled).
    pub meta: Meta,
    /// Its deadline, Unix ms.
    pub deadline: Option<u64>,
    /// The common prefix of its elements' store keys.
    pub prefix: Vec<u8>,
}

impl Coll {
    /// A new, empty collection of `kind` under `key` in the selected database.
    /// A list is chunked (layout 2) unless the store's value limit is below a full chunk.
    pub(crate) fn create(ctx: &Ctx<'_>, key: &[u8], kind: Kind) -> Coll {
        let mut meta = Meta::new(kind, ctx.new_generation());
        meta.chunked &= ctx.max_value_len() >= crate::list_chunk::MAX_CHUNK_BYTES;
        Coll {
            meta,
            deadline: None,
            prefix: keyspace::element_prefix(ctx.pdb(), key, meta.generation),
        }
    }

    /// The store key of the element with `suffix`, or the error that it is too long.
    pub(crate) fn elem(&self, ctx: &Ctx<'_>, suffix: &[u8]) -> Result<Vec<u8>, CmdError> {
        let max = ctx.shared.db.limits().max_key_len;
        let len = self.prefix.len() + suffix.len();
        if len > max {
            return Err(CmdError::new(format!(
                "ERR element of {} bytes is too long: with its key it takes {len} bytes, over \
                 the store's key limit of {max} bytes (an element is stored as a key)",
                suffix.len()
            )));
        }
        let mut k = Vec::with_capacity(len);
        k.extend_from_slice(&self.prefix);
        k.extend_from_slice(suffix);
        Ok(k)
    }

    /// The value of the element with `suffix`.
    pub(crate) fn get(&self, ctx: &Ctx<'_>, suffix: &[u8]) -> Result<Option<Vec<u8>>, CmdError> {
        match self.elem(ctx, suffix) {
            Ok(k) => ctx.read_raw(&k),
            // An element too long to store cannot be there.
            Err(_) => Ok(None),
        }
    }

    /// Writes the element with `suffix`.
    pub(crate) fn put(&self, ctx: &Ctx<'_>, suffix: &[u8], value: &[u8]) -> CmdResult {
        ctx.put_raw(&self.elem(ctx, suffix)?, value)
    }

    /// Deletes the element with `suffix`.
    pub(crate) fn delete(&self, ctx: &Ctx<'_>, suffix: &[u8]) -> CmdResult {
        ctx.delete_raw(&self.elem(ctx, suffix)?)
    }

    /// Up to `limit` elements (suffix, value) from suffix `from` (inclusive), in order.
    pub(crate) fn page(
        &self,
        ctx: &Ctx<'_>,
        from: &[u8],
        limit: usize,
    ) -> Result<Elements, CmdError> {
        let mut start = self.prefix.clone();
        start.extend_from_slice(from);
        let rows = ctx.scan_prefix(&self.prefix, &start, limit)?;
        let n = self.prefix.len();
        Ok(rows
            .into_iter()
            .map(|(mut k, v)| (k.split_off(n), v))
            .collect())
    }

    /// Every element whose suffix starts with `sub` (a type's sub-space), in order; the
    /// walk stops with an error past `max_bytes` of keys and values.
    pub(crate) fn all(
        &self,
        ctx: &Ctx<'_>,
        sub: &[u8],
        max_bytes: usize,
    ) -> Result<Elements, CmdError> {
        let mut out = Vec::new();
        let mut bytes = 0usize;
        let mut from = sub.to_vec();
        loop {
            let rows = self.page(ctx, &from, PAGE)?;
            let full = rows.len() == PAGE;
            let mut last = None;
            for (s, v) in rows {
                if !s.starts_with(sub) {
                    return Ok(out);
                }
                bytes += s.len() + v.len() + 16;
                if bytes > max_bytes {
                    return Err(super::strings::reply_too_large(max_bytes));
                }
                last = Some(s.clone());
                out.push((s, v));
            }
            match last {
                Some(mut s) if full => {
                    s.push(0);
                    from = s;
                }
                _ => return Ok(out),
            }
        }
    }
}

/// The collection of `kind` under `key`: `None` when the key is missing, WRONGTYPE when it
/// holds anything else (a format-1 hash included: the hash commands rewrite one per
/// element before they get here).
pub(crate) fn load(ctx: &mut Ctx<'_>, key: &[u8], kind: Kind) -> Result<Option<Coll>, CmdError> {
    let Some((v, deadline)) = ctx.load_entry(key)? else {
        return Ok(None);
    };
    match encoding::decode(&v)? {
        Stored::Meta(meta) if meta.kind == kind => Ok(Some(Coll {
            meta,
            deadline,
            prefix: keyspace::element_prefix(ctx.pdb(), key, meta.generation),
        })),
        _ => Err(CmdError::new(msg::WRONGTYPE)),
    }
}

/// [`load`], or a new empty collection when the key is missing.
pub(crate) fn load_or_create(ctx: &mut Ctx<'_>, key: &[u8], kind: Kind) -> Result<Coll, CmdError> {
    Ok(match load(ctx, key, kind)? {
        Some(c) => c,
        None => Coll::create(ctx, key, kind),
    })
}

/// Stores the metadata of `c` under `key` (after its elements); an empty collection is
/// deleted instead (its remaining elements, if any, are garbage for the sweep).
pub(crate) fn save(ctx: &Ctx<'_>, key: &[u8], c: &Coll) -> CmdResult {
    if c.meta.count == 0 {
        return ctx.remove(key);
    }
    ctx.store_with_deadline(key, &c.meta.encode(), c.deadline)
}

/// Copies every element of `c` into a new generation of `to` in database `db` and returns
/// that collection (not yet saved: the caller stores its metadata). O(elements).
pub(crate) fn copy_elements(ctx: &Ctx<'_>, c: &Coll, db: u8, to: &[u8]) -> Result<Coll, CmdError> {
    let generation = ctx.new_generation();
    let target = Coll {
        meta: Meta {
            generation,
            ..c.meta
        },
        deadline: c.deadline,
        prefix: keyspace::element_prefix(db, to, generation),
    };
    let mut from = Vec::new();
    loop {
        let rows = c.page(ctx, &from, PAGE)?;
        let full = rows.len() == PAGE;
        for (s, v) in &rows {
            target.put(ctx, s, v)?;
        }
        match rows.into_iter().last() {
            Some((mut s, _)) if full => {
                s.push(0);
                from = s;
            }
            _ => return Ok(target),
        }
    }
}
