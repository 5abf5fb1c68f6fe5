//! `tierkv batch`: puts and deletes read from standard input (or a file), one per line,
//! applied as one crash-atomic write batch (`Db::write`, issue 24).
//!
//! Lines: `put <key> <value>` (the value is the rest of the line after one space, so it
//! may hold spaces), `del <key>`; blank lines and lines starting with `#` are skipped.
//! With `--hex` keys and values are hex. The whole input is parsed and checked before the
//! store is opened: a bad line is reported with its number and nothing is written.

use std::io::BufRead;

use tierkv::{Db, Error, Result, WriteBatch};

use super::{open_or_create, resolve};
use crate::args::BatchArgs;
use crate::output::bytes_arg;

/// Parses the batch lines of `input`.
pub fn parse(input: &mut dyn BufRead, hex: bool) -> Result<WriteBatch> {
    let mut batch = WriteBatch::new();
    for (i, line) in input.lines().enumerate() {
        let n = i + 1;
        let line = line.map_err(|e| Error::io("read", "batch input", e))?;
        let line = line.strip_suffix('\r').unwrap_or(&line);
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let bad = |why: &str| Error::invalid(format!("batch line {n}: {why}: {line:?}"));
        let (verb, rest) = line.split_once(' ').unwrap_or((line, ""));
        match verb {
            "put" => {
                let (k, v) = rest
                    .split_once(' ')
                    .ok_or_else(|| bad("expected `put <key> <value>`"))?;
                let key = bytes_arg(k, hex, "key").map_err(|e| bad(&e.to_string()))?;
                let value = bytes_arg(v, hex, "value").map_err(|e| bad(&e.to_string()))?;
                batch.put(key, value);
            }
            "del" => {
                if rest.is_empty() || rest.contains(' ') {
                    return Err(bad("expected `del <key>`"));
                }
                batch.delete(bytes_arg(rest, hex, "key").map_err(|e| bad(&e.to_string()))?);
            }
            _ => return Err(bad("a line is `put <key> <value>` or `del <key>`")),
        }
    }
    Ok(batch)
}

/// Runs `tierkv batch`.
pub fn batch(a: &BatchArgs) -> Result<u8> {
    let mut input: Box<dyn BufRead> = match &a.input {
        Some(p) => Box::new(std::io::BufReader::new(
            std::fs::File::open(p).map_err(|e| Error::io("open", p, e))?,
        )),
        None => Box::new(std::io::stdin().lock()),
    };
    let batch = parse(&mut *input, a.hex)?;
    // Bad input is refused before a store is created for it.
    let (o, _) = resolve(&a.store)?;
    batch.check(&Db::limits_for(&o)?)?;
    tierkv::check_spec_atomic_batches(&o.engine_spec()?)?;
    let db = open_or_create(&a.store)?;
    db.write(&batch)?;
    db.close()?;
    println!("applied {} operations as one batch", batch.len());
    Ok(0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]
    use super::*;
    use tierkv::BatchOp;

    #[test]
    fn parses_puts_deletes_comments_and_spaces_in_values() {
        let text = "# a comment\nput a hello world\n\ndel b\nput a again\r\n";
        let b = parse(&mut text.as_bytes(), false).unwrap();
        assert_eq!(b.len(), 2);
        assert_eq!(b.op(b"a"), Some(&BatchOp::Put(b"again".to_vec())));
        assert_eq!(b.op(b"b"), Some(&BatchOp::Delete));
        let b = parse(&mut "put 00ff 6869\n".as_bytes(), true).unwrap();
        assert_eq!(b.op(&[0, 0xff]), Some(&BatchOp::Put(b"hi".to_vec())));
    }

    #[test]
    fn bad_lines_name_their_number() {
        for (text, n) in [
            ("put a\n", 1),
            ("del a b\n", 1),
            ("# c\nset a b\n", 2),
            ("del\n", 1),
        ] {
            let e = parse(&mut text.as_bytes(), false).unwrap_err().to_string();
            assert!(e.contains(&format!("line {n}")), "{text:?}: {e}");
        }
        let e = parse(&mut "put zz 00\n".as_bytes(), true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("hex"), "{e}");
    }
}
