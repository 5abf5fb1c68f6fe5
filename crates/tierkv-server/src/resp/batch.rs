//! [`Batch`]: the complete commands of one pipelined burst, as the parser hands them to the
//! executor, without one allocation per command or per argument.
//!
//! A batch owns the raw bytes of its commands (one [`Bytes`], split off the connection's
//! input buffer without copying) and, per argument, a span into them. Arguments of inline
//! commands that needed unquoting live in a side arena (`extra`); a span says which of the
//! two it points into. The vectors of spans are reused from burst to burst
//! (`Batch::recycle`), so a steady pipelined stream allocates nothing per command.
//!
//! Invariants: every span lies inside its buffer (the parser only records spans it has
//! checked); the commands' argument ranges are consecutive and cover `args` exactly.
//!
//! Thread-safety: a batch is plain owned data; it moves to the executor thread and back.

use bytes::Bytes;

/// Where one argument lies: bit 31 of `start` selects the side arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ArgSpan {
    start: u32,
    len: u32,
}

const EXTRA_BIT: u32 = 1 << 31;

impl ArgSpan {
    /// A span of the raw input buffer.
    pub(crate) fn input(start: usize, len: usize) -> ArgSpan {
        // The parser bounds a request far below 2 GiB (see `ParserLimits::validate`).
        ArgSpan {
            start: start as u32,
            len: len as u32,
        }
    }

    /// A span of the side arena.
    pub(crate) fn extra(start: usize, len: usize) -> ArgSpan {
        ArgSpan {
            start: start as u32 | EXTRA_BIT,
            len: len as u32,
        }
    }

    /// The same span, moved `by` bytes towards the start of the input buffer (after the
    /// bytes in front of it were split off). Arena spans do not move.
    pub(crate) fn rebased(self, by: usize) -> ArgSpan {
        if self.start & EXTRA_BIT != 0 {
            self
        } else {
            ArgSpan {
                start: self.start - by as u32,
                len: self.len,
            }
        }
    }

    fn resolve<'a>(self, data: &'a [u8], extra: &'a [u8]) -> &'a [u8] {
        let (buf, start) = if self.start & EXTRA_BIT != 0 {
            (extra, (self.start & !EXTRA_BIT) as usize)
        } else {
            (data, self.start as usize)
        };
        buf.get(start..start + self.len as usize)
            .unwrap_or_default()
    }
}

/// One command: a range of `Batch::args`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CmdSpan {
    pub(crate) first_arg: u32,
    pub(crate) argc: u32,
    /// Refused by the parser: the one argument is the error to answer.
    pub(crate) refused: bool,
}

/// The complete commands of one burst.
#[derive(Debug, Default)]
pub struct Batch {
    pub(crate) data: Bytes,
    pub(crate) extra: Vec<u8>,
    pub(crate) args: Vec<ArgSpan>,
    pub(crate) cmds: Vec<CmdSpan>,
}

impl Batch {
    /// Number of commands.
    pub fn len(&self) -> usize {
        self.cmds.len()
    }

    /// True when the batch holds no command.
    pub fn is_empty(&self) -> bool {
        self.cmds.is_empty()
    }

    /// The arguments of command `i` (the command name first).
    pub fn command(&self, i: usize) -> Option<Args<'_>> {
        let c = *self.cmds.get(i)?;
        let first = c.first_arg as usize;
        let spans = self.args.get(first..first + c.argc as usize)?;
        Some(Args {
            spans,
            data: &self.data,
            extra: &self.extra,
        })
    }

    /// True when command `i` was refused by the parser (an over-long argument): its one
    /// argument is the error text to answer instead of running it.
    pub fn refused(&self, i: usize) -> bool {
        self.cmds.get(i).is_some_and(|c| c.refused)
    }

    /// Appends a command given as owned arguments (they are copied into the side arena).
    /// Used to queue the commands of a transaction between MULTI and EXEC; the caller
    /// bounds the total size (see `commands::multi`), far below the arena's 2 GiB.
    pub fn push_owned<'a>(&mut self, args: impl Iterator<Item = &'a [u8]>) {
        let first_arg = self.args.len();
        for a in args {
            let start = self.extra.len();
            self.extra.extend_from_slice(a);
            self.args.push(ArgSpan::extra(start, a.len()));
        }
        self.cmds.push(CmdSpan {
            first_arg: first_arg as u32,
            argc: (self.args.len() - first_arg) as u32,
            refused: false,
        });
    }

    /// Bytes held by the side arena (the size of a queued transaction).
    pub fn owned_bytes(&self) -> usize {
        self.extra.len()
    }

    /// Drops the data, keeps the vectors' capacity for the next burst.
    pub(crate) fn recycle(&mut self) {
        self.data = Bytes::new();
        self.extra.clear();
        self.args.clear();
        self.cmds.clear();
    }
}

/// The arguments of one command; `get(0)` is its name.
#[derive(Clone, Copy)]
pub struct Args<'a> {
    spans: &'a [ArgSpan],
    data: &'a [u8],
    extra: &'a [u8],
}

impl<'a> Args<'a> {
    /// Number of arguments, the name included.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// True when there is not even a name (never for a parsed command).
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Argument `i`, or an empty slice past the end.
    pub fn get(&self, i: usize) -> &'a [u8] {
        self.spans
            .get(i)
            .map_or(&[][..], |s| s.resolve(self.data, self.extra))
    }

    /// Arguments `from..` in order.
    pub fn iter_from(&self, from: usize) -> impl Iterator<Item = &'a [u8]> + 'a {
        let (data, extra) = (self.data, self.extra);
        self.spans
            .get(from..)
            .unwrap_or_default()
            .iter()
            .map(move |s| s.resolve(data, extra))
    }
}

impl std::fmt::Debug for Args<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.iter_from(0).map(String::from_utf8_lossy))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_resolve_into_input_and_arena() {
        let b = Batch {
            data: Bytes::from_static(b"xxGETyykey"),
            extra: b"quoted arg".to_vec(),
            args: vec![
                ArgSpan::input(2, 3),
                ArgSpan::input(7, 3),
                ArgSpan::extra(0, 10),
            ],
            cmds: vec![CmdSpan {
                first_arg: 0,
                argc: 3,
                refused: false,
            }],
        };
        let a = b.command(0).unwrap();
        assert_eq!(a.len(), 3);
        assert_eq!(a.get(0), b"GET");
        assert_eq!(a.get(1), b"key");
        assert_eq!(a.get(2), b"quoted arg");
        assert_eq!(a.get(3), b"");
        assert_eq!(a.iter_from(1).count(), 2);
        assert!(b.command(1).is_none());
    }

    #[test]
    fn rebasing_moves_input_spans_only() {
        assert_eq!(ArgSpan::input(10, 2).rebased(4), ArgSpan::input(6, 2));
        assert_eq!(ArgSpan::extra(10, 2).rebased(4), ArgSpan::extra(10, 2));
    }
}
