//! Running commands off the reactor threads: the worker pool.
//!
//! The store's calls block (a pmem persist, an fdatasync on flash, a key lock), so they
//! never run on a tokio reactor thread (except on a volatile engine: "Inline execution"
//! below). A connection hands each pipelined burst to the
//! pool as one [`Job`] (the burst's commands, the connection's session, its output buffer);
//! a worker thread runs it and sends it back with the replies written. One hand-off per
//! burst, not per command, is what makes pipelining pay: with `redis-benchmark -P 16` a
//! hand-off carries 16 commands.
//!
//! # Why a dedicated pool and not `spawn_blocking`
//! Both were measured under `redis-benchmark -t set,get -n 400000 -c 50 -P 16` with
//! `dram:hash` on 2 cores (see the crate README): tokio's blocking pool cost about 1.9 µs of
//! server CPU per request, almost all of it threads sleeping and waking on futexes (the
//! pool grows a thread per concurrent burst and parks each one after its task); this pool
//! costs 0.8 to 1.0 µs (redis-server: 0.6 µs). Its few workers stay busy while work is
//! queued, and the channel spins briefly before it parks a worker, so under load a hand-off
//! is a queue operation, not a context switch.
//!
//! # Inline execution
//! For a volatile engine (`dram`) the hand-offs cost more than they protect: its calls
//! never wait on a device, and a command waits at most for a key lock held by another
//! short command. There the connection runs the job itself, on its network thread
//! ([`crate::ServerConfig::inline_commands`]). Measured with `redis-benchmark -n 200000
//! -c 50 -P 16` against `dram:hash` on 2 shared cores, the server's CPU per request fell
//! from 0.80-0.95 to 0.50-0.55 µs for GET, 1.65-2.05 to 1.30-1.45 µs for LPUSH and
//! 1.50-1.65 to 1.25-1.35 µs for RPOP (three alternations; crate README). A panic in a
//! command is caught the same way: that connection is closed, the thread lives on. No
//! lock is held across an `.await`, so a network thread blocked on a key lock waits only
//! for another thread's running command.
//!
//! Inline, a connection yields to the runtime once before it writes a burst's replies
//! (`Connection::flush`), so the other connections that are ready run their bursts first
//! and one round's replies leave back to back, as Redis writes its replies in
//! `beforeSleep` after running every ready client. Writing each burst's replies at once
//! woke the idle `redis-benchmark` once per reply write (a cross-CPU wake-up in the kernel,
//! a quarter of the server's CPU); after the change (`redis-benchmark -n 400000 -c 50 -P
//! 16`, `dram:hash`, quiet 2-core machine): LPUSH 1.18 -> 0.95 µs of server CPU and 1.26
//! -> 1.02 µs of wall time per request (redis-server 0.55 / 0.61), GET 0.35 µs (redis 0.45).
//!
//! # Throttling
//! A job stops early once its output passes `output_soft_limit`; the connection then sends
//! the replies (waiting, without reading, for a slow client to take them) before it runs
//! the rest. That is the throttle of a client that sends faster than it reads.
//!
//! # Lifecycle
//! The server starts the workers when it binds and joins them after the last connection
//! ended (every sender is then gone, so each worker's `recv` fails and it returns). A
//! panic in a command (a bug) is caught in the worker: that job's connection is closed,
//! the worker lives on. The queue is unbounded but holds at most one job per connection.
//!
//! Thread-safety: a job is owned data, moved to a worker and back; everything it shares is
//! in [`Shared`].

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam::channel::{Receiver, Sender, unbounded};
use tokio::sync::oneshot;

use crate::commands::{self, Ctx};
use crate::resp::{Batch, Reply};
use crate::shared::{Session, Shared, Tally};

/// A burst of commands on its way to a worker thread and back.
#[derive(Debug, Default)]
pub(crate) struct Job {
    /// The commands.
    pub batch: Batch,
    /// Index of the next command to run.
    pub next: usize,
    /// The connection's state.
    pub session: Session,
    /// The connection's pending replies.
    pub out: Reply,
}

impl Job {
    /// True when every command of the batch has run.
    pub fn done(&self) -> bool {
        self.next >= self.batch.len()
    }
}

/// Runs commands of `job` from `job.next` until the batch is done, the output passes the
/// soft limit, or the client said QUIT.
pub(crate) fn run_job(shared: &Shared, job: &mut Job) {
    let soft = usize::try_from(shared.config.output_soft_limit.bytes()).unwrap_or(usize::MAX);
    let mut tally = Tally::default();
    while let Some(args) = job.batch.command(job.next) {
        job.next += 1;
        let mut ctx = Ctx::new(shared, &mut job.session, &mut job.out, &mut tally);
        if job.batch.refused(job.next - 1) {
            commands::refuse(&mut ctx, args.get(0));
        } else {
            commands::execute(&mut ctx, args);
        }
        if job.session.block.is_some_and(|b| b.waiting) {
            // A blocking command found nothing: it runs again when the connection is woken
            // (or times out); the commands after it wait, as in Redis.
            job.next -= 1;
            break;
        }
        if job.session.quit || job.out.len() > soft {
            break;
        }
    }
    shared.stats.add(&tally);
}

/// A job and where to send it back.
pub(crate) struct Task {
    shared: Arc<Shared>,
    job: Job,
    reply: oneshot::Sender<Job>,
}

/// The job was lost: a command panicked (a bug) or the pool is gone.
#[derive(Debug)]
pub(crate) struct JobLost;

/// Where a connection's jobs run, one clone per connection: the sending side of the
/// pool, or the connection's own thread.
#[derive(Clone)]
pub(crate) enum WorkQueue {
    /// Jobs go to the worker threads.
    Pool(Sender<Task>),
    /// Jobs run on the calling (network) thread (module doc).
    Inline,
}

impl WorkQueue {
    /// Runs `job` on a worker and waits (asynchronously) for it to come back, or runs it
    /// here when inline.
    pub(crate) async fn execute(&self, shared: Arc<Shared>, mut job: Job) -> Result<Job, JobLost> {
        let tx = match self {
            WorkQueue::Pool(tx) => tx,
            WorkQueue::Inline => {
                return match catch_unwind(AssertUnwindSafe(|| run_job(&shared, &mut job))) {
                    Ok(()) => Ok(job),
                    Err(_) => {
                        eprintln!("tierkv serve: a command panicked; closing its connection");
                        Err(JobLost)
                    }
                };
            }
        };
        let (reply, back) = oneshot::channel();
        tx.send(Task { shared, job, reply }).map_err(|_| JobLost)?;
        back.await.map_err(|_| JobLost)
    }
}

/// The worker threads.
pub(crate) struct Workers {
    queue: Option<WorkQueue>,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Workers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workers")
            .field("threads", &self.threads.len())
            .finish()
    }
}

impl Workers {
    /// Starts `n` workers (at least one).
    pub(crate) fn start(n: usize) -> std::io::Result<Workers> {
        let (tx, rx) = unbounded::<Task>();
        let threads = (0..n.max(1))
            .map(|i| {
                let rx = rx.clone();
                std::thread::Builder::new()
                    .name(format!("tierkv-worker-{i}"))
                    .spawn(move || work(&rx))
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Workers {
            queue: Some(WorkQueue::Pool(tx)),
            threads,
        })
    }

    /// No threads: every connection runs its jobs itself ([`WorkQueue::Inline`]).
    pub(crate) fn inline() -> Workers {
        Workers {
            queue: Some(WorkQueue::Inline),
            threads: Vec::new(),
        }
    }

    /// A handle to give a connection.
    pub(crate) fn queue(&self) -> Option<WorkQueue> {
        self.queue.clone()
    }

    /// Drops the pool's own sender and joins the workers; they end once every
    /// connection's [`WorkQueue`] is gone too.
    pub(crate) fn join(mut self) {
        self.queue = None;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn work(rx: &Receiver<Task>) {
    while let Ok(Task {
        shared,
        mut job,
        reply,
    }) = rx.recv()
    {
        match catch_unwind(AssertUnwindSafe(|| run_job(&shared, &mut job))) {
            Ok(()) => {
                // The connection may be gone; its job is then simply dropped.
                let _ = reply.send(job);
            }
            Err(_) => {
                eprintln!("tierkv serve: a command panicked; closing its connection");
            }
        }
    }
}
