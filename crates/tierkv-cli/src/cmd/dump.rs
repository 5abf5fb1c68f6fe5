//! `tierkv dump` and `tierkv load` (issue 23, finding 10), and the [`walk`] that `dump` and
//! `scan` share: every readable record of a store,
//! in key order, in a text format `load` takes back; on a damaged store, the records that
//! can be read, and a line for each damaged one skipped (the `ldb dump` /
//! `redis-check-aof` of tierkv).
//!
//! Format (version 1), one line each, UTF-8 (`→` stands for a TAB):
//! ```text
//! # tierkv dump v1 (engine prism, from DIR): hex key TAB hex value per line
//! 6b31→7631
//! # skipped 6b33: checksum mismatch in flash ...
//! # end: 2 records, 1 skipped
//! ```
//! `load` requires the first line, ignores every other `#` line and empty lines, and puts
//! each record.
//!
//! A store that does not open (or any store, with `--salvage`) is dumped by [`salvage`]:
//! the engine's read-only walk (`tierkv::salvage`), whose header says so and lists what the
//! format cannot verify (`# caveat:` lines), whose report ends it (`# salvage:` lines), and
//! whose skipped records, keys and regions are `# skipped` lines as above.
//!
//! Finding the damaged record: the engines' scans stop at the first value they cannot read
//! and do not say its key. The dump narrows a failing batch down to its readable prefix
//! (bisection on the scan limit), then bisects the key space for the boundary `lo < hi`
//! (adjacent keys of `M` bytes, `M` one more than the longest key) where a scan of one
//! record from `lo` fails and from `hi` succeeds: the damaged key lies in `[lo, hi)`, and
//! is `hi` without its trailing zero bytes whenever that key's `get` fails too. Otherwise
//! the dump reports the key range it skipped. The search assumes a scan of one record reads
//! one value; where several damaged records follow each other it may skip (and report) a
//! range holding readable ones too.

use std::io::{BufRead, BufWriter, Write};

use tierkv::{Db, Error, KvPair, Result};

use crate::output::{bytes_arg, hex};

/// Records per scan call.
const BATCH: usize = 1000;
/// The first line of a dump (and what `load` checks for).
pub const HEADER: &str = "# tierkv dump v1";

/// What a dump wrote.
#[derive(Debug, Default)]
pub struct DumpSummary {
    /// Records written.
    pub records: u64,
    /// Damaged records (or ranges) skipped.
    pub skipped: u64,
}

/// One step of a [`walk`]: a readable record, or a note on a damaged one skipped.
pub enum Item {
    /// A record.
    Record(KvPair),
    /// What was skipped, and why.
    Skipped(String),
}

/// Calls `f` with every readable record from `start` on, in key order, and with a note for
/// every damaged one, until `f` returns `false` or the store ends.
pub fn walk(db: &Db, start: &[u8], f: &mut dyn FnMut(Item) -> Result<bool>) -> Result<()> {
    let mut start = start.to_vec();
    loop {
        let (rows, failure) = readable_prefix(db, &start)?;
        let full = rows.len() == BATCH;
        if let Some((last, _)) = rows.last() {
            start = successor(last);
        }
        for r in rows {
            if !f(Item::Record(r))? {
                return Ok(());
            }
        }
        match failure {
            None if !full => return Ok(()),
            None => {}
            Some(e) => {
                let (note, resume) = locate_damaged(db, &start, &e)?;
                if !f(Item::Skipped(note))? {
                    return Ok(());
                }
                start = resume;
            }
        }
    }
}

/// Writes every readable record of `db` to `out`.
pub fn dump(db: &Db, out: &mut dyn Write) -> Result<DumpSummary> {
    let w = &mut BufWriter::new(out);
    let io = |e| Error::io("write", "<dump>", e);
    writeln!(
        w,
        "{HEADER} (engine {}, from {}): hex key TAB hex value per line",
        db.spec(),
        db.dir().display()
    )
    .map_err(io)?;
    let mut sum = DumpSummary::default();
    walk(db, &[], &mut |item| {
        match item {
            Item::Record((k, v)) => {
                writeln!(w, "{}\t{}", hex(&k), hex(&v)).map_err(io)?;
                sum.records += 1;
            }
            Item::Skipped(note) => {
                eprintln!("tierkv: dump: skipped {note}");
                writeln!(w, "# skipped {note}").map_err(io)?;
                sum.skipped += 1;
            }
        }
        Ok(true)
    })?;
    writeln!(w, "# end: {} records, {} skipped", sum.records, sum.skipped).map_err(io)?;
    w.flush().map_err(io)?;
    Ok(sum)
}

/// True for an open error that a salvage may get past: damage, not a usage error, a
/// missing store or a store in use.
pub fn salvageable(e: &Error) -> bool {
    !matches!(
        e,
        Error::NoStore(_) | Error::Locked(_) | Error::InvalidArgument(_) | Error::Closed
    )
}

/// Writes every record the engine's salvage walk validates in the store in `dir`
/// (without opening it) to `out`, in the dump format: the header names the salvage and
/// what its format cannot verify; the walk's report ends it. `open_error` is why the
/// store was not opened, if it was tried.
pub fn salvage(
    dir: &std::path::Path,
    options: &tierkv::Options,
    out: &mut dyn Write,
    open_error: Option<&Error>,
) -> Result<DumpSummary> {
    let manifest =
        tierkv::Manifest::read_from(dir)?.ok_or_else(|| Error::NoStore(dir.to_owned()))?;
    let base = manifest.engine.split(':').next().unwrap_or_default();
    let engine = tierkv::salvage_engine(base)?;
    let w = &mut BufWriter::new(out);
    let io = |e| Error::io("write", "<dump>", e);
    writeln!(
        w,
        "{HEADER} (salvage of engine {}, from {}): hex key TAB hex value per line",
        manifest.engine,
        dir.display()
    )
    .map_err(io)?;
    if let Some(e) = open_error {
        writeln!(w, "# salvage: the store does not open: {e}").map_err(io)?;
    }
    for c in engine.caveats {
        writeln!(w, "# caveat: {c}").map_err(io)?;
    }
    let mut sink = WriteSink {
        w,
        sum: DumpSummary::default(),
    };
    let report = tierkv::salvage(dir, options, &mut sink)?;
    let WriteSink { w, sum } = sink;
    for r in &report.regions {
        eprintln!("tierkv: salvage: {r}");
        writeln!(w, "# salvage: {r}").map_err(io)?;
    }
    for c in report
        .caveats
        .iter()
        .filter(|c| !engine.caveats.contains(&c.as_str()))
    {
        eprintln!("tierkv: salvage: caveat: {c}");
        writeln!(w, "# caveat: {c}").map_err(io)?;
    }
    writeln!(w, "# end: {} records, {} skipped", sum.records, sum.skipped).map_err(io)?;
    w.flush().map_err(io)?;
    Ok(sum)
}

struct WriteSink<'a, W: Write> {
    w: &'a mut W,
    sum: DumpSummary,
}

impl<W: Write> tierkv::SalvageSink for WriteSink<'_, W> {
    fn record(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        writeln!(self.w, "{}\t{}", hex(key), hex(value))
            .map_err(|e| Error::io("write", "<dump>", e))?;
        self.sum.records += 1;
        Ok(())
    }
    fn skipped(&mut self, note: &str) -> Result<()> {
        eprintln!("tierkv: dump: skipped {note}");
        writeln!(self.w, "# skipped {note}").map_err(|e| Error::io("write", "<dump>", e))?;
        self.sum.skipped += 1;
        Ok(())
    }
}

/// The records from `start` on that can be read in one batch, and the error that ended the
/// batch early (the next record is unreadable).
fn readable_prefix(db: &Db, start: &[u8]) -> Result<(Vec<KvPair>, Option<Error>)> {
    let first = match db.scan(start.., BATCH) {
        Ok(rows) => return Ok((rows, None)),
        Err(e) => e,
    };
    // scan(start, ok) succeeds, scan(start, bad) fails.
    let (mut ok, mut bad) = (0usize, BATCH);
    while bad - ok > 1 {
        let mid = ok + (bad - ok) / 2;
        if db.scan(start.., mid).is_ok() {
            ok = mid;
        } else {
            bad = mid;
        }
    }
    let rows = if ok == 0 {
        Vec::new()
    } else {
        db.scan(start.., ok)?
    };
    Ok((rows, Some(first)))
}

/// The smallest key after `k`.
fn successor(k: &[u8]) -> Vec<u8> {
    let mut s = k.to_vec();
    s.push(0);
    s
}

fn fails(db: &Db, start: &[u8]) -> bool {
    db.scan(start.., 1).is_err()
}

/// `lo` is a key from which a scan of one record fails: finds the damaged record and where
/// to go on. Returns a note for the report and the key to resume from.
fn locate_damaged(db: &Db, lo: &[u8], first: &Error) -> Result<(String, Vec<u8>)> {
    let m = db.limits().max_key_len + 1;
    let mut a = lo.to_vec();
    a.resize(m, 0);
    let mut b = vec![0xffu8; m];
    if fails(db, &b) {
        return Err(Error::invalid(format!(
            "dump: the store cannot be scanned even past its last key ({first}); its \
             index is damaged, which the engine cannot read around"
        )));
    }
    if !fails(db, &a) {
        // The damaged record lies between `lo` and `lo` padded with zeros.
        return Ok((format!("keys {} to {}: {first}", hex(lo), hex(&a)), a));
    }
    // fails(a) and !fails(b): bisect to adjacent a < b.
    while let Some(mid) = midpoint(&a, &b) {
        if fails(db, &mid) {
            a = mid;
        } else {
            b = mid;
        }
    }
    let mut key = b.clone();
    while key.last() == Some(&0) {
        key.pop();
    }
    let exact = key.as_slice() >= lo && !key.is_empty() && db.get(&key).is_err();
    let note = if exact {
        let e = db
            .get(&key)
            .err()
            .map_or(first.to_string(), |e| e.to_string());
        format!("{}: {e}", hex(&key))
    } else {
        format!(
            "keys from {} up to {} (not readable): {first}",
            hex(lo),
            hex(&key)
        )
    };
    Ok((note, b))
}

/// `(a + b) / 2` of two big-endian numbers of the same length, or `None` when `b <= a + 1`.
fn midpoint(a: &[u8], b: &[u8]) -> Option<Vec<u8>> {
    // sum = a + b, with a carry byte in front.
    let mut sum = vec![0u8; a.len() + 1];
    let mut carry = 0u16;
    for i in (0..a.len()).rev() {
        let s = u16::from(a[i]) + u16::from(b[i]) + carry;
        sum[i + 1] = (s & 0xff) as u8;
        carry = s >> 8;
    }
    sum[0] = carry as u8;
    // mid = sum >> 1, dropping the front byte (it is 0 after the shift).
    let mut mid = vec![0u8; a.len()];
    for i in 0..a.len() {
        mid[i] = (sum[i + 1] >> 1) | (sum[i] << 7);
    }
    (mid.as_slice() != a && mid.as_slice() != b).then_some(mid)
}

/// Puts every record of a dump read from `input` into `db`; returns how many.
pub fn load(db: &Db, input: &mut dyn BufRead) -> Result<u64> {
    let io = |e| Error::io("read", "<dump>", e);
    let mut lines = input.lines();
    match lines.next().transpose().map_err(io)? {
        Some(l) if l.starts_with(HEADER) => {}
        _ => {
            return Err(Error::invalid(format!(
                "not a tierkv dump: the first line must start with {HEADER:?}"
            )));
        }
    }
    let mut n = 0u64;
    for (i, line) in lines.enumerate() {
        let line = line.map_err(io)?;
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = || {
            Error::invalid(format!(
                "dump line {}: expected hex key TAB hex value",
                i + 2
            ))
        };
        let (k, v) = line.split_once('\t').ok_or_else(bad)?;
        let key = bytes_arg(k, true, "key").map_err(|_| bad())?;
        let value = bytes_arg(v, true, "value").map_err(|_| bad())?;
        db.put(&key, &value)?;
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn midpoint_of_big_endian_numbers() {
        assert_eq!(midpoint(&[0, 0], &[0, 4]), Some(vec![0, 2]));
        assert_eq!(midpoint(&[0, 255], &[1, 1]), Some(vec![1, 0]));
        assert_eq!(midpoint(&[0, 1], &[0, 2]), None);
        assert_eq!(midpoint(&[255, 255], &[255, 255]), None);
        assert_eq!(midpoint(&[0, 0], &[255, 255]), Some(vec![127, 255]));
    }
}
