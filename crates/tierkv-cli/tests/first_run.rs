//! What a newcomer meets in the first hour (issue 23, findings 5-7): the default engine
//! keeps what it acknowledged across processes, a directory that holds another store's
//! files without a MANIFEST is never buried under a new store, and a weaker pmem mode
//! than the store was created with is never used silently.

use std::path::Path;
use std::process::Output;

/// Small tiers, so that a default-engine store does not allocate the default 4 GiB of
/// flash in a test; no `--engine`.
const SMALL: [&str; 4] = ["--pmem-size", "8MiB", "--flash-size", "16MiB"];

mod common;

use common::{stderr_of as stderr, tierkv_in as tierkv};

fn put(dir: &Path, extra: &[&str], k: &str, v: &str) -> Output {
    let mut args = vec!["put"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&[k, v]);
    tierkv(dir, &args)
}

/// A small prism store in `s` holding `k` = `v`.
fn create_prism(s: &Path) {
    let mut extra = vec!["--engine", "prism"];
    extra.extend_from_slice(&SMALL);
    let o = put(s, &extra, "k", "v");
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn first_put_and_get_in_two_processes_round_trip_on_the_default_engine() {
    let d = tempfile::tempdir().unwrap();
    let s = d.path().join("s");
    let o = put(&s, &SMALL, "k", "v");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        !stderr(&o).contains("keeps everything in DRAM"),
        "the default engine is volatile: {}",
        stderr(&o)
    );
    let o = tierkv(&s, &["get", "k"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(o.stdout, b"v\n");
    let manifest = tierkv::Manifest::read_from(&s).unwrap().unwrap();
    assert_eq!(manifest.engine, tierkv::ENGINES[0].name);
    assert!(!tierkv::ENGINES[0].volatile);
}

/// Runs `tierkv <args> --dir <dir>` in the working directory `cwd`.
fn tierkv_from(cwd: &Path, dir: &Path, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_tierkv"))
        .current_dir(cwd)
        .args(args)
        .arg("--dir")
        .arg(dir)
        .output()
        .expect("run tierkv")
}

#[test]
fn a_store_made_with_a_relative_dir_opens_from_anywhere_and_after_a_move() {
    // `tierkv put --dir s` stored `s/pmem.pool` in the MANIFEST, relative to the working
    // directory of that one process: a `get --dir /abs/s` from elsewhere failed with
    // "open pool file s/pmem.pool: No such file or directory", and a copied store read
    // the original's files.
    let d = tempfile::tempdir().unwrap();
    let (work, other) = (d.path().join("work"), d.path().join("other"));
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&other).unwrap();
    let mut args = vec!["put"];
    args.extend_from_slice(&SMALL);
    args.extend_from_slice(&["k", "v"]);
    let o = tierkv_from(&work, Path::new("s"), &args);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = tierkv_from(&other, &work.join("s"), &["get", "k"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(o.stdout, b"v\n");
    let moved = d.path().join("moved");
    std::fs::rename(work.join("s"), &moved).unwrap();
    let o = tierkv_from(&other, &moved, &["put", "k2", "v2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = tierkv_from(&work, &moved, &["get", "k2"]);
    assert_eq!(o.stdout, b"v2\n", "{}", stderr(&o));
    assert!(!work.join("s").exists(), "the move left files behind");
}

#[test]
fn a_lost_manifest_never_lets_put_bury_the_store() {
    let d = tempfile::tempdir().unwrap();
    let s = d.path().join("s");
    create_prism(&s);
    std::fs::remove_file(s.join("MANIFEST")).unwrap();
    // Every engine, the volatile one too, must refuse to create a store over these files.
    for engine in [None, Some("dram"), Some("hetermm"), Some("prism")] {
        let mut extra = SMALL.to_vec();
        if let Some(e) = engine {
            extra.extend_from_slice(&["--engine", e]);
        }
        let o = put(&s, &extra, "x", "y");
        assert_eq!(o.status.code(), Some(1), "{engine:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("MANIFEST"),
            "{engine:?}: the error should name the missing MANIFEST: {}",
            stderr(&o)
        );
        assert!(!s.join("MANIFEST").exists(), "{engine:?} wrote a MANIFEST");
    }
    assert!(s.join("pmem.pool").exists());
}

#[test]
fn a_weaker_pmem_mode_than_the_store_was_created_with_is_never_silent() {
    let d = tempfile::tempdir().unwrap();
    let s = d.path().join("s");
    create_prism(&s);
    let o = put(&s, &["--pmem-mode", "volatile"], "k", "w");
    let e = stderr(&o);
    assert!(
        !o.status.success() || e.contains("NOT durable"),
        "put --pmem-mode volatile on an msync store said nothing: {e}"
    );
    if o.status.success() {
        assert!(
            e.contains("msync"),
            "the warning should name the store's mode: {e}"
        );
    }
}

/// A store whose pool is on tmpfs (/dev/shm) in msync mode survives no power loss: msync
/// writes nothing back there, and a write says so; a pool on a disk does not.
#[test]
fn an_msync_pool_on_tmpfs_is_never_called_durable() {
    let shm = Path::new("/dev/shm");
    if !tierkv::core::media::pmem::memory_backed(shm) {
        println!("skipped: /dev/shm is not tmpfs");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let pools = tempfile::tempdir_in(shm).unwrap();
    let s = d.path().join("s");
    let mut extra = vec!["--engine", "prism", "--pmem-path"];
    extra.push(pools.path().to_str().unwrap());
    extra.extend_from_slice(&SMALL);
    let o = put(&s, &extra, "k", "v");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("is on tmpfs or ramfs") && stderr(&o).contains("not a power loss"),
        "a put to an msync pool on /dev/shm said nothing: {}",
        stderr(&o)
    );
    let on_disk = d.path().join("t");
    create_prism(&on_disk);
    let o = put(&on_disk, &[], "k", "w");
    assert!(o.status.success(), "{}", stderr(&o));
    if !tierkv::core::media::pmem::memory_backed(d.path()) {
        assert!(!stderr(&o).contains("tmpfs"), "{}", stderr(&o));
    }
}
