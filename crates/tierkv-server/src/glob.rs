//! Redis glob patterns (`SCAN ... MATCH`, `CONFIG GET`), matched as Redis's
//! `stringmatchlen` matches them, over bytes:
//!
//! - `*` any run of bytes, `?` any one byte;
//! - `[abc]`, `[a-z]` (a reversed range is swapped), `[^...]` negated, `\` escapes inside;
//!   an unterminated `[` class ends at the end of the pattern;
//! - `\x` the byte `x` itself.
//!
//! Matching is the two-pointer algorithm with one backtrack point (every token but `*`
//! consumes exactly one byte), so it takes O(pattern × key) time at worst and never
//! recurses. [`literal_prefix`] lets a scan start at the first key the pattern can match.
//!
//! Thread-safety: pure functions.

/// True when `s` matches `pattern`.
pub fn matches(pattern: &[u8], s: &[u8]) -> bool {
    let (mut p, mut i) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() {
        if pattern.get(p) == Some(&b'*') {
            while pattern.get(p) == Some(&b'*') {
                p += 1;
            }
            star = Some((p, i));
            continue;
        }
        if let Some(next) = match_one(pattern, p, s[i]) {
            p = next;
            i += 1;
            continue;
        }
        match star.as_mut() {
            Some((sp, si)) => {
                *si += 1;
                p = *sp;
                i = *si;
            }
            None => return false,
        }
    }
    pattern
        .get(p..)
        .unwrap_or_default()
        .iter()
        .all(|&c| c == b'*')
}

/// If the token at `p` matches byte `c`, the position of the next token.
fn match_one(pattern: &[u8], p: usize, c: u8) -> Option<usize> {
    match *pattern.get(p)? {
        b'?' => Some(p + 1),
        b'[' => {
            let (hit, next) = class(pattern, p + 1, c);
            hit.then_some(next)
        }
        b'\\' if p + 1 < pattern.len() => (pattern.get(p + 1) == Some(&c)).then_some(p + 2),
        lit => (lit == c).then_some(p + 1),
    }
}

/// Matches `c` against the class starting after its `[`; returns (matched, next token).
fn class(pattern: &[u8], mut p: usize, c: u8) -> (bool, usize) {
    let negate = pattern.get(p) == Some(&b'^');
    if negate {
        p += 1;
    }
    let mut hit = false;
    loop {
        match (pattern.get(p), pattern.get(p + 1), pattern.get(p + 2)) {
            (None, _, _) => break,
            (Some(b']'), _, _) => {
                p += 1;
                break;
            }
            (Some(b'\\'), Some(&e), _) => {
                hit |= e == c;
                p += 2;
            }
            (Some(&lo), Some(b'-'), Some(&hi)) => {
                let (lo, hi) = if lo <= hi { (lo, hi) } else { (hi, lo) };
                hit |= (lo..=hi).contains(&c);
                p += 3;
            }
            (Some(&lit), _, _) => {
                hit |= lit == c;
                p += 1;
            }
        }
    }
    (hit != negate, p)
}

/// The bytes every match of `pattern` starts with (up to its first wildcard).
pub fn literal_prefix(pattern: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut p = 0;
    while let Some(&c) = pattern.get(p) {
        match c {
            b'*' | b'?' | b'[' => break,
            b'\\' => match pattern.get(p + 1) {
                Some(&e) => {
                    out.push(e);
                    p += 2;
                }
                None => {
                    out.push(c);
                    p += 1;
                }
            },
            _ => {
                out.push(c);
                p += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, s: &str) -> bool {
        matches(p.as_bytes(), s.as_bytes())
    }

    #[test]
    fn stars_and_question_marks() {
        assert!(m("*", ""));
        assert!(m("*", "anything"));
        assert!(m("user:*", "user:42"));
        assert!(!m("user:*", "use"));
        assert!(m("a*b*c", "aXXbYYc"));
        assert!(!m("a*b*c", "aXXbYY"));
        assert!(m("h?llo", "hello"));
        assert!(!m("h?llo", "hllo"));
        assert!(m("**a**", "bab"));
        assert!(m("*ab", "aab"));
    }

    #[test]
    fn classes_ranges_and_negation() {
        assert!(m("h[ae]llo", "hallo"));
        assert!(!m("h[ae]llo", "hillo"));
        assert!(m("h[^e]llo", "hallo"));
        assert!(!m("h[^e]llo", "hello"));
        assert!(m("k[0-9]", "k5"));
        assert!(m("k[9-0]", "k5"));
        assert!(!m("k[0-9]", "ka"));
        assert!(m("k[\\]]", "k]"));
        assert!(m("k[ab", "ka"));
    }

    #[test]
    fn escapes_match_the_byte_itself() {
        assert!(m("a\\*b", "a*b"));
        assert!(!m("a\\*b", "axb"));
        assert!(m("a\\", "a\\"));
    }

    #[test]
    fn binary_bytes_match() {
        assert!(matches(b"\x00*\xFF", b"\x00\x01\x02\xFF"));
    }

    #[test]
    fn literal_prefix_stops_at_the_first_wildcard() {
        assert_eq!(literal_prefix(b"user:*"), b"user:");
        assert_eq!(literal_prefix(b"a\\*b?"), b"a*b");
        assert_eq!(literal_prefix(b"*x"), b"");
        assert_eq!(literal_prefix(b"plain"), b"plain");
    }

    #[test]
    fn pathological_pattern_finishes_quickly() {
        let s = "a".repeat(10_000);
        let p = format!("{}b", "*a".repeat(50));
        assert!(!m(&p, &s));
    }
}
