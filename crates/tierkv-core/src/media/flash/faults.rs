//! [`FaultInjector`]: the fault-injecting double of the flash tier (DESIGN §4, failure model
//! items 3 and 4), modelled on LevelDB's `db/fault_injection_test.cc` and the error
//! switches of its `SpecialEnv`.
//!
//! A device opened with [`super::FlashDevice::open_with_faults`] reports every operation to
//! its injector before the kernel sees it. The injector
//! - records, per file, the writes made since that file's last successful `sync`, with the
//!   bytes they overwrote (read back just before the write is issued), so they can be undone;
//! - records the files created since their directory's last `sync_dir`;
//! - fails the n-th read, write or sync (or every write) with a chosen errno;
//! - at [`FaultInjector::crash`], freezes the devices (every later write and sync fails),
//!   waits for writes in flight, and rolls the files back to what a power cut could leave:
//!   each unsynced write dropped whole ([`CrashMode::DropUnsynced`]) or torn at 4 KiB
//!   granularity ([`CrashMode::TearUnsynced`]: a seeded RNG keeps or drops each block), and
//!   every file created after the last directory sync removed.
//!
//! Invariants of the crash image: a block written and then synced holds its synced content
//! (a write is forgotten at its file's sync); every block holds a version that was written
//! to it at some point (undoing from the newest write to the oldest, each dropped block takes
//! the bytes its write overwrote). Deleting files is not undone (a deleted file stays
//! deleted), and a file's length never changes after creation, so it is not tracked.
//!
//! Thread safety: `Send + Sync`; one mutex guards the state, a condition variable lets
//! `crash` wait for writes in flight. Several devices may share one injector (they share the
//! fault countdowns and crash together). Tests should not race a write with a read-back of
//! the same bytes by the injector: the pre-image is read just before the write is issued.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use parking_lot::{Condvar, Mutex};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::aligned::FLASH_BLOCK;
use crate::api::error::{Error, Result};

/// How [`FaultInjector::crash`] treats writes not yet synced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashMode {
    /// Every unsynced write is lost whole.
    DropUnsynced,
    /// Every 4 KiB block of every unsynced write is independently kept or lost, chosen by
    /// an RNG seeded with `seed` (print it in the test).
    TearUnsynced {
        /// The RNG seed.
        seed: u64,
    },
}

/// What a crash did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CrashReport {
    /// Unsynced writes rolled back (wholly or in part).
    pub writes_undone: u64,
    /// 4 KiB blocks of unsynced writes that kept their new content.
    pub blocks_kept: u64,
    /// 4 KiB blocks of unsynced writes restored to their previous content.
    pub blocks_dropped: u64,
    /// Files removed because they were created after the last directory sync.
    pub files_removed: u64,
}

/// How many faults the injector has caused.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InjectedFaults {
    /// Reads failed on purpose.
    pub reads_failed: u64,
    /// Writes failed on purpose (countdown, fail-all, or after a crash).
    pub writes_failed: u64,
    /// Syncs (file or directory) failed on purpose (countdown or after a crash).
    pub syncs_failed: u64,
    /// Crashes simulated.
    pub crashes: u64,
}

/// How many operations the injector has seen issued (failed ones included): lets a test
/// aim a fault at an operation that will actually happen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoSeen {
    /// Reads issued.
    pub reads: u64,
    /// Writes issued.
    pub writes: u64,
    /// File and directory syncs issued.
    pub syncs: u64,
}

/// A pending "fail the n-th operation" switch.
#[derive(Clone, Copy, Debug)]
struct Countdown {
    remaining: u64,
    errno: i32,
}

impl Countdown {
    /// Counts one operation; the errno when this is the n-th.
    fn tick(slot: &mut Option<Countdown>) -> Option<i32> {
        let c = slot.as_mut()?;
        c.remaining = c.remaining.saturating_sub(1);
        if c.remaining == 0 {
            let errno = c.errno;
            *slot = None;
            Some(errno)
        } else {
            None
        }
    }
}

/// One write not yet made durable by a sync: where it went and what it overwrote.
#[derive(Debug)]
struct UnsyncedWrite {
    offset: u64,
    before: Vec<u8>,
}

#[derive(Debug, Default)]
struct State {
    crashed: bool,
    fail_read: Option<Countdown>,
    fail_write: Option<Countdown>,
    fail_sync: Option<Countdown>,
    fail_all_writes: Option<i32>,
    /// Per file, its unsynced writes, oldest first.
    unsynced: BTreeMap<PathBuf, Vec<UnsyncedWrite>>,
    /// Files created since their directory's last sync, in creation order.
    created: Vec<PathBuf>,
    /// Writes admitted but not yet completed.
    writes_in_flight: usize,
    /// Syncs admitted but not yet completed.
    syncs_in_flight: usize,
    injected: InjectedFaults,
    seen: IoSeen,
}

/// The fault-injecting double; share it (`Arc`) between the test and the device(s).
#[derive(Debug, Default)]
pub struct FaultInjector {
    state: Mutex<State>,
    idle: Condvar,
}

/// A file creation or removal in flight ([`FaultInjector::begin_dir_op`]); it ends when
/// dropped.
#[derive(Debug)]
pub(crate) struct DirOp<'a>(&'a FaultInjector);

impl Drop for DirOp<'_> {
    fn drop(&mut self) {
        self.0.write_done();
    }
}

fn frozen() -> io::Error {
    io::Error::other("simulated crash: the flash device is frozen (fault injection)")
}

impl FaultInjector {
    /// An injector that injects nothing until told to.
    pub fn new() -> FaultInjector {
        FaultInjector::default()
    }

    /// The `n`-th read from now (1 = the next one) fails with `errno`.
    pub fn fail_nth_read(&self, n: u64, errno: i32) {
        self.state.lock().fail_read = Some(Countdown {
            remaining: n.max(1),
            errno,
        });
    }

    /// The `n`-th write from now (1 = the next one) fails with `errno` (EIO, ENOSPC, ...).
    pub fn fail_nth_write(&self, n: u64, errno: i32) {
        self.state.lock().fail_write = Some(Countdown {
            remaining: n.max(1),
            errno,
        });
    }

    /// The `n`-th file or directory sync from now fails with `errno`.
    pub fn fail_nth_sync(&self, n: u64, errno: i32) {
        self.state.lock().fail_sync = Some(Countdown {
            remaining: n.max(1),
            errno,
        });
    }

    /// Every write from now on fails with `errno`, until [`FaultInjector::clear_failures`].
    pub fn fail_all_writes(&self, errno: i32) {
        self.state.lock().fail_all_writes = Some(errno);
    }

    /// Cancels every pending failure switch (not a crash).
    pub fn clear_failures(&self) {
        let mut s = self.state.lock();
        s.fail_read = None;
        s.fail_write = None;
        s.fail_sync = None;
        s.fail_all_writes = None;
    }

    /// The faults injected so far.
    pub fn injected(&self) -> InjectedFaults {
        self.state.lock().injected
    }

    /// The reads, writes and syncs issued through the injector so far.
    pub fn seen(&self) -> IoSeen {
        self.state.lock().seen
    }

    /// Writes recorded since their file's last sync (all files).
    pub fn unsynced_writes(&self) -> usize {
        self.state.lock().unsynced.values().map(Vec::len).sum()
    }

    /// True after [`FaultInjector::crash`].
    pub fn is_crashed(&self) -> bool {
        self.state.lock().crashed
    }

    /// Simulates a power cut: freezes every device using this injector (later writes and
    /// syncs fail; reads still work), waits for writes and syncs in flight (a sync that
    /// returns success made its writes durable before the cut), then rolls back what was
    /// not durable (see the module doc). Reopen the directory to see the crash image.
    pub fn crash(&self, mode: CrashMode) -> Result<CrashReport> {
        let (unsynced, created) = {
            let mut s = self.state.lock();
            s.crashed = true;
            s.injected.crashes += 1;
            while s.writes_in_flight > 0 || s.syncs_in_flight > 0 {
                self.idle.wait(&mut s);
            }
            (
                std::mem::take(&mut s.unsynced),
                std::mem::take(&mut s.created),
            )
        };
        let mut report = CrashReport::default();
        let mut rng = match mode {
            CrashMode::DropUnsynced => None,
            CrashMode::TearUnsynced { seed } => Some(ChaCha8Rng::seed_from_u64(seed)),
        };
        for (path, writes) in &unsynced {
            if created.contains(path) {
                continue; // removed below
            }
            undo_writes(path, writes, rng.as_mut(), &mut report)?;
        }
        remove_created(&created, &mut report)?;
        Ok(report)
    }

    // ---- hooks called by the device (before the kernel sees an operation) ----

    /// A file creation or removal is about to be issued: fails once the devices are frozen
    /// by a crash; otherwise the operation counts as in flight until the guard is dropped.
    ///
    /// IMPORTANT: [`FaultInjector::crash`] waits for it. A removal admitted just before the
    /// cut and carried out just after it would otherwise change the directory while the
    /// crash state is read or copied (a file listed and then gone).
    pub(crate) fn begin_dir_op(&self) -> io::Result<DirOp<'_>> {
        let mut s = self.state.lock();
        if s.crashed {
            return Err(frozen());
        }
        s.writes_in_flight += 1;
        Ok(DirOp(self))
    }

    /// A read is about to be issued.
    pub(crate) fn before_read(&self) -> io::Result<()> {
        let mut s = self.state.lock();
        s.seen.reads += 1;
        if let Some(errno) = Countdown::tick(&mut s.fail_read) {
            s.injected.reads_failed += 1;
            return Err(io::Error::from_raw_os_error(errno));
        }
        Ok(())
    }

    /// A write of `len` bytes at `offset` of `path` is about to be issued. On `Ok` the write
    /// counts as in flight until [`FaultInjector::write_done`].
    pub(crate) fn before_write(&self, path: &Path, offset: u64, len: usize) -> io::Result<()> {
        let mut s = self.state.lock();
        s.seen.writes += 1;
        if s.crashed {
            s.injected.writes_failed += 1;
            return Err(frozen());
        }
        let injected = Countdown::tick(&mut s.fail_write).or(s.fail_all_writes);
        if let Some(errno) = injected {
            s.injected.writes_failed += 1;
            return Err(io::Error::from_raw_os_error(errno));
        }
        let before = read_pre_image(path, offset, len)?;
        s.unsynced
            .entry(path.to_owned())
            .or_default()
            .push(UnsyncedWrite { offset, before });
        s.writes_in_flight += 1;
        Ok(())
    }

    /// An admitted write completed (successfully or not).
    pub(crate) fn write_done(&self) {
        let mut s = self.state.lock();
        s.writes_in_flight = s.writes_in_flight.saturating_sub(1);
        if s.writes_in_flight == 0 && s.syncs_in_flight == 0 {
            self.idle.notify_all();
        }
    }

    /// A file or directory sync is about to be issued.
    pub(crate) fn before_sync(&self) -> io::Result<()> {
        let mut s = self.state.lock();
        s.seen.syncs += 1;
        if s.crashed {
            s.injected.syncs_failed += 1;
            return Err(frozen());
        }
        if let Some(errno) = Countdown::tick(&mut s.fail_sync) {
            s.injected.syncs_failed += 1;
            return Err(io::Error::from_raw_os_error(errno));
        }
        s.syncs_in_flight += 1;
        Ok(())
    }

    /// An admitted sync of `path` (a file or a directory) completed; when it succeeded,
    /// what it covers is durable. Applied before the sync counts as done, so a crash never
    /// rolls back writes whose sync returned success.
    pub(crate) fn sync_done(&self, path: &Path, ok: bool) {
        let mut s = self.state.lock();
        if ok {
            s.unsynced.remove(path);
            s.created.retain(|p| p.parent() != Some(path));
        }
        s.syncs_in_flight = s.syncs_in_flight.saturating_sub(1);
        if s.syncs_in_flight == 0 && s.writes_in_flight == 0 {
            self.idle.notify_all();
        }
    }

    /// `path` was synced: its earlier writes are durable.
    pub(crate) fn file_synced(&self, path: &Path) {
        self.state.lock().unsynced.remove(path);
    }

    /// `path` was created (and is not durable until its directory is synced).
    pub(crate) fn file_created(&self, path: &Path) {
        self.state.lock().created.push(path.to_owned());
    }

    /// `path` was removed: nothing about it is rolled back any more.
    pub(crate) fn file_removed(&self, path: &Path) {
        let mut s = self.state.lock();
        s.unsynced.remove(path);
        s.created.retain(|p| p != path);
    }

    /// `dir` was synced: the files created in it are durable.
    pub(crate) fn dir_synced(&self, dir: &Path) {
        self.state
            .lock()
            .created
            .retain(|p| p.parent() != Some(dir));
    }
}

/// The bytes `[offset, offset + len)` of `path` hold now (through the page cache, which is
/// coherent with `O_DIRECT` writes on Linux).
fn read_pre_image(path: &Path, offset: u64, len: usize) -> io::Result<Vec<u8>> {
    let f = File::open(path)?;
    let mut before = vec![0; len];
    f.read_exact_at(&mut before, offset)?;
    Ok(before)
}

/// Undoes `writes` (newest first) in `path`, whole or block by block.
fn undo_writes(
    path: &Path,
    writes: &[UnsyncedWrite],
    mut rng: Option<&mut ChaCha8Rng>,
    report: &mut CrashReport,
) -> Result<()> {
    let f = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| Error::io("open (crash rollback)", path, e))?;
    for w in writes.iter().rev() {
        report.writes_undone += 1;
        for (i, block) in w.before.chunks(FLASH_BLOCK).enumerate() {
            let keep = rng.as_mut().is_some_and(|r| r.random_bool(0.5));
            if keep {
                report.blocks_kept += 1;
                continue;
            }
            report.blocks_dropped += 1;
            let off = w.offset + (i * FLASH_BLOCK) as u64;
            f.write_all_at(block, off)
                .map_err(|e| Error::io("write (crash rollback)", path, e))?;
        }
    }
    f.sync_all()
        .map_err(|e| Error::io("fsync (crash rollback)", path, e))
}

/// Removes the files created after their directory's last sync, then syncs the directories.
fn remove_created(created: &[PathBuf], report: &mut CrashReport) -> Result<()> {
    let mut dirs: Vec<&Path> = Vec::new();
    for p in created {
        match fs::remove_file(p) {
            Ok(()) => report.files_removed += 1,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("remove (crash rollback)", p, e)),
        }
        if let Some(d) = p.parent()
            && !dirs.contains(&d)
        {
            dirs.push(d);
        }
    }
    for d in dirs {
        File::open(d)
            .and_then(|f| f.sync_all())
            .map_err(|e| Error::io("fsync directory (crash rollback)", d, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn countdown_fires_exactly_on_the_nth_operation() {
        let f = FaultInjector::new();
        f.fail_nth_read(3, libc::EIO);
        assert!(f.before_read().is_ok());
        assert!(f.before_read().is_ok());
        let e = f.before_read().unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
        assert!(f.before_read().is_ok(), "a countdown fires once");
        assert_eq!(f.injected().reads_failed, 1);
    }

    #[test]
    fn sync_forgets_writes_and_dir_sync_forgets_creations() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        fs::write(&p, vec![0u8; 8192]).unwrap();
        let f = FaultInjector::new();
        f.file_created(&p);
        f.before_write(&p, 0, 4096).unwrap();
        f.write_done();
        assert_eq!(f.unsynced_writes(), 1);
        f.file_synced(&p);
        assert_eq!(f.unsynced_writes(), 0);
        f.dir_synced(dir.path());
        let r = f.crash(CrashMode::DropUnsynced).unwrap();
        assert_eq!(r, CrashReport::default());
        assert!(p.exists());
    }

    #[test]
    fn a_sync_in_flight_at_a_crash_keeps_the_writes_it_reported_durable() {
        // Found by PRISM's crash tests: a sync admitted before a crash but returning after
        // it used to report success for writes the crash had already rolled back.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        fs::write(&p, vec![0u8; 4096]).unwrap();
        let f = std::sync::Arc::new(FaultInjector::new());
        f.before_write(&p, 0, 4096).unwrap();
        fs::write(&p, vec![7u8; 4096]).unwrap();
        f.write_done();
        f.before_sync().unwrap();
        let crasher = {
            let f = f.clone();
            std::thread::spawn(move || f.crash(CrashMode::DropUnsynced).unwrap())
        };
        // The crash waits for the sync in flight...
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(
            !crasher.is_finished(),
            "the crash did not wait for the sync in flight"
        );
        // ...which succeeds: its write is durable and must survive the crash.
        f.sync_done(&p, true);
        let r = crasher.join().unwrap();
        assert_eq!(r.writes_undone, 0);
        assert_eq!(fs::read(&p).unwrap(), vec![7u8; 4096]);
    }

    /// Seen in a prismdb stress run: a removal admitted just before a power cut deleted its
    /// file while the crashed store's directory was being copied. The cut now waits for
    /// file creations and removals in flight, and refuses later ones.
    #[test]
    fn a_crash_waits_for_a_file_removal_in_flight_and_refuses_later_ones() {
        let f = std::sync::Arc::new(FaultInjector::new());
        let op = f.begin_dir_op().unwrap();
        let crasher = {
            let f = f.clone();
            std::thread::spawn(move || f.crash(CrashMode::DropUnsynced).unwrap())
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(
            !crasher.is_finished(),
            "the crash did not wait for the removal in flight"
        );
        drop(op);
        crasher.join().unwrap();
        assert!(f.begin_dir_op().is_err(), "a removal after the cut");
    }

    #[test]
    fn crash_freezes_later_writes_and_syncs() {
        let f = FaultInjector::new();
        f.crash(CrashMode::DropUnsynced).unwrap();
        assert!(f.is_crashed());
        assert!(f.before_write(Path::new("/nonexistent"), 0, 4096).is_err());
        assert!(f.before_sync().is_err());
        assert!(f.before_read().is_ok(), "reads still work after a crash");
        let i = f.injected();
        assert_eq!((i.writes_failed, i.syncs_failed, i.crashes), (1, 1, 1));
    }

    #[test]
    fn seen_counts_every_operation_issued_failed_or_not() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        fs::write(&p, vec![0u8; 4096]).unwrap();
        let f = FaultInjector::new();
        f.fail_nth_write(2, libc::EIO);
        for _ in 0..3 {
            if f.before_write(&p, 0, 4096).is_ok() {
                f.write_done();
            }
        }
        f.before_read().unwrap();
        f.before_sync().unwrap();
        f.sync_done(&p, true);
        assert_eq!(
            f.seen(),
            IoSeen {
                reads: 1,
                writes: 3,
                syncs: 1
            }
        );
        assert_eq!(f.injected().writes_failed, 1);
    }
}
