//! [`AlignedBuf`]: a heap buffer whose start is aligned to [`FLASH_BLOCK`] (4 KiB), as
//! `O_DIRECT` requires (DESIGN §4, "Flash").
//!
//! Invariants:
//! 1. the allocation starts on a 4 KiB boundary and its size (the *capacity*) is a non-zero
//!    multiple of 4 KiB, so a buffer is always safe to hand to the kernel for any length up
//!    to its capacity;
//! 2. `len <= capacity`, and every byte of the capacity is initialised (zeroed at
//!    allocation), so changing the length within the capacity never exposes garbage;
//! 3. the allocation never moves while the buffer lives (moving an `AlignedBuf` moves only
//!    the pointer), so an in-flight io_uring request may keep a raw pointer into it as long
//!    as the buffer is owned by the request's slot.
//!
//! Buffers of [`MAPPED_FROM`] bytes or more (whole flash tables a compaction builds or
//! reads) are private anonymous mappings with transparent huge pages asked for: the kernel
//! zero-fills them as they are first touched, a fault per 2 MiB where it grants huge pages;
//! the global allocator's aligned path instead wrote zeros over fresh pages, a fault per
//! 4 KiB (in a 2M-record PrismDB load that memset and those faults were 12% of the CPU).
//!
//! The *length* need not be a multiple of 4 KiB: a buffer of any length can be built, and the
//! flash tier refuses to submit one whose length is not a multiple of 4 KiB
//! ([`crate::Error::InvalidArgument`]), so a misaligned request is a clear error rather than
//! an `EINVAL` from the kernel.
//!
//! Thread safety: an `AlignedBuf` is a uniquely owned byte buffer (like `Vec<u8>`): `Send`
//! and `Sync`; mutation needs `&mut`.

use std::alloc::{self, Layout};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

use crate::api::error::{Error, Result};

/// The flash tier's alignment and I/O granularity: buffers, offsets and lengths of every
/// request are multiples of this.
pub const FLASH_BLOCK: usize = 4096;

/// A 4 KiB-aligned, zero-initialised heap buffer for `O_DIRECT` I/O.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    /// The allocation's layout: size = capacity (a non-zero multiple of 4 KiB), align 4 KiB.
    layout: Layout,
    /// An anonymous mapping (unmapped on drop) rather than a heap block.
    mapped: bool,
}

/// Capacity from which a buffer is an anonymous mapping rather than a heap allocation.
pub const MAPPED_FROM: usize = 2 << 20;

// SAFETY: `AlignedBuf` owns its allocation exclusively (no aliasing pointers escape except
// through `&self`/`&mut self` borrows), exactly like `Vec<u8>`, which is Send + Sync.
#[expect(unsafe_code, reason = "AlignedBuf owns a raw allocation like Vec<u8>")]
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only allow reads of initialised bytes; see `Send` above.
#[expect(unsafe_code, reason = "AlignedBuf owns a raw allocation like Vec<u8>")]
unsafe impl Sync for AlignedBuf {}

/// Rounds `n` up to a multiple of [`FLASH_BLOCK`], at least one block.
fn round_capacity(n: usize) -> Option<usize> {
    let blocks = n.div_ceil(FLASH_BLOCK).max(1);
    blocks.checked_mul(FLASH_BLOCK)
}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes (capacity rounded up to a multiple of 4 KiB).
    pub fn new(len: usize) -> Result<AlignedBuf> {
        let capacity = round_capacity(len)
            .ok_or_else(|| Error::invalid(format!("buffer of {len} bytes is too large")))?;
        let layout = Layout::from_size_align(capacity, FLASH_BLOCK)
            .map_err(|_| Error::invalid(format!("buffer of {len} bytes is too large")))?;
        let (ptr, mapped) = allocate_zeroed(layout);
        Ok(AlignedBuf {
            ptr,
            len,
            layout,
            mapped,
        })
    }

    /// A buffer holding a copy of `data` (capacity rounded up, the rest zeroed).
    pub fn from_slice(data: &[u8]) -> Result<AlignedBuf> {
        let mut b = AlignedBuf::new(data.len())?;
        b.copy_from_slice(data);
        Ok(b)
    }

    /// The length in bytes (what a request reads or writes).
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the length is zero.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The size of the allocation (a multiple of 4 KiB).
    pub fn capacity(&self) -> usize {
        self.layout.size()
    }

    /// Changes the length within the capacity. Bytes that come into view are whatever the
    /// buffer held there last (zero if never written).
    pub fn set_len(&mut self, len: usize) -> Result<()> {
        if len > self.capacity() {
            return Err(Error::invalid(format!(
                "buffer length {len} exceeds its capacity {}",
                self.capacity()
            )));
        }
        self.len = len;
        Ok(())
    }

    /// True when the length is a whole number of 4 KiB blocks (required for I/O).
    pub fn is_block_multiple(&self) -> bool {
        self.len.is_multiple_of(FLASH_BLOCK)
    }

    /// The start of the buffer, for handing to the kernel.
    pub(crate) fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// The start of the buffer, for handing to the kernel to fill.
    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` points to `capacity() >= len` initialised (zeroed at allocation) bytes
        // owned by `self`; the borrow of `self` keeps them alive and unaliased by writers.
        #[expect(unsafe_code, reason = "view of the owned allocation")]
        unsafe {
            std::slice::from_raw_parts(self.ptr.as_ptr(), self.len)
        }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` guarantees exclusive access.
        #[expect(unsafe_code, reason = "view of the owned allocation")]
        unsafe {
            std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len)
        }
    }
}

impl Clone for AlignedBuf {
    fn clone(&self) -> Self {
        let (ptr, mapped) = allocate_zeroed(self.layout);
        // SAFETY: both allocations are `layout.size()` bytes, initialised, and distinct
        // (`ptr` is fresh), so the copy neither reads uninitialised memory nor overlaps.
        #[expect(unsafe_code, reason = "copy between two owned allocations")]
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr(), ptr.as_ptr(), self.layout.size());
        }
        AlignedBuf {
            ptr,
            len: self.len,
            layout: self.layout,
            mapped,
        }
    }
}

/// Allocates `layout` zeroed; aborts on out-of-memory like every std collection. From
/// [`MAPPED_FROM`] bytes, a private anonymous mapping (page aligned, zero-filled by the
/// kernel, huge pages asked for), or the heap if the kernel refuses the mapping. True when
/// it is a mapping.
fn allocate_zeroed(layout: Layout) -> (NonNull<u8>, bool) {
    if layout.size() >= MAPPED_FROM
        && let Some(p) = crate::common::hugepage::map_zeroed(layout.size())
    {
        return (p, true);
    }
    // SAFETY: every layout built in this module has a non-zero size (>= FLASH_BLOCK).
    #[expect(unsafe_code, reason = "aligned allocation for O_DIRECT")]
    let raw = unsafe { alloc::alloc_zeroed(layout) };
    match NonNull::new(raw) {
        Some(p) => (p, false),
        None => alloc::handle_alloc_error(layout),
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.mapped {
            // SAFETY: `ptr` is the mapping of `layout.size()` bytes that
            // `common::hugepage::map_zeroed` made for this buffer, unmapped only here; no
            // borrow of it outlives `self`.
            #[expect(unsafe_code, reason = "unmap of the owned mapping")]
            unsafe {
                libc::munmap(self.ptr.as_ptr().cast(), self.layout.size());
            }
            return;
        }
        // SAFETY: `ptr` was allocated by `allocate_zeroed` from the heap with
        // `self.layout` and is freed only here.
        #[expect(unsafe_code, reason = "free of the owned allocation")]
        unsafe {
            alloc::dealloc(self.ptr.as_ptr(), self.layout);
        }
    }
}

impl fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .field("capacity", &self.capacity())
            .finish()
    }
}

impl PartialEq for AlignedBuf {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for AlignedBuf {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffer_is_block_aligned_and_zeroed() {
        for len in [0, 1, 4095, 4096, 4097, 65536] {
            let b = AlignedBuf::new(len).unwrap();
            assert_eq!(b.as_ptr() as usize % FLASH_BLOCK, 0, "len {len}");
            assert_eq!(b.len(), len);
            assert!(b.capacity() >= len.max(1));
            assert_eq!(b.capacity() % FLASH_BLOCK, 0);
            assert!(b.iter().all(|&x| x == 0));
        }
    }

    #[test]
    fn from_slice_copies_and_clone_is_deep() {
        let data: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        let a = AlignedBuf::from_slice(&data).unwrap();
        let mut b = a.clone();
        assert_eq!(&a[..], &data[..]);
        b[0] = 0xFF;
        assert_eq!(a[0], 0);
        assert_ne!(a, b);
        assert_eq!(b.as_ptr() as usize % FLASH_BLOCK, 0);
    }

    #[test]
    fn set_len_stays_within_capacity() {
        let mut b = AlignedBuf::new(100).unwrap();
        assert!(!b.is_block_multiple());
        b.set_len(4096).unwrap();
        assert!(b.is_block_multiple());
        let e = b.set_len(8192).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    }

    #[test]
    fn a_large_buffer_is_a_zeroed_aligned_mapping_and_clones_deeply() {
        let mut b = AlignedBuf::new(3 * MAPPED_FROM + 100).unwrap();
        assert!(b.mapped);
        assert_eq!(b.as_ptr() as usize % FLASH_BLOCK, 0);
        assert!(b.iter().all(|&x| x == 0));
        let n = b.len();
        b[n - 1] = 7;
        let c = b.clone();
        assert!(c.mapped);
        assert_eq!(c[n - 1], 7);
        assert!(!AlignedBuf::new(MAPPED_FROM - FLASH_BLOCK).unwrap().mapped);
    }

    #[test]
    fn absurd_length_is_an_error_not_an_abort() {
        assert!(matches!(
            AlignedBuf::new(usize::MAX),
            Err(Error::InvalidArgument(_))
        ));
    }
}
