//! Flash I/O requests: [`IoRequest`], [`IoBatch`], [`IoCompletion`], the
//! [`CompletionNotifier`] of the asynchronous path, and the crate-internal [`RawOp`] that
//! both back ends (io_uring and pread/pwrite) execute.
//!
//! Invariants every request satisfies before it reaches the kernel ([`check_span`]):
//! offset and length are multiples of [`FLASH_BLOCK`], the length is not zero and at most
//! [`MAX_IO_LEN`], and the span lies inside the file. A request that breaks one of them
//! completes with [`Error::InvalidArgument`] without touching the device.
//!
//! A transfer either moves every byte of the span or fails: the kernel may move fewer bytes
//! than asked (a *short* transfer); [`RawOp::advance`] then resubmits the rest, and a
//! transfer of zero bytes is an error (a read past the end of the file is never returned as
//! zero-filled data).
//!
//! Thread safety: requests and batches are plain owned values (`Send`); a [`RawOp`] holds a
//! raw pointer into a buffer that its owner keeps alive and unaliased until the operation
//! completes (see the SAFETY comments at each submission site).
//!
//! This is DESIGN §4 ("reads and writes submitted through io_uring in batches"), shaped for
//! PRISM's thread combining (PRISM §4.3: a leader submits up to a queue depth of reads at
//! once, a completion thread hands each result to its waiter).

use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;

use super::aligned::{AlignedBuf, FLASH_BLOCK};
use super::file::FlashFile;
use crate::api::error::{Error, Result};

/// The largest single request (1 GiB), so that lengths fit the kernel's 32-bit fields.
pub const MAX_IO_LEN: usize = 1 << 30;

/// What a request does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IoOp {
    /// Read `buf.len()` bytes at `offset` into `buf`.
    Read,
    /// Write `buf` at `offset`.
    Write,
}

impl IoOp {
    /// The operation's name in errors ("read", "write").
    pub fn name(self) -> &'static str {
        match self {
            IoOp::Read => "read",
            IoOp::Write => "write",
        }
    }
}

/// One read or write of a whole buffer at an offset of a flash file. The request owns its
/// buffer while it is in flight and gives it back in its [`IoCompletion`], so buffers can
/// be reused without allocation.
#[derive(Debug)]
pub struct IoRequest {
    /// The file.
    pub file: FlashFile,
    /// Read or write.
    pub op: IoOp,
    /// Byte offset in the file (a multiple of 4 KiB).
    pub offset: u64,
    /// The data to write, or the buffer to read into (its length is the request's length).
    pub buf: AlignedBuf,
    /// The caller's label for this request (for example the index of the waiting thread);
    /// returned unchanged in the completion.
    pub tag: u64,
}

impl IoRequest {
    /// A read of `buf.len()` bytes at `offset`.
    pub fn read(file: &FlashFile, offset: u64, buf: AlignedBuf, tag: u64) -> IoRequest {
        IoRequest {
            file: file.clone(),
            op: IoOp::Read,
            offset,
            buf,
            tag,
        }
    }

    /// A write of `buf` at `offset`.
    pub fn write(file: &FlashFile, offset: u64, buf: AlignedBuf, tag: u64) -> IoRequest {
        IoRequest {
            file: file.clone(),
            op: IoOp::Write,
            offset,
            buf,
            tag,
        }
    }

    /// The raw operation over this request's buffer.
    pub(crate) fn raw(&mut self) -> RawOp {
        let ptr = match self.op {
            IoOp::Read => self.buf.as_mut_ptr(),
            // NOTE: the kernel only reads from a write's buffer.
            IoOp::Write => self.buf.as_ptr().cast_mut(),
        };
        RawOp::new(
            self.file.raw_fd(),
            self.op,
            self.offset,
            ptr,
            self.buf.len(),
        )
    }
}

/// A finished request: the request (with its buffer, filled for a read) and its outcome.
#[derive(Debug)]
pub struct IoCompletion {
    /// The request as submitted.
    pub request: IoRequest,
    /// `Ok` when every byte was transferred.
    pub result: Result<()>,
}

/// Receives completions of the asynchronous path ([`super::FlashDevice::submit_async`]),
/// one call per request, on the device's completion thread.
///
/// The call must be short and must not block on the completion of other flash I/O of the
/// same device (it runs on the thread that reaps those completions); it may submit more
/// requests. A panic in `complete` is caught, poisons the device, and is reported as an
/// error to later writers.
pub trait CompletionNotifier: Send + Sync {
    /// One request finished.
    fn complete(&self, completion: IoCompletion);
}

impl<F: Fn(IoCompletion) + Send + Sync> CompletionNotifier for F {
    fn complete(&self, completion: IoCompletion) {
        self(completion);
    }
}

/// A shared notifier, as the asynchronous path takes it.
pub type Notifier = Arc<dyn CompletionNotifier>;

/// Hands a completion to its notifier. A panicking notifier poisons the request's device
/// instead of killing the thread that delivers completions (which would strand every other
/// request in flight).
pub(crate) fn deliver(notifier: &Notifier, completion: IoCompletion) {
    let core = completion.request.file.core().clone();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        notifier.complete(completion);
    }));
    if outcome.is_err() {
        core.poison("a flash completion notifier panicked".into());
    }
}

/// Requests submitted together: through io_uring they reach the kernel in one
/// `io_uring_enter` per queue depth's worth of requests.
#[derive(Debug, Default)]
pub struct IoBatch {
    pub(crate) requests: Vec<IoRequest>,
}

impl IoBatch {
    /// An empty batch.
    pub fn new() -> IoBatch {
        IoBatch::default()
    }

    /// An empty batch with room for `n` requests.
    pub fn with_capacity(n: usize) -> IoBatch {
        IoBatch {
            requests: Vec::with_capacity(n),
        }
    }

    /// Adds a request.
    pub fn push(&mut self, request: IoRequest) {
        self.requests.push(request);
    }

    /// Adds a read of `buf.len()` bytes at `offset` of `file`.
    pub fn read(&mut self, file: &FlashFile, offset: u64, buf: AlignedBuf, tag: u64) {
        self.push(IoRequest::read(file, offset, buf, tag));
    }

    /// Adds a write of `buf` at `offset` of `file`.
    pub fn write(&mut self, file: &FlashFile, offset: u64, buf: AlignedBuf, tag: u64) {
        self.push(IoRequest::write(file, offset, buf, tag));
    }

    /// The number of requests.
    pub fn len(&self) -> usize {
        self.requests.len()
    }

    /// True when the batch holds no request.
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }
}

/// Checks that `[offset, offset + len)` is an aligned, non-empty span inside `file`.
pub(crate) fn check_span(file: &FlashFile, op: IoOp, offset: u64, len: usize) -> Result<()> {
    let path = file.path().display();
    let block = FLASH_BLOCK as u64;
    if !offset.is_multiple_of(block) {
        return Err(Error::invalid(format!(
            "{} at offset {offset} of {path}: offsets must be multiples of {FLASH_BLOCK}",
            op.name()
        )));
    }
    if len == 0 || !len.is_multiple_of(FLASH_BLOCK) || len > MAX_IO_LEN {
        return Err(Error::invalid(format!(
            "{} of {len} bytes at {path}: lengths must be non-zero multiples of {FLASH_BLOCK} \
             and at most {MAX_IO_LEN}",
            op.name()
        )));
    }
    let end = offset.checked_add(len as u64);
    match end {
        Some(end) if end <= file.len() => Ok(()),
        _ => Err(Error::invalid(format!(
            "{} of {len} bytes at offset {offset} runs past the end of {path} ({} bytes)",
            op.name(),
            file.len()
        ))),
    }
}

/// One transfer as a back end executes it: a file descriptor, an offset and a buffer span
/// that shrinks as short transfers make progress.
#[derive(Debug)]
pub(crate) struct RawOp {
    pub(crate) fd: RawFd,
    pub(crate) op: IoOp,
    pub(crate) offset: u64,
    pub(crate) ptr: *mut u8,
    pub(crate) remaining: usize,
    pub(crate) total: usize,
}

// SAFETY: a RawOp is only a description (fd, pointer, length); the buffer it points into is
// owned by the request slot or borrowed by the synchronous caller, which keeps it alive
// and unaliased until the operation completes, whichever thread executes it.
#[expect(unsafe_code, reason = "RawOp carries a buffer pointer across threads")]
unsafe impl Send for RawOp {}

/// What the back end does next with an operation after the kernel answered.
#[derive(Debug)]
pub(crate) enum Step {
    /// Every byte moved.
    Done,
    /// Part moved (or the kernel asked to retry): submit the rest.
    Again,
    /// The operation failed.
    Failed(io::Error),
}

impl RawOp {
    /// An operation over the `len` bytes at `ptr`, which the caller keeps alive and
    /// unaliased (for a read) until the operation completes.
    pub(crate) fn new(fd: RawFd, op: IoOp, offset: u64, ptr: *mut u8, len: usize) -> RawOp {
        RawOp {
            fd,
            op,
            offset,
            ptr,
            remaining: len,
            total: len,
        }
    }

    /// Accounts for the kernel's answer `res` (bytes moved, or a negated errno).
    pub(crate) fn advance(&mut self, res: i64) -> Step {
        if res < 0 {
            let errno = i32::try_from(-res).unwrap_or(libc::EIO);
            if errno == libc::EINTR || errno == libc::EAGAIN {
                return Step::Again;
            }
            return Step::Failed(io::Error::from_raw_os_error(errno));
        }
        let moved = usize::try_from(res).unwrap_or(usize::MAX);
        if moved == 0 {
            return Step::Failed(self.zero_transfer_error());
        }
        if moved >= self.remaining {
            self.remaining = 0;
            return Step::Done;
        }
        self.remaining -= moved;
        self.offset += moved as u64;
        // SAFETY: `moved < remaining`, so the new pointer stays inside the same buffer.
        #[expect(unsafe_code, reason = "advancing within the request's buffer")]
        {
            self.ptr = unsafe { self.ptr.add(moved) };
        }
        Step::Again
    }

    fn zero_transfer_error(&self) -> io::Error {
        match self.op {
            IoOp::Read => io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "short read: the file ends before offset {} ({} of {} bytes read)",
                    self.offset,
                    self.total - self.remaining,
                    self.total
                ),
            ),
            IoOp::Write => io::Error::new(
                io::ErrorKind::WriteZero,
                format!(
                    "short write: the device accepted no bytes at offset {} ({} of {} written)",
                    self.offset,
                    self.total - self.remaining,
                    self.total
                ),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(len: usize) -> (AlignedBuf, RawOp) {
        let mut b = AlignedBuf::new(len).unwrap();
        let r = RawOp::new(3, IoOp::Read, 4096, b.as_mut_ptr(), len);
        (b, r)
    }

    #[test]
    fn short_transfer_advances_pointer_and_offset() {
        let (b, mut r) = op(8192);
        assert!(matches!(r.advance(4096), Step::Again));
        assert_eq!(r.remaining, 4096);
        assert_eq!(r.offset, 8192);
        assert_eq!(r.ptr as usize, b.as_ptr() as usize + 4096);
        assert!(matches!(r.advance(4096), Step::Done));
    }

    #[test]
    fn zero_byte_read_is_an_eof_error_not_zero_fill() {
        let (_b, mut r) = op(4096);
        match r.advance(0) {
            Step::Failed(e) => assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof),
            s => panic!("{s:?}"),
        }
    }

    #[test]
    fn negative_result_is_the_errno_and_eintr_retries() {
        let (_b, mut r) = op(4096);
        match r.advance(-i64::from(libc::EIO)) {
            Step::Failed(e) => assert_eq!(e.raw_os_error(), Some(libc::EIO)),
            s => panic!("{s:?}"),
        }
        assert!(matches!(r.advance(-i64::from(libc::EINTR)), Step::Again));
        assert_eq!(r.remaining, 4096);
    }
}
