//! The child of kill mode: opens the store, says `ready`, runs the workload and reports
//! every write to the parent over its stdout (one `write(2)` per line); with a power-loss
//! kill, a cutter thread cuts the power when the parent asks (see the `kill` module doc).
//!
//! Thread safety: the workload's threads, a counter loop on the main thread, and (power
//! loss) a cutter thread plus a detached stdin reader.

use std::fs::{self, File};
use std::io::{BufRead, Write};
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};
use tierkv::Manifest;
use tierkv::core::media::pmem::CrashImageOptions;

use super::protocol::{MAX_LINE, Msg, RoundParams};
use super::{KillPaths, power_loss};
use crate::batch::BatchWrite;
use crate::cli::{Mode, StressArgs};
use crate::expected_state::ExpectedState;
use crate::fields::WriteKind;
use crate::modes::RunConfig;
use crate::modes::media::{InjectedStore, MediaPaths, open_injected};
use crate::workload::{Workload, WorkloadConfig, WriteObserver};

/// A child never outlives this (in case its parent vanished without killing it).
const CHILD_MAX_LIFETIME: Duration = Duration::from_secs(3600);

/// The child's end of the pipe: one `write(2)` per line.
struct Pipe(File);

impl Pipe {
    fn stdout() -> anyhow::Result<Pipe> {
        let fd = std::io::stdout()
            .as_fd()
            .try_clone_to_owned()
            .context("duplicating stdout")?;
        Ok(Pipe(File::from(fd)))
    }

    /// Sends one message; a parent that is gone ends the child.
    fn send(&self, msg: &Msg) {
        let mut line = msg.encode();
        if line.len() > MAX_LINE {
            let mut cut = MAX_LINE;
            while !line.is_char_boundary(cut) {
                cut -= 1;
            }
            line.truncate(cut);
        }
        line.push('\n');
        if (&self.0).write_all(line.as_bytes()).is_err() {
            // The parent is gone: nobody is listening, and nobody will verify.
            std::process::exit(3);
        }
    }

    fn fail(&self, what: &str, e: &anyhow::Error) {
        self.send(&Msg::Failure(format!("{what}: {e:#}")));
    }
}

impl WriteObserver for Pipe {
    fn announce(&self, id: u32, version: u32, delete: bool) {
        self.send(&Msg::Announce {
            id,
            version,
            delete,
        });
    }
    fn acked(&self, id: u32, version: u32, delete: bool) {
        self.send(&Msg::Ack {
            id,
            version,
            delete,
        });
    }
    fn announce_batch(&self, writes: &[BatchWrite]) {
        self.send(&Msg::BatchAnnounce(writes.to_vec()));
    }
    fn acked_batch(&self, writes: &[BatchWrite]) {
        self.send(&Msg::BatchAck(writes.to_vec()));
    }
    fn announce_field(&self, row: u32, version: u32, kind: WriteKind, mask: u64) {
        self.send(&Msg::FieldAnnounce {
            row,
            version,
            kind,
            mask,
        });
    }
    fn acked_field(&self, row: u32, version: u32) {
        self.send(&Msg::FieldAck { row, version });
    }
    fn refused_field(&self, row: u32, version: u32) {
        self.send(&Msg::FieldRefused { row, version });
    }
}

/// Opens the store as the child: through the facade, or (power loss) with a Tracked pool
/// and fault-injecting flash injected.
fn open_child_store(cfg: &RunConfig, paths: &KillPaths) -> anyhow::Result<InjectedStore> {
    let t = &cfg.target;
    if !power_loss(cfg) {
        let mode = cfg.pmem_mode.unwrap_or_default();
        let options = t.options(
            &cfg.tiers,
            mode,
            Some(&paths.pmem_dir),
            Some(&paths.flash),
            None,
        );
        return Ok(InjectedStore {
            db: t.open(&paths.data, options)?,
            pool: None,
            injector: None,
        });
    }
    let pool = paths.pool();
    let at = MediaPaths {
        data: &paths.data,
        pool: &pool,
        pmem_dir: Some(&paths.pmem_dir),
        flash: &paths.flash,
    };
    let exists = Manifest::read_from(&paths.data)?.is_some();
    Ok(open_injected(cfg, &at, !exists)?)
}

/// The child's power cut (see the module doc).
fn cut_power(store: &InjectedStore, params: &RoundParams, image: &Path) -> anyhow::Result<()> {
    if let Some(inj) = &store.injector {
        inj.crash(params.flash_mode())?;
    }
    if let Some(pool) = &store.pool {
        let opts = CrashImageOptions {
            tear_words: params.tear_words,
        };
        pool.write_crash_image(params.image_seed, opts, image)?;
    }
    Ok(())
}

/// Runs as the child of kill mode (hidden `--kill-child <work dir>`); the parent SIGKILLs
/// it. Returns only when the workload stopped by itself (a violation or an engine error).
pub fn child_main(args: &StressArgs, work: &Path) -> anyhow::Result<bool> {
    let pipe = Pipe::stdout()?;
    let cfg = crate::cli::config(args, 0, work.to_path_buf())?;
    let paths = KillPaths::new(&cfg);
    let params = fs::read_to_string(&paths.round)
        .ok()
        .and_then(|t| RoundParams::decode(&t))
        .ok_or_else(|| {
            anyhow!(
                "kill child: no round parameters in {}",
                paths.round.display()
            )
        })?;
    let state = fs::read(&paths.state)
        .ok()
        .and_then(|b| ExpectedState::decode(&b))
        .filter(|s| s.space() == cfg.space)
        .map(|s| cfg.adopt_state(s))
        .ok_or_else(|| anyhow!("kill child: no expected state in {}", paths.state.display()))?;
    let store = match open_child_store(&cfg, &paths) {
        Ok(s) => s,
        Err(e) => {
            pipe.fail("opening the store", &e);
            return Ok(false);
        }
    };
    pipe.send(&Msg::Ready);
    let wl_cfg = WorkloadConfig {
        seed: params.seed,
        ..cfg.workload.clone()
    };
    let mut wl = Workload::new(
        &store.db,
        &state,
        wl_cfg,
        &pipe,
        format!("round {}", params.round),
    );
    if args.mode == Mode::Space {
        // Space mode kills the child mid-fill: a refused write is in flight, not a failure.
        wl = wl.allow_refusals();
    }
    let end = std::thread::scope(|s| {
        let worker = s.spawn(|| wl.run());
        if power_loss(&cfg) {
            s.spawn(|| cutter(&wl, &store, &params, &paths.image, &pipe));
        }
        let born = Instant::now();
        while !wl.stopped() && born.elapsed() < CHILD_MAX_LIFETIME {
            let c = &wl.counts;
            pipe.send(&Msg::Counts([
                c.puts.get(),
                c.deletes.get(),
                c.gets.get(),
                c.scans.get(),
                c.row_gets.get(),
                c.row_scans.get(),
                c.absent_updates.get(),
            ]));
            std::thread::sleep(Duration::from_millis(100));
        }
        wl.stop();
        worker.join()
    })
    .map_err(|_| anyhow!("a workload thread panicked"))?;
    for v in &end.violations {
        pipe.send(&Msg::Violation(v.clone()));
    }
    if let Some(e) = &end.write_error {
        pipe.send(&Msg::Failure(format!("a write failed: {e}")));
    }
    Ok(end.violations.is_empty() && end.write_error.is_none())
}

/// Forwards the parent's cut request from stdin (a detached thread: a blocking read of
/// stdin cannot be interrupted, and the process ends by SIGKILL or exit anyway).
fn cut_requests() -> Receiver<()> {
    let (tx, rx) = channel();
    let spawned = std::thread::Builder::new()
        .name("stress:stdin".into())
        .spawn(move || {
            let mut line = String::new();
            if std::io::stdin()
                .lock()
                .read_line(&mut line)
                .is_ok_and(|n| n > 0)
            {
                let _ = tx.send(());
            }
        });
    // NOTE: without the thread no cut is ever requested; the parent then reports a stall.
    drop(spawned);
    rx
}

/// The power-loss cutter: waits for the parent's request, then cuts the power while the
/// workers run.
fn cutter(
    wl: &Workload<'_>,
    store: &InjectedStore,
    params: &RoundParams,
    image: &Path,
    pipe: &Pipe,
) {
    let requests = cut_requests();
    loop {
        if wl.stopped() {
            return;
        }
        match requests.recv_timeout(Duration::from_millis(20)) {
            Ok(()) => break,
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
    pipe.send(&Msg::CutStarted);
    wl.mark_crashed();
    match cut_power(store, params, image) {
        Ok(()) => pipe.send(&Msg::CutDone),
        Err(e) => pipe.fail("cutting the power", &e),
    }
}
