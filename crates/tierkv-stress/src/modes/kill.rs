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
//! Thread safety: the parent runs on the caller's thread plus one pipe-reader thread per
//! round; the child runs its workload threads, a counter thread and (power loss) a cutter
//! thread.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv::core::media::flash::CrashMode;
use tierkv::core::media::pmem::CrashImageOptions;
use tierkv::{DurabilityMode, Manifest, Tier};

use super::media::{InjectedStore, MediaPaths, open_injected};
use super::{RunConfig, ms, remove_path};
use crate::cli::StressArgs;
use crate::expected_state::ExpectedState;
use crate::report::RunReport;
use crate::verify::{Violation, unrecoverable, verify_store};
use crate::workload::{Workload, WorkloadConfig, WriteObserver};

const PREFIX: &str = "@tks ";
/// How long the child may take to open (recover) the store.
const READY_TIMEOUT: Duration = Duration::from_secs(300);
/// How long the child may take to write a crash image.
const CUT_TIMEOUT: Duration = Duration::from_secs(300);
/// A child never outlives this (in case its parent vanished without killing it).
const CHILD_MAX_LIFETIME: Duration = Duration::from_secs(3600);
/// Longest message line (stays under `PIPE_BUF`, so one write is atomic).
const MAX_LINE: usize = 3500;

/// Checks that the engine and the pool mode make sense for kill mode.
pub fn check_engine(cfg: &RunConfig) -> anyhow::Result<()> {
    if cfg.pmem_mode == Some(DurabilityMode::Dax) {
        bail!("kill mode runs the pool in msync, volatile or tracked mode, not dax");
    }
    Ok(())
}

/// The places of a kill-mode run.
#[derive(Clone, Debug)]
struct KillPaths {
    data: PathBuf,
    state: PathBuf,
    round: PathBuf,
    image: PathBuf,
    pmem_dir: PathBuf,
    flash: PathBuf,
}

impl KillPaths {
    fn new(cfg: &RunConfig) -> KillPaths {
        let w = &cfg.work_dir;
        let data = w.join("data");
        let name = w
            .file_name()
            .map_or_else(|| "stress".to_owned(), |n| n.to_string_lossy().into_owned());
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

/// What the child needs to know about its round, written by the parent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RoundParams {
    round: u64,
    seed: u64,
    image_seed: u64,
    tear_words: bool,
    /// `None`: unsynced flash writes dropped whole; `Some(seed)`: torn.
    flash_tear: Option<u64>,
}

impl RoundParams {
    fn encode(&self) -> String {
        format!(
            "round={}\nseed={}\nimage_seed={}\ntear_words={}\nflash_tear={}\n",
            self.round,
            self.seed,
            self.image_seed,
            u8::from(self.tear_words),
            self.flash_tear.map_or("none".to_owned(), |s| s.to_string())
        )
    }

    fn decode(text: &str) -> Option<RoundParams> {
        let mut p = RoundParams {
            round: 0,
            seed: 0,
            image_seed: 0,
            tear_words: false,
            flash_tear: None,
        };
        let mut seen = 0;
        for line in text.lines() {
            let (k, v) = line.split_once('=')?;
            match k {
                "round" => p.round = v.parse().ok()?,
                "seed" => p.seed = v.parse().ok()?,
                "image_seed" => p.image_seed = v.parse().ok()?,
                "tear_words" => p.tear_words = v == "1",
                "flash_tear" if v == "none" => p.flash_tear = None,
                "flash_tear" => p.flash_tear = Some(v.parse().ok()?),
                _ => return None,
            }
            seen += 1;
        }
        (seen == 5).then_some(p)
    }

    fn flash_mode(&self) -> CrashMode {
        match self.flash_tear {
            None => CrashMode::DropUnsynced,
            Some(seed) => CrashMode::TearUnsynced { seed },
        }
    }
}

fn power_loss(cfg: &RunConfig) -> bool {
    cfg.pmem_mode == Some(DurabilityMode::Tracked)
}

/// The pool mode the parent opens the store with to verify it.
fn verify_mode(cfg: &RunConfig) -> DurabilityMode {
    match cfg.pmem_mode {
        None | Some(DurabilityMode::Tracked) => DurabilityMode::Msync,
        Some(m) => m,
    }
}

// ---------------------------------------------------------------------------------------
// The parent.
// ---------------------------------------------------------------------------------------

/// One message from the child.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Msg {
    Ready,
    Announce { id: u32, version: u32, delete: bool },
    Ack { id: u32, version: u32, delete: bool },
    Counts([u64; 4]),
    CutStarted,
    CutDone,
    Violation(Violation),
    Failure(String),
    Other(String),
}

fn parse_write(rest: &str) -> Option<(u32, u32, bool)> {
    let mut it = rest.split(' ');
    let id = it.next()?.parse().ok()?;
    let version = it.next()?.parse().ok()?;
    let delete = match it.next()? {
        "0" => false,
        "1" => true,
        _ => return None,
    };
    it.next().is_none().then_some((id, version, delete))
}

fn parse_msg(line: &str) -> Msg {
    let other = || Msg::Other(line.to_owned());
    let Some(body) = line.strip_prefix(PREFIX) else {
        return other();
    };
    let (tag, rest) = body.split_once(' ').unwrap_or((body, ""));
    match tag {
        "ready" => Msg::Ready,
        "M" => Msg::CutStarted,
        "C" => Msg::CutDone,
        "P" | "A" => match parse_write(rest) {
            Some((id, version, delete)) if tag == "P" => Msg::Announce {
                id,
                version,
                delete,
            },
            Some((id, version, delete)) => Msg::Ack {
                id,
                version,
                delete,
            },
            None => other(),
        },
        "N" => {
            let n: Vec<u64> = rest.split(' ').filter_map(|x| x.parse().ok()).collect();
            match n[..] {
                [a, b, c, d] => Msg::Counts([a, b, c, d]),
                _ => other(),
            }
        }
        "V" => {
            let f: Vec<&str> = rest.splitn(4, '\t').collect();
            match f[..] {
                [context, key, expected, found] => Msg::Violation(Violation {
                    context: format!("child: {context}"),
                    key: key.to_owned(),
                    expected: expected.to_owned(),
                    found: found.to_owned(),
                }),
                _ => other(),
            }
        }
        "F" => Msg::Failure(rest.to_owned()),
        _ => other(),
    }
}

/// The parent's view of one round.
#[derive(Default)]
struct RoundLog {
    ready: bool,
    cut_started: bool,
    cut_done: bool,
    acks: (u64, u64),
    counts: [u64; 4],
    violations: Vec<Violation>,
    failures: Vec<String>,
}

impl RoundLog {
    /// Applies one message to the expected state.
    fn apply(&mut self, state: &ExpectedState, msg: Msg) {
        let in_range = |id: u32| id < state.space().count();
        match msg {
            Msg::Ready => self.ready = true,
            Msg::Announce {
                id,
                version,
                delete,
            } if in_range(id) => {
                state.announce_known(id, version, delete);
            }
            // IMPORTANT: after the cut started, an acknowledgement may come from a write
            // persisted after the image's instant: it stays in flight.
            Msg::Ack {
                id,
                version,
                delete,
            } if in_range(id) && !self.cut_started => {
                state.commit_known(id, version, delete);
                if delete {
                    self.acks.1 += 1;
                } else {
                    self.acks.0 += 1;
                }
            }
            Msg::Ack { .. } => {}
            Msg::Counts(c) => self.counts = c,
            Msg::CutStarted => self.cut_started = true,
            Msg::CutDone => self.cut_done = true,
            Msg::Violation(v) => self.violations.push(v),
            Msg::Failure(f) => self.failures.push(f),
            Msg::Announce { id, .. } => self.failures.push(format!(
                "the child announced a write to key number {id}, outside the key space"
            )),
            Msg::Other(line) => eprintln!("child: {line}"),
        }
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
    let state = ExpectedState::new(cfg.space);
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
    report.gets += log.counts[2];
    report.scans += log.counts[3];
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

// ---------------------------------------------------------------------------------------
// The child.
// ---------------------------------------------------------------------------------------

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

    /// Sends one line; a parent that is gone ends the child.
    fn say(&self, line: &str) {
        let mut msg = String::with_capacity(line.len() + PREFIX.len() + 1);
        msg.push_str(PREFIX);
        msg.push_str(line);
        if msg.len() > MAX_LINE {
            let mut cut = MAX_LINE;
            while !msg.is_char_boundary(cut) {
                cut -= 1;
            }
            msg.truncate(cut);
        }
        msg.push('\n');
        if (&self.0).write_all(msg.as_bytes()).is_err() {
            // The parent is gone: nobody is listening, and nobody will verify.
            std::process::exit(3);
        }
    }
}

impl WriteObserver for Pipe {
    fn announce(&self, id: u32, version: u32, delete: bool) {
        self.say(&format!("P {id} {version} {}", u8::from(delete)));
    }
    fn acked(&self, id: u32, version: u32, delete: bool) {
        self.say(&format!("A {id} {version} {}", u8::from(delete)));
    }
}

fn one_line(s: &str) -> String {
    s.replace(['\n', '\t'], " ")
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
        .ok_or_else(|| anyhow!("kill child: no expected state in {}", paths.state.display()))?;
    let store = match open_child_store(&cfg, &paths) {
        Ok(s) => s,
        Err(e) => {
            pipe.say(&format!(
                "F opening the store: {}",
                one_line(&format!("{e:#}"))
            ));
            return Ok(false);
        }
    };
    pipe.say("ready");
    let wl_cfg = WorkloadConfig {
        seed: params.seed,
        ..cfg.workload.clone()
    };
    let wl = Workload::new(
        &store.db,
        &state,
        wl_cfg,
        &pipe,
        format!("round {}", params.round),
    );
    let end = std::thread::scope(|s| {
        let worker = s.spawn(|| wl.run());
        if power_loss(&cfg) {
            s.spawn(|| cutter(&wl, &store, &params, &paths.image, &pipe));
        }
        let born = Instant::now();
        while !wl.stopped() && born.elapsed() < CHILD_MAX_LIFETIME {
            let c = &wl.counts;
            pipe.say(&format!(
                "N {} {} {} {}",
                c.puts.get(),
                c.deletes.get(),
                c.gets.get(),
                c.scans.get()
            ));
            std::thread::sleep(Duration::from_millis(100));
        }
        wl.stop();
        worker.join()
    })
    .map_err(|_| anyhow!("a workload thread panicked"))?;
    for v in &end.violations {
        pipe.say(&format!(
            "V {}\t{}\t{}\t{}",
            one_line(&v.context),
            one_line(&v.key),
            one_line(&v.expected),
            one_line(&v.found)
        ));
    }
    if let Some(e) = &end.write_error {
        pipe.say(&format!("F a write failed: {}", one_line(e)));
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
    pipe.say("M");
    wl.mark_crashed();
    match cut_power(store, params, image) {
        Ok(()) => pipe.say("C"),
        Err(e) => pipe.say(&format!(
            "F cutting the power: {}",
            one_line(&format!("{e:#}"))
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expected_state::KeySpace;

    #[test]
    fn messages_parse_and_garbage_is_passed_through() {
        assert_eq!(parse_msg("@tks ready"), Msg::Ready);
        assert_eq!(
            parse_msg("@tks P 3 17 1"),
            Msg::Announce {
                id: 3,
                version: 17,
                delete: true
            }
        );
        assert_eq!(
            parse_msg("@tks A 3 17 0"),
            Msg::Ack {
                id: 3,
                version: 17,
                delete: false
            }
        );
        assert_eq!(parse_msg("@tks N 1 2 3 4"), Msg::Counts([1, 2, 3, 4]));
        let v = parse_msg("@tks V round 1, get\tk00000001\tv#2 (acknowledged)\tabsent");
        let Msg::Violation(v) = v else {
            panic!("{v:?}")
        };
        assert_eq!(v.key, "k00000001");
        assert_eq!(v.found, "absent");
        for junk in [
            "hello",
            "@tks P 3",
            "@tks P 3 x 0",
            "@tks A 1 2 3",
            "@tks N 1 2",
            "@tks Q",
        ] {
            assert_eq!(parse_msg(junk), Msg::Other(junk.to_owned()), "{junk}");
        }
    }

    #[test]
    fn acks_after_the_cut_started_stay_in_flight() {
        let state = ExpectedState::new(KeySpace::new(4));
        let mut log = RoundLog::default();
        for m in [
            "@tks P 1 1 0",
            "@tks A 1 1 0",
            "@tks P 1 2 0",
            "@tks M",
            "@tks A 1 2 0",
            "@tks P 1 3 1",
        ] {
            log.apply(&state, parse_msg(m));
        }
        let s = state.load(1);
        assert_eq!((s.committed, s.max_issued), (1, 3));
        assert!(s.pending.is_some_and(|p| p.delete));
        assert_eq!(log.acks, (1, 0));
    }

    #[test]
    fn out_of_range_keys_from_the_child_are_failures() {
        let state = ExpectedState::new(KeySpace::new(4));
        let mut log = RoundLog::default();
        log.apply(&state, parse_msg("@tks P 99 1 0"));
        assert_eq!(log.failures.len(), 1);
    }

    #[test]
    fn round_params_round_trip() {
        for p in [
            RoundParams {
                round: 3,
                seed: u64::MAX,
                image_seed: 7,
                tear_words: true,
                flash_tear: Some(9),
            },
            RoundParams {
                round: 1,
                seed: 0,
                image_seed: 0,
                tear_words: false,
                flash_tear: None,
            },
        ] {
            assert_eq!(RoundParams::decode(&p.encode()), Some(p));
        }
        assert_eq!(RoundParams::decode("round=1\n"), None);
        assert_eq!(RoundParams::decode("bogus"), None);
    }
}
