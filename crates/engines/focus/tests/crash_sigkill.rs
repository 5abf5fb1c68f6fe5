//! Process crash under load (DESIGN §4, failure model 1): a child process (this test binary
//! re-run with `TIERKV_FOCUS_CHILD` set) updates two fields at a time of its threads' rows
//! (swim deltas, restore points, merges, SeaCache and GC all running), printing an intent
//! line before and an acknowledgement after each `update_fields`; the parent SIGKILLs it
//! at a random moment, recovers the store and checks every field: it holds its last
//! acknowledged value or the one of the update in flight, and the two fields of the update
//! in flight are both new or both old (`update_fields` is atomic). Three kill/recover
//! cycles on one store.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv_core::media::pmem::DurabilityMode;
use tierkv_core::{FieldDef, FieldSelection, KvStore, SchemaStore};

const CHILD_ENV: &str = "TIERKV_FOCUS_CHILD";
const EXTRA: &str = "chunk_size=64KiB,restore_point=4";
const THREADS: u64 = 3;
const ROWS: u64 = 20;
const FIELDS: u16 = 4;

fn row_key(t: u64, r: u64) -> Vec<u8> {
    format!("t{t}/r{r:02}").into_bytes()
}

fn field_value(seq: u64) -> Vec<u8> {
    let mut v = seq.to_le_bytes().to_vec();
    v.resize(16, b'.');
    v
}

/// The child: updates until killed; sequence numbers continue from `start`.
#[test]
fn sigkill_child_entry() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let start: u64 = std::env::var("TIERKV_FOCUS_START")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let path = Path::new(&dir).join("pool");
    let store = if path.exists() {
        common::reopen(&path, EXTRA)
    } else {
        common::new_store(Path::new(&dir), 32 << 20, DurabilityMode::Volatile, EXTRA)
    };
    let fields: Vec<FieldDef> = (0..FIELDS)
        .map(|i| FieldDef::fixed(&format!("f{i}"), 16))
        .collect();
    let id = store.create_schema("rows", &fields).unwrap().id;
    let zero = field_value(0);
    for t in 0..THREADS {
        for r in 0..ROWS {
            if store
                .get_fields(id, &row_key(t, r), &FieldSelection::All)
                .unwrap()
                .is_none()
            {
                store
                    .put_row(id, &row_key(t, r), &[&zero[..]; FIELDS as usize])
                    .unwrap();
            }
        }
    }
    println!("READY");
    let out = std::sync::Mutex::new(std::io::stdout());
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (store, out) = (&store, &out);
            s.spawn(move || {
                let mut rng = ChaCha8Rng::seed_from_u64(start ^ t);
                for seq in (start..).map(|n| n * THREADS + t) {
                    let r = rng.random_range(0..ROWS);
                    let f1 = rng.random_range(0..FIELDS);
                    let f2 = (f1 + rng.random_range(1..FIELDS)) % FIELDS;
                    writeln!(out.lock().unwrap(), "I {t} {r} {f1} {f2} {seq}").unwrap();
                    let v = field_value(seq);
                    assert!(
                        store
                            .update_fields(id, &row_key(t, r), &[(f1, &v), (f2, &v)])
                            .unwrap()
                    );
                    // Reads keep SeaCache busy.
                    store
                        .get_fields(id, &row_key(t, (r + 1) % ROWS), &FieldSelection::All)
                        .unwrap();
                    let mut o = out.lock().unwrap();
                    writeln!(o, "A {t} {r} {f1} {f2} {seq}").unwrap();
                    o.flush().unwrap();
                }
            });
        }
    });
}

/// What the parent knows: per (thread, row, field) the last acknowledged seq; per thread
/// the update in flight (row, f1, f2, seq).
#[derive(Default)]
struct Expect {
    acked: BTreeMap<(u64, u64, u16), u64>,
    in_flight: BTreeMap<u64, (u64, u16, u16, u64)>,
}

fn run_child(dir: &Path, start: u64, kill_after: Duration, expect: &mut Expect) -> u64 {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "sigkill_child_entry",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir)
        .env("TIERKV_FOCUS_START", start.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (mut deadline, mut acks, mut killed, mut max_seq) = (None, 0u64, false, 0u64);
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        if line.ends_with("READY") {
            deadline = Some(Instant::now() + kill_after);
            continue;
        }
        let f: Vec<u64> = line
            .split(' ')
            .skip(1)
            .filter_map(|x| x.parse().ok())
            .collect();
        let [t, r, f1, f2, seq] = f[..] else { continue };
        let (f1, f2) = (f1 as u16, f2 as u16);
        max_seq = max_seq.max(seq);
        if line.starts_with('I') {
            expect.in_flight.insert(t, (r, f1, f2, seq));
        } else if line.starts_with('A') {
            expect.acked.insert((t, r, f1), seq);
            expect.acked.insert((t, r, f2), seq);
            expect.in_flight.remove(&t);
            acks += 1;
        }
        if !killed && deadline.is_some_and(|d| Instant::now() >= d) && acks > 300 {
            child.kill().unwrap();
            killed = true;
        }
    }
    let _ = child.wait();
    assert!(killed, "the child stopped before it was killed");
    eprintln!("child killed after {acks} acknowledged updates");
    max_seq / THREADS + 1
}

fn verify(dir: &Path, expect: &mut Expect) {
    let s = common::reopen(&dir.join("pool"), EXTRA);
    s.check().unwrap();
    let id = s.schema("rows").unwrap().unwrap().id;
    for t in 0..THREADS {
        let flight = expect.in_flight.get(&t).copied();
        for r in 0..ROWS {
            let row = s
                .get_fields(id, &row_key(t, r), &FieldSelection::All)
                .unwrap()
                .unwrap();
            let got: Vec<u64> = row
                .iter()
                .map(|v| u64::from_le_bytes(v[..8].try_into().unwrap()))
                .collect();
            for f in 0..FIELDS {
                let acked = expect.acked.get(&(t, r, f)).copied().unwrap_or(0);
                let g = got[usize::from(f)];
                let in_flight = flight
                    .filter(|(fr, f1, f2, _)| *fr == r && (*f1 == f || *f2 == f))
                    .map(|x| x.3);
                assert!(
                    g == acked || Some(g) == in_flight,
                    "t{t} r{r} f{f}: {g}, acked {acked}, in flight {in_flight:?}"
                );
            }
            if let Some((fr, f1, f2, seq)) = flight
                && fr == r
            {
                let (a, b) = (got[usize::from(f1)] == seq, got[usize::from(f2)] == seq);
                assert_eq!(a, b, "t{t} r{r}: the update in flight was applied in part");
                if a {
                    expect.acked.insert((t, r, f1), seq);
                    expect.acked.insert((t, r, f2), seq);
                }
            }
        }
        expect.in_flight.remove(&t);
    }
    s.close().unwrap();
}

#[test]
fn sigkill_during_field_updates_keeps_every_acknowledged_update() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let seed = common::seed("sigkill_during_field_updates_keeps_every_acknowledged_update");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let dir = common::scratch_dir();
    let mut expect = Expect::default();
    let mut start = 1;
    for _ in 0..3 {
        let after = Duration::from_millis(rng.random_range(100..600));
        start = run_child(dir.path(), start, after, &mut expect);
        verify(dir.path(), &mut expect);
    }
}
