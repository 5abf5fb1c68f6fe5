//! Scheduling priority of an engine's background threads.
//!
//! An engine whose background work (merges, copies, compactions) can wait may run it at a
//! lower CPU priority than its callers, so that on a machine with fewer cores than busy
//! threads the foreground operations get the CPU first and the background catches up in
//! the gaps. RocksDB offers the same (`Env::LowerThreadPoolCPUPriority`).
//!
//! On Linux a thread's nice value is its own (`setpriority(PRIO_PROCESS, tid)`). Raising
//! it needs no privilege; lowering it again does, so a thread only ever raises its own.
//! Elsewhere the call does nothing.
//!
//! Thread safety: acts on the calling thread only.

/// Highest nice value Linux accepts (the lowest priority).
pub const MAX_NICE: i32 = 19;

/// Raises the calling thread's nice value by `by` (0 ..= [`MAX_NICE`]; 0 leaves it), so
/// the scheduler gives it a smaller share of a contended core. Errors come from the
/// kernel (for example a seccomp filter); callers may ignore them, the thread then runs at
/// its old priority.
pub fn lower_current_thread_priority(by: i32) -> std::io::Result<()> {
    if by <= 0 {
        return Ok(());
    }
    imp::lower(by.min(MAX_NICE))
}

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
mod imp {
    pub(super) fn lower(by: i32) -> std::io::Result<()> {
        // SAFETY: `gettid` has no preconditions and only returns the caller's thread id.
        let tid = unsafe { libc::gettid() };
        // getpriority may legitimately return -1, so errno is cleared and read back.
        // SAFETY: `__errno_location` returns this thread's errno slot, valid for the
        // thread's life; getpriority/setpriority take plain integers and touch no memory
        // of ours.
        let now = unsafe {
            *libc::__errno_location() = 0;
            libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t)
        };
        if now == -1 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(0) {
                return Err(e);
            }
        }
        let want = (now + by).min(super::MAX_NICE);
        // SAFETY: as above.
        let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, want) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// The calling thread's nice value.
    #[cfg(test)]
    pub(super) fn current() -> i32 {
        // SAFETY: as in `lower`.
        unsafe {
            let tid = libc::gettid();
            libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t)
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    pub(super) fn lower(_by: i32) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn a_thread_lowers_only_its_own_priority() {
        let before = imp::current();
        let (inside, after_in_thread) = std::thread::spawn(|| {
            let start = imp::current();
            lower_current_thread_priority(5).unwrap();
            (start, imp::current())
        })
        .join()
        .unwrap();
        assert_eq!(after_in_thread, (inside + 5).min(MAX_NICE));
        assert_eq!(imp::current(), before, "the caller's priority is unchanged");
    }

    #[test]
    fn zero_leaves_the_priority_and_large_values_clamp() {
        std::thread::spawn(|| {
            let start = imp::current();
            lower_current_thread_priority(0).unwrap();
            assert_eq!(imp::current(), start);
            lower_current_thread_priority(1000).unwrap();
            assert_eq!(imp::current(), MAX_NICE);
        })
        .join()
        .unwrap();
    }
}
