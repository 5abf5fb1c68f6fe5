//! The reference engines: small but correct persistent engines that exist only to prove
//! that the stress harness catches bugs (issue 5, first acceptance point), plus
//! deliberately broken variants of them. They are compiled only with the
//! `reference-engine` feature and are never registered in `tierkv::ENGINES`; the harness
//! resolves them by name ([`descriptor`]) after the registry.
//!
//! - `reflog` ([`pmem_log`]): an append-only record log on the pmem pool, committed by an
//!   8-byte commit word, with a DRAM index rebuilt by replaying the log at open;
//! - `reflog-flash` ([`flash_log`]): the same log in segment files on the flash tier,
//!   committed by fdatasync, with a ping-pong superblock for compaction.
//!
//! Variants (after `:`): `correct` (the default), `ack-before-persist` (acknowledges a
//! write before it is durable), `skip-persist` (skips one persist of its protocol), and
//! for `reflog` also `lose-race-winner`, `ack-before-move-persist`, `free-while-read`,
//! `lose-on-refusal`, `refuse-deletes-when-full`, `hang-when-full`, `loop-batches` and
//! `lose-field-updates` (see [`Fault`]; its schema store is [`racy_rows`]). Only `reflog` has write batches (committed by one commit word). Each
//! engine module's doc states its protocol and exactly what its broken variants skip.
//!
//! Records share one codec ([`record`]), which has a fuzz target.
//!
//! Thread safety: both engines are `Send + Sync`; see each module.

pub mod flash_log;
mod log_core;
pub mod pmem_log;
pub mod racy_rows;
pub mod record;

use std::sync::Arc;

use tierkv_core::{EngineContext, EngineDescriptor, KvStore, Result, Tier};

/// The deliberate bug of a variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The correct engine.
    None,
    /// Acknowledges writes before they are durable.
    AckBeforePersist,
    /// Skips one persist (or sync) of the commit protocol.
    SkipPersist,
    /// `reflog` only: a write that raced with another write to its key is logged with a
    /// rank above every later write, so recovery resurrects it over the acknowledged
    /// winner of a later round of writes (the shape of a lost CAS retried with a stale
    /// timestamp).
    LoseRaceWinner,
    /// `reflog` only: compaction (the move a real engine runs in the background) switches
    /// to the new half, and acknowledges the write that triggered it, before the moved
    /// records are persisted.
    AckBeforeMovePersist,
    /// `reflog` only: gets read values from pmem through an offset looked up in DRAM,
    /// without protecting it; compaction frees (zeroes) the old half at once, so a reader
    /// still holding an offset into it reads freed memory.
    FreeWhileRead,
    /// `reflog` only: a put refused with `NoSpace` first drops the key's old value from
    /// the live index (the shape of an engine that frees the old slot before it finds
    /// room for the new one): an acknowledged value is lost on a refusal.
    LoseOnRefusal,
    /// `reflog` only: once a put was refused, every delete is refused with `NoSpace` until
    /// the store is reopened (the shape of a latched "store full" state), so space can
    /// never be freed.
    RefuseDeletesWhenFull,
    /// `reflog` only: the first put that does not fit never returns (it sleeps forever
    /// holding the writer lock), so every later write hangs too.
    HangWhenFull,
    /// `reflog` only: write batches applied as a loop of puts and deletes, one commit
    /// each, while `atomic_batches()` says they are atomic (a crash tears a batch).
    LoopBatches,
    /// `reflog` only: its schema store updates fields by an unlocked read-modify-write of
    /// the row ([`racy_rows`]), so concurrent updates of different fields of one row lose
    /// one of them.
    LoseFieldUpdates,
}

/// The variants, default first.
pub const VARIANTS: &[&str] = &[
    "correct",
    "ack-before-persist",
    "skip-persist",
    "lose-race-winner",
    "ack-before-move-persist",
    "free-while-read",
    "lose-on-refusal",
    "refuse-deletes-when-full",
    "hang-when-full",
    "loop-batches",
    "lose-field-updates",
];

fn fault_of(desc: &EngineDescriptor, ctx: &EngineContext) -> Result<Fault> {
    Ok(match desc.variant(&ctx.spec)? {
        "ack-before-persist" => Fault::AckBeforePersist,
        "skip-persist" => Fault::SkipPersist,
        "lose-race-winner" => Fault::LoseRaceWinner,
        "ack-before-move-persist" => Fault::AckBeforeMovePersist,
        "free-while-read" => Fault::FreeWhileRead,
        "lose-on-refusal" => Fault::LoseOnRefusal,
        "refuse-deletes-when-full" => Fault::RefuseDeletesWhenFull,
        "hang-when-full" => Fault::HangWhenFull,
        "loop-batches" => Fault::LoopBatches,
        "lose-field-updates" => Fault::LoseFieldUpdates,
        _ => Fault::None,
    })
}

/// The pmem reference engine.
pub static REFLOG: EngineDescriptor = EngineDescriptor {
    name: "reflog",
    variants: VARIANTS,
    summary: "TEST ONLY: append-only record log on pmem (the stress harness's reference engine)",
    tiers: &[Tier::Pmem],
    variant_tiers: &[],
    volatile: false,
    min_pmem_size: 64 << 10,
    max_value_len: None,
    open: open_reflog,
};

/// The flash reference engine.
pub static REFLOG_FLASH: EngineDescriptor = EngineDescriptor {
    name: "reflog-flash",
    variants: VARIANTS,
    summary: "TEST ONLY: append-only record log on flash (the stress harness's reference engine)",
    tiers: &[Tier::Flash],
    variant_tiers: &[],
    volatile: false,
    min_pmem_size: 0,
    max_value_len: None,
    open: open_reflog_flash,
};

fn open_reflog(ctx: EngineContext) -> Result<Arc<dyn KvStore>> {
    let fault = fault_of(&REFLOG, &ctx)?;
    ctx.spec.params().finish()?;
    pmem_log::open(ctx, fault)
}

fn open_reflog_flash(ctx: EngineContext) -> Result<Arc<dyn KvStore>> {
    let fault = fault_of(&REFLOG_FLASH, &ctx)?;
    if !matches!(
        fault,
        Fault::None | Fault::AckBeforePersist | Fault::SkipPersist
    ) {
        return Err(tierkv_core::Error::invalid(format!(
            "reflog-flash has no {} variant (reflog has)",
            ctx.spec.variant.as_deref().unwrap_or("such")
        )));
    }
    let mut params = ctx.spec.params();
    let segment = params.take("segment", tierkv_core::ByteSize(flash_log::DEFAULT_SEGMENT))?;
    params.finish()?;
    flash_log::open(ctx, fault, segment.bytes())
}

/// The reference engine called `name`, if any.
pub fn descriptor(name: &str) -> Option<&'static EngineDescriptor> {
    [&REFLOG, &REFLOG_FLASH]
        .into_iter()
        .find(|d| d.name == name)
}
