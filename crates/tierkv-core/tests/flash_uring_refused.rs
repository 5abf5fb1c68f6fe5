//! Where the kernel refuses io_uring (here: a seccomp filter makes `io_uring_setup` fail with
//! EPERM, as container runtimes do), `IoBackend::Auto` falls back to pread/pwrite and says
//! so exactly once per process, the pread/pwrite path reads back what it wrote, and
//! `IoBackend::Uring` fails to open with a clear error.
//!
//! The filter cannot be removed once installed, so the scenario runs in a child process
//! (this test binary again), and the parent counts the notice in the child's stderr.

mod flash_support;

use flash_support::{data_disk_dir, open, options, pattern, read};
use tierkv_core::media::flash::{FlashDevice, IoBatch, uring_fallback_announced};
use tierkv_core::{Error, IoBackend};

const CHILD_ENV: &str = "TIERKV_FLASH_URING_REFUSED_CHILD";
const NOTICE: &str = "flash I/O uses pread/pwrite instead";

/// Makes `io_uring_setup` fail with EPERM for this thread and the threads it starts.
fn refuse_io_uring() {
    let nr = u32::try_from(libc::SYS_io_uring_setup).expect("syscall number");
    let ret_errno = libc::SECCOMP_RET_ERRNO | (libc::EPERM as u32 & libc::SECCOMP_RET_DATA);
    let mut filter = [
        // A = seccomp_data.nr
        bpf(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0, 0, 0),
        bpf(libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K, 0, 1, nr),
        bpf(libc::BPF_RET | libc::BPF_K, 0, 0, ret_errno),
        bpf(libc::BPF_RET | libc::BPF_K, 0, 0, libc::SECCOMP_RET_ALLOW),
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_mut_ptr(),
    };
    // SAFETY: plain prctl calls; `prog` points to a valid filter for the duration of the
    // call (the kernel copies it).
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        assert_eq!(
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &prog as *const libc::sock_fprog
            ),
            0,
            "seccomp: {}",
            std::io::Error::last_os_error()
        );
    }
}

fn bpf(code: u32, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

/// The child's work.
fn run_without_io_uring() {
    refuse_io_uring();
    let e = tierkv_core::media::flash::uring_supported().expect_err("io_uring is refused");
    assert_eq!(e.raw_os_error(), Some(libc::EPERM));
    for round in 0..3u64 {
        let dir = data_disk_dir();
        let dev = open(dir.path(), IoBackend::Auto, 1 << 20);
        assert_eq!(dev.backend(), IoBackend::Threads, "Auto fell back");
        let f = dev.create_file("p", 64 << 10).expect("create");
        let mut b = IoBatch::new();
        for i in 0..8u64 {
            b.write(&f, i * 8192, pattern(8192, i + round), i);
        }
        for c in dev.submit_and_wait(b).expect("batch") {
            c.result.expect("write");
        }
        for i in 0..8u64 {
            assert!(read(&f, i * 8192, 8192) == pattern(8192, i + round));
        }
        let e = FlashDevice::open(dir.path(), &options(IoBackend::Uring, 1 << 20))
            .expect_err("Uring must not fall back");
        assert!(
            matches!(
                e,
                Error::Io {
                    op: "io_uring_setup",
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(e.raw_os_error(), Some(libc::EPERM));
    }
    assert!(uring_fallback_announced());
}

#[test]
fn auto_falls_back_to_pread_and_says_so_once_where_io_uring_is_refused() {
    if std::env::var_os(CHILD_ENV).is_some() {
        run_without_io_uring();
        return;
    }
    let notices = flash_support::child_stderr_lines(
        "auto_falls_back_to_pread_and_says_so_once_where_io_uring_is_refused",
        CHILD_ENV,
        NOTICE,
    );
    assert_eq!(notices, 1, "the fallback is said exactly once");
}
