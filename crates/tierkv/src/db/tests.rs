//! Facade tests: creation, reopen, manifest mismatches, limits, locking.

use super::*;
use std::ops::Bound;
use tierkv_core::format::manifest::MANIFEST_FILE;

fn opts() -> Options {
    Options::default().engine("dram:btree")
}

#[test]
fn creates_then_reopens_with_manifest() {
    let d = tempfile::tempdir().unwrap();
    let db = Db::open(d.path(), opts()).unwrap();
    assert!(db.created());
    db.put(b"a", b"1").unwrap();
    drop(db);
    assert!(d.path().join(MANIFEST_FILE).exists());
    let db = Db::open_existing(d.path(), opts()).unwrap();
    assert!(!db.created());
    assert_eq!(db.manifest().engine, "dram:btree");
}

#[test]
fn default_variant_is_pinned_in_manifest() {
    let d = tempfile::tempdir().unwrap();
    drop(Db::open(d.path(), Options::default().engine("dram")).unwrap());
    // "dram" means "dram:btree": both open the same store.
    drop(Db::open(d.path(), Options::default().engine("dram:btree")).unwrap());
    let e = Db::open(d.path(), Options::default().engine("dram:hash")).unwrap_err();
    assert!(e.to_string().contains("holds a dram:btree store"), "{e}");
}

#[test]
fn missing_store_is_an_error_without_create() {
    let d = tempfile::tempdir().unwrap();
    let e = Db::open_existing(d.path().join("nope"), opts()).unwrap_err();
    assert!(matches!(e, Error::NoStore(_)), "{e}");
    assert!(
        !d.path().join("nope").exists(),
        "open_existing must not create the directory"
    );
    let e = Db::open_existing(d.path(), opts()).unwrap_err();
    assert!(matches!(e, Error::NoStore(_)), "{e}");
}

#[test]
fn unknown_engine_and_variant_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let e = Db::open(d.path(), Options::default().engine("nosuch")).unwrap_err();
    assert!(e.to_string().contains("unknown engine \"nosuch\""), "{e}");
    let e = Db::open(d.path(), Options::default().engine("dram:nosuch")).unwrap_err();
    assert!(e.to_string().contains("no variant"), "{e}");
    let e = Db::open(d.path(), Options::default().engine("dram@bogus=1")).unwrap_err();
    assert!(e.to_string().contains("unknown option"), "{e}");
}

#[test]
fn truncated_and_corrupt_manifests_are_errors_not_reformats() {
    let d = tempfile::tempdir().unwrap();
    drop(Db::open(d.path(), opts()).unwrap());
    let path = d.path().join(MANIFEST_FILE);
    let good = fs::read(&path).unwrap();
    fs::write(&path, &good[..good.len() / 2]).unwrap();
    let e = Db::open(d.path(), opts()).unwrap_err();
    assert!(e.is_corruption(), "{e}");
    let mut bad = good.clone();
    let n = bad.len() - 3;
    bad[n] ^= 0x20;
    fs::write(&path, &bad).unwrap();
    let e = Db::open(d.path(), opts()).unwrap_err();
    assert!(e.is_corruption(), "{e}");
    // The damaged manifest is still there: nothing re-formatted the directory.
    assert_eq!(fs::read(&path).unwrap(), bad);
}

#[test]
fn limits_are_checked_before_the_engine() {
    let d = tempfile::tempdir().unwrap();
    let db = Db::open(
        d.path(),
        opts().limits(Limits {
            max_key_len: 8,
            max_value_len: 16,
        }),
    )
    .unwrap();
    assert!(matches!(db.put(b"", b"x"), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        db.put(&[b'k'; 9], b"x"),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        db.put(b"k", &[0; 17]),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(db.get(&[b'k'; 9]), Err(Error::InvalidArgument(_))));
    assert!(matches!(db.delete(b""), Err(Error::InvalidArgument(_))));
    db.put(&[b'k'; 8], &[0; 16]).unwrap();
    // Default limits: 1 KiB keys, 1 MiB values.
    let d2 = tempfile::tempdir().unwrap();
    let db = Db::open(d2.path(), opts()).unwrap();
    db.put(&[1; 1024], &vec![0; 1 << 20]).unwrap();
    assert!(db.put(&[1; 1025], b"").is_err());
    assert!(db.put(b"k", &vec![0; (1 << 20) + 1]).is_err());
}

#[test]
fn second_open_of_a_directory_is_locked() {
    let d = tempfile::tempdir().unwrap();
    let _db = Db::open(d.path(), opts()).unwrap();
    let e = Db::open(d.path(), opts()).unwrap_err();
    assert!(matches!(e, Error::Locked(_)), "{e}");
}

#[test]
fn scan_honours_range_bounds() {
    let d = tempfile::tempdir().unwrap();
    let db = Db::open(d.path(), opts()).unwrap();
    for k in ["a", "b", "c", "d"] {
        db.put(k.as_bytes(), b"v").unwrap();
    }
    let keys = |rows: Vec<KvPair>| {
        rows.into_iter()
            .map(|(k, _)| String::from_utf8(k).unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(keys(db.scan(&b"b"[..].., 10).unwrap()), ["b", "c", "d"]);
    assert_eq!(keys(db.scan(&b"b"[..]..&b"d"[..], 10).unwrap()), ["b", "c"]);
    assert_eq!(
        keys(db.scan(&b"b"[..]..=&b"d"[..], 10).unwrap()),
        ["b", "c", "d"]
    );
    assert_eq!(keys(db.scan::<&[u8], _>(.., 2).unwrap()), ["a", "b"]);
    assert_eq!(
        keys(
            db.scan::<&[u8], _>((Bound::Excluded(&b"b"[..]), Bound::Unbounded), 10)
                .unwrap()
        ),
        ["c", "d"]
    );
}

#[test]
fn path_that_is_a_file_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("file");
    fs::write(&f, b"x").unwrap();
    assert!(matches!(
        Db::open(&f, opts()),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn open_with_engine_opens_an_unregistered_descriptor_named_by_the_spec() {
    static OTHER: EngineDescriptor = EngineDescriptor {
        name: "other",
        ..tierkv_dram::DESCRIPTOR
    };
    let d = tempfile::tempdir().unwrap();
    let e = Db::open_with_engine(d.path(), opts(), &OTHER).unwrap_err();
    assert!(
        e.to_string().contains("does not name the engine other"),
        "{e}"
    );
    let db = Db::open_with_engine(d.path(), Options::default().engine("other"), &OTHER).unwrap();
    assert_eq!(db.manifest().engine, "other:btree");
    db.put(b"k", b"v").unwrap();
    assert_eq!(db.get(b"k").unwrap(), Some(b"v".to_vec()));
}

#[test]
fn the_default_engine_is_the_first_registered_and_persistent() {
    let spec = Options::default().engine_spec().unwrap();
    assert_eq!(spec.name, crate::ENGINES[0].name);
    assert!(
        !crate::ENGINES[0].volatile,
        "the default engine must keep what it acknowledged"
    );
}

#[test]
fn creation_over_another_stores_files_without_a_manifest_is_refused() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join(POOL_FILE), b"someone's pool").unwrap();
    let e = Db::open(d.path(), opts()).unwrap_err();
    assert!(e.to_string().contains("no MANIFEST"), "{e}");
    assert!(!d.path().join(MANIFEST_FILE).exists());
    std::fs::remove_file(d.path().join(POOL_FILE)).unwrap();
    std::fs::create_dir(d.path().join(FLASH_DIR)).unwrap();
    std::fs::write(d.path().join(FLASH_DIR).join("x.vs"), b"data").unwrap();
    let e = Db::open(d.path(), opts()).unwrap_err();
    assert!(e.to_string().contains("flash"), "{e}");
    std::fs::remove_dir_all(d.path().join(FLASH_DIR)).unwrap();
    Db::open(d.path(), opts()).unwrap().close().unwrap();
}
