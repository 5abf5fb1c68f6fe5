//! Inline commands: a line of space-separated words (`SET k "a b"` typed into telnet),
//! split the way Redis's `sdssplitargs` does.
//!
//! Rules: words are separated by ASCII whitespace; a word in double quotes understands the
//! escapes `\xHH`, `\n`, `\r`, `\t`, `\b`, `\a` and `\<c>` for any other `c`; a word in single
//! quotes understands only `\'`; a closing quote must be followed by whitespace or the end of
//! the line, else the line has *unbalanced quotes* (an error, as in Redis).
//!
//! Unquoted words become spans of the input; quoted words are unescaped into the batch's
//! side arena. Pure functions, no state.

use super::batch::ArgSpan;

/// The line's quotes do not balance (Redis: "unbalanced quotes in request").
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct UnbalancedQuotes;

/// Splits `line` (which starts at offset `base` of the input buffer) into argument spans
/// appended to `out`; quoted words go to `extra`.
pub(crate) fn split(
    line: &[u8],
    base: usize,
    extra: &mut Vec<u8>,
    out: &mut Vec<ArgSpan>,
) -> Result<(), UnbalancedQuotes> {
    let mut i = 0;
    loop {
        while line.get(i).is_some_and(u8::is_ascii_whitespace) {
            i += 1;
        }
        let Some(&first) = line.get(i) else {
            return Ok(());
        };
        i = match first {
            b'"' => quoted(line, i + 1, extra, out, double_quoted_byte)?,
            b'\'' => quoted(line, i + 1, extra, out, single_quoted_byte)?,
            _ => {
                let start = i;
                while line.get(i).is_some_and(|b| !b.is_ascii_whitespace()) {
                    i += 1;
                }
                out.push(ArgSpan::input(base + start, i - start));
                i
            }
        };
    }
}

/// One step inside quotes: `Some((byte, consumed))`, or `None` at the closing quote.
type QuoteStep = fn(&[u8]) -> Option<(u8, usize)>;

fn quoted(
    line: &[u8],
    mut i: usize,
    extra: &mut Vec<u8>,
    out: &mut Vec<ArgSpan>,
    step: QuoteStep,
) -> Result<usize, UnbalancedQuotes> {
    let start = extra.len();
    loop {
        let rest = line.get(i..).unwrap_or_default();
        if rest.is_empty() {
            return Err(UnbalancedQuotes);
        }
        match step(rest) {
            Some((b, used)) => {
                extra.push(b);
                i += used;
            }
            None => {
                // The closing quote must end the word.
                if line.get(i + 1).is_some_and(|b| !b.is_ascii_whitespace()) {
                    return Err(UnbalancedQuotes);
                }
                out.push(ArgSpan::extra(start, extra.len() - start));
                return Ok(i + 1);
            }
        }
    }
}

fn double_quoted_byte(rest: &[u8]) -> Option<(u8, usize)> {
    match rest {
        [b'"', ..] => None,
        [b'\\', b'x', h, l, ..] if h.is_ascii_hexdigit() && l.is_ascii_hexdigit() => {
            Some((hex(*h) << 4 | hex(*l), 4))
        }
        [b'\\', c, ..] => Some((
            match c {
                b'n' => b'\n',
                b'r' => b'\r',
                b't' => b'\t',
                b'b' => 0x08,
                b'a' => 0x07,
                other => *other,
            },
            2,
        )),
        [c, ..] => Some((*c, 1)),
        [] => None,
    }
}

fn single_quoted_byte(rest: &[u8]) -> Option<(u8, usize)> {
    match rest {
        [b'\\', b'\'', ..] => Some((b'\'', 2)),
        [b'\'', ..] | [] => None,
        [c, ..] => Some((*c, 1)),
    }
}

fn hex(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        _ => c.wrapping_sub(b'A').wrapping_add(10),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Result<Vec<Vec<u8>>, UnbalancedQuotes> {
        let mut extra = Vec::new();
        let mut spans = Vec::new();
        split(line.as_bytes(), 0, &mut extra, &mut spans)?;
        let b = super::super::batch::Batch {
            data: bytes::Bytes::copy_from_slice(line.as_bytes()),
            extra,
            args: spans.clone(),
            cmds: vec![super::super::batch::CmdSpan {
                first_arg: 0,
                argc: spans.len() as u32,
                refused: false,
            }],
        };
        let a = b.command(0).unwrap();
        Ok(a.iter_from(0).map(<[u8]>::to_vec).collect())
    }

    #[test]
    fn plain_words_split_on_whitespace() {
        assert_eq!(
            words("  SET  key\tvalue ").unwrap(),
            vec![b"SET".to_vec(), b"key".to_vec(), b"value".to_vec()]
        );
        assert!(words("   ").unwrap().is_empty());
    }

    #[test]
    fn double_quotes_understand_escapes() {
        assert_eq!(
            words(r#"set "a b\x41\n\"" x"#).unwrap(),
            vec![b"set".to_vec(), b"a bA\n\"".to_vec(), b"x".to_vec()]
        );
    }

    #[test]
    fn single_quotes_keep_backslashes() {
        assert_eq!(
            words(r"echo 'it\'s \n'").unwrap(),
            vec![b"echo".to_vec(), b"it's \\n".to_vec()]
        );
        assert_eq!(
            words("echo ''").unwrap(),
            vec![b"echo".to_vec(), Vec::new()]
        );
    }

    #[test]
    fn unbalanced_or_glued_quotes_are_refused() {
        assert_eq!(words(r#"set "abc"#), Err(UnbalancedQuotes));
        assert_eq!(words(r#"set "abc"def"#), Err(UnbalancedQuotes));
        assert_eq!(words("set 'abc"), Err(UnbalancedQuotes));
    }
}
