//! The commands: one module per family, one table ([`table::COMMANDS`]) that names each
//! command's arity, flags and key positions, and [`execute`], which runs one command.
//!
//! [`execute`] does for every command, in order: look the name up (unknown: Redis's
//! `ERR unknown command` reply); refuse it with `NOAUTH` if the client must authenticate
//! first; check the arity (`ERR wrong number of arguments`); lock the command's keys in the
//! striped lock table ([`crate::locks`], shared for readers, exclusive for writers); run
//! the handler. A handler that fails after writing part of its reply has that part rolled
//! back and replaced by its error, so a reply is always one well-formed frame.
//!
//! A reply to a write is written only after the store acknowledged the write (its `put` or
//! `delete` returned), so `OK` means durable under the engine's durability mode.
//!
//! # Write batches (issue 24 item 4, issue 25 item 1)
//! When the engine applies write batches crash-atomically ([`tierkv::Db::atomic_batches`]:
//! `prism`, `dram`), a multi-key write (MSET, MSETNX, DEL/UNLINK of several keys) and the
//! writes of an EXEC run inside [`Ctx::batched`]: [`Ctx::store_encoded`] and [`Ctx::remove`]
//! add to a pending [`tierkv::WriteBatch`] instead of writing, reads of the command see
//! the pending operations first (read-your-writes), and the batch is committed with one
//! `Db::write` before the reply leaves. A handler that fails, or a batch over the limits
//! ([`tierkv::MAX_BATCH_OPS`], [`tierkv::MAX_BATCH_BYTES`]), applies nothing. On the other
//! engines the writes go one by one, each durable when it returns (INFO
//! `crash_atomic_multi_key:0`).
//!
//! Thread-safety: handlers run on worker threads, many at once; all shared state is in
//! [`Shared`], the per-connection state in [`Session`].

pub(crate) mod bits;
pub(crate) mod blocking;
pub(crate) mod collection;
pub(crate) mod connection;
pub(crate) mod expire;
pub(crate) mod hashes;
pub(crate) mod info;
pub(crate) mod keys;
pub(crate) mod list_slots;
pub(crate) mod lists;
pub(crate) mod multi;
pub(crate) mod packed_hashes;
pub(crate) mod rows;
pub(crate) mod scan;
pub(crate) mod sets;
pub(crate) mod strings;
pub(crate) mod table;
pub(crate) mod zsets;

use std::borrow::Cow;
use std::cell::RefCell;

use tierkv::WriteBatch;

use std::ops::Bound;

use crate::encoding::{self, DecodeError, HashRef, Stored};
use crate::expiry;
use crate::keyspace;
use crate::locks::Access;
use crate::resp::{Args, Reply};
use crate::shared::{Session, Shared, Tally};

pub(crate) use table::{COMMANDS, CommandSpec};

/// Redis's error strings, verbatim, so clients recognise them.
pub(crate) mod msg {
    pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
    pub const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
    pub const SYNTAX: &str = "ERR syntax error";
    pub const OVERFLOW: &str = "ERR increment or decrement would overflow";
    pub const NOAUTH: &str = "NOAUTH Authentication required.";
    pub const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";
}

/// An error reply (its text starts with the error code).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CmdError(pub Cow<'static, str>);

/// What a handler returns.
pub(crate) type CmdResult = Result<(), CmdError>;

impl CmdError {
    pub(crate) fn new(msg: impl Into<Cow<'static, str>>) -> CmdError {
        CmdError(msg.into())
    }
}

impl From<tierkv::Error> for CmdError {
    /// Maps a store error to the Redis error a client expects: a refused argument is a
    /// plain `ERR`, a full tier is Redis's `OOM`, a store that refuses writes after a
    /// failure is Redis's `MISCONF` (what Redis answers when it cannot persist).
    fn from(e: tierkv::Error) -> CmdError {
        CmdError::new(match e {
            tierkv::Error::InvalidArgument(m) => format!("ERR {m}"),
            tierkv::Error::NoSpace { .. } => format!("OOM {e}"),
            tierkv::Error::Poisoned(why) => format!("MISCONF {}", misconf(&why)),
            other => format!("ERR {other}"),
        })
    }
}

/// The text of a `MISCONF` reply: what failed, and what helps (issue 23 finding 2). After
/// a transient failure a restart (which reopens the store) helps; after the engine's
/// background work ran out of space it does not, because the reopened engine meets the
/// full tier again at once. Then the reply names what does help.
fn misconf(why: &str) -> String {
    if why.contains("no space left") {
        format!(
            "the store refuses writes and deletes: its background work ran out of space \
             ({why}). Restarting the server does not help while the tier is full: stop it and \
             delete keys with `tierkv del --dir DIR KEY` (one process each), or copy the \
             store to larger tiers with `tierkv dump` and `tierkv load`"
        )
    } else {
        format!(
            "the store refuses writes after an earlier failure ({why}); restart the server \
             to reopen it"
        )
    }
}

impl From<DecodeError> for CmdError {
    fn from(e: DecodeError) -> CmdError {
        CmdError::new(format!("ERR {e}"))
    }
}

/// A live value (expiry envelope removed) and its deadline (Unix ms), if it has one.
pub(crate) type Entry = (Vec<u8>, Option<u64>);

/// The signature of every command handler.
pub(crate) type Handler = fn(&mut Ctx<'_>, Args<'_>) -> CmdResult;

/// What a handler works with.
pub(crate) struct Ctx<'a> {
    pub shared: &'a Shared,
    pub session: &'a mut Session,
    pub out: &'a mut Reply,
    pub tally: &'a mut Tally,
    /// The write batch being collected by [`Ctx::batched`], if any.
    pub pending: RefCell<Option<WriteBatch>>,
    /// True while EXEC runs its commands: blocking commands do not block.
    pub in_exec: bool,
}

impl<'a> Ctx<'a> {
    /// A context with no pending batch.
    pub(crate) fn new(
        shared: &'a Shared,
        session: &'a mut Session,
        out: &'a mut Reply,
        tally: &'a mut Tally,
    ) -> Ctx<'a> {
        Ctx {
            shared,
            session,
            out,
            tally,
            pending: RefCell::new(None),
            in_exec: false,
        }
    }

    /// Runs `f` with its writes collected into one write batch, committed (crash-atomic)
    /// when `f` succeeds and dropped when it fails. Without atomic batches on the engine,
    /// or inside a batch already open, `f` simply runs. A batch over the batch limits is
    /// refused with an error naming the limit, and nothing of it is applied.
    pub(crate) fn batched<T>(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<T, CmdError>,
    ) -> Result<T, CmdError> {
        if !self.shared.db.atomic_batches() || self.pending.borrow().is_some() {
            return f(self);
        }
        *self.pending.borrow_mut() = Some(WriteBatch::new());
        let result = f(self);
        let batch = self.pending.borrow_mut().take().unwrap_or_default();
        let value = result?;
        if batch.is_empty() {
            return Ok(value);
        }
        self.shared.db.write(&batch).map_err(|e| match e {
            tierkv::Error::InvalidArgument(m) => CmdError::new(format!(
                "ERR nothing was applied: the writes form one crash-atomic batch, and {m}"
            )),
            other => CmdError::from(other),
        })?;
        self.tally.batches += 1;
        Ok(value)
    }

    /// [`Ctx::batched`] for a command that writes a collection's elements first and its
    /// metadata last (LPUSH, RPOP & co.): on a volatile engine, outside a transaction, `f`
    /// runs without a write batch, its writes applied one by one (issue 25's list
    /// benchmark: building and applying a batch of two writes cost about a fifth of
    /// LPUSH's server CPU on `dram:hash`).
    ///
    /// What the batch gives elsewhere, and what stands in for it here:
    /// - crash-atomicity means nothing on a volatile engine: nothing survives the process;
    /// - other clients never see the writes half done: every reader of a collection's
    ///   elements holds the key's lock (the reclaiming walk too), which the command holds
    ///   exclusively until its last write;
    /// - a handler that fails before its metadata write changes nothing visible: a push's
    ///   new positions lie outside the list until the metadata moves its head or tail
    ///   (stray ones are overwritten by the next push, or are garbage of a generation no
    ///   metadata names); a pop fails, if at all, before its first write (its element
    ///   missing), and after that a write of a volatile engine fails only once the store is
    ///   closed, when the server is stopping and the data is gone anyway.
    pub(crate) fn batched_meta_last<T>(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<T, CmdError>,
    ) -> Result<T, CmdError> {
        if self.shared.db.descriptor().volatile && self.pending.borrow().is_none() {
            return f(self);
        }
        self.batched(f)
    }

    /// The physical database ([`crate::dbmap`]) of the selected database: the `db` byte
    /// of its store keys. Read under the command's key locks, which SWAPDB excludes.
    pub(crate) fn pdb(&self) -> u8 {
        self.shared.dbmap.physical(self.session.db)
    }

    /// The store key of the user key `key` in the selected database.
    pub(crate) fn skey<'k>(&self, key: &'k [u8]) -> std::borrow::Cow<'k, [u8]> {
        keyspace::user_key(self.pdb(), key)
    }

    /// The stored bytes under the user key `key`: the pending batch's operation on it first.
    fn read(&self, key: &[u8]) -> Result<Option<Vec<u8>>, CmdError> {
        self.read_raw(&self.skey(key))
    }

    /// The stored bytes under the store key `skey` (pending batch first).
    pub(crate) fn read_raw(&self, skey: &[u8]) -> Result<Option<Vec<u8>>, CmdError> {
        if let Some(batch) = self.pending.borrow().as_ref()
            && let Some(op) = batch.op(skey)
        {
            return Ok(op.value().map(<[u8]>::to_vec));
        }
        Ok(self.shared.db.get(skey)?)
    }

    /// Calls `f` with the stored bytes under the store key `skey` (pending batch first),
    /// lent by the engine where it can; returns whether the key was there.
    pub(crate) fn read_raw_with(
        &self,
        skey: &[u8],
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<bool, CmdError> {
        if let Some(batch) = self.pending.borrow().as_ref()
            && let Some(op) = batch.op(skey)
        {
            return Ok(op.value().map(f).is_some());
        }
        Ok(self.shared.db.get_with(skey, f)?)
    }

    /// Writes `value` under the internal store key `skey` (pending batch if any; no WATCH
    /// bookkeeping: the command also writes the collection's metadata, which does it).
    pub(crate) fn put_raw(&self, skey: &[u8], value: &[u8]) -> CmdResult {
        if let Some(batch) = self.pending.borrow_mut().as_mut() {
            let limits = self.shared.db.limits();
            limits.check_key(skey)?;
            limits.check_value(value)?;
            batch.put(skey, value);
        } else {
            self.shared.db.put(skey, value)?;
        }
        Ok(())
    }

    /// Deletes the internal store key `skey` (pending batch if any).
    pub(crate) fn delete_raw(&self, skey: &[u8]) -> CmdResult {
        if let Some(batch) = self.pending.borrow_mut().as_mut() {
            batch.delete(skey);
        } else {
            self.shared.db.delete(skey)?;
        }
        Ok(())
    }

    /// Up to `limit` pairs of store keys starting with `prefix`, from `from` (inclusive) on,
    /// in key order, the pending batch's operations merged in (read-your-writes). Fewer
    /// than `limit` pairs means the range is exhausted.
    pub(crate) fn scan_prefix(
        &self,
        prefix: &[u8],
        from: &[u8],
        limit: usize,
    ) -> Result<Vec<tierkv::KvPair>, CmdError> {
        let end = keyspace::successor(prefix).map_or(Bound::Unbounded, Bound::Excluded);
        let pending = self.pending.borrow();
        let mut out: Vec<tierkv::KvPair> = Vec::new();
        let mut start = from.to_vec();
        loop {
            let rows = self
                .shared
                .db
                .scan((Bound::Included(start.clone()), end.clone()), limit)
                .map_err(|e| unordered(self, e))?;
            let Some(batch) = pending.as_ref() else {
                return Ok(rows);
            };
            // The store's page covers keys up to its last one when full, the rest of the
            // range otherwise; pending operations in that span are merged in.
            let bound = (rows.len() == limit)
                .then(|| rows.last().map(|(k, _)| k.clone()))
                .flatten();
            let mut merged = std::collections::BTreeMap::new();
            for (k, v) in rows {
                merged.insert(k, Some(v));
            }
            for (k, op) in batch.iter() {
                let inside = k.starts_with(prefix)
                    && k >= start.as_slice()
                    && bound.as_deref().is_none_or(|b| k <= b);
                if inside {
                    merged.insert(k.to_vec(), op.value().map(<[u8]>::to_vec));
                }
            }
            out.extend(merged.into_iter().filter_map(|(k, v)| v.map(|v| (k, v))));
            match bound {
                // Pending deletes may have thinned a full page: read on.
                Some(b) if out.len() < limit => start = keyspace::after(&b),
                _ => {
                    out.truncate(limit);
                    return Ok(out);
                }
            }
        }
    }

    /// A fresh collection generation.
    pub(crate) fn new_generation(&self) -> u64 {
        self.shared.new_generation()
    }

    /// The stored value under `key`, its expiry envelope removed (counted as a keyspace
    /// hit or miss). An expired key reads as missing and is deleted.
    pub(crate) fn load(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, CmdError> {
        Ok(self.load_entry(key)?.map(|(v, _)| v))
    }

    /// Like [`Ctx::load`], with the key's deadline (Unix ms), if it has one.
    pub(crate) fn load_entry(&mut self, key: &[u8]) -> Result<Option<Entry>, CmdError> {
        let entry = match self.read(key)? {
            Some(v) => self.live(key, v)?,
            None => None,
        };
        if entry.is_some() {
            self.tally.hits += 1;
        } else {
            self.tally.misses += 1;
        }
        Ok(entry)
    }

    /// A stored value unwrapped, or `None` (and the key deleted) when it has expired. The
    /// caller holds the key's stripe, shared at least: no writer races the deletion.
    fn live(&self, key: &[u8], mut v: Vec<u8>) -> Result<Option<Entry>, CmdError> {
        if !encoding::is_expiring(&v) {
            return Ok(Some((v, None)));
        }
        let (deadline, inner) = encoding::split_expiry(&v)?;
        if expiry::expired(deadline, expiry::now_ms()) {
            self.remove(key)?;
            self.shared
                .expiry
                .expired_keys
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Ok(None);
        }
        let header = v.len() - inner.len();
        v.drain(..header);
        Ok(Some((v, deadline)))
    }

    /// Like [`Ctx::load_entry`], not counted as a hit or miss (a second look at a key).
    pub(crate) fn peek(&self, key: &[u8]) -> Result<Option<Entry>, CmdError> {
        match self.read(key)? {
            Some(v) => self.live(key, v),
            None => Ok(None),
        }
    }

    /// True when `key` exists (not counted as a hit or miss: WATCH bookkeeping); a key
    /// under a prefix bound to a schema exists when its row does.
    pub(crate) fn exists_quiet(&self, key: &[u8]) -> Result<bool, CmdError> {
        if let Some(exists) = rows::bound_exists(self, key)? {
            return Ok(exists);
        }
        Ok(match self.read(key)? {
            Some(v) => self.live(key, v)?.is_some(),
            None => false,
        })
    }

    /// Stores already-encoded bytes under `key` with a deadline (Unix ms) or none.
    pub(crate) fn store_with_deadline(
        &self,
        key: &[u8],
        bytes: &[u8],
        deadline: Option<u64>,
    ) -> CmdResult {
        let Some(at) = deadline else {
            return self.store_encoded(key, bytes);
        };
        self.store_encoded(key, &encoding::wrap_expiry(at, bytes))?;
        self.shared.expiry.push(&self.skey(key), at);
        Ok(())
    }

    /// Stores `raw` as a string under `key`.
    pub(crate) fn store_string(&self, key: &[u8], raw: &[u8]) -> CmdResult {
        self.store_encoded(key, &encoding::encode_string(raw))
    }

    /// Stores already-encoded bytes under `key`. Every write of a command goes through
    /// here or [`Ctx::remove`] (WATCH counts them; a pending batch collects them, its key
    /// and value limits checked at once so the refusal is this command's own error).
    pub(crate) fn store_encoded(&self, key: &[u8], bytes: &[u8]) -> CmdResult {
        self.put_raw(&self.skey(key), bytes)?;
        self.shared.locks.touch(key);
        Ok(())
    }

    /// Removes `key` (or adds its delete to the pending batch). A collection's elements
    /// are left to the reclaiming sweep: without their metadata record they are garbage.
    pub(crate) fn remove(&self, key: &[u8]) -> CmdResult {
        self.delete_raw(&self.skey(key))?;
        self.shared.locks.touch(key);
        crate::reclaim::Reclaimer::removed(&self.shared.expiry.removals);
        Ok(())
    }

    /// The store's value limit.
    pub(crate) fn max_value_len(&self) -> usize {
        self.shared.db.limits().max_value_len
    }

    /// The largest single reply.
    pub(crate) fn max_reply_bytes(&self) -> usize {
        usize::try_from(self.shared.config.max_reply_bytes.bytes()).unwrap_or(usize::MAX)
    }
}

/// The string in a stored value, or WRONGTYPE.
pub(crate) fn as_string(stored: &[u8]) -> Result<&[u8], CmdError> {
    match encoding::decode(stored)? {
        Stored::Str(s) => Ok(s),
        Stored::Hash(_) | Stored::Meta(_) => Err(CmdError::new(msg::WRONGTYPE)),
    }
}

/// The format-1 hash in a stored value, or WRONGTYPE.
pub(crate) fn as_hash(stored: &[u8]) -> Result<HashRef<'_>, CmdError> {
    match encoding::decode(stored)? {
        Stored::Hash(h) => Ok(h),
        Stored::Str(_) | Stored::Meta(_) => Err(CmdError::new(msg::WRONGTYPE)),
    }
}

/// The error of an element walk on an engine that cannot scan in order.
fn unordered(ctx: &Ctx<'_>, e: tierkv::Error) -> CmdError {
    match e {
        tierkv::Error::Unsupported(_) => CmdError::new(format!(
            "ERR this command walks a collection's elements in order, which the {} engine \
             cannot (its index is unordered; use an ordered engine such as dram:btree)",
            ctx.shared.db.spec()
        )),
        other => CmdError::from(other),
    }
}

/// An integer argument as Redis reads one (`string2ll`): optional `-`, digits, no `+`, no
/// spaces, no leading zeros, no `-0`, within i64.
pub(crate) fn parse_int(arg: &[u8]) -> Result<i64, CmdError> {
    parse_i64_strict(arg).ok_or_else(|| CmdError::new(msg::NOT_INTEGER))
}

pub(crate) fn parse_i64_strict(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s.split_first()? {
        (b'-', d) => (true, d),
        _ => (false, s),
    };
    let (&first, _) = digits.split_first()?;
    if digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if first == b'0' && (digits.len() > 1 || neg) {
        return None;
    }
    let mut v: i64 = 0;
    for d in digits {
        let d = i64::from(d - b'0');
        v = v.checked_mul(10).and_then(|v| {
            if neg {
                v.checked_sub(d)
            } else {
                v.checked_add(d)
            }
        })?;
    }
    Some(v)
}

/// The optional `count` argument of the pop commands (argument 2 of `name key [count]`):
/// `None` when absent, a non-negative integer, or Redis's errors.
pub(crate) fn pop_count(args: Args<'_>) -> Result<Option<i64>, CmdError> {
    match args.len() {
        2 => Ok(None),
        3 => parse_int(args.get(2))
            .ok()
            .filter(|n| *n >= 0)
            .map(Some)
            .ok_or_else(|| CmdError::new("ERR value is out of range, must be positive")),
        _ => Err(CmdError::new(msg::SYNTAX)),
    }
}

/// True when `arg` equals `word` ignoring ASCII case.
pub(crate) fn is(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

/// The longest command name in the table (a longer name is no command).
const MAX_NAME: usize = 32;

/// Looks a command up by name, ignoring case: the name is lower-cased into a stack buffer
/// and looked up in a hash map built once from [`COMMANDS`] (a linear scan of the 135
/// names cost 4% of the server's CPU under `redis-benchmark -t lpush,rpop`: LPUSH and
/// RPOP are far down the table).
pub(crate) fn lookup(name: &[u8]) -> Option<&'static CommandSpec> {
    static BY_NAME: std::sync::LazyLock<std::collections::HashMap<&'static [u8], usize>> =
        std::sync::LazyLock::new(|| {
            COMMANDS
                .iter()
                .enumerate()
                .map(|(i, c)| (c.name.as_bytes(), i))
                .collect()
        });
    let mut lower = [0u8; MAX_NAME];
    let lower = lower.get_mut(..name.len())?;
    lower.copy_from_slice(name);
    lower.make_ascii_lowercase();
    BY_NAME.get(&*lower).and_then(|&i| COMMANDS.get(i))
}

/// Runs one command and writes its reply (inside MULTI: checks and queues it).
pub(crate) fn execute(ctx: &mut Ctx<'_>, args: Args<'_>) {
    ctx.tally.commands += 1;
    let Some(spec) = lookup(args.get(0)) else {
        multi::flag_error(ctx);
        ctx.out.error(&unknown_command(args));
        return;
    };
    if !ctx.session.authenticated && !spec.has_flag("no_auth") {
        multi::flag_error(ctx);
        ctx.out.error(msg::NOAUTH);
        return;
    }
    if !spec.arity_ok(args.len()) {
        multi::flag_error(ctx);
        ctx.out.error(&format!(
            "ERR wrong number of arguments for '{}' command",
            spec.name
        ));
        return;
    }
    if ctx.session.tx.is_some() && !spec.has_flag("multi_now") {
        if let Some(e) = rows::refuse_in_multi(ctx, spec, args) {
            multi::flag_error(ctx);
            ctx.out.error(&e);
            return;
        }
        multi::queue(ctx, args);
        return;
    }
    let shared = ctx.shared;
    let access = if spec.has_flag("write") {
        Access::Write
    } else {
        Access::Read
    };
    let _guard = if spec.has_flag("allkeys") {
        shared.locks.lock_all()
    } else {
        shared.locks.lock(spec.keys(args), access)
    };
    run_locked(ctx, spec, args);
}

/// Answers a command the parser refused (an over-long argument) with its error; inside
/// MULTI it marks the transaction failed, as any command refused while queuing does.
pub(crate) fn refuse(ctx: &mut Ctx<'_>, error: &[u8]) {
    ctx.tally.commands += 1;
    multi::flag_error(ctx);
    ctx.out.error(&String::from_utf8_lossy(error));
}

/// Runs a checked command whose locks are held.
pub(crate) fn run_locked(ctx: &mut Ctx<'_>, spec: &CommandSpec, args: Args<'_>) {
    let mark = ctx.out.mark();
    if spec.keys(args).any(keyspace::is_reserved) {
        ctx.out.error(RESERVED);
        return;
    }
    let handler = rows::route(ctx, spec, args).unwrap_or(spec.handler);
    if let Err(e) = handler(ctx, args) {
        ctx.out.truncate(mark);
        ctx.out.error(&e.0);
    }
}

/// The reply to a key in the reserved internal range.
const RESERVED: &str = "ERR keys starting with the bytes FF FE 74 6B (\"\\xff\\xfetk\") are \
     reserved for tierkv serve's internal keys, and keys starting with FF 43, FF 46 or FF 52 \
     (\"\\xffC\", \"\\xffF\", \"\\xffR\") for the schema catalog and rows";

/// Redis's reply to an unknown command: the name and the first arguments, quoted, up to
/// 128 characters of arguments in all.
pub(crate) fn unknown_command(args: Args<'_>) -> String {
    let name = String::from_utf8_lossy(args.get(0));
    let name: String = name.chars().take(128).collect();
    let mut shown = String::new();
    for a in args.iter_from(1) {
        let room = 128usize.saturating_sub(shown.len());
        if room == 0 {
            break;
        }
        let a = String::from_utf8_lossy(a);
        let a: String = a.chars().take(room).collect();
        shown.push_str(&format!("'{a}' "));
    }
    format!("ERR unknown command '{name}', with args beginning with: {shown}")
}

/// Redis's reply to an unknown subcommand.
pub(crate) fn unknown_subcommand(sub: &[u8], command: &str) -> CmdError {
    CmdError::new(format!(
        "ERR unknown subcommand '{}'. Try {command} HELP.",
        String::from_utf8_lossy(sub)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_parse_as_redis_parses_them() {
        for (s, v) in [
            ("0", 0),
            ("-1", -1),
            ("42", 42),
            ("9223372036854775807", i64::MAX),
            ("-9223372036854775808", i64::MIN),
        ] {
            assert_eq!(parse_i64_strict(s.as_bytes()), Some(v), "{s}");
        }
        for s in [
            "",
            "-",
            "+1",
            " 1",
            "1 ",
            "01",
            "-0",
            "1.5",
            "9223372036854775808",
            "abc",
            "99999999999999999999",
        ] {
            assert_eq!(parse_i64_strict(s.as_bytes()), None, "{s}");
        }
    }

    #[test]
    fn every_command_in_the_table_is_found_in_any_case() {
        for c in COMMANDS {
            assert!(std::ptr::eq(lookup(c.name.as_bytes()).unwrap(), c));
            let upper = c.name.to_ascii_uppercase();
            assert!(std::ptr::eq(lookup(upper.as_bytes()).unwrap(), c));
        }
        assert!(lookup(b"nosuchcommand").is_none());
        assert!(lookup(&[b'g'; MAX_NAME + 1]).is_none());
        assert!(lookup(b"").is_none());
        assert!(COMMANDS.iter().all(|c| c.name.len() <= MAX_NAME));
        assert!(
            COMMANDS
                .iter()
                .all(|c| c.name == c.name.to_ascii_lowercase())
        );
    }

    #[test]
    fn store_errors_map_to_redis_codes() {
        let e: CmdError = tierkv::Error::invalid("key too long").into();
        assert_eq!(e.0, "ERR key too long");
        let e: CmdError = tierkv::Error::no_space(tierkv::Tier::Pmem, "pool").into();
        assert!(e.0.starts_with("OOM "), "{}", e.0);
        let e: CmdError = tierkv::Error::Poisoned("fsync".into()).into();
        assert!(e.0.starts_with("MISCONF "), "{}", e.0);
        assert!(e.0.contains("restart the server"), "{}", e.0);
        let full = tierkv::Error::no_space(tierkv::Tier::Flash, "no free chunk").to_string();
        let e: CmdError = tierkv::Error::Poisoned(full).into();
        assert!(e.0.starts_with("MISCONF "), "{}", e.0);
        assert!(!e.0.contains("reopen"), "{}", e.0);
        assert!(e.0.contains("tierkv del"), "{}", e.0);
    }
}
