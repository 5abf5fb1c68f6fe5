//! One client connection: read, parse, run, reply, until the client leaves, says QUIT,
//! sends a malformed request, or the server stops.
//!
//! # The loop
//! 1. Parse what is buffered. Complete commands (a whole pipelined burst, up to
//!    `max_batch_commands`) become one [`Job`], run off the reactor by the worker pool
//!    (or here, on a volatile engine: [`super::executor`]), and
//!    their replies are written back in one `write`.
//! 2. Only when no complete command is buffered, read more from the socket.
//!
//! # Bounded memory and throttling
//! The input buffer holds at most one partial command (bounded by the parser) plus one
//! read. Output is bounded by the job's soft limit (plus one reply, itself bounded by
//! `max_reply_bytes`): when a job stops at that limit, the replies are written out before
//! anything else happens, and nothing is read meanwhile. A client that sends without
//! reading therefore fills its own socket buffers and is held there; the server neither
//! reads nor buffers more for it.
//!
//! # Bad input and departures
//! A protocol error is answered (`-ERR Protocol error: ...`, after the replies of the
//! commands before it) and the connection is closed, as in Redis — except an over-long
//! argument (over the store's value limit, within 512 MiB) of an authenticated client:
//! that command is answered with an error in its place and the connection goes on, the
//! argument's bytes dropped as they arrive (see [`crate::resp::parser`]). A half-received command
//! is dropped with the connection; it never ran. A client that disconnects mid-pipeline has
//! the commands already received run (each atomically), their replies go nowhere.
//!
//! # Shutdown
//! When the server stops, an idle connection closes at once; a connection with a job in
//! flight finishes that job and sends its replies (for at most the grace period), then
//! closes. Commands received but not started are not run, so their clients get no reply
//! and no write happened for them.
//!
//! Thread-safety: one task per connection; shares only [`Shared`].

use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::{BufMut, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::StopSignal;
use super::executor::{Job, WorkQueue};
use crate::resp::{ProtocolError, RequestParser};
use crate::shared::{Session, Shared};

/// Bytes asked of the socket per read, unless a large argument is on its way.
const READ_CHUNK: usize = 16 << 10;
/// How long a connection closed for a protocol error keeps draining its input.
const LINGER: std::time::Duration = std::time::Duration::from_millis(200);
/// Most bytes read from a blocked client (kept for after its blocking command).
const BLOCKED_INPUT: usize = 1 << 20;
/// Buffer capacity kept between bursts; more is given back after a large request or reply.
const KEEP_CAPACITY: usize = 64 << 10;

/// Why a connection ends.
#[derive(Debug)]
enum Close {
    /// The client closed its side, or the socket failed.
    Gone,
    /// QUIT, a protocol error (already answered), or the server stopping.
    Done,
}

impl From<io::Error> for Close {
    fn from(_: io::Error) -> Close {
        Close::Gone
    }
}

struct Connection {
    sock: TcpStream,
    shared: Arc<Shared>,
    parser: RequestParser,
    inbuf: BytesMut,
    /// The job, between bursts (its vectors and buffers are reused).
    job: Option<Job>,
    stop: StopSignal,
    /// Where jobs run.
    queue: WorkQueue,
    /// When replies must have been handed over, once the server is stopping.
    deadline: Option<Instant>,
    /// Set by CLIENT KILL.
    kill: crate::clients::KillSwitch,
}

/// Serves one client until it leaves or the server stops.
pub(crate) async fn serve(
    sock: TcpStream,
    shared: Arc<Shared>,
    queue: WorkQueue,
    stop: StopSignal,
) {
    let password = shared.config.requirepass.is_some();
    let limits = shared.config.parser_limits(shared.max_arg_len());
    let session = Session::new(shared.stats.next_client_id(), password);
    let id = session.id;
    let show =
        |a: std::io::Result<std::net::SocketAddr>| a.map_or_else(|_| "?".into(), |a| a.to_string());
    let kill = shared
        .clients
        .register(id, show(sock.peer_addr()), show(sock.local_addr()));
    let _ = sock.set_nodelay(true);
    let mut c = Connection {
        sock,
        parser: RequestParser::new(limits, !password),
        inbuf: BytesMut::with_capacity(READ_CHUNK),
        job: Some(Job {
            session,
            ..Job::default()
        }),
        stop,
        queue,
        deadline: None,
        shared,
        kill,
    };
    let _ = c.run().await;
    // Gone from CLIENT LIST before the client can see the close.
    c.shared.clients.unregister(id);
    let _ = c.sock.shutdown().await;
}

impl Connection {
    async fn run(&mut self) -> Result<(), Close> {
        loop {
            let parsed = self.parser.parse(&self.inbuf);
            if self.parser.complete_commands() > 0 {
                self.run_commands().await?;
                if parsed.is_ok() {
                    // More complete commands may be buffered (a batch has a bound).
                    continue;
                }
            }
            if let Err(e) = parsed {
                return self.refuse(e).await;
            }
            if self.stop.is_set() || self.kill.is_set() {
                return Err(Close::Done);
            }
            self.parser.discard_refused(&mut self.inbuf);
            self.read_more().await?;
        }
    }

    /// Runs every complete command, writing replies as each job comes back.
    async fn run_commands(&mut self) -> Result<(), Close> {
        let mut job = self.job.take().unwrap_or_default();
        self.parser.take_batch(&mut self.inbuf, &mut job.batch);
        job.next = 0;
        loop {
            job = self
                .queue
                .execute(self.shared.clone(), job)
                .await
                .map_err(|_| Close::Done)?;
            self.flush(&mut job).await?;
            if job.session.quit || self.kill.is_set() {
                return Err(Close::Done);
            }
            if let Some(block) = job.session.block.as_mut()
                && block.waiting
            {
                self.wait_blocked(block).await?;
                continue;
            }
            if job.done() {
                break;
            }
            if self.stop.is_set() {
                // Only the job in flight is finished on shutdown; the rest never ran.
                return Err(Close::Done);
            }
        }
        self.parser.set_authenticated(job.session.authenticated);
        job.batch.recycle();
        self.job = Some(job);
        Ok(())
    }

    /// Waits, for a client blocked in BLPOP & co., until a push may have given it an
    /// element, its timeout passes (the command then answers its timeout), the client
    /// leaves, or the server stops. Bytes the client sends meanwhile are kept for after.
    async fn wait_blocked(&mut self, block: &mut crate::shared::Block) -> Result<(), Close> {
        let shared = self.shared.clone();
        let woken = shared.waiters.wait(block.seen);
        tokio::pin!(woken);
        let deadline = block.deadline.map(Instant::from_std);
        let sleep = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(sleep);
        loop {
            self.inbuf.reserve(READ_CHUNK);
            tokio::select! {
                r = &mut woken => {
                    r.map_err(|_| Close::Done)?;
                    break;
                }
                () = &mut sleep => {
                    block.timed_out = true;
                    break;
                }
                r = self.sock.read_buf(&mut self.inbuf), if self.inbuf.len() < BLOCKED_INPUT => {
                    if r? == 0 {
                        return Err(Close::Gone);
                    }
                }
                () = self.stop.wait() => return Err(Close::Done),
                () = self.kill.wait() => return Err(Close::Done),
            }
        }
        block.waiting = false;
        Ok(())
    }

    /// Answers a protocol error and ends the connection.
    async fn refuse(&mut self, e: ProtocolError) -> Result<(), Close> {
        self.shared
            .stats
            .protocol_errors
            .fetch_add(1, Ordering::Relaxed);
        let mut job = self.job.take().unwrap_or_default();
        job.out.error(&format!("ERR {e}"));
        self.flush(&mut job).await?;
        // Let the client read the error: close our side first, then discard what it still
        // sends for a moment, so that the kernel does not answer bytes we never read with
        // a reset that could destroy the error before the client reads it.
        let _ = self.sock.shutdown().await;
        let mut sink = [0u8; 4096];
        let _ = tokio::time::timeout(LINGER, async {
            while let Ok(1..) = self.sock.read(&mut sink).await {}
        })
        .await;
        Err(Close::Done)
    }

    /// Reads more bytes; at most the rest of a large argument, or one chunk.
    async fn read_more(&mut self) -> Result<(), Close> {
        if self.inbuf.is_empty() && self.inbuf.capacity() > KEEP_CAPACITY {
            self.inbuf = BytesMut::with_capacity(READ_CHUNK);
        }
        let want = self
            .parser
            .wanted_len()
            .map_or(READ_CHUNK, |w| w.saturating_sub(self.inbuf.len()))
            .max(READ_CHUNK);
        self.inbuf.reserve(want);
        let mut room = (&mut self.inbuf).limit(want);
        let n = tokio::select! {
            r = self.sock.read_buf(&mut room) => r?,
            () = self.stop.wait() => return Err(Close::Done),
            () = self.kill.wait() => return Err(Close::Done),
        };
        if n == 0 {
            return Err(Close::Gone);
        }
        self.shared
            .stats
            .net_input_bytes
            .fetch_add(n as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Writes the job's replies; once the server is stopping, gives up at the deadline.
    async fn flush(&mut self, job: &mut Job) -> Result<(), Close> {
        if matches!(self.queue, super::executor::WorkQueue::Inline)
            && !job.out.as_bytes().is_empty()
        {
            // Deferred replies (the executor's module doc, "Inline execution"): let the
            // other connections that are ready run their bursts first, so that the replies
            // of one round go out back to back, as Redis writes them before it sleeps.
            tokio::task::yield_now().await;
        }
        let out = job.out.as_bytes();
        // The common case: the socket takes everything at once.
        let mut written = match self.sock.try_write(out) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
            Err(e) => return Err(e.into()),
        };
        if written < out.len() {
            // The client has not read its earlier replies: nothing more is read from it
            // until it has taken these.
            self.shared
                .stats
                .output_throttles
                .fetch_add(1, Ordering::Relaxed);
        }
        while written < out.len() {
            let chunk = out.get(written..).unwrap_or_default();
            let n = if self.stop.is_set() {
                let grace = self.shared.config.shutdown_grace();
                let deadline = *self.deadline.get_or_insert_with(|| Instant::now() + grace);
                match tokio::time::timeout_at(deadline, self.sock.write(chunk)).await {
                    Ok(r) => r?,
                    Err(_) => return Err(Close::Done),
                }
            } else {
                tokio::select! {
                    r = self.sock.write(chunk) => r?,
                    () = self.stop.wait() => continue,
                }
            };
            if n == 0 {
                return Err(Close::Gone);
            }
            written += n;
        }
        self.shared
            .stats
            .net_output_bytes
            .fetch_add(written as u64, Ordering::Relaxed);
        job.out.clear(KEEP_CAPACITY);
        Ok(())
    }
}
