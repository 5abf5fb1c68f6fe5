//! Writes, reads, scans and prints the stats of a store in `./tierkv-data/quickstart`.
//!
//!     cargo run --release -p tierkv --example quickstart [-- ENGINE]
//!
//! ENGINE is an engine spec (default: the first engine of this build).

use std::time::Instant;

use tierkv::{Db, Options};

fn main() -> tierkv::Result<()> {
    let engine = std::env::args()
        .nth(1)
        .unwrap_or_else(|| tierkv::ENGINES[0].name.to_owned());
    let dir = std::path::Path::new("tierkv-data").join("quickstart");
    let db = Db::open(&dir, Options::default().engine(&engine))?;
    println!(
        "opened {} store in {} ({})",
        db.spec(),
        dir.display(),
        if db.created() { "created" } else { "reopened" }
    );

    let n = 100_000u32;
    let t = Instant::now();
    for i in 0..n {
        db.put(
            format!("user{i:08}").as_bytes(),
            format!("value-{i}").as_bytes(),
        )?;
    }
    println!("put {n} keys in {:.2?}", t.elapsed());

    let t = Instant::now();
    let mut found = 0;
    for i in (0..n).step_by(7) {
        if db.get(format!("user{i:08}").as_bytes())?.is_some() {
            found += 1;
        }
    }
    println!(
        "got {found} of {} keys in {:.2?}",
        n.div_ceil(7),
        t.elapsed()
    );

    match db.scan(&b"user00001000"[..].., 3) {
        Ok(rows) => {
            for (k, v) in rows {
                println!(
                    "scan: {} = {}",
                    String::from_utf8_lossy(&k),
                    String::from_utf8_lossy(&v)
                );
            }
        }
        Err(tierkv::Error::Unsupported(why)) => {
            println!("scan: unsupported by this engine ({why})")
        }
        Err(e) => return Err(e),
    }

    db.delete(b"user00000000")?;
    assert_eq!(db.get(b"user00000000")?, None);

    println!("stats:");
    for (k, v) in db.stats().flatten() {
        println!("  {k:<24} {v}");
    }
    db.close()
}
