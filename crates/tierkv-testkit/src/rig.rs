//! The small pieces every engine's integration tests need: a scratch directory on tmpfs, a
//! printed (and replayable) seed, and pmem pools of a given size and durability mode.
//!
//! Test helpers: they panic (failing the test) on errors instead of returning them.

#![allow(clippy::unwrap_used, reason = "test helpers fail the test on errors")]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tierkv_core::media::pmem::{DurabilityMode, EmulatedLatency, PmemConfig, PmemPool};

/// A scratch directory, on /dev/shm when it exists (pools there cost no disk I/O).
pub fn scratch_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(d) = tempfile::tempdir_in(shm)
    {
        return d;
    }
    tempfile::tempdir().expect("temp dir")
}

/// The seed of a random test, printed either way so a failure can be replayed:
/// - `TIERKV_SEED` (or the older name `TIERKV_TEST_SEED`) if set;
/// - else, when `TIERKV_FIXED_SEEDS` is set (CI sets it: a CI run must be reproducible), a
///   seed derived from the test's name, the same on every run;
/// - else a fresh random seed (local runs explore new cases every time).
pub fn seed(test: &str) -> u64 {
    let seed = env_seed().unwrap_or_else(|| {
        if fixed_seeds() {
            fixed_seed(test)
        } else {
            rand::random()
        }
    });
    println!("{test}: seed {seed} (replay with TIERKV_SEED={seed})");
    seed
}

/// The seed given in the environment (`TIERKV_SEED`, or the older `TIERKV_TEST_SEED`).
pub fn env_seed() -> Option<u64> {
    ["TIERKV_SEED", "TIERKV_TEST_SEED"]
        .iter()
        .find_map(|v| std::env::var(v).ok().and_then(|s| s.trim().parse().ok()))
}

/// Whether this run asks for fixed seeds (`TIERKV_FIXED_SEEDS` set and not `0`).
pub fn fixed_seeds() -> bool {
    std::env::var("TIERKV_FIXED_SEEDS").is_ok_and(|v| v != "0" && !v.is_empty())
}

/// The fixed seed of `test`: FNV-1a of its name.
pub fn fixed_seed(test: &str) -> u64 {
    test.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A pool configuration without emulated latency.
pub fn config(path: impl Into<PathBuf>, size: u64, mode: DurabilityMode) -> PmemConfig {
    PmemConfig {
        path: path.into(),
        size,
        mode,
        latency: EmulatedLatency::default(),
    }
}

/// Creates a pool of `size` bytes at `path`.
pub fn create_pool(path: &Path, size: u64, mode: DurabilityMode) -> Arc<PmemPool> {
    PmemPool::create(&config(path, size, mode)).expect("create pool")
}

/// How long a child of [`run_until_killed`] may print nothing before it is judged hung.
pub const CHILD_STALL: Duration = Duration::from_secs(120);

/// Runs `cmd` (a child test process) with its stdout piped and returns the lines it
/// printed. Once `kill_after` has passed and at least `min_acks` lines satisfy `is_ack`,
/// the child is SIGKILLed; lines already in the pipe are still read (they were printed, so
/// what they acknowledge happened).
///
/// A child that prints nothing for [`CHILD_STALL`] has hung (every writer blocked): its
/// threads' stacks (by `gdb`, when there is one) and the end of its stderr are printed, it
/// is killed and the test fails — a hang is a defect to see, not a CI run that never ends.
pub fn run_until_killed(
    cmd: Command,
    kill_after: Duration,
    min_acks: usize,
    is_ack: impl Fn(&str) -> bool,
) -> Vec<String> {
    run_until_killed_or_stalled(cmd, kill_after, min_acks, is_ack, CHILD_STALL)
}

/// [`run_until_killed`] with the stall limit `stall` in place of [`CHILD_STALL`].
pub fn run_until_killed_or_stalled(
    mut cmd: Command,
    kill_after: Duration,
    min_acks: usize,
    is_ack: impl Fn(&str) -> bool,
    stall: Duration,
) -> Vec<String> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    // The child's stderr (a panic message, say), its last lines kept for a report.
    let err_tail = std::thread::spawn(move || {
        let mut tail = std::collections::VecDeque::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tail.len() == 40 {
                tail.pop_front();
            }
            tail.push_back(line);
        }
        tail.into_iter().collect::<Vec<_>>().join("\n")
    });
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let deadline = Instant::now() + kill_after;
    let (mut lines, mut acks, mut killed) = (Vec::new(), 0, false);
    let mut last_line = Instant::now();
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(line) => {
                acks += usize::from(is_ack(&line));
                lines.push(line);
                last_line = Instant::now();
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if !killed && last_line.elapsed() >= stall {
                    let stacks = thread_stacks(child.id());
                    let _ = child.kill();
                    let _ = child.wait();
                    let tail = err_tail.join().unwrap_or_default();
                    panic!(
                        "the child printed nothing for {stall:?} after {} lines ({acks} \
                         acknowledgements): it hung.\n--- its threads ---\n{stacks}\n\
                         --- the end of its stderr ---\n{tail}",
                        lines.len()
                    );
                }
            }
        }
        if !killed && Instant::now() >= deadline && acks >= min_acks {
            // SIGKILL: no chance to close anything.
            child.kill().unwrap();
            killed = true;
        }
    }
    let _ = reader.join();
    let _ = child.wait();
    let _ = err_tail.join();
    lines
}

/// The stacks of every thread of process `pid`, by `gdb` (bounded by `timeout`), or why
/// there are none (in parentheses).
pub fn thread_stacks(pid: u32) -> String {
    let out = Command::new("timeout")
        .args(["60", "gdb", "-batch", "-nx", "-p"])
        .arg(pid.to_string())
        .args(["-ex", "thread apply all bt"])
        .stdin(Stdio::null())
        .output();
    match out {
        // NOTE: gdb exits 0 even when it could not attach (ptrace refused): its output
        // then names no thread.
        Ok(o) if o.status.success() && o.stdout.windows(7).any(|w| w == b"Thread ") => {
            String::from_utf8_lossy(&o.stdout).into_owned()
        }
        Ok(o) => format!(
            "(gdb gave none: {}; {})",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => format!("(no stacks: gdb could not run: {e})"),
    }
}

/// A guard against a test that hangs: if it is not dropped within its limit, the stacks of
/// every thread of this process are printed (by `gdb`, when there is one) and the process
/// aborts, so a deadlock fails the run with its stacks instead of stalling it until CI's
/// limit. See [`watchdog`].
#[must_use = "the watchdog stands down when this guard is dropped"]
pub struct Watchdog {
    stand_down: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Starts a [`Watchdog`] for `what`, which must finish within `limit`.
pub fn watchdog(what: &str, limit: Duration) -> Watchdog {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let what = what.to_owned();
    let thread = std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(limit) {
            let stacks = thread_stacks(std::process::id());
            eprintln!(
                "{what}: not done after {limit:?}: hung.\n--- this process's threads ---\n{stacks}"
            );
            std::process::abort();
        }
    });
    Watchdog {
        stand_down: Some(tx),
        thread: Some(thread),
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.stand_down.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_that_stops_printing_is_reported_as_hung_and_killed() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo 'A 0 1'; echo stuck >&2; exec sleep 600"]);
        let started = Instant::now();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_until_killed_or_stalled(
                cmd,
                Duration::from_secs(600),
                1,
                |l| l.starts_with("A "),
                Duration::from_secs(1),
            )
        }));
        let message = *result
            .expect_err("a stalled child fails the test")
            .downcast::<String>()
            .unwrap();
        assert!(message.contains("it hung"), "{message}");
        assert!(message.contains("stuck"), "its stderr is shown: {message}");
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn a_child_is_killed_once_its_time_and_acknowledgements_are_there() {
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            "i=0; while true; do i=$((i+1)); echo \"A 0 $i\"; sleep 0.01; done",
        ]);
        let lines = run_until_killed(cmd, Duration::from_millis(200), 5, |l| l.starts_with("A "));
        assert!(lines.len() >= 5, "{}", lines.len());
    }

    #[test]
    fn stacks_of_this_process_name_its_threads_or_say_why_not() {
        let stacks = thread_stacks(std::process::id());
        if !stacks.starts_with('(') {
            // This thread and the harness's main thread at least.
            assert!(stacks.matches("\nThread ").count() >= 2, "{stacks}");
        }
    }
}
