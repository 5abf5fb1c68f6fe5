//! The Redis serialization protocol (RESP2 and RESP3), both directions.
//!
//! - [`parser`]: requests in. Incremental (a command split across many reads is resumed,
//!   not rescanned) and bounded (every length is checked before the bytes it announces are
//!   buffered).
//! - [`batch`]: the complete commands of one pipelined burst, borrowed from the input
//!   buffer without a copy or an allocation per command.
//! - `inline`: telnet-style inline commands, split as Redis splits them.
//! - [`writer`]: replies out, written into the connection's output buffer in the client's
//!   protocol version.
//!
//! Reference: the RESP specification (redis.io/docs/reference/protocol-spec) and Redis's
//! `networking.c` (`processMultibulkBuffer`, `processInlineBuffer`), whose error strings
//! this module keeps.

pub mod batch;
pub(crate) mod inline;
pub mod parser;
pub mod writer;

pub use batch::{Args, Batch};
pub use parser::{ParserLimits, ProtocolError, RequestParser};
pub use writer::{Protocol, Reply};
