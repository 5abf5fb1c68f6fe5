//! Turning user text into key bytes and bytes into printable text.

use tierkv::{Error, Result};

/// Decodes `s` as hex when `hex`, else takes its UTF-8 bytes.
pub fn bytes_arg(s: &str, hex: bool, what: &str) -> Result<Vec<u8>> {
    if !hex {
        return Ok(s.as_bytes().to_vec());
    }
    let s = s.strip_prefix("0x").unwrap_or(s);
    if !s.len().is_multiple_of(2) {
        return Err(Error::invalid(format!(
            "{what} {s:?}: hex needs an even number of digits"
        )));
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(s.get(i..i + 2).unwrap_or(""), 16)
                .map_err(|_| Error::invalid(format!("{what} {s:?} is not hex")))
        })
        .collect()
}

/// Lower-case hex of `b`.
pub fn hex(b: &[u8]) -> String {
    use std::fmt::Write;
    b.iter()
        .fold(String::with_capacity(b.len() * 2), |mut s, x| {
            let _ = write!(s, "{x:02x}");
            s
        })
}

/// `b` as text for a tab-separated line: printable ASCII as is, everything else (and `\`)
/// escaped as `\xNN`, so that one pair is always one line.
pub fn escaped(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len());
    for &x in b {
        if (0x20..0x7f).contains(&x) && x != b'\\' {
            s.push(char::from(x));
        } else {
            s.push_str(&format!("\\x{x:02x}"));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_rejects_garbage() {
        assert_eq!(bytes_arg("00ff10", true, "key").unwrap(), vec![0, 255, 16]);
        assert_eq!(bytes_arg("0xAB", true, "key").unwrap(), vec![0xab]);
        assert!(bytes_arg("abc", true, "key").is_err());
        assert!(bytes_arg("zz", true, "key").is_err());
        assert_eq!(hex(&[0, 255, 16]), "00ff10");
        assert_eq!(
            bytes_arg("héllo", false, "key").unwrap(),
            "héllo".as_bytes()
        );
    }

    #[test]
    fn escaping_keeps_one_pair_per_line() {
        assert_eq!(escaped(b"a\tb\n\\"), "a\\x09b\\x0a\\x5c");
    }
}
