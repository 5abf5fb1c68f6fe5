//! `kill` mode (issue 5, item 3; DESIGN §4, failure 1): a child process runs the workload
//! against the real data directory and tells the parent about every write over a pipe; the
//! parent SIGKILLs it at a random moment, reopens the store, verifies every key, and repeats
//! on the same directory (so a recovered store is crashed and recovered again).
//!
//! # The child
//! The child is the same executable ([`std::env::current_exe`]) re-run with the parent's own
//! arguments plus the hidden `--kill-child <work dir>`, so it works under `tierkv stress`
//! and under `tierkv-stress` alike. It reads the expected state and the round's parameters
//! from the work directory, opens the store, says `ready`, and runs the workload; its reads
//! are checked as in every mode, and a violation or an engine error is reported to the
//! parent before the child exits on its own.
//!
//! # The pipe protocol (the child's stdout; one line per message, each written with one
//! `write(2)` of at most `PIPE_BUF` bytes, so lines never interleave)
//! ```text
//! @tks ready                      the store is open, the workload starts
//! @tks P <key> <version> <0|1>    about to write (1: a delete)       — before the call
//! @tks A <key> <version> <0|1>    acknowledged                       — after it returned
//! @tks BP <key>:<version>:<0|1> ...   a write batch about to be applied — before the call
//! @tks BA <key>:<version>:<0|1> ...   the batch acknowledged               — after it returned
//! @tks N <puts> <deletes> <gets> <scans>   operation counters (every 100 ms)
//! @tks M                          power-loss kill: the crash image is being taken now
//! @tks C                          power-loss kill: the crash image is written
//! @tks V <context>\t<key>\t<expected>\t<found>   a violation seen by a read
//! @tks F <message>                an engine error (the child then exits)
//! ```
//! Other lines (an engine printing to stdout) are passed to stderr. A write is announced
//! before the engine is called and acknowledged after it returned, so at the kill the
//! parent knows every acknowledged write (it must survive) and every write in flight (it
//! may or may not, but whole).
//!
//! # Power-loss kill (`--pmem-mode tracked`)
//! A SIGKILL does not lose the pool's unpersisted stores in Msync/Volatile mode (the page
//! cache survives the process), so it cannot catch a missing persist. With a Tracked pool
//! the kill simulates a power loss instead: at the random moment the parent asks the child
//! (a line on its stdin) to cut the power; the child's cutter thread says `M`, crashes its
//! flash devices (unsynced writes dropped or torn), writes the pool's crash image (an
//! instant: the Tracked pool blocks its mutations while the image is built) and says `C`
//! while the workers keep writing; the parent then SIGKILLs the child and installs the
//! image as the pool. Acknowledgements that reach the parent after `M` are not counted:
//! those writes may have been persisted after the image's instant. The Tracked shadow lives
//! in the child's memory, which is why the child builds the image (see the README for the
//! sidecar-shadow alternative that would let the parent build it after a plain SIGKILL).
//!
//! Files: this one is the parent; `kill/protocol.rs` the round parameters and the message
//! lines; `kill/child.rs` the child.
//!
//! Thread safety: the parent runs on the caller's thread plus one pipe-reader thread per
//! round; the child runs its workload threads, a counter thread and (power loss) a cutter
//! thread.

mod child;
mod protocol;

use std::ffi::OsString;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv::{DurabilityMode, Manifest, Tier};

use self::protocol::{Msg, RoundLog, RoundParams, parse_msg};
use super::{RunConfig, ms, remove_path};
use crate::expected_state::ExpectedState;
use crate::report::RunReport;
use crate::verify::{unrecoverable, verify_store};

pub use self::child::child_main;

/// How long the child may take to open (recover) the store.
const READY_TIMEOUT: Duration = Duration::from_secs(300);
/// How long the child may take to write a crash image.
const CUT_TIMEOUT: Duration = Duration::from_secs(300);

/// Checks that the engine and the pool mode make sense for kill mode.
pub fn check_engine(cfg: &RunConfig) -> anyhow::Result<()> {
    if cfg.pmem_mode == Some(DurabilityMode::Dax) {
        bail!("kill mode runs the pool in msync, volatile or tracked mode, not dax");
    }
    Ok(())
}

/// The places of a kill-mode run.
#[derive(Clone, Debug)]
pub(super) struct KillPaths {
    pub(super) data: PathBuf,
    state: PathBuf,
    round: PathBuf,
    image: PathBuf,
    pub(super) pmem_dir: PathBuf,
    pub(super) flash: PathBuf,
}

impl KillPaths {
    pub(super) fn new(cfg: &RunConfig) -> KillPaths {
        let w = &cfg.work_dir;
        let data = w.join("data");
        let name = super::run_name(cfg);
        let pmem_dir = cfg
            .tiers
            .pmem_dir
            .as_ref()
            .map_or_else(|| data.clone(), |d| d.join(&name));
        KillPaths {
            state: w.join("expected.state"),
            round: w.join("round"),
            // NOTE: beside the pool, so that installing it is a rename on one file system.
            image: pmem_dir.join("crash-image.pool"),
            pmem_dir,
            flash: cfg
                .tiers
                .flash_dir
                .as_ref()
                .map_or_else(|| data.join("flash"), |d| d.join(&name)),
            data,
        }
    }

    /// The pool file, where the facade puts it.
    fn pool(&self) -> PathBuf {
        self.pmem_dir.join("pmem.pool")
    }
}

fn power_loss(cfg: &RunConfig) -> bool {
    cfg.pmem_mode == Some(DurabilityMode::Tracked)
}

/// The pool mode the parent opens the store with to verify it.
pub(super) fn verify_mode(cfg: &RunConfig) -> DurabilityMode {
    match cfg.pmem_mode {
        None | Some(DurabilityMode::Tracked) => DurabilityMode::Msync,
        Some(m) => m,
    }
}

/// A running child and the channel of its messages.
struct ChildProc {
    child: Child,
    rx: Receiver<Msg>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Drop for ChildProc {
    /// A child left behind by an early return is killed and reaped, never orphaned.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ChildProc {
    fn spawn(work: &Path) -> anyhow::Result<ChildProc> {
        let exe = std::env::current_exe().context("finding the current executable")?;
        let mut args: Vec<OsString> = std::env::args_os().skip(1).collect();
        args.push("--kill-child".into());
        args.push(work.as_os_str().to_owned());
        let mut child = Command::new(&exe)
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting the child {}", exe.display()))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow!("the child has no stdout pipe"))?;
        let (tx, rx) = channel();
        let reader = std::thread::Builder::new()
            .name("stress:pipe".into())
            .spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(parse_msg(&line)).is_err() {
                        break;
                    }
                }
            })
            .context("starting the pipe reader")?;
        Ok(ChildProc {
            child,
            rx,
            reader: Some(reader),
        })
    }

    /// Applies messages until `until` is true or `deadline`; false if the pipe closed
    /// (the child exited) first.
    fn pump(
        &self,
        log: &mut RoundLog,
        state: &ExpectedState,
        deadline: Instant,
        until: impl Fn(&RoundLog) -> bool,
    ) -> PumpEnd {
        loop {
            if until(log) {
                return PumpEnd::Condition;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(msg) => log.apply(state, msg),
                Err(RecvTimeoutError::Timeout) => return PumpEnd::Deadline,
                Err(RecvTimeoutError::Disconnected) => return PumpEnd::Exited,
            }
        }
    }

    /// SIGKILLs the child, applies what it wrote before dying, and reaps it.
    fn kill_and_drain(&mut self, log: &mut RoundLog, state: &ExpectedState) -> anyhow::Result<()> {
        // NOTE: kill() fails only if the child already exited, which the drain shows.
        let _ = self.child.kill();
        for msg in self.rx.iter() {
            log.apply(state, msg);
        }
        if let Some(reader) = self.reader.take() {
            reader
                .join()
                .map_err(|_| anyhow!("the pipe reader panicked"))?;
        }
        self.child.wait().context("reaping the child")?;
        Ok(())
    }

    /// Asks a power-loss child to cut the power now.
    fn request_cut(&mut self) -> anyhow::Result<()> {
        let stdin = self
            .child
            .stdin
            .as_mut()
            .ok_or_else(|| anyhow!("the child has no stdin pipe"))?;
        stdin
            .write_all(b"cut\n")
            .context("asking the child to cut the power")?;
        stdin.flush().context("asking the child to cut the power")
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PumpEnd {
    Condition,
    Deadline,
    Exited,
}

/// Runs kill mode (the parent).
pub fn run(cfg: &RunConfig, report: &mut RunReport) -> anyhow::Result<()> {
    let paths = KillPaths::new(cfg);
    fs::create_dir_all(&paths.data)
        .with_context(|| format!("creating {}", paths.data.display()))?;
    fs::create_dir_all(&paths.pmem_dir)
        .with_context(|| format!("creating {}", paths.pmem_dir.display()))?;
    let state = cfg.new_state();
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let mut round = 0u64;
    while cfg.budget.more(round) {
        round += 1;
        let params = RoundParams {
            round,
            seed: rng.random(),
            image_seed: rng.random(),
            tear_words: rng.random_bool(cfg.tear_fraction),
            flash_tear: rng.random_bool(0.5).then(|| rng.random()),
        };
        let delay = cfg.crash_delay(&mut rng);
        if !parent_round(cfg, &paths, &state, params, delay, report)? {
            return Ok(());
        }
    }
    if report.passed() {
        if cfg.tiers.pmem_dir.is_some() {
            remove_path(&paths.pmem_dir)?;
        }
        if cfg.tiers.flash_dir.is_some() {
            remove_path(&paths.flash)?;
        }
    }
    Ok(())
}

/// One kill round on the store of `cfg`'s work directory (closed by the caller), as
/// [`run`] makes them: space mode SIGKILLs a child mid-fill this way. False when the run
/// must stop (the report says why); a passing round is counted in `report.rounds`.
pub(super) fn kill_round(
    cfg: &RunConfig,
    state: &ExpectedState,
    round: u64,
    rng: &mut ChaCha8Rng,
    report: &mut RunReport,
) -> anyhow::Result<bool> {
    let paths = KillPaths::new(cfg);
    let params = RoundParams {
        round,
        seed: rng.random(),
        image_seed: rng.random(),
        tear_words: rng.random_bool(cfg.tear_fraction),
        flash_tear: rng.random_bool(0.5).then(|| rng.random()),
    };
    let delay = cfg.crash_delay(rng);
    parent_round(cfg, &paths, state, params, delay, report)
}

/// One round of the parent; false when the run must stop (the report says why).
fn parent_round(
    cfg: &RunConfig,
    paths: &KillPaths,
    state: &ExpectedState,
    params: RoundParams,
    delay: Duration,
    report: &mut RunReport,
) -> anyhow::Result<bool> {
    let round = params.round;
    fs::write(&paths.state, state.encode()).context("writing the expected state")?;
    fs::write(&paths.round, params.encode()).context("writing the round parameters")?;
    remove_path(&paths.image)?;
    let mut child = ChildProc::spawn(&cfg.work_dir)?;
    let mut log = RoundLog::default();
    let ready = child.pump(&mut log, state, Instant::now() + READY_TIMEOUT, |l| l.ready);
    let mut how = format!("SIGKILL after {:.0} ms", ms(delay));
    let mut killed_in_time = ready == PumpEnd::Condition;
    if killed_in_time {
        let running = child.pump(&mut log, state, Instant::now() + delay, |l| {
            !l.violations.is_empty() || !l.failures.is_empty()
        });
        killed_in_time = running == PumpEnd::Deadline;
        if killed_in_time && power_loss(cfg) {
            child.request_cut()?;
            let cut = child.pump(&mut log, state, Instant::now() + CUT_TIMEOUT, |l| {
                l.cut_done
            });
            killed_in_time = cut == PumpEnd::Condition;
            how = format!(
                "power-loss kill after {:.0} ms ({})",
                ms(delay),
                describe_cut(cfg, &params)
            );
        }
    }
    child.kill_and_drain(&mut log, state)?;
    report.puts += log.acks.0;
    report.deletes += log.acks.1;
    report.batches += log.batch_acks.0;
    report.batch_keys += log.batch_acks.1;
    for (sum, n) in report.field_ops.iter_mut().zip(log.field_acks) {
        *sum += n;
    }
    report.gets += log.counts[2];
    report.scans += log.counts[3];
    report.field_ops[5] += log.counts[4];
    report.field_ops[6] += log.counts[5];
    report.field_ops[4] += log.counts[6];
    if !log.violations.is_empty() || !log.failures.is_empty() || !killed_in_time {
        report.add_violations(log.violations);
        for f in log.failures {
            report.fail(format!("round {round}: the child reported: {f}"));
        }
        if report.passed() {
            let stage = if log.ready {
                "while running"
            } else {
                "before the store was open"
            };
            report.fail(format!(
                "round {round}: the child exited or stalled {stage}"
            ));
        }
        return Ok(false);
    }
    if power_loss(cfg) {
        install_image(paths)?;
        report.crash_images += u64::from(cfg.target.uses(Tier::Pmem));
        report.torn_images += u64::from(cfg.target.uses(Tier::Pmem) && params.tear_words);
        report.flash_crashes += u64::from(cfg.target.uses(Tier::Flash));
    }
    verify_round(cfg, paths, state, round, &how, report)
}

fn describe_cut(cfg: &RunConfig, p: &RoundParams) -> String {
    let mut parts = Vec::new();
    if cfg.target.uses(Tier::Pmem) {
        parts.push(if p.tear_words {
            "pmem image with torn words"
        } else {
            "pmem image by lines"
        });
    }
    if cfg.target.uses(Tier::Flash) {
        parts.push(if p.flash_tear.is_some() {
            "unsynced flash writes torn"
        } else {
            "unsynced flash writes dropped"
        });
    }
    parts.join(", ")
}

/// Puts the power-loss crash image where the pool was.
fn install_image(paths: &KillPaths) -> anyhow::Result<()> {
    let Some(m) = Manifest::read_from(&paths.data)? else {
        bail!(
            "the store in {} has no manifest after the power cut",
            paths.data.display()
        );
    };
    if let Some(p) = &m.pmem {
        fs::rename(&paths.image, &p.path).with_context(|| {
            format!(
                "installing the crash image {} as {}",
                paths.image.display(),
                p.path.display()
            )
        })?;
    }
    Ok(())
}

/// Reopens the killed store in the parent, verifies it and closes it.
fn verify_round(
    cfg: &RunConfig,
    paths: &KillPaths,
    state: &ExpectedState,
    round: u64,
    how: &str,
    report: &mut RunReport,
) -> anyhow::Result<bool> {
    let options = cfg.target.options(
        &cfg.tiers,
        verify_mode(cfg),
        Some(&paths.pmem_dir),
        Some(&paths.flash),
        None,
    );
    let t0 = Instant::now();
    let db = match cfg.target.open(&paths.data, options) {
        Ok(db) => db,
        Err(e) => {
            let ctx = format!("recovery after round {round}: {how}");
            report.add_violations(vec![unrecoverable(&ctx, &paths.data, &e)]);
            return Ok(false);
        }
    };
    let took = t0.elapsed();
    report.add_recovery(took, db.stats().recovery_micros);
    let ctx = format!("recovery after round {round}: {how}");
    let v = verify_store(&db, state, &cfg.workload.sizes, &ctx, true);
    let line = format!(
        "round {round}: {how}; recovered in {:.2} ms, {} keys verified, {} in flight ({} applied)",
        ms(took),
        v.keys_verified,
        v.in_flight,
        v.in_flight_applied
    );
    report.add_verify(v);
    if let Err(e) = db.close() {
        report.fail(format!("round {round}: closing the verified store: {e}"));
    }
    drop(db);
    if !report.passed() {
        return Ok(false);
    }
    report.rounds += 1;
    if cfg.verbose {
        println!("{line}");
    }
    Ok(true)
}
