//! Issue 23, finding 3 (the engine side is prism's, issue 21/22): a prism store whose pmem
//! pool filled up with small values must take new keys again after half of them are deleted
//! and the store is reopened. Today it takes 32 (`tierkv-cli`'s report of issue 23 has the
//! output).

use tierkv::{ByteSize, Db, DurabilityMode, Error, Options};

fn options() -> Options {
    Options::default()
        .engine("prism")
        .pmem_size(ByteSize::mib(8))
        .pmem_mode(DurabilityMode::Volatile)
        .flash_size(ByteSize::mib(64))
}

#[test]
fn a_full_prism_pool_takes_new_keys_after_deletes_and_a_reopen() {
    let d = tempfile::tempdir().unwrap();
    let db = Db::open(d.path(), options()).unwrap();
    let value = [b'x'; 100];
    let mut n = 0u32;
    let refusal = loop {
        match db.put(format!("key{n:08}").as_bytes(), &value) {
            Ok(()) => n += 1,
            Err(e) => break e,
        }
        assert!(n < 10_000_000, "an 8 MiB pool never filled");
    };
    assert!(matches!(refusal, Error::NoSpace { .. }), "{refusal}");
    for i in (0..n).step_by(2) {
        db.delete(format!("key{i:08}").as_bytes()).unwrap();
    }
    db.close().unwrap();
    drop(db);
    let db = Db::open_existing(d.path(), options()).unwrap();
    for i in 0..100 {
        db.put(format!("new{i:08}").as_bytes(), &value)
            .unwrap_or_else(|e| panic!("new key {i} after deleting {} of {n}: {e}", n / 2));
    }
    assert_eq!(db.get(b"key00000001").unwrap(), Some(value.to_vec()));
    assert_eq!(db.get(b"key00000000").unwrap(), None);
}
