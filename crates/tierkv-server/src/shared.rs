//! [`Shared`]: what every connection and every command sees (the store, the key locks, the
//! SCAN cursors, the settings, the server's counters), and [`Session`]: what one connection
//! remembers between commands.
//!
//! Thread-safety: `Shared` is `Sync` (the store is, the lock table and cursor table lock
//! internally, counters are relaxed atomics: they order nothing). A `Session` belongs to
//! one connection and travels with its batch to the thread that runs it.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use tierkv::{Db, DurabilityMode};

use crate::clients::ClientRegistry;
use crate::config::ServerConfig;
use crate::cursors::CursorTable;
use crate::dbmap::DbMap;
use crate::expiry::ExpiryQueue;
use crate::locks::KeyLocks;
use crate::resp::Batch;

/// Counters the server keeps for INFO.
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Connections open now.
    pub connected_clients: AtomicUsize,
    /// Connections accepted since start (refused ones included).
    pub total_connections: AtomicU64,
    /// Connections refused by `max_clients`.
    pub rejected_connections: AtomicU64,
    /// Commands run.
    pub total_commands: AtomicU64,
    /// Key lookups that found the key.
    pub keyspace_hits: AtomicU64,
    /// Key lookups that did not.
    pub keyspace_misses: AtomicU64,
    /// Bytes read from clients.
    pub net_input_bytes: AtomicU64,
    /// Bytes written to clients.
    pub net_output_bytes: AtomicU64,
    /// Times a connection stopped reading because its client had not read its replies.
    pub output_throttles: AtomicU64,
    /// Connections closed for a protocol error.
    pub protocol_errors: AtomicU64,
    /// Write batches committed by multi-key writes and EXECs.
    pub atomic_batches: AtomicU64,
    /// Source of client ids.
    next_client_id: AtomicU64,
}

impl ServerStats {
    /// A fresh client id (1, 2, ...).
    pub fn next_client_id(&self) -> u64 {
        self.next_client_id.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Reads a counter.
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }

    /// Adds the tally of one batch.
    pub fn add(&self, t: &Tally) {
        let add = |c: &AtomicU64, n: u64| {
            if n > 0 {
                c.fetch_add(n, Ordering::Relaxed);
            }
        };
        add(&self.total_commands, t.commands);
        add(&self.keyspace_hits, t.hits);
        add(&self.keyspace_misses, t.misses);
        add(&self.atomic_batches, t.batches);
    }
}

/// Counters of one batch, added to [`ServerStats`] once per batch (not per command, to keep
/// shared cache lines quiet).
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    /// Commands run.
    pub commands: u64,
    /// Lookups that found their key.
    pub hits: u64,
    /// Lookups that did not.
    pub misses: u64,
    /// Write batches committed (multi-key writes and EXECs applied crash-atomically).
    pub batches: u64,
}

/// Everything the connections share.
#[derive(Debug)]
pub struct Shared {
    /// The store.
    pub db: Db,
    /// Per-key atomicity.
    pub locks: KeyLocks,
    /// Resume keys of unfinished SCANs.
    pub cursors: CursorTable,
    /// Settings.
    pub config: ServerConfig,
    /// What CONFIG SET may change while the server runs (`maxclients` among them: read it
    /// there, not from `config`).
    pub settings: crate::settings::Settings,
    /// Counters.
    pub stats: ServerStats,
    /// When the server started.
    pub started: Instant,
    /// The port actually bound (for INFO).
    pub port: u16,
    /// The pmem durability mode the store was opened with (for INFO).
    pub pmem_mode: DurabilityMode,
    /// Bumped by FLUSHDB/FLUSHALL: a change of every key, as WATCH sees it.
    pub flush_epoch: AtomicU64,
    /// The recent SWAPDBs, which EXEC checks its watched keys against.
    pub swaps: crate::swaplog::SwapLog,
    /// Key prefixes bound to schemas (hashes over rows).
    pub bindings: crate::bindings::Bindings,
    /// Deadlines set in this run, for the active expiry sweep.
    pub expiry: ExpiryQueue,
    /// The connected clients (CLIENT LIST).
    pub clients: ClientRegistry,
    /// Source of collection generations ([`Shared::new_generation`]).
    generations: AtomicU64,
    /// Wakes clients blocked in BLPOP & co. when a list is pushed to.
    pub waiters: Waiters,
    /// Which stored database holds each SELECTable one (SWAPDB).
    pub dbmap: DbMap,
}

/// The wake-up of blocked clients: a version bumped by every push to a list (under the
/// key's lock, after the write). A blocking command that found nothing records the
/// version it saw (under the same lock), and its connection waits for the version to
/// move: a push that landed after the check always moves it, so no wake-up is missed.
/// Every push wakes every blocked client, which re-runs its command (a spurious wake-up
/// costs one look at its keys).
///
/// # Waking only when someone waits
/// The version is an atomic counter; the tokio `watch` channel that wakes the waiting
/// connections is sent to only while a connection is waiting ([`Waiters::wait`] counts
/// them): a send wakes every receiver through eight mutex-guarded lists, which cost 4% of
/// the server's CPU under `redis-benchmark -t lpush` when nobody waited. No wake-up is
/// lost: a pusher bumps the version and then reads the count; a waiter subscribes, then
/// raises the count, then reads the version (all sequentially consistent). In the single
/// order of those operations either the pusher's count read comes after the waiter's
/// raise (it sends, and the waiter, subscribed before, sees the send), or before it (then
/// the pusher's bump precedes the waiter's version read, which sees the version moved).
#[derive(Debug)]
pub struct Waiters {
    version: AtomicU64,
    waiting: AtomicUsize,
    tx: tokio::sync::watch::Sender<u64>,
}

impl Default for Waiters {
    fn default() -> Waiters {
        Waiters {
            version: AtomicU64::new(0),
            waiting: AtomicUsize::new(0),
            tx: tokio::sync::watch::Sender::new(0),
        }
    }
}

impl Waiters {
    /// A list under `key` of database `db` got elements.
    pub fn notify(&self, _db: u8, _key: &[u8]) {
        self.version.fetch_add(1, Ordering::SeqCst);
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.tx.send_modify(|v| *v = v.wrapping_add(1));
        }
    }

    /// The current version.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::SeqCst)
    }

    /// Waits (asynchronously) until the version differs from `seen`; returns an error
    /// only when the channel is gone (the server is stopping).
    pub async fn wait(&self, seen: u64) -> Result<(), tokio::sync::watch::error::RecvError> {
        // Subscribe first, then count ourselves, then look (the type's doc says why).
        let mut rx = self.tx.subscribe();
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let _count = WaitingGuard(&self.waiting);
        while self.version() == seen {
            rx.changed().await?;
        }
        Ok(())
    }
}

/// Lowers the count of waiting connections when a wait ends, however it ends.
struct WaitingGuard<'a>(&'a AtomicUsize);

impl Drop for WaitingGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A connection blocked in BLPOP & co.
#[derive(Debug, Clone, Copy)]
pub struct Block {
    /// When the command times out (`None`: never).
    pub deadline: Option<std::time::Instant>,
    /// The [`Waiters`] version the command saw when it found nothing.
    pub seen: u64,
    /// True while the connection must wait before running the command again.
    pub waiting: bool,
    /// Set by the connection when the deadline passed: the command answers its timeout.
    pub timed_out: bool,
}

impl Shared {
    /// Shared state over an open store.
    pub fn new(db: Db, pmem_mode: DurabilityMode, config: ServerConfig, port: u16) -> Shared {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        Shared {
            db,
            locks: KeyLocks::default(),
            cursors: CursorTable::new(seed.rotate_left(17) ^ u64::from(std::process::id())),
            settings: crate::settings::Settings::new(config.max_clients),
            config,
            stats: ServerStats::default(),
            started: Instant::now(),
            port,
            pmem_mode,
            flush_epoch: AtomicU64::new(0),
            swaps: crate::swaplog::SwapLog::default(),
            bindings: crate::bindings::Bindings::default(),
            expiry: ExpiryQueue::default(),
            clients: ClientRegistry::default(),
            generations: AtomicU64::new(seed ^ u64::from(std::process::id()).rotate_left(40)),
            waiters: Waiters::default(),
            dbmap: DbMap::default(),
        }
    }

    /// A collection generation no other collection of this store has: the splitmix64 of a
    /// counter seeded from the clock and the pid (a bijection, so unique within a run; a
    /// repeat across runs would need a 64-bit collision on the same key before the
    /// sweep reclaimed the old one).
    pub fn new_generation(&self) -> u64 {
        let mut z = self
            .generations
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// The longest argument a request may carry: a key or a value.
    pub fn max_arg_len(&self) -> usize {
        let l = self.db.limits();
        l.max_value_len.max(l.max_key_len)
    }
}

/// What one connection remembers.
#[derive(Debug, Default)]
pub struct Session {
    /// `CLIENT ID`.
    pub id: u64,
    /// False until `AUTH` succeeds when a password is required.
    pub authenticated: bool,
    /// `CLIENT SETNAME`.
    pub name: Option<Vec<u8>>,
    /// `CLIENT SETINFO LIB-NAME`.
    pub lib_name: Option<Vec<u8>>,
    /// `CLIENT SETINFO LIB-VER`.
    pub lib_ver: Option<Vec<u8>>,
    /// Set by `QUIT`: close after the reply.
    pub quit: bool,
    /// The transaction being queued, between MULTI and EXEC/DISCARD.
    pub tx: Option<Transaction>,
    /// The keys under WATCH.
    pub watched: Vec<Watched>,
    /// The selected database (SELECT), 0 to 15.
    pub db: u8,
    /// The blocking command being waited on, if any.
    pub block: Option<Block>,
}

/// A transaction being queued.
#[derive(Debug, Default)]
pub struct Transaction {
    /// The queued commands (owned copies).
    pub queued: Batch,
    /// A command was refused while queuing: EXEC answers EXECABORT.
    pub dirty: bool,
}

/// A key under WATCH and what it was when watched.
#[derive(Debug, Clone)]
pub struct Watched {
    /// The key as the client named it.
    pub key: Vec<u8>,
    /// The version of its lock stripe ([`KeyLocks::version`]).
    pub version: u64,
    /// [`Shared::flush_epoch`] then.
    pub epoch: u64,
    /// The (logical) database it was watched in.
    pub db: u8,
    /// [`crate::swaplog::SwapLog::seq`] then.
    pub swaps: u64,
    /// Whether the key existed (a key that expires after WATCH fails EXEC, as in Redis).
    pub existed: bool,
}

impl Session {
    /// A new connection's session.
    pub fn new(id: u64, password_required: bool) -> Session {
        Session {
            id,
            authenticated: !password_required,
            ..Session::default()
        }
    }
}
