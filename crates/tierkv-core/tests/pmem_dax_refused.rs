//! Dax mode on a filesystem that is not DAX (tmpfs, or the ext4 of the test machine) is
//! refused with a clear error that names the problem and the alternatives, and leaves no
//! file behind.

mod pmem_common;

use pmem_common::{config, scratch_dir};
use tierkv_core::Error;
use tierkv_core::media::pmem::{DurabilityMode, PmemPool};

fn assert_clear_refusal(e: &Error) {
    let msg = e.to_string();
    assert!(matches!(e, Error::Unsupported(_)), "{msg}");
    assert!(msg.contains("not on a DAX filesystem"), "{msg}");
    assert!(
        msg.contains("msync") && msg.contains("volatile"),
        "suggests the other modes: {msg}"
    );
}

#[test]
fn dax_create_on_a_non_dax_filesystem_fails_clearly() {
    for dir in [scratch_dir(), tempfile::tempdir().unwrap()] {
        let path = dir.path().join("pool");
        let e = PmemPool::create(&config(&path, 1 << 20, DurabilityMode::Dax)).unwrap_err();
        println!("{}: {e}", dir.path().display());
        assert_clear_refusal(&e);
        assert!(!path.exists(), "a refused create leaves no pool file");
    }
}

#[test]
fn dax_open_of_a_pool_on_a_non_dax_filesystem_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool");
    drop(PmemPool::create(&config(&path, 1 << 20, DurabilityMode::Msync)).unwrap());
    let e = PmemPool::open(&config(&path, 0, DurabilityMode::Dax)).unwrap_err();
    assert_clear_refusal(&e);
    // The refusal released the lock: the pool opens in another mode.
    PmemPool::open(&config(&path, 0, DurabilityMode::Msync)).unwrap();
}
