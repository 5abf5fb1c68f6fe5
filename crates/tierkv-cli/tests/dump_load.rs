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
