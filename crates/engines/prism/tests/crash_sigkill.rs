//! Process crash (DESIGN §4, failure model 1): a child process (this test binary re-run
//! with `TIERKV_PRISM_CHILD` set) writes from several threads to a store whose pool is in
//! Volatile mode, printing an intent line before and an acknowledgement line after every
//! operation; the parent SIGKILLs it at a random moment, reopens the store and checks that
//! every acknowledged write is there and nothing else changed. Three kill/reopen cycles
//! run on the same store, so recovery of a recovered store is covered too.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{Rig, assert_check};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv_core::{DurabilityMode, KvStore};
use tierkv_testkit::rig::run_until_killed;

const SPEC: &str = "prism@pwb_count=4,pwb_size=64KiB,chunk_size=16KiB,svc_size=64KiB";
const CHILD_ENV: &str = "TIERKV_PRISM_CHILD";
const THREADS: u64 = 3;
const KEYS: u64 = 150;

fn rig_at(dir: &Path) -> Rig {
    let mut rig = Rig::at(dir, SPEC, 16, 8);
    rig.mode = DurabilityMode::Volatile;
    rig
}

fn key(t: u64, n: u64) -> Vec<u8> {
    format!("t{t}/{n:04}").into_bytes()
}

/// The value of operation `seq` of thread `t` (`None`: a delete).
fn value(t: u64, seq: u64) -> Option<Vec<u8>> {
    if seq.is_multiple_of(11) {
        return None;
    }
    let mut v = format!("t{t}:{seq}:").into_bytes();
    v.resize(v.len() + (seq as usize * 131) % 1500, b'x');
    Some(v)
}

/// The child: writes until killed. Sequence numbers continue from `start`.
#[test]
fn sigkill_child_entry() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let start: u64 = std::env::var("TIERKV_PRISM_CHILD_START")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let rig = rig_at(Path::new(&dir));
    let store = if rig.pool_path().exists() {
        rig.reopen().unwrap()
    } else {
        rig.create()
    };
    let out = std::sync::Mutex::new(std::io::stdout());
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (store, out) = (&store, &out);
            s.spawn(move || {
                let mut rng = ChaCha8Rng::seed_from_u64(start ^ t);
                for seq in start.. {
                    let n = rng.random_range(0..KEYS);
                    let k = key(t, n);
                    writeln!(out.lock().unwrap(), "I {t} {n} {seq}").unwrap();
                    match value(t, seq) {
                        Some(v) => store.put(&k, &v).unwrap(),
                        None => store.delete(&k).unwrap(),
                    }
                    let mut o = out.lock().unwrap();
                    writeln!(o, "A {t} {n} {seq}").unwrap();
                    o.flush().unwrap();
                }
            });
        }
    });
}

/// Per (thread, key): the last acknowledged seq, and the seq in flight.
#[derive(Default)]
struct Expect {
    acked: BTreeMap<(u64, u64), u64>,
    in_flight: BTreeMap<u64, (u64, u64)>,
}

fn run_child(dir: &Path, start: u64, kill_after: Duration, expect: &mut Expect) -> u64 {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "sigkill_child_entry",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_ENV, dir)
    .env("TIERKV_PRISM_CHILD_START", start.to_string());
    let lines = run_until_killed(cmd, kill_after, 201, |l| l.starts_with("A "));
    let mut acks = 0u64;
    let mut max_seq = start;
    for line in &lines {
        let f: Vec<&str> = line.split(' ').collect();
        let [kind, t, n, seq] = f.as_slice() else {
            continue;
        };
        let (t, n, seq): (u64, u64, u64) =
            (t.parse().unwrap(), n.parse().unwrap(), seq.parse().unwrap());
        max_seq = max_seq.max(seq);
        match *kind {
            "I" => {
                expect.in_flight.insert(t, (n, seq));
            }
            "A" => {
                expect.acked.insert((t, n), seq);
                expect.in_flight.remove(&t);
                acks += 1;
            }
            _ => {}
        }
    }
    eprintln!("child killed after {acks} acknowledged operations");
    max_seq + 1
}

fn verify(store: &dyn KvStore, expect: &Expect) {
    for t in 0..THREADS {
        for n in 0..KEYS {
            let got = store.get(&key(t, n)).unwrap();
            let acked = expect.acked.get(&(t, n)).and_then(|s| value(t, *s));
            let flight = expect
                .in_flight
                .get(&t)
                .filter(|(fk, _)| *fk == n)
                .map(|(_, s)| value(t, *s));
            assert!(
                got == acked || flight.as_ref() == Some(&got),
                "t{t}/{n}: got {:?}, acknowledged {:?}",
                got.map(|v| String::from_utf8_lossy(&v[..v.len().min(20)]).into_owned()),
                acked.map(|v| String::from_utf8_lossy(&v[..v.len().min(20)]).into_owned()),
            );
        }
    }
}

#[test]
fn sigkill_under_load_loses_no_acknowledged_write() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    // A hang (in a child or in a recovery here) fails with its stacks, never stalls CI.
    let _watchdog = tierkv_testkit::rig::watchdog(
        "sigkill_under_load_loses_no_acknowledged_write",
        Duration::from_secs(900),
    );
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let seed = std::env::var("TIERKV_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(42u64);
    eprintln!("sigkill seed {seed}");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut expect = Expect::default();
    let mut start = 0;
    for _cycle in 0..3 {
        let after = Duration::from_millis(rng.random_range(200..1200));
        start = run_child(tmp.path(), start, after, &mut expect);
        let store = rig_at(tmp.path()).reopen().unwrap();
        verify(&*store, &expect);
        assert_check(&*store);
        // Settle the in-flight operations to what recovery decided.
        for (t, (n, s)) in std::mem::take(&mut expect.in_flight) {
            let got = store.get(&key(t, n)).unwrap();
            if got == value(t, s) {
                expect.acked.insert((t, n), s);
            }
        }
    }
}
