//! The benchmark file ([`Target`]): opened through the flash tier in `--dir`, created and
//! written in full on first use (so that reads hit allocated, written blocks rather than
//! the filesystem's unwritten extents, which read as zeros without touching the device), and
//! reused by later runs and by fio.
//!
//! Thread safety: used from the benchmark's thread.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use indicatif::ProgressBar;
use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};
use tierkv_core::media::flash::{AlignedBuf, FlashDevice, FlashFile, IoRequest};
use tierkv_core::{ByteSize, Error, FlashOptions};

use crate::args::IoBenchArgs;

/// Requests of 1 MiB, 16 in flight, lay the file out.
const LAYOUT_BLOCK: usize = 1 << 20;
const LAYOUT_DEPTH: usize = 16;

/// The device and the file the jobs run on.
pub(crate) struct Target {
    pub(crate) dev: Arc<FlashDevice>,
    pub(crate) file: FlashFile,
    pub(crate) path: PathBuf,
}

/// Opens the device in `args.dir` with queues of at least `max_qd` entries and opens,
/// or creates and lays out, the benchmark file.
pub(crate) fn prepare(
    args: &IoBenchArgs,
    max_qd: u32,
    progress: impl Fn(u64) -> ProgressBar,
) -> anyhow::Result<Target> {
    let opts = FlashOptions {
        dirs: Vec::new(),
        // NOTE: the benchmark has no budget of its own; the filesystem's space is the limit.
        size: ByteSize(u64::MAX / 2),
        direct_io: true,
        io_backend: args.backend,
        queue_depth: max_qd.next_power_of_two().max(LAYOUT_DEPTH as u32),
    };
    let dev = FlashDevice::open(&args.dir, &opts)
        .with_context(|| format!("opening {} as a flash device", args.dir.display()))?;
    let size = args.size.bytes();
    let existing = match dev.open_file(&args.file) {
        Ok(f) if f.len() == size => Some(f),
        Ok(_) => {
            dev.remove_file(&args.file)?;
            None
        }
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e.into()),
    };
    let file = match existing {
        Some(f) => f,
        None => {
            let f = dev.create_file(&args.file, size)?;
            lay_out(&dev, &f, &progress(size))?;
            f.sync()?;
            dev.sync_dir()?;
            f
        }
    };
    let path = file.path().to_owned();
    Ok(Target { dev, file, path })
}

/// Writes the whole file once with random data, sequentially.
fn lay_out(dev: &FlashDevice, file: &FlashFile, progress: &ProgressBar) -> anyhow::Result<()> {
    let mut rng = SmallRng::seed_from_u64(0x1a70_u64);
    let mut q = dev.queue();
    let mut next = 0u64;
    let mut out = Vec::with_capacity(LAYOUT_DEPTH);
    for tag in 0..LAYOUT_DEPTH {
        if next >= file.len() {
            break;
        }
        let mut buf = AlignedBuf::new(LAYOUT_BLOCK)?;
        rng.fill_bytes(&mut buf);
        q.push(IoRequest::write(file, next, buf, tag as u64));
        next += LAYOUT_BLOCK as u64;
    }
    while q.outstanding() > 0 {
        q.wait(1, &mut out)?;
        for c in out.drain(..) {
            c.result.context("laying out the benchmark file")?;
            progress.inc(LAYOUT_BLOCK as u64);
            if next < file.len() {
                q.push(IoRequest::write(file, next, c.request.buf, c.request.tag));
                next += LAYOUT_BLOCK as u64;
            }
        }
    }
    progress.finish_and_clear();
    Ok(())
}
