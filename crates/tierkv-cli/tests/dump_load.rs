//! `tierkv dump` / `tierkv load` (issue 23, finding 10) and a scan that goes on past a
//! damaged value (finding 9): a round trip on an intact store, and a partial dump of a
//! store with one damaged flash value that names the key it skipped.

use std::path::Path;
use std::process::Output;

mod common;

use common::stderr_of as err;

fn tierkv(args: &[&str], dir: &Path) -> Output {
    common::tierkv_in(dir, args)
}

const SMALL: [&str; 6] = [
    "--engine",
    "prism",
    "--pmem-size",
    "16MiB",
    "--flash-size",
    "16MiB",
];

/// A prism store with keys k00..k29 holding 20,000-byte values `k<i>` repeated (on flash after
/// the last close), plus `bin` = bytes 0..=255.
fn filled_store(dir: &Path) {
    let d = tempfile::tempdir().expect("test setup");
    let mut text = String::from("# tierkv dump v1 (test input)\n");
    for i in 0..30 {
        let k = format!("k{i:02}");
        let v = k.repeat(20_000 / k.len());
        text.push_str(&format!("{}\t{}\n", hex(k.as_bytes()), hex(v.as_bytes())));
    }
    let bin: Vec<u8> = (0..=255).collect();
    text.push_str(&format!("{}\t{}\n", hex(b"bin"), hex(&bin)));
    let input = d.path().join("in.dump");
    std::fs::write(&input, text).expect("test setup");
    let mut args = vec!["load", "--in", input.to_str().expect("test setup")];
    args.extend_from_slice(&SMALL);
    let o = tierkv(&args, dir);
    assert!(o.status.success(), "{}", err(&o));
    assert!(err(&o).contains("loaded 31 records"), "{}", err(&o));
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn records(dump: &str) -> Vec<&str> {
    dump.lines().filter(|l| !l.starts_with('#')).collect()
}

#[test]
fn dump_then_load_round_trips_an_intact_store() {
    let d = tempfile::tempdir().expect("test setup");
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    filled_store(&a);
    let o = tierkv(&["dump"], &a);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let first = String::from_utf8(o.stdout).expect("test setup");
    assert!(first.starts_with("# tierkv dump v1"), "{first}");
    let recs = records(&first);
    assert_eq!(recs.len(), 31);
    let mut sorted = recs.clone();
    sorted.sort_unstable();
    assert_eq!(recs, sorted, "a dump is in key order");
    let file = d.path().join("a.dump");
    std::fs::write(&file, &first).expect("test setup");
    let mut args = vec!["load", "--in", file.to_str().expect("test setup")];
    args.extend_from_slice(&SMALL);
    let o = tierkv(&args, &b);
    assert!(o.status.success(), "{}", err(&o));
    let o = tierkv(&["dump"], &b);
    let second = String::from_utf8(o.stdout).expect("test setup");
    assert_eq!(records(&first), records(&second));
    let o = tierkv(&["get", "--hex", &hex(b"bin")], &b);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        hex(&(0..=255).collect::<Vec<u8>>())
    );
}

/// Damages the first byte of `needle` in the flash files of `store`.
fn damage_flash(store: &Path, needle: &[u8]) {
    for e in std::fs::read_dir(store.join("flash")).expect("test setup") {
        let p = e.expect("test setup").path();
        let mut b = std::fs::read(&p).expect("test setup");
        if let Some(at) = b.windows(needle.len()).position(|w| w == needle) {
            b[at + 10] ^= 0xff;
            std::fs::write(&p, b).expect("test setup");
            return;
        }
    }
    panic!("no flash file holds the value");
}

#[test]
fn a_damaged_value_is_skipped_and_named_by_dump_and_scan() {
    let d = tempfile::tempdir().expect("test setup");
    let a = d.path().join("a");
    filled_store(&a);
    damage_flash(&a, "k07".repeat(8).as_bytes());
    let o = tierkv(&["get", "k07"], &a);
    assert_eq!(
        o.status.code(),
        Some(1),
        "the damage is not detected: {}",
        err(&o)
    );
    assert!(err(&o).contains("flash"), "{}", err(&o));

    let o = tierkv(&["dump"], &a);
    assert_eq!(o.status.code(), Some(4), "{}", err(&o));
    let text = String::from_utf8(o.stdout.clone()).expect("test setup");
    assert_eq!(records(&text).len(), 30, "{}", err(&o));
    assert!(
        text.contains(&format!("# skipped {}: ", hex(b"k07"))),
        "the dump should name the damaged key: {text}"
    );
    assert!(err(&o).contains("skipped 1 damaged"), "{}", err(&o));
    // What was readable loads back into a new store.
    let file = d.path().join("partial.dump");
    std::fs::write(&file, &text).expect("test setup");
    let mut args = vec!["load", "--in", file.to_str().expect("test setup")];
    args.extend_from_slice(&SMALL);
    let b = d.path().join("b");
    assert!(tierkv(&args, &b).status.success());
    assert_eq!(tierkv(&["get", "k08"], &b).status.code(), Some(0));
    assert_eq!(tierkv(&["get", "k07"], &b).status.code(), Some(3));

    // A scan prints every readable pair and names the damaged one.
    let o = tierkv(&["scan", "--limit", "1000"], &a);
    assert_eq!(o.status.code(), Some(4), "{}", err(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 30);
    assert!(err(&o).contains(&hex(b"k07")), "{}", err(&o));
}

/// The bytes of every file of a store (to show that a salvage writes nothing).
fn snapshot(store: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut files = vec![store.join("pmem.pool")];
    for e in std::fs::read_dir(store.join("flash")).expect("test setup") {
        files.push(e.expect("test setup").path());
    }
    files
        .into_iter()
        .map(|p| {
            let b = std::fs::read(&p).expect("test setup");
            (p, b)
        })
        .collect()
}

#[test]
fn dump_salvage_of_an_intact_store_is_its_dump() {
    let d = tempfile::tempdir().expect("test setup");
    let a = d.path().join("a");
    filled_store(&a);
    let normal = tierkv(&["dump"], &a);
    let salvaged = tierkv(&["dump", "--salvage"], &a);
    assert_eq!(salvaged.status.code(), Some(0), "{}", err(&salvaged));
    let (n, s) = (
        String::from_utf8(normal.stdout).expect("test setup"),
        String::from_utf8(salvaged.stdout).expect("test setup"),
    );
    assert!(
        s.starts_with("# tierkv dump v1 (salvage of engine prism"),
        "{s}"
    );
    assert!(
        s.contains("# caveat: "),
        "the header says what cannot be verified: {s}"
    );
    assert_eq!(records(&n).len(), 31);
    assert_eq!(records(&n), records(&s));
}

#[test]
fn a_store_that_does_not_open_is_salvaged_by_dump_read_only() {
    let d = tempfile::tempdir().expect("test setup");
    let a = d.path().join("a");
    filled_store(&a);
    // The superblock's checksum (recovery refuses the store) and one flash value.
    let pool = a.join("pmem.pool");
    let mut b = std::fs::read(&pool).expect("test setup");
    b[4096 + 84] ^= 0xff;
    std::fs::write(&pool, b).expect("test setup");
    damage_flash(&a, "k07".repeat(8).as_bytes());
    let o = tierkv(&["get", "k00"], &a);
    assert_eq!(o.status.code(), Some(1), "{}", err(&o));
    assert!(err(&o).contains("checksum mismatch in pmem"), "{}", err(&o));

    let before = snapshot(&a);
    let o = tierkv(&["dump"], &a);
    assert_eq!(o.status.code(), Some(4), "{}", err(&o));
    assert!(
        err(&o).contains("salvaging its files read-only"),
        "{}",
        err(&o)
    );
    assert!(
        err(&o).contains("layout re-planned from the options"),
        "{}",
        err(&o)
    );
    let text = String::from_utf8(o.stdout).expect("test setup");
    assert!(
        text.contains("# salvage: the store does not open: checksum mismatch"),
        "{text}"
    );
    assert_eq!(records(&text).len(), 30, "{text}");
    assert!(
        text.contains(&format!("# skipped {}: ", hex(b"k07"))),
        "the dump names the damaged key: {text}"
    );
    assert!(text.contains("# end: 30 records, 1 skipped"), "{text}");
    assert!(
        snapshot(&a) == before,
        "a salvage must not write to the store"
    );

    // What was salvaged loads back into a new store.
    let file = d.path().join("salvaged.dump");
    std::fs::write(&file, &text).expect("test setup");
    let mut args = vec!["load", "--in", file.to_str().expect("test setup")];
    args.extend_from_slice(&SMALL);
    let b = d.path().join("b");
    let o = tierkv(&args, &b);
    assert!(o.status.success(), "{}", err(&o));
    let o = tierkv(&["get", "k08"], &b);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "k08".repeat(20_000 / 3)
    );
    assert_eq!(tierkv(&["get", "k07"], &b).status.code(), Some(3));
}

/// Issue 23 finding 9: a damaged flash value is reported with the tier, the file and the
/// offset, by `get` and by `check` (which said "corruption in pmem at offset 0").
#[test]
fn a_flash_checksum_error_names_the_tier_the_file_and_the_offset() {
    let d = tempfile::tempdir().expect("test setup");
    let a = d.path().join("a");
    filled_store(&a);
    damage_flash(&a, "k07".repeat(8).as_bytes());
    for args in [&["get", "k07"][..], &["check"][..]] {
        let o = tierkv(args, &a);
        assert_eq!(o.status.code(), Some(1), "{}", err(&o));
        let e = err(&o);
        assert!(
            e.contains("corruption in flash at offset "),
            "{args:?}: {e}"
        );
        assert!(!e.contains("in pmem at offset 0"), "{args:?}: {e}");
        assert!(
            e.contains("prism-value-storage-00.vs: checksum mismatch"),
            "{args:?}: {e}"
        );
    }
}

/// An engine without a salvage walk says so, naming the engines that have one.
#[test]
fn dump_salvage_of_an_engine_without_one_is_a_clear_error() {
    let d = tempfile::tempdir().expect("test setup");
    let a = d.path().join("a");
    let o = tierkv(&["put", "--engine", "dram", "k", "v"], &a);
    assert!(o.status.success(), "{}", err(&o));
    let o = tierkv(&["dump", "--salvage"], &a);
    assert_eq!(o.status.code(), Some(1), "{}", err(&o));
    assert!(
        err(&o).contains("engine dram has no salvage mode yet (engines with one: prism)"),
        "{}",
        err(&o)
    );
}
