//! Running out of space (issue 23, finding 1): a pool whose filesystem fills up after
//! creation must keep working (its blocks were allocated at creation), never die with
//! SIGBUS; a pool the filesystem cannot hold is refused with a clear `NoSpace`.
//!
//! The tests mount a small tmpfs, which needs root (or CAP_SYS_ADMIN): where mounting is
//! refused they say so on stderr and return; `tierkv-core`'s pool-file tests check the
//! allocation itself everywhere.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// A tmpfs of `mib` MiB mounted for the test's lifetime.
struct SmallFs {
    dir: PathBuf,
}

impl SmallFs {
    fn mount(parent: &Path, mib: u32) -> Option<SmallFs> {
        let dir = parent.join("small");
        std::fs::create_dir_all(&dir).expect("mkdir");
        let o = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(&dir)
            .output()
            .ok()?;
        if !o.status.success() {
            eprintln!(
                "skipped: cannot mount a tmpfs here ({})",
                String::from_utf8_lossy(&o.stderr).trim()
            );
            return None;
        }
        Some(SmallFs { dir })
    }

    /// Fills the filesystem to the last byte.
    fn fill(&self) {
        let mut f = std::fs::File::create(self.dir.join("filler")).expect("filler");
        let block = vec![0u8; 1 << 20];
        while f.write_all(&block).is_ok() {}
        let small = vec![0u8; 4096];
        while f.write_all(&small).is_ok() {}
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir).status();
    }
}

fn tierkv(args: &[&str], dir: &Path, stdin: Option<&[u8]>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tierkv"));
    c.args(args).arg("--dir").arg(dir);
    c.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("run tierkv");
    let mut pipe = child.stdin.take().expect("stdin");
    if let Some(b) = stdin {
        pipe.write_all(b).expect("write stdin");
    }
    drop(pipe);
    child.wait_with_output().expect("wait")
}

fn describe(o: &Output) -> String {
    use std::os::unix::process::ExitStatusExt;
    format!(
        "status {:?} signal {:?}: {}",
        o.status.code(),
        o.status.signal(),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Creates a prism store in `store` with its pool of `pmem_size` in `pmem_dir` (and a
/// small flash tier) by putting `a` = `1`.
fn create_prism(store: &Path, pmem_dir: &Path, pmem_size: &str) -> Output {
    let pmem = pmem_dir.to_str().expect("utf-8 path");
    let args = [
        "put",
        "--engine",
        "prism",
        "--pmem-path",
        pmem,
        "--pmem-size",
        pmem_size,
        "--flash-size",
        "64MiB",
        "a",
        "1",
    ];
    tierkv(&args, store, None)
}

#[test]
fn a_full_filesystem_after_creation_never_kills_a_put() {
    let d = tempfile::tempdir().unwrap();
    let Some(small) = SmallFs::mount(d.path(), 64) else {
        return;
    };
    let store = d.path().join("sp");
    let o = create_prism(&store, &small.dir, "40MiB");
    assert!(o.status.success(), "{}", describe(&o));
    small.fill();
    // Writes touching pool pages never touched before: before the fix the first one died
    // with SIGBUS (exit 135 from a shell).
    for i in 0..20 {
        let key = format!("c{i}");
        let o = tierkv(&["put", &key, "--stdin"], &store, Some(&[b'x'; 100_000]));
        assert!(o.status.success(), "put {key}: {}", describe(&o));
    }
    let o = tierkv(&["get", "a"], &store, None);
    assert_eq!(o.stdout, b"1\n", "{}", describe(&o));
}

#[test]
fn a_pool_the_filesystem_cannot_hold_is_refused_with_no_space() {
    let d = tempfile::tempdir().unwrap();
    let Some(small) = SmallFs::mount(d.path(), 16) else {
        return;
    };
    let store = d.path().join("sp");
    let o = create_prism(&store, &small.dir, "32MiB");
    assert_eq!(o.status.code(), Some(1), "{}", describe(&o));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("no space left on pmem"), "{e}");
    assert!(
        !small.dir.join("pmem.pool").exists(),
        "a refused pool was left behind"
    );
}
