//! The `prism` engine through the facade: `Db::open` creates its pool and flash directory
//! from the options, the manifest pins it, and a reopen recovers it.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

use tierkv::{Db, ENGINES};
use tierkv_core::{ByteSize, DurabilityMode, Error, Options};

fn options() -> Options {
    Options::default()
        .engine("prism@pwb_count=2,pwb_size=64KiB,chunk_size=64KiB")
        .pmem_size(ByteSize::mib(16))
        .pmem_mode(DurabilityMode::Volatile)
        .flash_size(ByteSize::mib(8))
        .dram_budget(ByteSize::mib(4))
}

#[test]
fn prism_is_the_default_engine_listed_first() {
    assert_eq!(ENGINES.first().map(|d| d.name), Some("prism"));
}

#[test]
fn prism_through_the_facade_creates_recovers_and_checks() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    {
        let db = Db::open(dir.path(), options()).unwrap();
        assert!(db.created());
        assert_eq!(db.manifest().engine, "prism");
        for i in 0..500u32 {
            db.put(format!("k{i:04}").as_bytes(), &i.to_le_bytes().repeat(30))
                .unwrap();
        }
        db.delete(b"k0007").unwrap();
        db.flush().unwrap();
        db.put(b"k0001", b"after the flush").unwrap();
        let s = db.stats();
        assert!(s.flash_bytes_written > 0 && s.pmem_bytes_written > 0);
        db.close().unwrap();
    }
    let db = Db::open_existing(dir.path(), options()).unwrap();
    assert!(!db.created());
    assert_eq!(
        db.get(b"k0001").unwrap().as_deref(),
        Some(&b"after the flush"[..])
    );
    assert_eq!(db.get(b"k0007").unwrap(), None);
    assert_eq!(
        db.get(b"k0499").unwrap(),
        Some(499u32.to_le_bytes().repeat(30))
    );
    let rows = db.scan(&b"k0005"[..]..&b"k0010"[..], 100).unwrap();
    let keys: Vec<_> = rows
        .iter()
        .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
        .collect();
    assert_eq!(keys, ["k0005", "k0006", "k0008", "k0009"]);
    let lines = db.check().unwrap();
    assert!(
        lines.iter().any(|l| l.contains("well-coupled")),
        "{lines:?}"
    );
    assert!(db.stats().recovery_micros > 0);
}

#[test]
fn opening_a_prism_store_as_dram_is_refused() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    drop(Db::open(dir.path(), options()).unwrap());
    let e = Db::open(dir.path(), Options::default().engine("dram")).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
}

#[test]
fn a_pmem_pool_smaller_than_the_engine_needs_is_refused_and_leaves_nothing() {
    let d = tempfile::tempdir().unwrap();
    let o = options().pmem_size(tierkv::ByteSize::mib(1));
    let e = Db::open(d.path(), o).unwrap_err();
    assert!(matches!(e, tierkv::Error::InvalidArgument(_)), "{e}");
    assert!(e.to_string().contains("smaller than"), "{e}");
    // Nothing was created: no manifest, no pool file; a correct open afterwards works.
    assert!(!d.path().join("MANIFEST").exists());
    assert!(!d.path().join("pmem.pool").exists());
    drop(Db::open(d.path(), options()).unwrap());
}
