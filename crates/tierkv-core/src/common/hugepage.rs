//! Zeroed blocks of words in anonymous memory the kernel may back with huge pages.
//!
//! Why: an engine's DRAM structures that are searched at random (a MemTable's skiplist of
//! tens of MiB) take a TLB miss on nearly every node visit with 4 KiB pages; with 2 MiB
//! pages the whole block fits in the TLB. Linux backs an anonymous mapping with
//! transparent huge pages when it is asked to (`madvise(MADV_HUGEPAGE)`, honoured when
//! `/sys/kernel/mm/transparent_hugepage/enabled` is `always` or `madvise`); elsewhere, or
//! when the kernel declines, the block is ordinary memory and behaves the same.
//!
//! # Soundness
//! A [`WordBlock`] owns a private anonymous mapping of `len * 8` bytes:
//! 1. the kernel zero-fills it, and zero is a valid `AtomicU64`;
//! 2. it is page-aligned, so every word is 8-byte aligned;
//! 3. it is only ever handed out as `&[AtomicU64]` (shared access through `UnsafeCell`),
//!    never as `&mut` memory the compiler could assume unaliased;
//! 4. `munmap` runs only in `Drop`, so no reference outlives it.
//!
//! Thread safety: `Send + Sync` like `Box<[AtomicU64]>`.

use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

/// A zeroed block of words (see the module doc).
pub struct WordBlock {
    base: NonNull<AtomicU64>,
    len: usize,
}

// SAFETY: a WordBlock is an owned allocation accessed only through `&[AtomicU64]`,
// exactly like `Box<[AtomicU64]>`, which is Send and Sync.
#[allow(unsafe_code)]
unsafe impl Send for WordBlock {}
// SAFETY: as above.
#[allow(unsafe_code)]
unsafe impl Sync for WordBlock {}

impl WordBlock {
    /// `len` zeroed words, with huge pages requested where the kernel offers them. Fails
    /// only if the kernel has no memory for the mapping.
    #[allow(unsafe_code)]
    pub fn zeroed(len: usize) -> std::io::Result<WordBlock> {
        if len == 0 {
            return Ok(WordBlock::default());
        }
        let bytes = len
            .checked_mul(8)
            .ok_or_else(|| std::io::Error::other("word block too large"))?;
        let p = map_zeroed(bytes).ok_or_else(std::io::Error::last_os_error)?;
        Ok(WordBlock {
            base: p.cast::<AtomicU64>(),
            len,
        })
    }
}

/// A fresh private anonymous mapping of `bytes` (> 0) bytes: page aligned, zero-filled by
/// the kernel as it is first touched, transparent huge pages asked for; `None` if the
/// kernel refuses it (`errno` says why). The caller owns it and unmaps it
/// (`libc::munmap(p, bytes)`).
#[allow(unsafe_code)]
pub(crate) fn map_zeroed(bytes: usize) -> Option<NonNull<u8>> {
    // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    #[cfg(target_os = "linux")]
    // SAFETY: advice on the range just mapped; it changes no contents. A refusal (a
    // kernel without THP) leaves ordinary pages, which is fine.
    unsafe {
        libc::madvise(p, bytes, libc::MADV_HUGEPAGE);
    }
    NonNull::new(p.cast::<u8>())
}

impl Default for WordBlock {
    /// An empty block (no mapping).
    fn default() -> WordBlock {
        WordBlock {
            base: NonNull::dangling(),
            len: 0,
        }
    }
}

impl Deref for WordBlock {
    type Target = [AtomicU64];

    #[allow(unsafe_code)]
    fn deref(&self) -> &[AtomicU64] {
        // SAFETY: `base` points at `len` zero-initialized, aligned words owned by self
        // (module doc 1-4); the slice borrows self, so it cannot outlive the mapping. For
        // len 0 the dangling pointer is aligned and non-null, as an empty slice needs.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr(), self.len) }
    }
}

impl Drop for WordBlock {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        if self.len == 0 {
            return;
        }
        // SAFETY: unmaps exactly the mapping made in `zeroed`; no reference into it
        // remains (they borrow self, which is being dropped).
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len * 8);
        }
    }
}

impl std::fmt::Debug for WordBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WordBlock({} words)", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn a_block_reads_zero_and_keeps_what_is_stored() {
        let b = WordBlock::zeroed(1 << 20).unwrap();
        assert_eq!(b.len(), 1 << 20);
        assert!(
            b.iter()
                .step_by(4099)
                .all(|w| w.load(Ordering::Relaxed) == 0)
        );
        b[12345].store(7, Ordering::Relaxed);
        assert_eq!(b[12345].load(Ordering::Relaxed), 7);
        assert_eq!(b.as_ptr() as usize % 4096, 0, "page-aligned");
        let empty = WordBlock::zeroed(0).unwrap();
        assert!(empty.is_empty());
    }
}
