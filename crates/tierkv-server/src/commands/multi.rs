//! Transactions: MULTI, EXEC, DISCARD, WATCH, UNWATCH, with Redis's semantics.
//!
//! # Queuing
//! After MULTI every command except EXEC, DISCARD, MULTI, WATCH and QUIT is checked (known
//! name, authenticated, arity) and queued as an owned copy ([`Batch::push_owned`]); the
//! client gets `+QUEUED`. A command refused at this point (unknown, wrong arity, NOAUTH,
//! too large a queue) is answered with its error and marks the transaction dirty: EXEC
//! then answers `EXECABORT` and runs nothing. Nested MULTI and WATCH inside MULTI get an
//! error but do not mark it dirty (as Redis 7.0 does). Errors a command finds only when
//! it runs (WRONGTYPE, a syntax error in its options, a non-integer) are answered inside
//! EXEC's reply array and do not stop the commands after it — Redis's behaviour.
//!
//! # Isolation
//! EXEC takes, exclusively and in the lock table's global order, the stripes of every key
//! of every queued command and of every watched key ([`crate::locks`]), or every stripe
//! when a queued command changes the whole keyspace (flag `allkeys`: FLUSHDB, FLUSHALL, SWAPDB).
//! SCAN and DBSIZE inside EXEC read the store without locks, as they do outside it. It then checks the watches and runs the commands one after another without
//! releasing anything, so no other client sees a state between two of them and no other
//! write lands between the WATCH check and the last command.
//!
//! # WATCH
//! WATCH records, per key, the version of its stripe, the flush epoch, the database, the
//! number of the last SWAPDB ([`crate::swaplog`]) and whether the key existed. EXEC fails
//! (null array) if any stripe version moved (a write to that key — by anyone, the watcher
//! included, in any database — or to a key sharing its stripe: a spurious abort, never a
//! missed change), if a FLUSHDB/FLUSHALL happened, if a SWAPDB exchanged the key's
//! database while the key existed in one of the two (Redis 7.0), or if a key that existed
//! has expired since (looked up in the database it was watched in). EXEC and DISCARD forget all watches, as does UNWATCH.
//!
//! # Crash atomicity
//! On an engine with atomic write batches ([`tierkv::Db::atomic_batches`]: `prism`,
//! `dram`), EXEC runs its commands inside [`Ctx::batched`]: their writes are collected
//! into one [`tierkv::WriteBatch`] (later commands read the earlier ones' pending writes)
//! and committed with one crash-atomic `Db::write` before the reply leaves, so a crash
//! leaves all of the transaction or none of it. A transaction whose writes exceed the
//! batch limits ([`tierkv::MAX_BATCH_OPS`] keys, [`tierkv::MAX_BATCH_BYTES`] bytes) gets
//! an error reply and applies nothing. A command that fails inside EXEC (Redis semantics:
//! the others still run) keeps whatever it wrote before failing in the batch; the
//! commands here check their arguments before writing. Two cases run without a batch,
//! writing one by one as every command does on the other engines: an EXEC that holds
//! FLUSHDB/FLUSHALL/SWAPDB, SCAN, KEYS, DBSIZE or RANDOMKEY (these walk the engine's scan, which
//! does not see pending writes), and every EXEC on an engine without atomic batches.
//!
//! Thread-safety: runs on a worker thread; the session is the connection's own.

use super::{CmdError, CmdResult, CommandSpec, Ctx, lookup, run_locked};
use crate::locks::Access;
use crate::resp::Args;
use crate::shared::{Transaction, Watched};

/// Most bytes of queued arguments in one transaction.
pub const MAX_QUEUED_BYTES: usize = 512 << 20;

const EXECABORT: &str = "EXECABORT Transaction discarded because of previous errors.";

/// Marks the transaction being queued (if any) as failed.
pub(crate) fn flag_error(ctx: &mut Ctx<'_>) {
    if let Some(tx) = ctx.session.tx.as_mut() {
        tx.dirty = true;
    }
}

/// Queues a checked command; answers `+QUEUED`.
pub(crate) fn queue(ctx: &mut Ctx<'_>, args: Args<'_>) {
    let Some(tx) = ctx.session.tx.as_mut() else {
        return;
    };
    let size: usize = args.iter_from(0).map(<[u8]>::len).sum();
    if tx.queued.owned_bytes() + size > MAX_QUEUED_BYTES {
        tx.dirty = true;
        ctx.out.error(&format!(
            "ERR the transaction's queued commands would exceed {MAX_QUEUED_BYTES} bytes"
        ));
        return;
    }
    tx.queued.push_owned(args.iter_from(0));
    ctx.out.simple("QUEUED");
}

/// MULTI
pub(crate) fn multi(ctx: &mut Ctx<'_>, _args: Args<'_>) -> CmdResult {
    if ctx.session.tx.is_some() {
        return Err(CmdError::new("ERR MULTI calls can not be nested"));
    }
    ctx.session.tx = Some(Transaction::default());
    ctx.out.ok();
    Ok(())
}

/// DISCARD
pub(crate) fn discard(ctx: &mut Ctx<'_>, _args: Args<'_>) -> CmdResult {
    if ctx.session.tx.take().is_none() {
        return Err(CmdError::new("ERR DISCARD without MULTI"));
    }
    ctx.session.watched.clear();
    ctx.out.ok();
    Ok(())
}

/// WATCH key [key ...]
pub(crate) fn watch(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    if ctx.session.tx.is_some() {
        return Err(CmdError::new("ERR WATCH inside MULTI is not allowed"));
    }
    let epoch = ctx
        .shared
        .flush_epoch
        .load(std::sync::atomic::Ordering::Acquire);
    for key in args.iter_from(1) {
        if ctx.session.watched.iter().any(|w| w.key == key) {
            continue;
        }
        let version = ctx.shared.locks.version(key);
        let swaps = ctx.shared.swaps.seq();
        let existed = ctx.exists_quiet(key)?;
        ctx.session.watched.push(Watched {
            key: key.to_vec(),
            version,
            epoch,
            db: ctx.session.db,
            swaps,
            existed,
        });
    }
    ctx.out.ok();
    Ok(())
}

/// UNWATCH
pub(crate) fn unwatch(ctx: &mut Ctx<'_>, _args: Args<'_>) -> CmdResult {
    ctx.session.watched.clear();
    ctx.out.ok();
    Ok(())
}

/// True when nothing watched changed (called with the watched keys' stripes held).
fn watches_hold(ctx: &mut Ctx<'_>, watched: &[Watched]) -> Result<bool, CmdError> {
    let epoch = ctx
        .shared
        .flush_epoch
        .load(std::sync::atomic::Ordering::Acquire);
    for w in watched {
        if w.epoch != epoch || ctx.shared.locks.version(&w.key) != w.version {
            return Ok(false);
        }
        if touched_by_swaps(ctx, w)? {
            return Ok(false);
        }
        let here = std::mem::replace(&mut ctx.session.db, w.db);
        let exists = ctx.exists_quiet(&w.key);
        ctx.session.db = here;
        if w.existed && !exists? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// True when a SWAPDB since the WATCH of `w` exchanged its database while the key existed
/// in one of the two (Redis 7.0's `touchAllWatchedKeysInDb`; see [`crate::swaplog`] for
/// why the stored entries now tell what existed at the swap). Called with the key's
/// stripe held and its version unchanged since WATCH.
fn touched_by_swaps(ctx: &Ctx<'_>, w: &Watched) -> Result<bool, CmdError> {
    let Some(swaps) = ctx.shared.swaps.since(w.swaps, w.db) else {
        return Ok(true);
    };
    for swap in swaps {
        for p in swap.physical {
            if let Some(row) = super::rows::row_in(ctx, &w.key, p)? {
                // A row has no TTL: it existed at the swap if it exists now.
                if row {
                    return Ok(true);
                }
                continue;
            }
            let Some(v) = ctx.read_raw(&crate::keyspace::user_key(p, &w.key))? else {
                continue;
            };
            let (deadline, _) = crate::encoding::split_expiry(&v)?;
            if !crate::expiry::expired(deadline, swap.at_ms) {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// EXEC
pub(crate) fn exec(ctx: &mut Ctx<'_>, _args: Args<'_>) -> CmdResult {
    let Some(tx) = ctx.session.tx.take() else {
        return Err(CmdError::new("ERR EXEC without MULTI"));
    };
    let watched = std::mem::take(&mut ctx.session.watched);
    if tx.dirty {
        return Err(CmdError::new(EXECABORT));
    }
    let commands: Vec<_> = (0..tx.queued.len())
        .filter_map(|i| tx.queued.command(i))
        .filter_map(|a| lookup(a.get(0)).map(|spec| (spec, a)))
        .collect();
    let shared = ctx.shared;
    let _guard = if commands.iter().any(|(s, _)| s.has_flag("allkeys")) {
        shared.locks.lock_all()
    } else {
        let keys = commands.iter().flat_map(|(s, a)| s.keys(*a));
        let watched_keys = watched.iter().map(|w| w.key.as_slice());
        shared.locks.lock(keys.chain(watched_keys), Access::Write)
    };
    if !watches_hold(ctx, &watched)? {
        ctx.out.null_array();
        return Ok(());
    }
    let run_all = |ctx: &mut Ctx<'_>| {
        ctx.out.array(commands.len());
        ctx.in_exec = true;
        for (spec, args) in &commands {
            ctx.tally.commands += 1;
            run_locked(ctx, spec, *args);
        }
        ctx.in_exec = false;
        Ok(())
    };
    if commands.iter().any(|(s, _)| walks_keyspace(s)) {
        run_all(ctx)
    } else {
        ctx.batched(run_all)
    }
}

/// Commands that read or change the whole keyspace through the engine's scan, which does
/// not see a pending batch: an EXEC holding one runs without a batch (writes one by one).
fn walks_keyspace(spec: &CommandSpec) -> bool {
    spec.has_flag("allkeys") || ["scan", "keys", "dbsize", "randomkey"].contains(&spec.name)
}
