//! The network side: [`Server`] (a tokio listener that admits clients up to
//! `max_clients` and shuts down gracefully) and [`ServerHandle`] (a server on its own
//! threads, for tests and for embedding).
//!
//! # Shutdown (SIGTERM, SIGINT, or [`ServerHandle::shutdown`])
//! 1. Stop accepting: the listener is closed.
//! 2. Tell every connection to stop (`StopSignal`): idle ones close at once; one with a
//!    job in flight finishes it and sends its replies (see `connection`).
//! 3. Wait for every connection task. Each one awaits its job, so when the last task
//!    ends no command is running; join the worker threads.
//! 4. Join the expiry sweep ([`crate::expiry::Sweeper`]).
//! 5. Close the store (`Db::close`: engine threads joined, everything durable).
//!
//! # Admission
//! The accept loop counts open connections; one over `max_clients` is answered
//! `-ERR max number of clients reached` and closed, as Redis does.
//!
//! Thread-safety: the accept loop is one task; connections are tasks on the runtime's
//! reactor threads; commands run on the worker threads (`executor`).

mod connection;
mod executor;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use tierkv::{Db, DurabilityMode};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinSet;

use self::executor::Workers;
use crate::config::ServerConfig;
use crate::dbmap::DbMap;
use crate::expiry::Sweeper;
use crate::shared::Shared;

/// The reply to a client over `max_clients` (Redis's words).
const MAX_CLIENTS_REPLY: &[u8] = b"-ERR max number of clients reached\r\n";

/// Tells connections that the server is stopping.
#[derive(Clone, Debug)]
pub(crate) struct StopSignal(watch::Receiver<bool>);

impl StopSignal {
    /// True once the server is stopping.
    pub(crate) fn is_set(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once the server is stopping (at once if it already is).
    pub(crate) async fn wait(&mut self) {
        // An error means the sender is gone, which also means stop.
        let _ = self.0.wait_for(|stop| *stop).await;
    }
}

/// A listening server over an open store.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    shared: Arc<Shared>,
    workers: Workers,
    sweeper: Sweeper,
}

impl Server {
    /// Checks `config`, binds its address and takes the store. `pmem_mode` is the
    /// durability mode the store was opened with (INFO reports it).
    pub async fn bind(
        db: Db,
        pmem_mode: DurabilityMode,
        config: ServerConfig,
    ) -> anyhow::Result<Server> {
        config.validate(db.limits().max_value_len)?;
        let listener = TcpListener::bind(config.bind)
            .await
            .with_context(|| format!("listening on {}", config.bind))?;
        let port = listener.local_addr()?.port();
        let volatile = db.descriptor().volatile;
        let workers = if config.inline(volatile) {
            Workers::inline()
        } else {
            Workers::start(config.worker_count(volatile)).context("starting the worker threads")?
        };
        let mut shared = Shared::new(db, pmem_mode, config, port);
        shared.dbmap = DbMap::load(&shared.db).context("reading the database map")?;
        shared.bindings =
            crate::bindings::Bindings::resolve(&shared.db, &shared.config.schema_prefixes)?;
        let shared = Arc::new(shared);
        let sweeper = Sweeper::start(shared.clone()).context("starting the expiry sweep")?;
        Ok(Server {
            listener,
            shared,
            workers,
            sweeper,
        })
    }

    /// The address it listens on (with the port the OS chose, if it was 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves clients until `shutdown` resolves, then shuts down gracefully (see the
    /// module doc) and closes the store; returns the store's close result.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let (stop_tx, stop_rx) = watch::channel(false);
        let stop = StopSignal(stop_rx);
        let mut conns = JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                accepted = self.listener.accept() => match accepted {
                    Ok((sock, _)) => self.admit(sock, &mut conns, &stop),
                    Err(e) => {
                        // EMFILE and friends: wait a little rather than spin.
                        eprintln!("tierkv serve: accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                Some(done) = conns.join_next(), if !conns.is_empty() => report(done),
            }
        }
        drop(self.listener);
        let _ = stop_tx.send(true);
        while let Some(done) = conns.join_next().await {
            report(done);
        }
        // Every connection awaited its last job, so the workers are idle: join them.
        self.workers.join();
        self.sweeper.join();
        self.shared.db.close().context("closing the store")
    }

    fn admit(&self, sock: TcpStream, conns: &mut JoinSet<()>, stop: &StopSignal) {
        let stats = &self.shared.stats;
        stats.total_connections.fetch_add(1, Ordering::Relaxed);
        if stats.connected_clients.load(Ordering::Relaxed) >= self.shared.settings.max_clients() {
            stats.rejected_connections.fetch_add(1, Ordering::Relaxed);
            conns.spawn(reject(sock));
            return;
        }
        let Some(queue) = self.workers.queue() else {
            return;
        };
        stats.connected_clients.fetch_add(1, Ordering::Relaxed);
        let shared = self.shared.clone();
        let stop = stop.clone();
        conns.spawn(async move {
            connection::serve(sock, shared.clone(), queue, stop).await;
            shared
                .stats
                .connected_clients
                .fetch_sub(1, Ordering::Relaxed);
        });
    }
}

async fn reject(mut sock: TcpStream) {
    let _ = tokio::time::timeout(Duration::from_secs(1), sock.write_all(MAX_CLIENTS_REPLY)).await;
}

fn report(done: Result<(), tokio::task::JoinError>) {
    if let Err(e) = done
        && e.is_panic()
    {
        eprintln!("tierkv serve: a connection task panicked: {e}");
    }
}

/// Builds the runtime a server runs on, with [`ServerConfig::io_thread_count`] reactor
/// threads.
pub fn runtime(config: &ServerConfig) -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.io_thread_count())
        .thread_name("tierkv-net")
        .enable_io()
        .enable_time()
        .build()
        .context("starting the network runtime")
}

/// A server running on its own threads.
#[derive(Debug)]
pub struct ServerHandle {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<anyhow::Result<()>>>,
}

/// Starts a server on its own runtime and threads; returns once it listens.
pub fn spawn(
    db: Db,
    pmem_mode: DurabilityMode,
    config: ServerConfig,
) -> anyhow::Result<ServerHandle> {
    let rt = runtime(&config)?;
    let server = rt.block_on(Server::bind(db, pmem_mode, config))?;
    let addr = server.local_addr()?;
    let (tx, rx) = oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("tierkv-serve".into())
        .spawn(move || {
            rt.block_on(server.serve(async {
                let _ = rx.await;
            }))
        })
        .context("starting the server thread")?;
    Ok(ServerHandle {
        addr,
        stop: Some(tx),
        thread: Some(thread),
    })
}

impl ServerHandle {
    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Shuts the server down gracefully and closes the store; returns the close result.
    pub fn shutdown(mut self) -> anyhow::Result<()> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> anyhow::Result<()> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        match self.thread.take() {
            Some(t) => t
                .join()
                .map_err(|_| anyhow::anyhow!("the server thread panicked"))?,
            None => Ok(()),
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        if let Err(e) = self.stop_and_join() {
            eprintln!(
                "tierkv serve: {}",
                tierkv::core::api::error::report(e.chain())
            );
        }
    }
}
