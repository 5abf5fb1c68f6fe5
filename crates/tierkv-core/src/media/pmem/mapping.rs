//! The shared mapping of the pool file, and the argument that handing out slices of it
//! and atomics inside it is sound (STYLE §6, DESIGN §4).
//!
//! A [`Mapping`] is `mmap(PROT_READ | PROT_WRITE, MAP_SHARED)` of a whole pool file
//! (with `MAP_SHARED_VALIDATE | MAP_SYNC` in Dax mode). Its safe methods are bounds- and
//! alignment-checked and return `None` instead of touching memory outside the mapping;
//! the pool turns `None` into [`Error::Corruption`](crate::Error::Corruption).
//!
//! # Soundness
//! The mapping is memory that the Rust abstract machine did not allocate, and that the
//! kernel (and, in principle, other processes) can see. The slices and `&AtomicU64`
//! handed out are sound because of these invariants, each kept by a named piece of code:
//!
//! 1. **The mapping lives as long as every reference into it.** Slices and atomics borrow
//!    `&self`; `munmap` runs only in `Drop`, which needs ownership, so no reference can
//!    outlive the mapping. The pool owns its `Mapping` and hands out `&[u8]` tied to
//!    `&PmemPool`.
//! 2. **Every byte of the mapping stays backed by the file.** The file is never truncated
//!    while mapped: tierkv sets its length once, at creation, before mapping it, and the
//!    pool takes an exclusive `flock` on it (`file.rs`) before mapping, so no other tierkv
//!    pool — in this process or another — maps or resizes it at the same time. (`flock`
//!    is advisory: a foreign program that truncates the file anyway makes later accesses
//!    raise `SIGBUS`, a process crash rather than undefined behaviour in Rust terms. The
//!    same would hold for a page fault into a hole on a full filesystem, so `file.rs`
//!    allocates every block of the pool before it is mapped, at create and at open.)
//! 3. **Every byte is initialized.** A shared file mapping reads back file contents or
//!    zeros (holes), never uninitialized memory; `u8` and `u64` have no invalid values, so
//!    any bytes are valid values of the types handed out.
//! 4. **The mapping is never handed out as `&mut`.** All mutation goes through
//!    [`Mapping::word`] (`&AtomicU64`, an `UnsafeCell`), so the compiler never assumes
//!    exclusive access to any byte of it.
//! 5. **Aligned atomics.** [`Mapping::word`] only returns 8-byte aligned words (the base
//!    is page-aligned; the offset is checked), as `AtomicU64::from_ptr` requires.
//!
//! # The obligation on engines (publication)
//! A slice from [`Mapping::slice`] is a plain `&[u8]`: while it is used, the bytes it
//! covers must not be mutated. The pool's writes are atomic word stores, but a plain read
//! that races with a store is still a data race in the Rust memory model. Engines
//! therefore follow the usual publication protocol: write an object's bytes, then publish
//! it with a `Release` store (or CAS) of an 8-byte word (a pointer, a length, a valid
//! bit); readers `Acquire`-load that word and only then read the bytes it covers; and an
//! engine reuses (overwrites) a range only when no reader can still hold a slice of it
//! (epochs, locks or a quiescent point). A racing access that breaks this contract reads
//! unspecified — but initialized — bytes on the hardware we run on; it is a bug in the
//! engine, not something this module can prevent.
//!
//! Thread safety: `Mapping` is `Send + Sync` (see the `unsafe impl`s); every method takes
//! `&self`.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::OnceLock;
use std::sync::atomic::AtomicU64;

use super::persist::{FlushInstr, LINE};

/// How the file is mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum MapKind {
    /// `MAP_SHARED`: stores reach the page cache; msync writes them back.
    Shared,
    /// `MAP_SHARED_VALIDATE | MAP_SYNC`: the file is on a DAX filesystem and the mapping
    /// is the media itself; the kernel refuses it elsewhere (EOPNOTSUPP).
    SharedSync,
}

/// A whole pool file mapped shared, read-write.
pub(super) struct Mapping {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: `Mapping` is an owned region of shared memory; all access to it from `&self`
// goes through bounds-checked slices (reads) and `&AtomicU64` (mutations), which are safe
// to use from any thread. Moving it to another thread moves the sole right to unmap it.
#[expect(unsafe_code, reason = "a raw pointer to a shared mapping is Send")]
unsafe impl Send for Mapping {}
// SAFETY: see `Send`; shared references only ever yield atomics and slices whose
// concurrent use is governed by the module's publication contract.
#[expect(unsafe_code, reason = "a raw pointer to a shared mapping is Sync")]
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps the first `len` bytes of `file` (which the caller has locked and sized to
    /// exactly `len`, invariant 2).
    #[expect(unsafe_code, reason = "mmap")]
    pub(super) fn map(file: &File, len: usize, kind: MapKind) -> io::Result<Mapping> {
        if len == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let flags = match kind {
            MapKind::Shared => libc::MAP_SHARED,
            MapKind::SharedSync => libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC,
        };
        // SAFETY: a fresh mapping at an address of the kernel's choice (NULL hint) cannot
        // alias any Rust object; the fd is valid for the call.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base =
            NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned NULL"))?;
        Ok(Mapping { base, len })
    }

    /// The mapping's length in bytes.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The bytes `[off, off + len)`, or `None` if any is outside the mapping.
    #[expect(unsafe_code, reason = "a slice of the mapping")]
    pub(super) fn slice(&self, off: usize, len: usize) -> Option<&[u8]> {
        let end = off.checked_add(len)?;
        if end > self.len {
            return None;
        }
        // SAFETY: `[off, end)` is inside the mapping (checked above), which stays mapped
        // and file-backed for the lifetime of `&self` (invariants 1, 2) and is initialized
        // (3). Concurrent mutation is excluded by the engines' publication contract.
        Some(unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(off), len) })
    }

    /// The aligned word at `off`, or `None` if `off` is misaligned or outside.
    #[expect(unsafe_code, reason = "an atomic inside the mapping")]
    pub(super) fn word(&self, off: usize) -> Option<&AtomicU64> {
        if !off.is_multiple_of(8) || off.checked_add(8)? > self.len {
            return None;
        }
        // SAFETY: the word is in bounds and 8-aligned (page-aligned base + checked offset,
        // invariant 5), valid for reads and writes while `&self` lives (1, 2), and only
        // ever mutated atomically through this method (4).
        Some(unsafe { AtomicU64::from_ptr(self.base.as_ptr().add(off).cast::<u64>()) })
    }

    /// The `n` aligned words from `off`, or `None` if `off` is misaligned or the range is
    /// not inside the mapping.
    #[expect(unsafe_code, reason = "atomics inside the mapping")]
    pub(super) fn words(&self, off: usize, n: usize) -> Option<&[AtomicU64]> {
        if !off.is_multiple_of(8) || off.checked_add(n.checked_mul(8)?)? > self.len {
            return None;
        }
        // SAFETY: as for `word`, for each of the n words: in bounds, 8-aligned, valid for
        // reads and writes while `&self` lives (1, 2) and only ever mutated atomically
        // (4); `AtomicU64` has the size and alignment of `u64`.
        Some(unsafe {
            std::slice::from_raw_parts(self.base.as_ptr().add(off).cast::<AtomicU64>(), n)
        })
    }

    /// Asks the kernel to fault the mapping in page by page (`MADV_RANDOM`: no readahead
    /// around a fault), so that the page cache holds the file in base pages.
    ///
    /// Why (msync mode on a disk filesystem): a store through a shared mapping marks the
    /// whole page-cache folio it lands in dirty, and `msync` writes back whole dirty
    /// folios. Readahead on a fault allocates large folios where the filesystem supports
    /// them (ext4 since Linux 6.16 among others): measured on this project's machines
    /// (6.18, ext4), an 8-byte persist wrote 1 MiB to the disk and took 1.4-1.6 ms,
    /// against 4 KiB and 0.9 ms in base pages. The cost: a pool read cold from the disk
    /// faults in 4 KiB at a time (a cold scan of 256 MiB took 20-25 s instead of 0.7 s);
    /// pages already cached (a reopen after a crash) are used as they are.
    #[expect(unsafe_code, reason = "madvise")]
    pub(super) fn advise_base_pages(&self) -> io::Result<()> {
        // SAFETY: the range is exactly this live mapping; MADV_RANDOM changes the kernel's
        // readahead policy for it, never its contents or its validity.
        let rc = unsafe { libc::madvise(self.base.as_ptr().cast(), self.len, libc::MADV_RANDOM) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Faults every page of the mapping in, writable, now (`MADV_POPULATE_WRITE`, Linux
    /// 5.14), instead of at the first store into each page.
    ///
    /// Why (a pool on tmpfs, the DRAM stand-in for pmem): `fallocate` reserves a tmpfs
    /// file's pages but the kernel zeroes each one and maps it at the first store into
    /// it, inside the engine's write path; real pmem has no such cost, and on a fresh
    /// pool it is paid once per 4 KiB of everything an engine writes (`PmemPool::create`
    /// says how much). Populating moves it to the create. It changes no byte: the pages
    /// read as the file's contents (zeros in a new pool) either way.
    #[expect(unsafe_code, reason = "madvise")]
    pub(super) fn populate_write(&self) -> io::Result<()> {
        // SAFETY: the range is exactly this live mapping; MADV_POPULATE_WRITE faults its
        // pages in as a write would, without changing their contents.
        let rc = unsafe {
            libc::madvise(
                self.base.as_ptr().cast(),
                self.len,
                libc::MADV_POPULATE_WRITE,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// `msync(MS_SYNC)` of the pages covering `[off, off + len)`.
    #[expect(unsafe_code, reason = "msync")]
    pub(super) fn msync(&self, off: usize, len: usize) -> io::Result<()> {
        let end = off.checked_add(len).filter(|e| *e <= self.len);
        let Some(end) = end else {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        };
        let start = off & !(page_size() - 1);
        // SAFETY: `[start, end)` lies inside the mapping (start <= off, end checked);
        // msync reads no Rust-visible state and writes none.
        let rc = unsafe {
            libc::msync(
                self.base.as_ptr().add(start).cast(),
                end - start,
                libc::MS_SYNC,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Writes back every cache line covering `[off, off + len)` (no fence). Out-of-range
    /// lines are skipped (callers check ranges first).
    #[expect(unsafe_code, reason = "cache-line write-back of mapped addresses")]
    pub(super) fn write_back(&self, off: usize, len: usize, instr: FlushInstr) {
        let end = off.saturating_add(len).min(self.len);
        let mut line = off & !(LINE - 1);
        while line < end {
            // SAFETY: `line < self.len`, so the address is inside the live mapping.
            unsafe { instr.write_back(self.base.as_ptr().add(line)) };
            line += LINE;
        }
    }
}

impl Drop for Mapping {
    #[expect(unsafe_code, reason = "munmap")]
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are exactly what mmap returned, and `&mut self` proves no
        // slice or atomic borrowed from this mapping is alive (invariant 1).
        let rc = unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
        // NOTE: munmap of a region we mapped cannot fail (EINVAL needs a bad range); there
        // is nothing to do with an error here anyway.
        debug_assert_eq!(rc, 0, "munmap of the pool mapping failed");
    }
}

/// The system page size (msync granularity).
#[expect(unsafe_code, reason = "sysconf")]
pub(super) fn page_size() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf reads a system constant and has no memory effects.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(p)
            .ok()
            .filter(|p| p.is_power_of_two())
            .unwrap_or(4096)
    })
}

/// The bytes of a word of the mapping as they lie in memory.
#[expect(
    clippy::host_endian_bytes,
    reason = "this is the in-memory image of a word of the mapping, not an encoded field"
)]
pub(super) fn memory_bytes(word: u64) -> [u8; 8] {
    word.to_ne_bytes()
}

/// The word whose in-memory image is `bytes` (inverse of [`memory_bytes`]).
#[expect(
    clippy::host_endian_bytes,
    reason = "this is the in-memory image of a word of the mapping, not an encoded field"
)]
pub(super) fn word_from_memory_bytes(bytes: [u8; 8]) -> u64 {
    u64::from_ne_bytes(bytes)
}

/// A mapping of a fresh temporary file of `len` bytes (for unit tests).
#[cfg(test)]
pub(super) fn mapped_temp_file(len: usize) -> (tempfile::NamedTempFile, Mapping) {
    let f = tempfile::NamedTempFile::new().expect("temp file");
    f.as_file().set_len(len as u64).expect("set_len");
    let m = Mapping::map(f.as_file(), len, MapKind::Shared).expect("mmap");
    (f, m)
}

#[cfg(test)]
mod tests {
    use super::mapped_temp_file as mapped;
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn accesses_outside_or_misaligned_are_refused() {
        let (_f, m) = mapped(8192);
        assert!(m.slice(8192, 0).is_some());
        assert!(m.slice(8190, 3).is_none());
        assert!(m.slice(usize::MAX, 2).is_none());
        assert!(m.word(8184).is_some());
        assert!(m.word(8188).is_none());
        assert!(m.word(8192).is_none());
        assert!(m.word(12).is_none());
        assert!(m.msync(8000, 500).is_err());
    }

    #[test]
    fn stores_through_words_reach_the_file() {
        let (f, m) = mapped(8192);
        m.word(4096)
            .unwrap()
            .store(word_from_memory_bytes(*b"tierkv!!"), Ordering::Release);
        m.msync(4096, 8).unwrap();
        let bytes = std::fs::read(f.path()).unwrap();
        assert_eq!(&bytes[4096..4104], b"tierkv!!");
        assert_eq!(m.slice(4096, 8).unwrap(), b"tierkv!!");
        m.write_back(
            4000,
            200,
            FlushInstr::detect().unwrap_or(FlushInstr::Clflush),
        );
    }

    #[test]
    fn memory_bytes_round_trip() {
        let w = 0x0102_0304_0506_0708;
        assert_eq!(word_from_memory_bytes(memory_bytes(w)), w);
    }

    #[test]
    fn page_size_is_a_power_of_two() {
        assert!(page_size().is_power_of_two());
    }
}
