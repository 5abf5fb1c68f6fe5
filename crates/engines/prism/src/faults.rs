//! Test-only fault points (STYLE §7): a unit test arms a point on its own thread, and the
//! next time that thread passes the point the operation fails with an injected I/O error
//! (or runs the test's hook there), so that a failure or a race between two steps can be
//! reproduced deterministically. In non-test builds every point is a no-op the compiler
//! removes.
//!
//! Thread safety: the armed points are thread-local; arming on one thread never affects
//! another (unit tests run in parallel).

#[cfg(not(test))]
use tierkv_core::Result;

/// Where a fault can be injected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Point {
    /// `Hsit::relocate`, before its CAS (the entry is left unchanged).
    HsitRelocateCas,
    /// The persist of `Hsit::relocate`, after its CAS won.
    HsitRelocatePersist,
    /// The persist of `Hsit::publish` (a put's or a delete's new pointer), after its CAS
    /// won (the entry is left dirty).
    HsitPublishPersist,
    /// The start of the key index's `remove`.
    IndexRemove,
    /// PWB reclamation, after a chunk of moved records is written and before their HSIT
    /// entries are moved to it (a hook point).
    ReclaimChunkWritten,
}

#[cfg(not(test))]
#[inline(always)]
pub(crate) fn fail_at(_: Point) -> Result<()> {
    Ok(())
}

#[cfg(not(test))]
#[inline(always)]
pub(crate) fn hook_at(_: Point) {}

#[cfg(test)]
pub(crate) use armed::*;

#[cfg(test)]
mod armed {
    use std::cell::RefCell;

    use tierkv_core::{Error, Result};

    use super::Point;

    type Hook = Box<dyn FnOnce()>;

    /// EIO (no libc dependency in the library for one constant).
    const EIO: i32 = 5;

    thread_local! {
        /// Armed failures: the point and how many passes to let through first.
        static FAILS: RefCell<Vec<(Point, u32)>> = const { RefCell::new(Vec::new()) };
        static HOOKS: RefCell<Vec<(Point, Hook)>> = RefCell::new(Vec::new());
    }

    /// Makes the next pass of this thread through `point` fail.
    pub(crate) fn fail_next(point: Point) {
        fail_nth(point, 1);
    }

    /// Makes the `n`th next pass (1 = the next) of this thread through `point` fail.
    pub(crate) fn fail_nth(point: Point, n: u32) {
        FAILS.with(|f| f.borrow_mut().push((point, n.saturating_sub(1))));
    }

    /// Runs `hook` the next time this thread passes `point`.
    pub(crate) fn hook_next(point: Point, hook: impl FnOnce() + 'static) {
        HOOKS.with(|h| h.borrow_mut().push((point, Box::new(hook))));
    }

    /// A fault point: `Err` if armed (once).
    pub(crate) fn fail_at(point: Point) -> Result<()> {
        let armed = FAILS.with(|f| {
            let mut f = f.borrow_mut();
            let Some(i) = f.iter().position(|(p, _)| *p == point) else {
                return false;
            };
            match &mut f[i].1 {
                0 => {
                    f.remove(i);
                    true
                }
                skip => {
                    *skip -= 1;
                    false
                }
            }
        });
        if armed {
            return Err(Error::io(
                "injected fault",
                format!("{point:?}"),
                std::io::Error::from_raw_os_error(EIO),
            ));
        }
        Ok(())
    }

    /// A hook point: runs the hook armed for it (once), outside any borrow.
    pub(crate) fn hook_at(point: Point) {
        let hook = HOOKS.with(|h| {
            let mut h = h.borrow_mut();
            let at = h.iter().position(|(p, _)| *p == point);
            at.map(|i| h.remove(i).1)
        });
        if let Some(hook) = hook {
            hook();
        }
    }
}
