//! [`Reply`]: the reply writer. Commands write their answers straight into a per-connection
//! byte buffer in the client's protocol (RESP2, or RESP3 after `HELLO 3`), with no reply
//! objects in between.
//!
//! RESP2 and RESP3 differ only in a few types, handled here so commands need not care:
//!
//! | written with   | RESP2                  | RESP3                   |
//! |----------------|------------------------|-------------------------|
//! | [`Reply::null`]    | `$-1` (null bulk)      | `_` (null)              |
//! | [`Reply::map`]     | `*2n` (flat array)     | `%n` (map)              |
//! | [`Reply::verbatim`]| `$` bulk               | `=` verbatim, `txt:`    |
//!
//! A multi-element reply that could grow past the output bound checks
//! [`Reply::exceeds`] from a [`Reply::mark`] and is replaced by an error with
//! [`Reply::truncate`] (see `commands::strings::mget`).
//!
//! Thread-safety: plain owned data, one per connection.

/// The reply protocol a connection speaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Protocol {
    /// RESP2, every connection's protocol until `HELLO 3`.
    #[default]
    Resp2,
    /// RESP3.
    Resp3,
}

impl Protocol {
    /// The version number `HELLO` speaks of.
    pub fn version(self) -> i64 {
        match self {
            Protocol::Resp2 => 2,
            Protocol::Resp3 => 3,
        }
    }
}

/// A connection's pending output.
#[derive(Debug, Default)]
pub struct Reply {
    buf: Vec<u8>,
    proto: Protocol,
}

impl Reply {
    /// An empty output buffer speaking RESP2.
    pub fn new() -> Reply {
        Reply::default()
    }

    /// The protocol replies are written in.
    pub fn protocol(&self) -> Protocol {
        self.proto
    }

    /// Switches the protocol (HELLO).
    pub fn set_protocol(&mut self, p: Protocol) {
        self.proto = p;
    }

    /// The bytes written so far.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }

    /// Number of bytes written so far.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// True when nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Forgets the bytes (after they were sent); gives back memory past `keep` bytes of
    /// capacity, so one huge reply does not pin its buffer for the connection's life.
    pub fn clear(&mut self, keep: usize) {
        self.buf.clear();
        if self.buf.capacity() > keep {
            self.buf.shrink_to(keep);
        }
    }

    /// A position to come back to with [`Reply::truncate`].
    pub fn mark(&self) -> usize {
        self.buf.len()
    }

    /// Drops everything written after `mark`.
    pub fn truncate(&mut self, mark: usize) {
        self.buf.truncate(mark);
    }

    /// True when more than `limit` bytes were written since `mark`.
    pub fn exceeds(&self, mark: usize, limit: usize) -> bool {
        self.buf.len().saturating_sub(mark) > limit
    }

    /// `+OK`.
    pub fn ok(&mut self) {
        self.buf.extend_from_slice(b"+OK\r\n");
    }

    /// A simple string (`+PONG`); must not contain CR or LF.
    pub fn simple(&mut self, s: &str) {
        self.buf.push(b'+');
        self.push_line(s.as_bytes());
    }

    /// An error reply; `msg` starts with its code (`ERR`, `WRONGTYPE`, ...). CR and LF are
    /// replaced by spaces so that a message can never break the framing.
    pub fn error(&mut self, msg: &str) {
        self.buf.push(b'-');
        self.push_line(msg.as_bytes());
    }

    fn push_line(&mut self, s: &[u8]) {
        self.buf.extend(
            s.iter()
                .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
        );
        self.buf.extend_from_slice(b"\r\n");
    }

    /// An integer.
    pub fn int(&mut self, n: i64) {
        self.buf.push(b':');
        self.decimal(n);
        self.buf.extend_from_slice(b"\r\n");
    }

    /// A bulk string.
    pub fn bulk(&mut self, b: &[u8]) {
        self.header(b'$', b.len());
        self.buf.extend_from_slice(b);
        self.buf.extend_from_slice(b"\r\n");
    }

    /// A floating-point number in Redis's text form (`1.5`, `inf`): a bulk string in RESP2,
    /// a double (`,1.5`) in RESP3, as Redis 7 replies scores.
    pub fn double(&mut self, text: &[u8]) {
        match self.proto {
            Protocol::Resp2 => self.bulk(text),
            Protocol::Resp3 => {
                self.buf.push(b',');
                self.buf.extend_from_slice(text);
                self.buf.extend_from_slice(b"\r\n");
            }
        }
    }

    /// A bulk string of a number's decimal form.
    pub fn bulk_int(&mut self, n: i64) {
        let mut digits = [0u8; 20];
        let s = format_decimal(n, &mut digits);
        self.bulk(s);
    }

    /// The null reply (a missing key).
    pub fn null(&mut self) {
        match self.proto {
            Protocol::Resp2 => self.buf.extend_from_slice(b"$-1\r\n"),
            Protocol::Resp3 => self.buf.extend_from_slice(b"_\r\n"),
        }
    }

    /// The null array (an EXEC whose WATCH failed): `*-1` in RESP2, `_` in RESP3.
    pub fn null_array(&mut self) {
        match self.proto {
            Protocol::Resp2 => self.buf.extend_from_slice(b"*-1\r\n"),
            Protocol::Resp3 => self.buf.extend_from_slice(b"_\r\n"),
        }
    }

    /// The header of an array of `n` elements.
    pub fn array(&mut self, n: usize) {
        self.header(b'*', n);
    }

    /// The header of a map of `n` key-value pairs (a flat array of `2n` in RESP2).
    pub fn map(&mut self, n: usize) {
        match self.proto {
            Protocol::Resp2 => self.header(b'*', 2 * n),
            Protocol::Resp3 => self.header(b'%', n),
        }
    }

    /// Human-readable text (INFO): a verbatim string in RESP3, a bulk string in RESP2.
    pub fn verbatim(&mut self, text: &[u8]) {
        match self.proto {
            Protocol::Resp2 => self.bulk(text),
            Protocol::Resp3 => {
                self.header(b'=', text.len() + 4);
                self.buf.extend_from_slice(b"txt:");
                self.buf.extend_from_slice(text);
                self.buf.extend_from_slice(b"\r\n");
            }
        }
    }

    fn header(&mut self, kind: u8, n: usize) {
        self.buf.push(kind);
        self.decimal(i64::try_from(n).unwrap_or(i64::MAX));
        self.buf.extend_from_slice(b"\r\n");
    }

    fn decimal(&mut self, n: i64) {
        let mut digits = [0u8; 20];
        let s = format_decimal(n, &mut digits);
        self.buf.extend_from_slice(s);
    }
}

/// Writes `n` in decimal into `out` (20 bytes hold any i64) and returns the used part.
pub(crate) fn format_decimal(n: i64, out: &mut [u8; 20]) -> &[u8] {
    let mut i = out.len();
    let mut v = n.unsigned_abs();
    loop {
        i -= 1;
        out[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    if n < 0 {
        i -= 1;
        out[i] = b'-';
    }
    &out[i..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_are_framed_as_resp2() {
        let mut r = Reply::new();
        r.ok();
        r.simple("PONG");
        r.error("ERR bad\r\nthing");
        r.int(-42);
        r.bulk(b"a\r\nb");
        r.null();
        assert_eq!(
            r.as_bytes(),
            b"+OK\r\n+PONG\r\n-ERR bad  thing\r\n:-42\r\n$4\r\na\r\nb\r\n$-1\r\n"
        );
    }

    #[test]
    fn resp3_changes_null_map_and_verbatim_only() {
        let mut r = Reply::new();
        r.set_protocol(Protocol::Resp3);
        r.null();
        r.map(2);
        r.verbatim(b"x:1");
        r.array(0);
        assert_eq!(r.as_bytes(), b"_\r\n%2\r\n=7\r\ntxt:x:1\r\n*0\r\n");
        let mut r2 = Reply::new();
        r2.map(2);
        r2.verbatim(b"x:1");
        assert_eq!(r2.as_bytes(), b"*4\r\n$3\r\nx:1\r\n");
    }

    #[test]
    fn decimal_formatting_covers_the_extremes() {
        let mut d = [0u8; 20];
        for n in [0, 7, -7, 10, i64::MAX, i64::MIN] {
            assert_eq!(format_decimal(n, &mut d), n.to_string().as_bytes());
        }
    }

    #[test]
    fn truncate_rolls_back_to_a_mark() {
        let mut r = Reply::new();
        r.ok();
        let m = r.mark();
        r.array(2);
        r.bulk(b"xxxxxxxx");
        assert!(r.exceeds(m, 10));
        r.truncate(m);
        r.error("ERR too big");
        assert_eq!(r.as_bytes(), b"+OK\r\n-ERR too big\r\n");
    }
}
