//! Where a list's elements are: [`Slots`] reads and writes a list's positions in either
//! layout, so the list commands do not care which one a list has.
//!
//! - Layout 1 (metadata kind `l`, lists created before chunks): one sub-key per position,
//!   `<prefix> | position` ([`super::lists::pos_suffix`]).
//! - Layout 2 (kind `L`, every list created now): chunks of [`list_chunk::SLOTS`]
//!   positions, `<prefix> | 'c' | chunk number` (order-preserving like a position), each
//!   holding its small elements inline; an element longer than
//!   [`list_chunk::INLINE_MAX`] bytes is stored on its own under `<prefix> | position`, as
//!   in layout 1, and its chunk slot says so.
//!
//! A command's chunk edits are kept in the [`Slots`] until [`Slots::flush`] writes each
//! changed chunk once (a push of several elements rewrites a chunk once, not once per
//! element); the command flushes before it saves the metadata, so elements are still
//! written first and the metadata last, and inside [`super::Ctx::batched`] all of it is one
//! crash-atomic batch.
//!
//! Thread-safety: used by one command under the list's key lock.

use super::collection::Coll;
use super::lists::pos_suffix;
use super::{CmdError, CmdResult, Ctx};
use crate::list_chunk::{self, Chunk, ChunkRef, Entry};

/// Chunks kept by one [`Slots`] beyond those with unwritten changes (a long LPOS walk
/// does not hold the whole list).
const CLEAN_CHUNKS_KEPT: usize = 4;

/// The sub-key suffix of chunk `n`.
pub(crate) fn chunk_suffix(n: i64) -> [u8; 9] {
    let mut s = [b'c'; 9];
    s[1..].copy_from_slice(&pos_suffix(n));
    s
}

/// The error of a list element that its metadata counts but the store does not hold.
pub(crate) fn missing() -> CmdError {
    CmdError::new("ERR list element missing: the store is inconsistent")
}

struct Cached {
    n: i64,
    key: Vec<u8>,
    chunk: Chunk,
    dirty: bool,
}

/// A list's positions for one command (module doc).
#[derive(Default)]
pub(crate) struct Slots {
    cache: Vec<Cached>,
}

impl Slots {
    /// No chunk read yet.
    pub(crate) fn new() -> Slots {
        Slots::default()
    }

    /// Chunk `n` of `c`, read once per command.
    fn chunk(&mut self, ctx: &Ctx<'_>, c: &Coll, n: i64) -> Result<&mut Cached, CmdError> {
        if let Some(i) = self.cache.iter().position(|k| k.n == n) {
            return Ok(&mut self.cache[i]);
        }
        if self.cache.len() >= CLEAN_CHUNKS_KEPT {
            self.cache.retain(|k| k.dirty);
        }
        let key = c.elem(ctx, &chunk_suffix(n))?;
        let chunk = match ctx.read_raw(&key)? {
            Some(bytes) => Chunk::from_stored(bytes)?,
            None => Chunk::new(),
        };
        self.cache.push(Cached {
            n,
            key,
            chunk,
            dirty: false,
        });
        let last = self.cache.len() - 1;
        Ok(&mut self.cache[last])
    }

    /// The element at position `p`, if stored.
    pub(crate) fn get(
        &mut self,
        ctx: &Ctx<'_>,
        c: &Coll,
        p: i64,
    ) -> Result<Option<Vec<u8>>, CmdError> {
        if !c.meta.chunked {
            return c.get(ctx, &pos_suffix(p));
        }
        let (n, slot) = list_chunk::locate(p);
        match self.chunk(ctx, c, n)?.chunk.get(slot) {
            Entry::Inline(v) => Ok(Some(v.to_vec())),
            Entry::External => c.get(ctx, &pos_suffix(p)),
            Entry::Hole => Ok(None),
        }
    }

    /// The element at position `p`, which the metadata says is there.
    pub(crate) fn at(&mut self, ctx: &Ctx<'_>, c: &Coll, p: i64) -> Result<Vec<u8>, CmdError> {
        self.get(ctx, c, p)?.ok_or_else(missing)
    }

    /// Stores `value` at position `p`.
    pub(crate) fn put(&mut self, ctx: &Ctx<'_>, c: &Coll, p: i64, value: &[u8]) -> CmdResult {
        if !c.meta.chunked {
            return c.put(ctx, &pos_suffix(p), value);
        }
        let (n, slot) = list_chunk::locate(p);
        let was_external = self.chunk(ctx, c, n)?.chunk.get(slot) == Entry::External;
        let entry = if value.len() > list_chunk::INLINE_MAX {
            c.put(ctx, &pos_suffix(p), value)?;
            Entry::External
        } else {
            if was_external {
                c.delete(ctx, &pos_suffix(p))?;
            }
            Entry::Inline(value)
        };
        let k = self.chunk(ctx, c, n)?;
        k.chunk.set(slot, entry);
        k.dirty = true;
        Ok(())
    }

    /// Removes the element at position `p`.
    pub(crate) fn delete(&mut self, ctx: &Ctx<'_>, c: &Coll, p: i64) -> CmdResult {
        if !c.meta.chunked {
            return c.delete(ctx, &pos_suffix(p));
        }
        let (n, slot) = list_chunk::locate(p);
        let k = self.chunk(ctx, c, n)?;
        let external = match k.chunk.get(slot) {
            Entry::Hole => return Ok(()),
            Entry::External => true,
            Entry::Inline(_) => false,
        };
        k.chunk.set(slot, Entry::Hole);
        k.dirty = true;
        if external {
            c.delete(ctx, &pos_suffix(p))?;
        }
        Ok(())
    }

    /// Writes every changed chunk (an emptied one is deleted). Call before the metadata
    /// is saved.
    pub(crate) fn flush(&mut self, ctx: &Ctx<'_>) -> CmdResult {
        for k in &mut self.cache {
            if !k.dirty {
                continue;
            }
            if k.chunk.is_empty() {
                ctx.delete_raw(&k.key)?;
            } else {
                ctx.put_raw(&k.key, k.chunk.bytes())?;
            }
            k.dirty = false;
        }
        Ok(())
    }
}

/// Calls `f` with the elements at positions `from..=to` of the chunked list `c`, in order:
/// one read per chunk (the pending batch's writes first), each element lent from the
/// chunk, or read on its own when stored outside it.
pub(crate) fn read_chunked(
    ctx: &Ctx<'_>,
    c: &Coll,
    from: i64,
    to: i64,
    f: &mut dyn FnMut(&[u8]) -> CmdResult,
) -> CmdResult {
    let mut p = from;
    let mut key = c.elem(ctx, &chunk_suffix(0))?;
    let at = key.len() - 8;
    let mut bytes = Vec::new();
    while p <= to {
        let (n, slot) = list_chunk::locate(p);
        key[at..].copy_from_slice(&pos_suffix(n));
        bytes.clear();
        if !ctx.read_raw_with(&key, &mut |v| bytes.extend_from_slice(v))? {
            return Err(missing());
        }
        let chunk = ChunkRef::parse(&bytes)?;
        let last = to.min((n + 1).saturating_mul(list_chunk::SLOTS).saturating_sub(1));
        let want = usize::try_from(last - p + 1).unwrap_or(0);
        let mut seen = 0;
        for (s, e) in chunk.entries_from(slot).take(want) {
            if s != slot + seen {
                return Err(missing());
            }
            match e {
                Entry::Inline(v) => f(v)?,
                Entry::External => {
                    let mut result = Ok(());
                    let q = p + seen as i64;
                    if !ctx.read_raw_with(&c.elem(ctx, &pos_suffix(q))?, &mut |v| result = f(v))? {
                        return Err(missing());
                    }
                    result?;
                }
                Entry::Hole => return Err(missing()),
            }
            seen += 1;
        }
        if seen != want {
            return Err(missing());
        }
        if last == i64::MAX {
            break;
        }
        p = last + 1;
    }
    Ok(())
}
