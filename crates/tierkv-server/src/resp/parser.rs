//! The incremental, bounded request parser: bytes from a client in, [`Batch`]es of complete
//! commands out.
//!
//! A request is either a RESP array of bulk strings (`*2\r\n$3\r\nGET\r\n$1\r\nk\r\n`, what
//! every client library sends) or an *inline* line (`GET k\r\n`, what telnet sends); see
//! `super::inline`. RESP2 and RESP3 requests are the same; only replies differ.
//!
//! # Incremental
//! The parser reads the connection's input buffer in place and keeps its position, so a
//! command that arrives in many reads is scanned once, not once per read. It never consumes
//! bytes itself: [`RequestParser::take_batch`] splits the prefix of complete commands off the
//! buffer (without copying) and keeps the state of a half-received command, rebased.
//!
//! # Bounded (every limit is checked *before* the bytes it admits are buffered)
//! - a bulk length over [`ParserLimits::max_bulk_len`] is refused as soon as its `$<len>`
//!   header is read;
//! - an array of more than [`ParserLimits::max_args`] elements, or whose bulk lengths add up
//!   to more than [`ParserLimits::max_request_bytes`], is refused likewise;
//! - an inline line or a `*`/`$` header line without an end within its bound is refused;
//! - a client that has not authenticated (when a password is required) gets Redis's tighter
//!   limits: 10 arguments, 16 KiB per argument, one command per batch (so that what follows
//!   `AUTH` in a pipeline is parsed with the limits of an authenticated client).
//!
//! A [`ProtocolError`] is final: the connection answers it and closes, as Redis does, since
//! the position of the next request in the stream is unknown.
//!
//! # Over-long arguments (issue 25 item 5)
//! One exception keeps the connection: an authenticated client's well-formed argument
//! longer than [`ParserLimits::max_bulk_len`] (the store's value limit) but not longer
//! than [`MAX_SKIPPABLE_BULK`] (Redis's default `proto-max-bulk-len`, 512 MiB). The
//! position of the next request is known, so the parser *refuses* the command instead:
//! it drops the arguments read so far, discards the rest of the command's bytes as they
//! arrive ([`RequestParser::discard_refused`]: nothing of it is buffered beyond one
//! read), and hands over a refused command ([`Batch::refused`]) whose one argument is
//! the error text; the executor answers it in its place in the pipeline.
//!
//! Thread-safety: one parser per connection; not shared.

use std::borrow::Cow;
use std::fmt;

use bytes::BytesMut;

use super::batch::{ArgSpan, Batch, CmdSpan};
use super::inline;

/// Longest `*<n>` or `$<n>` header line (Redis accepts any length up to its inline limit;
/// no valid header is longer than a sign, 20 digits and CRLF).
const MAX_HEADER_LINE: usize = 64;
/// Longest inline request (Redis's `PROTO_INLINE_MAX_SIZE`).
pub const MAX_INLINE_LEN: usize = 64 << 10;
/// Largest argument count of an unauthenticated client (as in Redis).
const UNAUTH_MAX_ARGS: usize = 10;
/// Largest argument of an unauthenticated client (as in Redis).
const UNAUTH_MAX_BULK: usize = 16 << 10;
/// Longest argument that is refused with an error and skipped, the connection kept
/// (Redis's default `proto-max-bulk-len`); a longer one is a protocol error.
pub const MAX_SKIPPABLE_BULK: usize = 512 << 20;

/// The parser's bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParserLimits {
    /// Longest single argument (key, value, field) in bytes.
    pub max_bulk_len: usize,
    /// Most arguments in one command, the name included.
    pub max_args: usize,
    /// Most bytes in one command (arguments and their headers).
    pub max_request_bytes: usize,
    /// Most commands handed over in one batch.
    pub max_commands: usize,
}

impl ParserLimits {
    /// The largest `max_request_bytes` allowed. Spans are 31-bit offsets into the input
    /// buffer, which holds at most one partial command plus one read (itself at most the
    /// rest of that command or a small chunk): under 2 × this bound, so under 2^31.
    pub const MAX_REQUEST_BYTES: usize = 512 << 20;

    fn unauthenticated(self) -> ParserLimits {
        ParserLimits {
            max_bulk_len: self.max_bulk_len.min(UNAUTH_MAX_BULK),
            max_args: self.max_args.min(UNAUTH_MAX_ARGS),
            max_request_bytes: self.max_request_bytes,
            max_commands: 1,
        }
    }
}

/// A request that is not valid RESP or breaks a limit; the reply is `-ERR <Display>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtocolError(Cow<'static, str>);

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Protocol error: {}", self.0)
    }
}

impl std::error::Error for ProtocolError {}

fn proto_err(what: impl Into<Cow<'static, str>>) -> ProtocolError {
    ProtocolError(what.into())
}

/// The command being received.
#[derive(Clone, Copy, Debug)]
struct Pending {
    /// Index in `args` of its first argument.
    first_arg: usize,
    /// Arguments still to read.
    args_left: usize,
    /// Length of the bulk whose `$` header was read, awaiting its bytes.
    bulk_len: Option<usize>,
    /// Its size so far: bulk lengths plus `$` headers.
    request_bytes: usize,
    /// The command is refused (an over-long argument): its bytes are skipped, and
    /// `bulk_len` counts the bytes of the current argument still to skip, CRLF included.
    refused: bool,
}

/// Parses requests out of one connection's input buffer.
#[derive(Debug)]
pub struct RequestParser {
    limits: ParserLimits,
    authenticated: bool,
    /// Where scanning resumes in the buffer.
    pos: usize,
    /// End of the last complete command.
    complete: usize,
    pending: Option<Pending>,
    args: Vec<ArgSpan>,
    cmds: Vec<CmdSpan>,
    extra: Vec<u8>,
    /// The error text of the command being refused.
    refusal: String,
}

impl RequestParser {
    /// A parser with these limits; `authenticated` is false when a password is required.
    pub fn new(limits: ParserLimits, authenticated: bool) -> RequestParser {
        RequestParser {
            limits,
            authenticated,
            pos: 0,
            complete: 0,
            pending: None,
            args: Vec::new(),
            cmds: Vec::new(),
            extra: Vec::new(),
            refusal: String::new(),
        }
    }

    /// Switches to the limits of an authenticated client (or back).
    pub fn set_authenticated(&mut self, yes: bool) {
        self.authenticated = yes;
    }

    fn effective(&self) -> ParserLimits {
        if self.authenticated {
            self.limits
        } else {
            self.limits.unauthenticated()
        }
    }

    /// Number of complete commands waiting to be taken.
    pub fn complete_commands(&self) -> usize {
        self.cmds.len()
    }

    /// The buffer length at which the argument being received will be complete, when that
    /// is known (so the caller can reserve room for a large value in one step).
    pub fn wanted_len(&self) -> Option<usize> {
        self.pending
            .filter(|p| !p.refused)
            .and_then(|p| p.bulk_len)
            .map(|n| self.pos + n + 2)
    }

    /// Drops the bytes of a refused command scanned so far from the front of `buf`, so
    /// that an over-long argument is never buffered whole. Call it when no complete
    /// command is waiting (after [`RequestParser::take_batch`]).
    pub fn discard_refused(&mut self, buf: &mut BytesMut) {
        if self.cmds.is_empty() && self.pending.is_some_and(|p| p.refused) && self.pos > 0 {
            let _ = buf.split_to(self.pos);
            self.pos = 0;
            self.complete = 0;
        }
    }

    /// Scans `buf` (the whole input buffer, of which the parser has seen a prefix) for
    /// complete commands.
    pub fn parse(&mut self, buf: &[u8]) -> Result<(), ProtocolError> {
        let limits = self.effective();
        while self.cmds.len() < limits.max_commands {
            let progressed = match self.pending {
                None => self.parse_start(buf, &limits)?,
                Some(p) => self.parse_argument(buf, p, &limits)?,
            };
            if !progressed {
                break;
            }
        }
        Ok(())
    }

    /// At the start of a command: reads its array header, or a whole inline command.
    fn parse_start(&mut self, buf: &[u8], limits: &ParserLimits) -> Result<bool, ProtocolError> {
        let Some(&first) = buf.get(self.pos) else {
            return Ok(false);
        };
        if first != b'*' {
            return self.parse_inline(buf, limits);
        }
        let Some((n, next)) = header_line(buf, self.pos + 1, "too big mbulk count string")? else {
            return Ok(false);
        };
        let n = n.ok_or_else(|| proto_err("invalid multibulk length"))?;
        self.pos = next;
        if n <= 0 {
            // `*0` and `*-1` are empty requests: skipped, as Redis does.
            self.complete = next;
            return Ok(true);
        }
        let n = n as usize;
        if n > limits.max_args {
            return Err(if self.authenticated {
                proto_err("invalid multibulk length")
            } else {
                proto_err("unauthenticated multibulk length")
            });
        }
        self.pending = Some(Pending {
            first_arg: self.args.len(),
            args_left: n,
            bulk_len: None,
            request_bytes: 0,
            refused: false,
        });
        Ok(true)
    }

    /// Inside an array: reads one `$<len>` header or the bytes it announced.
    fn parse_argument(
        &mut self,
        buf: &[u8],
        mut p: Pending,
        limits: &ParserLimits,
    ) -> Result<bool, ProtocolError> {
        let Some(len) = p.bulk_len else {
            let Some(&first) = buf.get(self.pos) else {
                return Ok(false);
            };
            if first != b'$' {
                return Err(proto_err(format!(
                    "expected '$', got '{}'",
                    char::from(first).escape_default()
                )));
            }
            let Some((n, next)) = header_line(buf, self.pos + 1, "too big bulk count string")?
            else {
                return Ok(false);
            };
            let len = match self.skippable_len(n, &p, limits) {
                Some(len) => {
                    if !p.refused {
                        p.refused = true;
                        self.args.truncate(p.first_arg);
                        self.refusal = format!(
                            "ERR argument of {len} bytes is too long: arguments are limited to \
                             {} bytes (the store's value limit); the command was not run",
                            limits.max_bulk_len
                        );
                    }
                    len + 2
                }
                None => self.check_bulk_len(n, next - self.pos, &mut p, limits)?,
            };
            self.pos = next;
            p.bulk_len = Some(len);
            self.pending = Some(p);
            return Ok(true);
        };
        if p.refused {
            return Ok(self.skip_refused(buf, p, len));
        }
        let end = self.pos + len;
        let Some(crlf) = buf.get(end..end + 2) else {
            return Ok(false);
        };
        if crlf != b"\r\n" {
            return Err(proto_err("bulk string not followed by CRLF"));
        }
        self.args.push(ArgSpan::input(self.pos, len));
        self.pos = end + 2;
        p.bulk_len = None;
        p.args_left -= 1;
        if p.args_left == 0 {
            self.commit(p.first_arg);
        } else {
            self.pending = Some(p);
        }
        Ok(true)
    }

    /// The length of an argument to skip: any well-formed one inside a refused command,
    /// and an authenticated client's argument over the bulk limit but within
    /// [`MAX_SKIPPABLE_BULK`].
    fn skippable_len(&self, n: Option<i64>, p: &Pending, limits: &ParserLimits) -> Option<usize> {
        let len = usize::try_from(n?).ok()?;
        let over = self.authenticated && len > limits.max_bulk_len;
        ((p.refused || over) && len <= MAX_SKIPPABLE_BULK).then_some(len)
    }

    /// Skips what is buffered of the refused command's current argument (`left` bytes
    /// with its CRLF); hands the refused command over when its last argument is skipped.
    fn skip_refused(&mut self, buf: &[u8], mut p: Pending, left: usize) -> bool {
        let take = left.min(buf.len().saturating_sub(self.pos));
        if take == 0 {
            return false;
        }
        self.pos += take;
        if take < left {
            p.bulk_len = Some(left - take);
            self.pending = Some(p);
            return true;
        }
        p.bulk_len = None;
        p.args_left -= 1;
        if p.args_left > 0 {
            self.pending = Some(p);
            return true;
        }
        let start = self.extra.len();
        self.extra.extend_from_slice(self.refusal.as_bytes());
        self.args.push(ArgSpan::extra(start, self.refusal.len()));
        self.commit(p.first_arg);
        if let Some(c) = self.cmds.last_mut() {
            c.refused = true;
        }
        true
    }

    /// Checks a bulk length (announced by a header of `header_len` bytes) against the
    /// limits, and adds both to the command's size.
    fn check_bulk_len(
        &self,
        n: Option<i64>,
        header_len: usize,
        p: &mut Pending,
        limits: &ParserLimits,
    ) -> Result<usize, ProtocolError> {
        let len = n
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| proto_err("invalid bulk length"))?;
        if len > limits.max_bulk_len {
            return Err(if self.authenticated {
                proto_err(format!(
                    "invalid bulk length {len}: arguments are limited to {} bytes",
                    limits.max_bulk_len
                ))
            } else {
                proto_err("unauthenticated bulk length")
            });
        }
        p.request_bytes += len + header_len;
        if p.request_bytes > limits.max_request_bytes {
            return Err(proto_err(format!(
                "request too large: it is longer than {} bytes",
                limits.max_request_bytes
            )));
        }
        Ok(len)
    }

    fn parse_inline(&mut self, buf: &[u8], limits: &ParserLimits) -> Result<bool, ProtocolError> {
        let rest = buf.get(self.pos..).unwrap_or_default();
        let Some(nl) = rest.iter().position(|&b| b == b'\n') else {
            if rest.len() > MAX_INLINE_LEN {
                return Err(proto_err("too big inline request"));
            }
            return Ok(false);
        };
        if nl > MAX_INLINE_LEN {
            return Err(proto_err("too big inline request"));
        }
        let line = rest.get(..nl).unwrap_or_default();
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let first_arg = self.args.len();
        inline::split(line, self.pos, &mut self.extra, &mut self.args)
            .map_err(|_| proto_err("unbalanced quotes in request"))?;
        self.pos += nl + 1;
        let argc = self.args.len() - first_arg;
        let bytes: usize = line.len();
        if argc > limits.max_args || bytes > limits.max_request_bytes {
            return Err(proto_err("invalid inline request: too many arguments"));
        }
        if argc == 0 {
            self.complete = self.pos;
        } else {
            self.commit(first_arg);
        }
        Ok(true)
    }

    fn commit(&mut self, first_arg: usize) {
        self.cmds.push(CmdSpan {
            first_arg: first_arg as u32,
            argc: (self.args.len() - first_arg) as u32,
            refused: false,
        });
        self.complete = self.pos;
        self.pending = None;
    }

    /// Moves the complete commands into `batch` (whose old contents are dropped, its
    /// vectors reused) and splits their bytes off the front of `buf`. A half-received
    /// command stays, rebased to the new start of `buf`.
    pub fn take_batch(&mut self, buf: &mut BytesMut, batch: &mut Batch) {
        batch.recycle();
        let cut = self.complete;
        batch.data = buf.split_to(cut).freeze();
        let committed = self.pending.map_or(self.args.len(), |p| p.first_arg);
        std::mem::swap(&mut batch.args, &mut self.args);
        std::mem::swap(&mut batch.cmds, &mut self.cmds);
        std::mem::swap(&mut batch.extra, &mut self.extra);
        // NOTE: a half-received command is always an array (inline commands are taken
        // whole), so its spans point into the input buffer and only they need rebasing.
        self.args
            .extend(batch.args.drain(committed..).map(|s| s.rebased(cut)));
        if let Some(p) = self.pending.as_mut() {
            p.first_arg = 0;
        }
        self.pos -= cut;
        self.complete = 0;
    }
}

/// Reads a header line's integer starting at `from` (just after `*` or `$`): `Ok(None)` when
/// the line is not complete yet; `Some((None, _))` when it is not an integer.
#[allow(clippy::type_complexity)]
fn header_line(
    buf: &[u8],
    from: usize,
    too_long: &'static str,
) -> Result<Option<(Option<i64>, usize)>, ProtocolError> {
    let rest = buf.get(from..).unwrap_or_default();
    let window = rest
        .get(..MAX_HEADER_LINE.min(rest.len()))
        .unwrap_or_default();
    let Some(cr) = window.iter().position(|&b| b == b'\r') else {
        if rest.len() >= MAX_HEADER_LINE {
            return Err(proto_err(too_long));
        }
        return Ok(None);
    };
    match rest.get(cr + 1) {
        None => Ok(None),
        Some(b'\n') => Ok(Some((
            parse_header_int(rest.get(..cr).unwrap_or_default()),
            from + cr + 2,
        ))),
        Some(_) => Err(proto_err("header line not ended by CRLF")),
    }
}

/// A decimal integer as RESP headers write it: an optional `-` then digits, nothing else.
fn parse_header_int(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s.split_first() {
        Some((b'-', d)) => (true, d),
        _ => (false, s),
    };
    if digits.is_empty() || digits.len() > 18 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let v = digits
        .iter()
        .fold(0i64, |acc, d| acc * 10 + i64::from(d - b'0'));
    Some(if neg { -v } else { v })
}

#[cfg(test)]
mod tests;
